//! Applications compiled whole by the JIT (`netvm_jit::link`), run the way a
//! benchmark wants them: descriptors prepared once, batches handed straight
//! to the compiled per-batch function `netvm_run` with
//! [`LinkedApp::run_descs`], no runtime in between.

use netvm_jit::link::{LinkMode, LinkedApp, XbDesc};
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
            // SAFETY: every descriptor points at its own slot of the buffer
            // owned by `descs`, borrowed exclusively here, `caplen` bytes
            // long; nothing else touches it during the call.
            unsafe { self.app.run_descs(&mut self.states, chunk, v) };
            for &r in v.iter() {
                acc += u64::from(r == u32::from(port));
                faults += u64::from(netvm_vm::FaultKind::from_code(r).is_some());
            }
        }
        (acc, faults)
    }
}

/// Copies of packets and one descriptor per packet, pointing at its bytes.
/// The copies lie in one buffer of [`SLOT`]-byte slots, one per packet, as
/// the C peers hold a trace (`benches/peers/filterpeers.c`). The buffer
/// never moves or changes size while this exists, so the descriptors stay
/// valid.
pub struct Descs {
    _bytes: Vec<u8>,
    descs: Vec<XbDesc>,
}

/// Bytes per packet slot of [`Descs`]: the C peers' slot, the traces' snap length.
pub const SLOT: usize = netvm_traffic::mixed::SNAPLEN;

impl Descs {
    /// Descriptors of copies of `packets` (at most [`SLOT`] bytes each; panics otherwise).
    pub fn new(packets: &[Packet]) -> Descs {
        let mut bytes = vec![0u8; packets.len() * SLOT];
        for (p, slot) in packets.iter().zip(bytes.chunks_mut(SLOT)) {
            assert!(p.data.len() <= SLOT, "a packet of {} bytes does not fit a {SLOT}-byte slot", p.data.len());
            slot[..p.data.len()].copy_from_slice(&p.data);
        }
        let descs = packets
            .iter()
            .zip(bytes.chunks_mut(SLOT))
            .map(|(p, slot)| {
                // The packet's descriptor, pointing at its copy.
                let mut d = XbDesc::of(&mut Packet { data: Vec::new(), wire_len: p.wire_len, ts: p.ts, in_port: p.in_port }, 0);
                d.data = slot.as_mut_ptr();
                d.caplen = p.data.len() as u32;
                d
            })
            .collect();
        Descs { _bytes: bytes, descs }
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
