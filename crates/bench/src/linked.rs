//! Applications compiled whole by the JIT (`netvm_jit::link`), run the way a
//! benchmark wants them: batches handed straight to the compiled per-batch
//! function `netvm_run` with [`LinkedApp::run_descs`], no runtime in
//! between, on descriptors prepared once for the whole trace
//! ([`Linked::pass_ports`]) or written burst by burst from flat arrays, as
//! a port writes them ([`Linked::pass_ports_burst`]).

use netvm_jit::link::{Batching, LinkMode, LinkedApp, XbDesc};
use netvm_jit::JitOptions;
use netvm_runtime::{Application, Manifest};
use netvm_vm::graph::LinkedCode;
use netvm_vm::{Packet, PeState, Timestamp};

/// Descriptors per call of the compiled batch function.
pub const BATCH: usize = 256;

/// A linked application with its NetPEs' states, ready to run descriptors.
pub struct Linked {
    app: LinkedApp,
    states: Vec<PeState>,
    verdicts: Vec<u32>,
    /// The descriptors of the burst [`Linked::pass_ports_burst`] is running.
    burst: Vec<XbDesc>,
}

impl Linked {
    /// Plans `manifest` (loads, verifies, wires, creates the coprocessors
    /// of `netvm_copro::registry`), compiles it with `mode` and runs its
    /// `.init` handlers.
    pub fn build(manifest: &Manifest, mode: LinkMode) -> Result<Linked, String> {
        Linked::build_with(manifest, mode, Batching::default(), &[])
    }

    /// As [`Linked::build`], with computation batching `batching`, and the
    /// table files `loads` (`(instance name, text)`) loaded before `.init`.
    pub fn build_with(manifest: &Manifest, mode: LinkMode, batching: Batching, loads: &[(&str, &str)]) -> Result<Linked, String> {
        let plan = Application::plan(manifest, &netvm_copro::registry(), None).map_err(|e| e.to_string())?;
        let mut app = LinkedApp::compile(&plan.graph, &plan.verified, &plan.limits, mode, JitOptions::default())
            .map_err(|e| format!("linking ({}): {e}", mode.name()))?;
        app.set_batching(batching);
        let mut states = plan.states;
        for (name, text) in loads {
            let (pe, i) = plan
                .copro_names
                .iter()
                .enumerate()
                .find_map(|(pe, names)| names.iter().position(|n| n == name).map(|i| (pe, i)))
                .ok_or_else(|| format!("no coprocessor `{name}`"))?;
            states[pe].copros[i].load(text).map_err(|e| format!("loading {name}: {e}"))?;
        }
        app.init(&mut states).map_err(|(n, o)| format!(".init of NetPE {n}: {o:?}"))?;
        Ok(Linked { app, states, verdicts: vec![0; BATCH], burst: Vec::with_capacity(BATCH) })
    }

    /// The sub-batch size the application runs with now: the fixed one,
    /// or the tuner's current choice (0: no stages).
    pub fn sub_batch(&self) -> usize {
        self.app.sub_batch()
    }

    /// Runs `descs` in batches of [`BATCH`]; returns the sum over the
    /// packets of (output port + 1), counting a packet that fanned out as
    /// 10 (the C peers' check).
    pub fn pass_ports(&mut self, descs: &mut Descs) -> u64 {
        let mut check = 0u64;
        for chunk in descs.descs.chunks_mut(BATCH) {
            let v = &mut self.verdicts[..chunk.len()];
            // SAFETY: as in `pass`.
            unsafe { self.app.run_descs(&mut self.states, chunk, v) };
            check += port_check(v);
        }
        check
    }

    /// As [`Linked::pass_ports`], but as a packet engine runs: the
    /// descriptors of each burst of [`BATCH`] packets are written, in one
    /// array reused for every burst, from the flat arrays of the packets'
    /// slots, lengths, timestamps and input ports (the C peers' loops read
    /// the slots, lengths and ports), the way a port writes a batch's
    /// descriptors from its receive ring.
    /// Writing them is part of the work timed. The descriptors prepared
    /// once in `descs` are not read.
    pub fn pass_ports_burst(&mut self, descs: &mut Descs) -> u64 {
        let mut check = 0u64;
        let base = descs.bytes.as_mut_ptr().wrapping_add(descs.start);
        let n = descs.caplens.len();
        for at in (0..n).step_by(BATCH) {
            let m = BATCH.min(n - at);
            self.burst.clear();
            self.burst.extend((at..at + m).map(|i| XbDesc {
                data: base.wrapping_add(i * descs.slot),
                caplen: descs.caplens[i],
                wirelen: descs.wirelens[i],
                ts_sec: descs.times[i].sec,
                ts_nsec: descs.times[i].nsec,
                in_port: descs.in_ports[i],
                reserved: 0,
                seq: i as u64,
            }));
            let v = &mut self.verdicts[..m];
            // SAFETY: every descriptor points at its own slot of the buffer
            // owned by `descs` (as `Descs::with_slot` laid them out),
            // borrowed exclusively here, `caplen` bytes long; nothing else
            // touches it during the call.
            unsafe { self.app.run_descs(&mut self.states, &mut self.burst, v) };
            check += port_check(v);
        }
        check
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

/// The check of a batch's raw verdicts (see [`Linked::pass_ports`]).
fn port_check(verdicts: &[u32]) -> u64 {
    verdicts
        .iter()
        .map(|&r| {
            if r <= 0xffff {
                u64::from(r) + 1
            } else if r & 0x8000_0000 != 0 {
                10
            } else {
                0
            }
        })
        .sum()
}

/// Copies of packets and one descriptor per packet, pointing at its bytes.
/// The copies lie in one buffer of equal slots, one per packet, the first
/// on a cache line, as the C peers hold a trace: [`SLOT`]-byte slots as
/// `benches/peers/filterpeers.c` ([`Descs::new`]), or the longest packet
/// rounded up to a cache line as `benches/peers/copropeers.c`
/// ([`Descs::packed`]). The buffer never moves or changes size while this
/// exists, so the descriptors stay valid.
pub struct Descs {
    bytes: Vec<u8>,
    /// Where the first slot starts in `bytes` (its first cache line).
    start: usize,
    slot: usize,
    descs: Vec<XbDesc>,
    /// Per packet, its captured and wire lengths, timestamp and input
    /// port: the flat arrays [`Linked::pass_ports_burst`] writes
    /// descriptors from.
    caplens: Vec<u32>,
    wirelens: Vec<u32>,
    times: Vec<Timestamp>,
    in_ports: Vec<u16>,
}

/// Bytes per packet slot of [`Descs::new`]: the filter peers' slot, the traces' snap length.
pub const SLOT: usize = netvm_traffic::mixed::SNAPLEN;

/// A cache line, the alignment of [`Descs`]' slots.
const LINE: usize = 64;

impl Descs {
    /// Descriptors of copies of `packets` in [`SLOT`]-byte slots (at most
    /// [`SLOT`] bytes each; panics otherwise).
    pub fn new(packets: &[Packet]) -> Descs {
        Descs::with_slot(packets, SLOT)
    }

    /// Descriptors of copies of `packets` in slots of the longest packet
    /// rounded up to a cache line (the frames of a 64-byte benchmark one
    /// line each, as `copropeers` holds them).
    pub fn packed(packets: &[Packet]) -> Descs {
        let longest = packets.iter().map(|p| p.data.len()).max().unwrap_or(0);
        Descs::with_slot(packets, longest.div_ceil(LINE).max(1) * LINE)
    }

    fn with_slot(packets: &[Packet], slot: usize) -> Descs {
        let mut bytes = vec![0u8; packets.len() * slot + LINE];
        // (`align_offset` may answer "impossible"; the arithmetic cannot.)
        let start = (LINE - bytes.as_ptr() as usize % LINE) % LINE;
        let slots = || (0..packets.len()).map(|i| start + i * slot);
        for (p, at) in packets.iter().zip(slots()) {
            assert!(p.data.len() <= slot, "a packet of {} bytes does not fit a {slot}-byte slot", p.data.len());
            bytes[at..at + p.data.len()].copy_from_slice(&p.data);
        }
        let base = bytes.as_mut_ptr();
        let descs = packets
            .iter()
            .zip(slots())
            .map(|(p, at)| {
                // The packet's descriptor, pointing at its copy.
                let mut d = XbDesc::of(&mut Packet { data: Vec::new(), wire_len: p.wire_len, ts: p.ts, in_port: p.in_port }, 0);
                d.data = base.wrapping_add(at);
                d.caplen = p.data.len() as u32;
                d
            })
            .collect();
        let caplens = packets.iter().map(|p| p.data.len() as u32).collect();
        let wirelens = packets.iter().map(|p| p.wire_len).collect();
        let times = packets.iter().map(|p| p.ts).collect();
        let in_ports = packets.iter().map(|p| p.in_port).collect();
        Descs { bytes, start, slot, descs, caplens, wirelens, times, in_ports }
    }

    /// Copies `packets` (those the descriptors were made from) over the slots again.
    pub fn restore(&mut self, packets: &[Packet]) {
        for (i, p) in packets.iter().enumerate() {
            let at = self.start + i * self.slot;
            self.bytes[at..at + p.data.len()].copy_from_slice(&p.data);
        }
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

#[cfg(test)]
mod tests {
    use super::{Descs, LINE, SLOT};
    use netvm_vm::{Packet, Timestamp};

    fn packet(len: usize, fill: u8) -> Packet {
        Packet { data: vec![fill; len], wire_len: len as u32, ts: Timestamp { sec: 0, nsec: 0 }, in_port: 0 }
    }

    /// The bytes a descriptor points at.
    fn bytes(d: &Descs, i: usize) -> &[u8] {
        // SAFETY: the descriptor points at `caplen` bytes of `d`'s buffer, alive while `d` is.
        unsafe { std::slice::from_raw_parts(d.descs[i].data, d.descs[i].caplen as usize) }
    }

    #[test]
    fn slots_start_on_cache_lines_and_restore_their_packets() {
        let packets = [packet(60, 1), packet(64, 2), packet(65, 3)];
        for (d, slot) in [(Descs::new(&packets), SLOT), (Descs::packed(&packets), 2 * LINE)] {
            assert_eq!(d.len(), 3);
            for (i, p) in packets.iter().enumerate() {
                assert_eq!(d.descs[i].data as usize % LINE, 0, "slot {i} on a cache line");
                assert_eq!(d.descs[i].data as usize - d.descs[0].data as usize, i * slot);
                assert_eq!(bytes(&d, i), &p.data[..]);
            }
        }
        let mut d = Descs::packed(&packets);
        // SAFETY: as `bytes`: the first packet's bytes, in `d`'s buffer.
        unsafe { d.descs[0].data.write(9) };
        assert_eq!(bytes(&d, 0)[0], 9);
        d.restore(&packets);
        assert_eq!(bytes(&d, 0), &packets[0].data[..]);
        assert_eq!(Descs::packed(&[packet(10, 0)]).slot, LINE);
    }
}
