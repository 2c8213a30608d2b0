//! Applications compiled whole by the JIT (`netvm_jit::link`), run the way a
//! benchmark wants them: descriptors prepared once, batches handed straight
//! to the compiled per-batch function `netvm_run` with
//! [`LinkedApp::run_descs`], no runtime in between.

use netvm_jit::context::OUT_FAULT;
use netvm_jit::link::{describe, LinkMode, LinkedApp, XbDesc};
use netvm_jit::JitOptions;
use netvm_runtime::{Application, Manifest};
use netvm_vm::graph::LinkedCode;
use netvm_vm::{Packet, PeState};

/// Descriptors per call of the compiled batch function.
pub const BATCH: usize = 256;

/// A linked application with its NetPEs' states, ready to run descriptors.
pub struct Linked {
    app: LinkedApp,
    states: Vec<PeState>,
    verdicts: Vec<u32>,
}

impl Linked {
    /// Plans `manifest` (loads, verifies, wires, creates the coprocessors
    /// of `netvm_copro::registry`), compiles it with `mode` and runs its
    /// `.init` handlers.
    pub fn build(manifest: &Manifest, mode: LinkMode) -> Result<Linked, String> {
        let plan = Application::plan(manifest, &netvm_copro::registry(), None).map_err(|e| e.to_string())?;
        let mut app = LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, mode, JitOptions::default())
            .map_err(|e| format!("linking ({}): {e}", mode.name()))?;
        let mut states = plan.states;
        app.init(&mut states).map_err(|(n, o)| format!(".init of NetPE {n}: {o:?}"))?;
        Ok(Linked { app, states, verdicts: vec![0; BATCH] })
    }

    /// Runs `descs` in batches of [`BATCH`]; returns (packets that left on
    /// application output port `port`, packets that faulted).
    pub fn pass(&mut self, descs: &mut Descs, port: u16) -> (u64, u64) {
        let (mut acc, mut faults) = (0u64, 0u64);
        for chunk in descs.descs.chunks_mut(BATCH) {
            let v = &mut self.verdicts[..chunk.len()];
            // SAFETY: every descriptor points into a packet owned by `descs`,
            // borrowed exclusively here; no descriptor shares a buffer with
            // another, and nothing else touches them during the call.
            unsafe { self.app.run_descs(&mut self.states, chunk, v) };
            for &r in v.iter() {
                acc += u64::from(r == u32::from(port));
                faults += u64::from(r >= OUT_FAULT);
            }
        }
        (acc, faults)
    }
}

/// Packets and one descriptor per packet, pointing at its bytes. The
/// packets' buffers never move or change size while this exists, so the
/// descriptors stay valid.
pub struct Descs {
    _packets: Vec<Packet>,
    descs: Vec<XbDesc>,
}

impl Descs {
    /// Descriptors of (a copy of) `packets`, each with its own buffer.
    pub fn new(packets: &[Packet]) -> Descs {
        let mut packets = packets.to_vec();
        let descs = packets.iter_mut().map(describe).collect();
        Descs { _packets: packets, descs }
    }

    /// Number of packets.
    pub fn len(&self) -> usize {
        self.descs.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.descs.is_empty()
    }
}
