//! Applications compiled whole by the JIT (`netvm_jit::link`), run the way a
//! benchmark wants them: batches handed straight to the compiled per-batch
//! function `netvm_run` with [`LinkedApp::run_descs`], no runtime in
//! between, on descriptors prepared once for the whole trace
//! ([`Linked::pass_ports`]) or written burst by burst from flat arrays, as
//! a port writes them ([`Linked::pass_ports_burst`], with the metadata of
//! [`Metadata`]).

use netvm_jit::link::{Batching, LinkMode, LinkedApp, XbDesc};
use netvm_jit::JitOptions;
use netvm_runtime::{Application, Manifest};
use netvm_vm::graph::LinkedCode;
use netvm_vm::{Packet, PeState, Timestamp};

/// Descriptors per call of the compiled batch function.
pub const BATCH: usize = 256;

/// The packet metadata a port has when it writes a burst's descriptors
/// ([`Linked::pass_ports_burst`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metadata {
    /// What the C peers' loops read (`benches/peers/copropeers.c`): each
    /// frame's slot and 2-byte length (captured = wire: whole frames), and
    /// its input port where the trace interleaves several ports ([`Descs`]);
    /// the time, which their inputs do not have, once per burst (the
    /// burst's first packet's), as a live port stamps a burst on receive.
    /// 2 or 4 bytes a packet beside the frames.
    PerBurst,
    /// Also every packet's wire length and time, as a capture's records
    /// carry them: 22 or 24 bytes a packet beside the frames.
    PerPacket,
}

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
    /// array reused for every burst, by a port that gets the packets'
    /// metadata as `metadata` says, the way a port writes a batch's
    /// descriptors from its receive ring. Writing them is part of the work
    /// timed. The descriptors prepared once in `descs` are not read.
    pub fn pass_ports_burst(&mut self, descs: &mut Descs, metadata: Metadata) -> u64 {
        let mut check = 0u64;
        let n = descs.lens.len();
        let base = descs.bytes.as_mut_ptr().wrapping_add(descs.start);
        let empty = XbDesc { data: std::ptr::null_mut(), caplen: 0, wirelen: 0, ts_sec: 0, ts_nsec: 0, in_port: 0, reserved: 0, seq: 0 };
        self.burst.resize(BATCH, empty);
        for at in (0..n).step_by(BATCH) {
            let m = BATCH.min(n - at);
            let burst = &mut self.burst[..m];
            // Each packet's input port, or the one port of every packet.
            match descs.in_ports.get(at..at + m) {
                Some(each) => write_burst(burst, base, descs, at, each.iter().copied(), metadata),
                None => write_burst(burst, base, descs, at, std::iter::repeat(descs.port), metadata),
            }
            let v = &mut self.verdicts[..m];
            // SAFETY: every descriptor points at its own slot of the buffer
            // owned by `descs` (as `Descs::with_slot` laid them out),
            // borrowed exclusively here, `caplen` bytes long; nothing else
            // touches it during the call.
            unsafe { self.app.run_descs(&mut self.states, burst, v) };
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

/// Writes the descriptors of `descs`' packets from `at` on into `burst`
/// (`base`: the first slot), with input ports `ports`, as
/// [`Linked::pass_ports_burst`] describes. One loop over slices of the
/// burst's length (no bounds checks in it) that steps the slot address and
/// the sequence number.
#[inline(always)]
fn write_burst(burst: &mut [XbDesc], base: *mut u8, descs: &Descs, at: usize, ports: impl Iterator<Item = u16>, metadata: Metadata) {
    let m = burst.len();
    let lens = &descs.lens[at..at + m];
    let mut data = base.wrapping_add(at * descs.slot);
    let mut seq = at as u64;
    match metadata {
        Metadata::PerBurst => {
            let t = descs.times[at];
            for ((d, &len), in_port) in burst.iter_mut().zip(lens).zip(ports) {
                let len = u32::from(len);
                *d = XbDesc { data, caplen: len, wirelen: len, ts_sec: t.sec, ts_nsec: t.nsec, in_port, reserved: 0, seq };
                data = data.wrapping_add(descs.slot);
                seq += 1;
            }
        }
        Metadata::PerPacket => {
            let (wirelens, times) = (&descs.wirelens[at..at + m], &descs.times[at..at + m]);
            for (((d, &len), (&wirelen, t)), in_port) in burst.iter_mut().zip(lens).zip(wirelens.iter().zip(times)).zip(ports) {
                let caplen = u32::from(len);
                *d = XbDesc { data, caplen, wirelen, ts_sec: t.sec, ts_nsec: t.nsec, in_port, reserved: 0, seq };
                data = data.wrapping_add(descs.slot);
                seq += 1;
            }
        }
    }
}

/// The check of a batch's raw verdicts (see [`Linked::pass_ports`]),
/// summed in 32 bits: at most [`BATCH`] verdicts of at most 2^16 each.
fn port_check(verdicts: &[u32]) -> u64 {
    debug_assert!(verdicts.len() <= BATCH);
    let sum: u32 = verdicts
        .iter()
        .map(|&r| {
            if r <= 0xffff {
                r + 1
            } else if r & 0x8000_0000 != 0 {
                10
            } else {
                0
            }
        })
        .sum();
    u64::from(sum)
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
    /// Per packet, its captured length (2 bytes, as the C peers hold it),
    /// wire length, timestamp and input port (an empty array where every
    /// packet has `port`): the flat arrays [`Linked::pass_ports_burst`]
    /// writes descriptors from.
    lens: Vec<u16>,
    wirelens: Vec<u32>,
    times: Vec<Timestamp>,
    in_ports: Vec<u16>,
    /// The input port of every packet where they all share one, as a
    /// port's own packets do.
    port: u16,
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
    /// line each, as `copropeers` holds them). Panics on a packet of more
    /// than 65,535 bytes, whose length the C peers' 2-byte lengths cannot hold.
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
        let lens = packets.iter().map(|p| u16::try_from(p.data.len()).expect("packets of at most 65,535 bytes")).collect();
        let wirelens = packets.iter().map(|p| p.wire_len).collect();
        let times = packets.iter().map(|p| p.ts).collect();
        let port = packets.first().map_or(0, |p| p.in_port);
        let one_port = packets.iter().all(|p| p.in_port == port);
        let in_ports = if one_port { Vec::new() } else { packets.iter().map(|p| p.in_port).collect() };
        Descs { bytes, start, slot, descs, lens, wirelens, times, in_ports, port }
    }

    /// Gives the prepared descriptors the metadata a port of
    /// [`Metadata::PerBurst`] writes: wire length = captured length, and
    /// the time of the first packet of their burst of [`BATCH`].
    pub fn stamp_per_burst(&mut self) {
        for (k, d) in self.descs.iter_mut().enumerate() {
            let t = self.times[k - k % BATCH];
            (d.wirelen, d.ts_sec, d.ts_nsec) = (d.caplen, t.sec, t.nsec);
        }
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
    use super::{write_burst, Descs, Metadata, LINE, SLOT};
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
    fn bursts_carry_each_packets_port_or_the_one_port_and_the_metadata_asked_for() {
        let at = |sec: u64, port: u16, len: usize| Packet {
            data: vec![0; len],
            wire_len: 2 * len as u32,
            ts: Timestamp { sec, nsec: 7 },
            in_port: port,
        };
        let one = [at(1, 3, 60), at(2, 3, 61), at(3, 3, 62)];
        let mixed = [at(1, 3, 60), at(2, 5, 61), at(3, 3, 62)];
        for (packets, ports) in [(&one, [3, 3, 3]), (&mixed, [3, 5, 3])] {
            let d = Descs::packed(packets);
            assert_eq!(d.in_ports.is_empty(), packets == &one, "one port: no array of ports");
            let base = d.descs[0].data;
            let each: Vec<u16> = if d.in_ports.is_empty() { vec![d.port; 3] } else { d.in_ports.clone() };
            for metadata in [Metadata::PerBurst, Metadata::PerPacket] {
                let mut burst = [d.descs[0]; 2];
                write_burst(&mut burst, base, &d, 1, each[1..].iter().copied(), metadata);
                for (k, x) in burst.iter().enumerate() {
                    let (i, p) = (1 + k, &packets[1 + k]);
                    assert_eq!((x.data, x.caplen, x.in_port, x.seq), (d.descs[i].data, p.data.len() as u32, ports[i], i as u64));
                    let (wirelen, sec) = if metadata == Metadata::PerBurst { (x.caplen, 2) } else { (p.wire_len, p.ts.sec) };
                    assert_eq!((x.wirelen, x.ts_sec, x.ts_nsec), (wirelen, sec, 7), "{metadata:?}");
                }
            }
        }
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
