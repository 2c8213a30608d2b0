//! `flow`: connection tracking: per-flow state (TCP handshake and
//! teardown, direction, client and server) and per-flow bits (Snort's
//! `flowbits`) for IPv4 flows, with idle timeouts and bounded memory. What
//! an IDS's `flow:established,to_server` and `flowbits:isset,x` need, and
//! what a stateful firewall needs.
//!
//! A flow is an IPv4 5-tuple (source and destination address, protocol,
//! source and destination port), the same for both directions: packets
//! from A:p to B:q and from B:q to A:p are one flow. Ports are the TCP,
//! UDP and SCTP ports; every other protocol (ICMP included) has ports 0,
//! so all its packets between two hosts are one flow.
//!
//! # Client, server, established (after Snort 3's stream)
//!
//! The **client** is the side that sent the first SYN. A TCP flow picked
//! up without its SYN: if the first packet seen is a SYN-ACK, its receiver
//! is the client (Snort's assumption: the SYN was missed); otherwise the
//! sender of the first packet seen is the client, and the flow is marked
//! **midstream**. For every other protocol the sender of the first packet
//! is the client.
//!
//! **Established**: TCP, once the three-way handshake completed in the
//! right directions (SYN from the client, SYN-ACK from the server, then an
//! ACK from the client; after a SYN-ACK pickup, the client's ACK). A
//! midstream flow is established by the first packet (neither SYN nor RST)
//! from the server side, as Snort 3's `MidStreamSent` tracker does (one
//! side's packets alone never establish it). UDP, ICMP and other
//! protocols: once a packet has been seen in each direction (Snort 3's
//! `stream_udp`, `stream_icmp`, `stream_ip`). Unlike Snort, nothing checks
//! sequence or acknowledgement numbers, windows or checksums: the state
//! follows the flags of the packets as they come, so a forged RST closes a
//! flow here where Snort would ignore an out-of-window one.
//!
//! **Closed**: a TCP flow closes on a RST from either side, or once both
//! sides have sent a FIN. A closed flow keeps its state (it still reports
//! established if it was) for `timeout_closed` seconds, so that the last
//! ACKs and retransmissions are still attributed to it; a SYN without ACK
//! on a closed flow starts a new flow on the same 5-tuple (a new handle,
//! its bits cleared, counted in `created`). Other protocols never close.
//!
//! # Registers and operations
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0     | `track`: source IPv4 address |
//! | in 1     | `track`: destination IPv4 address |
//! | in 2     | `track`: source port << 16 \| destination port |
//! | in 3     | `track`: IP protocol (low 8 bits) |
//! | in 4     | `track`: TCP flags (low 8 bits; read only for protocol 6) |
//! | in 5     | `track_pkt`: packet offset of the IPv4 header |
//! | in 6     | `select`: a flow handle |
//! | in 7     | flowbits: index of a 32-bit word of the bits (bit `n` is bit `n % 32` of word `n / 32`) |
//! | in 8     | flowbits: mask within that word |
//! | out 0    | `track`, `track_pkt`: the state word below; `select`: 1 if the handle names a live flow; flowbits: the result (0 or 1) |
//! | out 1    | the current flow's handle (0: none) |
//! | out 2    | flowbits: the word `in7` of the current flow's bits, after the operation (0 without a flow) |
//!
//! | op | name      | effect |
//! |----|-----------|--------|
//! | 0  | track     | tracks a packet of the 5-tuple in `in0..in4` at the packet's time: finds or creates its flow, updates its state, makes it the current flow |
//! | 1  | track_pkt | as `track`, reading the 5-tuple and TCP flags from the IPv4 header at packet offset `in5` and the TCP/UDP/SCTP header after it |
//! | 2  | select    | makes the flow of handle `in6` current |
//! | 3  | set       | current flow's word `in7` \|= `in8`; out0 = 1 (0 without a flow) |
//! | 4  | unset     | word `in7` &= !`in8` |
//! | 5  | toggle    | word `in7` ^= `in8` |
//! | 6  | all       | out0 = 1 if every bit of `in8` is set in word `in7` |
//! | 7  | any       | out0 = 1 if some bit of `in8` is set |
//! | 8  | none      | out0 = 1 if no bit of `in8` is set |
//! | 9  | not_all   | out0 = 1 if some bit of `in8` is clear |
//!
//! The state word (`out0` of `track` and `track_pkt`, constants in this
//! module):
//!
//! | bit  | name          | meaning |
//! |------|---------------|---------|
//! | 0x01 | `TRACKED`     | the packet belongs to a flow (every other bit is 0 when not) |
//! | 0x02 | `ESTABLISHED` | the flow is established (see above) |
//! | 0x04 | `TO_SERVER`   | the packet is from the client (Snort `to_server`, `from_client`) |
//! | 0x08 | `TO_CLIENT`   | the packet is from the server (Snort `to_client`, `from_server`) |
//! | 0x10 | `NEW`         | this packet created the flow |
//! | 0x20 | `MIDSTREAM`   | a TCP flow picked up without a SYN or SYN-ACK |
//! | 0x40 | `CLOSED`      | the TCP flow is closed (RST, or FIN from both sides) |
//!
//! `track_pkt` does not track (out0 = 0, out1 = 0, no current flow; counted
//! in `untracked`, never a fault) a packet whose IPv4 header at `in5` is
//! not there or not IPv4 (version, header length under 20 bytes), a
//! non-first fragment (fragment offset not 0: it has no ports), or a TCP,
//! UDP or SCTP packet whose ports (TCP: its first 14 header bytes, to the
//! flags) are not captured. Handles are nonzero; a handle names one flow,
//! and stops naming it when the flow is evicted, ages out or restarts
//! (a handle recurs only after 512 flows have used the same slot).
//!
//! **Flowbits** act on the current flow: the flow of the last `track`,
//! `track_pkt` or `select` on this instance (by this worker), whichever
//! packet it was; without one (a packet not tracked, a stale handle) `set`,
//! `unset` and `toggle` do nothing and every test gives 0, as Snort's
//! flowbits never match a packet without a flow. A word index at or above
//! `bits / 32` faults `copro`; other registers take any value. Bit names
//! are the caller's business (the IDS compiler numbers them). Snort's
//! options map to: `set` → `set`; `unset` → `unset`; `toggle` → `toggle`;
//! `setx` → `unset` of the group's mask then `set`; `isset a&b` → `all`;
//! `isset a|b` → `any`; `isnotset a|b` (and of one bit) → `none`;
//! `isnotset a&b` → `not_all`; a group spanning several words combines
//! the words' results (`all`, `none`: every word; `any`, `not_all`: some
//! word). Snort's `flow` options map to the state word: `established` →
//! `ESTABLISHED`; `not_established` → `TRACKED` and not `ESTABLISHED`;
//! `to_server`/`from_client` → not `TO_CLIENT` (Snort fails these only on
//! packets known to come from the other side); `to_client`/`from_server`
//! → not `TO_SERVER`; `stateless` → no test; `no_stream` → always true and
//! `only_stream` → never (netvm reassembles no streams).
//!
//! # Configuration
//!
//! | setting               | default | meaning |
//! |-----------------------|---------|---------|
//! | `capacity`            | 65536   | most flows, 1..=2^22; when full, a new flow first purges an aged flow at the head of an idle list, else evicts the least recently seen flow (counted in `evicted`) |
//! | `bits`                | 256     | flowbits per flow, a multiple of 32, 32..=4096; `capacity × bits / 8` at most 2^30 bytes |
//! | `timeout_established` | 3600    | seconds idle before an established, open TCP flow ages out (Snort 3 `stream_tcp.idle_timeout`) |
//! | `timeout_embryonic`   | 30      | TCP flows not yet established (`stream_tcp.embryonic_timeout`) |
//! | `timeout_closed`      | 10      | closed TCP flows (netvm's choice: long enough for the last ACKs) |
//! | `timeout_udp`         | 30      | UDP flows (`stream_udp.session_timeout`) |
//! | `timeout_other`       | 60      | every other protocol (`stream_icmp`, `stream_ip` `session_timeout`) |
//!
//! Timeouts are whole seconds, 1..=2^31-1, of packet time. Other settings
//! are errors. Memory: about `capacity × (bits / 8 + 80)` bytes at most;
//! the index (a `table` of `capacity` entries) and the flows grow as
//! flows come.
//!
//! # Time and aging
//!
//! The instance's clock is the latest packet (or `tick`) time it has seen:
//! a packet older than that counts as seen at that time. A flow idle for
//! more than its state's timeout is dead for every operation, whether or
//! not `tick` has purged it yet: the next packet of its 5-tuple starts a
//! new flow (counted in `aged_out` and `created`), so results do not
//! depend on when the runtime ticks. Flows are kept in one list per
//! timeout class in order of their last packet, so `tick` purges aged
//! flows from the list heads, at most 1024 per call, and a full table finds
//! its victim in constant time: no operation scans the table.
//!
//! # Control plane and statistics
//!
//! `dump` lists the live flows, one per line, sorted by 5-tuple, client
//! first: `tcp 10.0.0.1:1234 > 10.0.0.2:80 established midstream closed
//! packets=3/2 last=12.000000000 handle=0x800001 bits=0,37` (`packets`
//! from the client / from the server; the protocol as `tcp`, `udp`,
//! `icmp` or `proto N`). It is for reading: `load` is not supported (flow
//! state is learnt from packets). `clear` removes every flow.
//! Statistics: `flows` (live and not yet purged), `capacity`, `packets`
//! (tracked), `untracked`, `created`, `established` (flows that became
//! established), `midstream` (flows picked up midstream), `closed` (flows
//! that closed), `evicted` (live flows removed to make room), `aged_out`.
//!
//! # Several workers
//!
//! One table per worker (`PerWorker`): a fork starts empty, with the same
//! configuration and its statistics at zero. Flow state is only correct if
//! every packet of a flow, both directions, reaches the same worker: the
//! application must use the runtime's `flow` distribution (a symmetric
//! 5-tuple hash; the default for applications with per-worker state, so
//! the default wherever a `flow` instance is declared). Under
//! `round-robin` a flow's packets are split among workers, and each
//! worker sees a partial flow: a midstream pickup on each, handshakes
//! never completing, bits set on one worker invisible on the others. At
//! the end of a run `absorb` moves every worker's flows into the first
//! worker's table (for a 5-tuple several workers hold, the most recently
//! seen wins; flows that do not fit are counted in `evicted`, aged ones in
//! `aged_out`) and adds
//! the statistics, so a dump after the run lists every worker's flows.
//! A flow handle is only meaningful to the worker that got it.

use std::fmt::Write as _;

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, RegisterFile, Timestamp, WorkerShare};

use crate::table::ExactTable;

/// State word bit: the packet belongs to a flow.
pub const TRACKED: u32 = 0x01;
/// State word bit: the flow is established.
pub const ESTABLISHED: u32 = 0x02;
/// State word bit: the packet is from the client.
pub const TO_SERVER: u32 = 0x04;
/// State word bit: the packet is from the server.
pub const TO_CLIENT: u32 = 0x08;
/// State word bit: this packet created the flow.
pub const NEW: u32 = 0x10;
/// State word bit: a TCP flow picked up without a SYN or SYN-ACK.
pub const MIDSTREAM: u32 = 0x20;
/// State word bit: the TCP flow is closed.
pub const CLOSED: u32 = 0x40;

/// Default `capacity`.
pub const DEFAULT_CAPACITY: usize = 65536;
/// Largest `capacity`.
pub const MAX_CAPACITY: usize = 1 << 22;
/// Default `bits`.
pub const DEFAULT_BITS: usize = 256;
/// Largest `bits`.
pub const MAX_BITS: usize = 4096;
/// Most bytes of flowbits an instance may hold (`capacity × bits / 8`).
const MAX_BITS_BYTES: usize = 1 << 30;
/// Largest timeout in seconds.
const MAX_TIMEOUT: u64 = (1 << 31) - 1;
/// Most flows one `tick` purges.
pub const PURGE_PER_TICK: usize = 1024;

const NIL: u32 = u32::MAX;
/// Handle bits holding the slot (plus one); the rest hold the slot's generation.
const SLOT_BITS: u32 = 23;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
const GENERATION_MASK: u16 = (1 << (32 - SLOT_BITS)) - 1;

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_SCTP: u8 = 132;
const TH_FIN: u8 = 0x01;
const TH_SYN: u8 = 0x02;
const TH_RST: u8 = 0x04;
const TH_ACK: u8 = 0x10;

/// A flow's own state (`Flow::flags`).
const F_SEEN_CLIENT: u16 = 0x001;
const F_SEEN_SERVER: u16 = 0x002;
const F_SYN: u16 = 0x004;
const F_SYNACK: u16 = 0x008;
const F_EST: u16 = 0x010;
const F_MID: u16 = 0x020;
const F_FIN_CLIENT: u16 = 0x040;
const F_FIN_SERVER: u16 = 0x080;
const F_CLOSED: u16 = 0x100;

/// Timeout classes, one idle list each; on a tie the lower one is evicted first.
const CLASS_CLOSED: usize = 0;
const CLASS_OTHER: usize = 1;
const CLASS_UDP: usize = 2;
const CLASS_EMBRYONIC: usize = 3;
const CLASS_ESTABLISHED: usize = 4;
const CLASSES: usize = 5;
/// The setting of each class's timeout, by class.
const TIMEOUT_KEYS: [&str; CLASSES] = ["timeout_closed", "timeout_other", "timeout_udp", "timeout_embryonic", "timeout_established"];
const TIMEOUT_DEFAULTS: [u64; CLASSES] = [10, 60, 30, 30, 3600];

/// Statistics counters (`Flows::counts`), in the order `stats` reports them after `flows`, `capacity`.
const PACKETS: usize = 0;
const UNTRACKED: usize = 1;
const CREATED: usize = 2;
const ESTABLISHED_COUNT: usize = 3;
const MIDSTREAM_COUNT: usize = 4;
const CLOSED_COUNT: usize = 5;
const EVICTED: usize = 6;
const AGED_OUT: usize = 7;
const COUNT_NAMES: [&str; 8] = ["packets", "untracked", "created", "established", "midstream", "closed", "evicted", "aged_out"];

/// The configuration of a [`Flows`] instance (the manifest's settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// Most flows.
    pub capacity: usize,
    /// Flowbits per flow (a multiple of 32).
    pub bits: usize,
    /// Idle timeouts in seconds: closed, other, UDP, embryonic TCP, established TCP.
    pub timeouts: [u64; 5],
}

impl Default for FlowConfig {
    fn default() -> FlowConfig {
        FlowConfig { capacity: DEFAULT_CAPACITY, bits: DEFAULT_BITS, timeouts: TIMEOUT_DEFAULTS }
    }
}

impl FlowConfig {
    /// Reads the manifest's settings (see the module documentation).
    pub fn from_settings(cfg: &CoproConfig) -> Result<FlowConfig, String> {
        const OTHER_KEYS: [&str; 2] = ["capacity", "bits"];
        if let Some(k) = cfg.keys().find(|k| !OTHER_KEYS.contains(&k.as_str()) && !TIMEOUT_KEYS.contains(&k.as_str())) {
            return Err(format!("flow: unknown setting `{k}` (known: {}, {})", OTHER_KEYS.join(", "), TIMEOUT_KEYS.join(", ")));
        }
        let number = |key: &str, default: u64, min: u64, max: u64| -> Result<u64, String> {
            let Some(s) = cfg.get(key) else { return Ok(default) };
            let v = s.trim().parse::<u64>().map_err(|_| format!("flow: {key} `{s}` is not a whole number"))?;
            if !(min..=max).contains(&v) {
                return Err(format!("flow: {key} must be between {min} and {max}, not {v}"));
            }
            Ok(v)
        };
        let capacity = number("capacity", DEFAULT_CAPACITY as u64, 1, MAX_CAPACITY as u64)? as usize;
        let bits = number("bits", DEFAULT_BITS as u64, 32, MAX_BITS as u64)? as usize;
        let mut timeouts = TIMEOUT_DEFAULTS;
        for (t, key) in timeouts.iter_mut().zip(TIMEOUT_KEYS) {
            *t = number(key, *t, 1, MAX_TIMEOUT)?;
        }
        let c = FlowConfig { capacity, bits, timeouts };
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), String> {
        if self.capacity == 0 || self.capacity > MAX_CAPACITY {
            return Err(format!("flow: capacity must be between 1 and {MAX_CAPACITY}, not {}", self.capacity));
        }
        if self.bits == 0 || !self.bits.is_multiple_of(32) || self.bits > MAX_BITS {
            return Err(format!("flow: bits must be a multiple of 32 between 32 and {MAX_BITS}, not {}", self.bits));
        }
        if self.capacity * (self.bits / 8) > MAX_BITS_BYTES {
            return Err(format!("flow: capacity × bits / 8 is {} bytes, over {MAX_BITS_BYTES}", self.capacity * (self.bits / 8)));
        }
        if let Some(i) = self.timeouts.iter().position(|t| !(1..=MAX_TIMEOUT).contains(t)) {
            return Err(format!("flow: {} must be between 1 and {MAX_TIMEOUT} seconds", TIMEOUT_KEYS[i]));
        }
        Ok(())
    }
}

/// A packet as `track` sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowPacket {
    /// Source IPv4 address.
    pub src: u32,
    /// Destination IPv4 address.
    pub dst: u32,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// TCP flags (ignored for other protocols).
    pub tcp_flags: u8,
}

impl FlowPacket {
    /// The packet whose IPv4 header is at `off` in `packet`, if it can be
    /// tracked (see the module documentation for what cannot).
    pub fn parse_ipv4(packet: &[u8], off: usize) -> Option<FlowPacket> {
        let ip = packet.get(off..off.checked_add(20)?)?;
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ip[0] >> 4 != 4 || ihl < 20 || u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0 {
            return None;
        }
        let proto = ip[9];
        let mut p = FlowPacket {
            src: u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]),
            dst: u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]),
            proto,
            ..FlowPacket::default()
        };
        let need = match proto {
            PROTO_TCP => 14,
            PROTO_UDP | PROTO_SCTP => 4,
            _ => return Some(p),
        };
        let l4 = off + ihl;
        let h = packet.get(l4..l4.checked_add(need)?)?;
        p.sport = u16::from_be_bytes([h[0], h[1]]);
        p.dport = u16::from_be_bytes([h[2], h[3]]);
        if proto == PROTO_TCP {
            p.tcp_flags = h[13];
        }
        Some(p)
    }

    /// The packet the `track` registers describe.
    fn from_registers(r: &[u32; 9]) -> FlowPacket {
        FlowPacket { src: r[0], dst: r[1], sport: (r[2] >> 16) as u16, dport: r[2] as u16, proto: r[3] as u8, tcp_flags: r[4] as u8 }
    }
}

/// A flow's 5-tuple, the lower endpoint (address, port) first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    a: u32,
    pa: u16,
    b: u32,
    pb: u16,
    proto: u8,
}

impl Key {
    /// The key of `p`'s flow, and whether `p`'s source is endpoint `a`.
    fn of(p: &FlowPacket) -> (Key, bool) {
        let forward = (p.src, p.sport) <= (p.dst, p.dport);
        let key = if forward {
            Key { a: p.src, pa: p.sport, b: p.dst, pb: p.dport, proto: p.proto }
        } else {
            Key { a: p.dst, pa: p.dport, b: p.src, pb: p.sport, proto: p.proto }
        };
        (key, forward)
    }

    fn bytes(&self) -> [u8; 13] {
        let mut k = [0u8; 13];
        k[0..4].copy_from_slice(&self.a.to_be_bytes());
        k[4..8].copy_from_slice(&self.b.to_be_bytes());
        k[8..10].copy_from_slice(&self.pa.to_be_bytes());
        k[10..12].copy_from_slice(&self.pb.to_be_bytes());
        k[12] = self.proto;
        k
    }
}

/// One slot of the flow array.
#[derive(Clone, Copy, Debug)]
struct Flow {
    key: Key,
    /// Whether endpoint `a` of the key is the client.
    client_is_a: bool,
    live: bool,
    flags: u16,
    /// Incremented each time the slot takes a new flow (the handle's high bits).
    generation: u16,
    class: u8,
    /// Time of the latest packet, ns.
    last: u64,
    /// Neighbours in the class's idle list (older, newer).
    prev: u32,
    next: u32,
    /// Packets from the client, from the server.
    packets: [u32; 2],
}

/// An idle list: flows of one timeout class, oldest first.
#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List { head: NIL, tail: NIL };

/// The `flow` coprocessor (see the module documentation).
#[derive(Debug)]
pub struct Flows {
    config: FlowConfig,
    timeout_ns: [u64; CLASSES],
    words: usize,
    /// 5-tuple → slot (value: the slot, little-endian).
    index: ExactTable,
    flows: Vec<Flow>,
    /// `words` words per slot.
    bits: Vec<u32>,
    free: Vec<u32>,
    lists: [List; CLASSES],
    clock: u64,
    /// The flow of the last `track` or `select` (a slot), if any.
    current: Option<u32>,
    input: [u32; 9],
    output: [u32; 3],
    counts: [u64; 8],
}

/// The TCP and non-TCP state machine: the flags of a flow after a packet
/// (`new`: the packet creates the flow).
fn step(mut fl: u16, tcp: bool, from_client: bool, th: u8, new: bool) -> u16 {
    fl |= if from_client { F_SEEN_CLIENT } else { F_SEEN_SERVER };
    if !tcp {
        if fl & (F_SEEN_CLIENT | F_SEEN_SERVER) == F_SEEN_CLIENT | F_SEEN_SERVER {
            fl |= F_EST;
        }
        return fl;
    }
    let (syn, ack) = (th & TH_SYN != 0, th & TH_ACK != 0);
    if th & TH_RST != 0 {
        return fl | F_CLOSED;
    }
    if new {
        fl |= match (syn, ack) {
            (true, false) => F_SYN,
            (true, true) => F_SYNACK,
            _ => F_MID,
        };
    } else if syn {
        if ack && !from_client && fl & (F_SYN | F_SYNACK | F_EST | F_MID) == F_SYN {
            fl |= F_SYNACK;
        }
    } else if fl & F_EST == 0 && ((from_client && ack && fl & F_SYNACK != 0) || (!from_client && fl & F_MID != 0)) {
        fl |= F_EST;
    }
    if th & TH_FIN != 0 {
        fl |= if from_client { F_FIN_CLIENT } else { F_FIN_SERVER };
        if fl & (F_FIN_CLIENT | F_FIN_SERVER) == F_FIN_CLIENT | F_FIN_SERVER {
            fl |= F_CLOSED;
        }
    }
    fl
}

fn class_of(flags: u16, proto: u8) -> usize {
    match proto {
        _ if flags & F_CLOSED != 0 => CLASS_CLOSED,
        PROTO_TCP if flags & F_EST != 0 => CLASS_ESTABLISHED,
        PROTO_TCP => CLASS_EMBRYONIC,
        PROTO_UDP => CLASS_UDP,
        _ => CLASS_OTHER,
    }
}

fn proto_name(proto: u8) -> String {
    match proto {
        PROTO_TCP => "tcp".into(),
        PROTO_UDP => "udp".into(),
        1 => "icmp".into(),
        p => format!("proto {p}"),
    }
}

fn addr(a: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(a)
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    Ok(Box::new(Flows::new(FlowConfig::from_settings(cfg)?)?))
}

impl Flows {
    /// An empty flow table.
    pub fn new(config: FlowConfig) -> Result<Flows, String> {
        config.check()?;
        let index = ExactTable::new(13, 4, config.capacity).map_err(|e| format!("flow: {e}"))?;
        Ok(Flows {
            timeout_ns: config.timeouts.map(|s| s * 1_000_000_000),
            words: config.bits / 32,
            index,
            flows: Vec::new(),
            bits: Vec::new(),
            free: Vec::new(),
            lists: [EMPTY; CLASSES],
            clock: 0,
            current: None,
            input: [0; 9],
            output: [0; 3],
            counts: [0; 8],
            config,
        })
    }

    /// The configuration it was made with.
    pub fn config(&self) -> FlowConfig {
        self.config
    }

    /// Live flows (those aged but not yet purged included).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether it holds no flow.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn expired(&self, slot: u32) -> bool {
        let f = &self.flows[slot as usize];
        self.clock.saturating_sub(f.last) > self.timeout_ns[usize::from(f.class)]
    }

    fn handle(&self, slot: u32) -> u32 {
        (u32::from(self.flows[slot as usize].generation) << SLOT_BITS) | (slot + 1)
    }

    fn unlink(&mut self, slot: u32) {
        let Flow { prev, next, class, .. } = self.flows[slot as usize];
        let list = &mut self.lists[usize::from(class)];
        match prev {
            NIL => list.head = next,
            p => self.flows[p as usize].next = next,
        }
        match next {
            NIL => list.tail = prev,
            n => self.flows[n as usize].prev = prev,
        }
    }

    /// Links `slot` into `class`'s idle list after `after` (`NIL`: at the head).
    fn link_after(&mut self, slot: u32, class: usize, after: u32) {
        let next = match after {
            NIL => self.lists[class].head,
            a => self.flows[a as usize].next,
        };
        let f = &mut self.flows[slot as usize];
        f.class = class as u8;
        f.prev = after;
        f.next = next;
        match after {
            NIL => self.lists[class].head = slot,
            a => self.flows[a as usize].next = slot,
        }
        match next {
            NIL => self.lists[class].tail = slot,
            n => self.flows[n as usize].prev = slot,
        }
    }

    fn push_tail(&mut self, slot: u32, class: usize) {
        self.link_after(slot, class, self.lists[class].tail);
    }

    /// Removes the flow in `slot`.
    fn remove(&mut self, slot: u32) {
        self.unlink(slot);
        let f = &mut self.flows[slot as usize];
        f.live = false;
        let key = f.key.bytes();
        self.index.delete(&key);
        self.free.push(slot);
        if self.current == Some(slot) {
            self.current = None;
        }
    }

    /// Frees one slot of a full table: an aged flow at the head of an idle
    /// list if there is one, else the least recently seen flow.
    fn make_room(&mut self) {
        let heads = self.lists.map(|l| l.head);
        if let Some(&h) = heads.iter().find(|&&h| h != NIL && self.expired(h)) {
            self.remove(h);
            self.counts[AGED_OUT] += 1;
            return;
        }
        let oldest = heads.into_iter().filter(|&h| h != NIL).min_by_key(|&h| self.flows[h as usize].last);
        if let Some(h) = oldest {
            self.remove(h);
            self.counts[EVICTED] += 1;
        }
    }

    /// A new flow for `key` (flags 0, no list yet), or `None` if the index
    /// refused it (it does not below capacity).
    fn allocate(&mut self, key: Key, client_is_a: bool) -> Option<u32> {
        if self.index.len() >= self.config.capacity {
            self.make_room();
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.flows.len() < self.config.capacity => {
                let fresh = Flow {
                    key,
                    client_is_a,
                    live: false,
                    flags: 0,
                    generation: 0,
                    class: 0,
                    last: 0,
                    prev: NIL,
                    next: NIL,
                    packets: [0; 2],
                };
                self.flows.push(fresh);
                self.bits.resize(self.bits.len() + self.words, 0);
                (self.flows.len() - 1) as u32
            }
            None => return None,
        };
        if self.index.insert(&key.bytes(), &slot.to_le_bytes(), 0).is_err() {
            self.free.push(slot);
            return None;
        }
        let f = &mut self.flows[slot as usize];
        *f = Flow {
            key,
            client_is_a,
            live: true,
            flags: 0,
            generation: f.generation.wrapping_add(1) & GENERATION_MASK,
            class: 0,
            last: self.clock,
            prev: NIL,
            next: NIL,
            packets: [0; 2],
        };
        let w = self.words;
        self.bits[slot as usize * w..][..w].fill(0);
        self.counts[CREATED] += 1;
        Some(slot)
    }

    fn lookup(&self, key: &Key) -> Option<u32> {
        self.index.lookup(&key.bytes()).map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
    }

    /// Tracks packet `p` at time `now`: returns the state word and makes
    /// its flow current (see the module documentation). The handle of the
    /// flow is [`Flows::current_handle`].
    pub fn track(&mut self, p: &FlowPacket, now: Timestamp) -> u32 {
        self.clock = self.clock.max(now.as_nanos());
        let (key, forward) = Key::of(p);
        let tcp = p.proto == PROTO_TCP;
        let th = if tcp { p.tcp_flags } else { 0 };
        let mut slot = self.lookup(&key);
        if let Some(s) = slot {
            if self.expired(s) {
                self.remove(s);
                self.counts[AGED_OUT] += 1;
                slot = None;
            } else if tcp && self.flows[s as usize].flags & F_CLOSED != 0 && th & (TH_SYN | TH_ACK | TH_RST) == TH_SYN {
                self.remove(s);
                slot = None;
            }
        }
        let (slot, new) = match slot {
            Some(s) => (s, false),
            None => {
                // The SYN-ACK's receiver is the client; otherwise the sender.
                let client_is_a = forward != (tcp && th & (TH_SYN | TH_ACK | TH_RST) == TH_SYN | TH_ACK);
                match self.allocate(key, client_is_a) {
                    Some(s) => (s, true),
                    None => {
                        self.counts[UNTRACKED] += 1;
                        self.current = None;
                        return 0;
                    }
                }
            }
        };
        let clock = self.clock;
        let f = &mut self.flows[slot as usize];
        let from_client = forward == f.client_is_a;
        let old = f.flags;
        f.flags = step(old, tcp, from_client, th, new);
        let fl = f.flags;
        f.last = clock;
        let dir = usize::from(!from_client);
        f.packets[dir] = f.packets[dir].saturating_add(1);
        let changed = fl & !old;
        self.counts[ESTABLISHED_COUNT] += u64::from(changed & F_EST != 0);
        self.counts[MIDSTREAM_COUNT] += u64::from(changed & F_MID != 0);
        self.counts[CLOSED_COUNT] += u64::from(changed & F_CLOSED != 0);
        let class = class_of(fl, key.proto);
        if new {
            self.push_tail(slot, class);
        } else if class != usize::from(self.flows[slot as usize].class) || self.lists[class].tail != slot {
            self.unlink(slot);
            self.push_tail(slot, class);
        }
        self.current = Some(slot);
        self.counts[PACKETS] += 1;
        let mut word = TRACKED | if from_client { TO_SERVER } else { TO_CLIENT };
        for (flag, bit) in [(F_EST, ESTABLISHED), (F_MID, MIDSTREAM), (F_CLOSED, CLOSED)] {
            if fl & flag != 0 {
                word |= bit;
            }
        }
        if new {
            word |= NEW;
        }
        word
    }

    /// The handle of the current flow (0: none).
    pub fn current_handle(&self) -> u32 {
        self.current.map_or(0, |s| self.handle(s))
    }

    /// Makes the flow of `handle` current; whether it names a live flow.
    pub fn select(&mut self, handle: u32) -> bool {
        let slot = (handle & SLOT_MASK).wrapping_sub(1);
        self.current = self.flows.get(slot as usize).filter(|f| f.live && handle == self.handle(slot) && !self.expired(slot)).map(|_| slot);
        self.current.is_some()
    }

    /// Word `word` of the current flow's bits, if there is a current flow.
    /// `None` too when `word` is out of range.
    fn current_word(&mut self, word: usize) -> Option<&mut u32> {
        let s = self.current?;
        if word >= self.words || self.expired(s) {
            return None;
        }
        self.bits.get_mut(s as usize * self.words + word)
    }

    /// Runs flowbits op `op` (3..=9) on word `word` with `mask`; returns
    /// (result, the word afterwards).
    fn flowbits(&mut self, op: u8, word: u32, mask: u32) -> Result<(u32, u32), CoproError> {
        let words = self.words;
        if word as usize >= words {
            return Err(CoproError::BadArgument(format!("flowbits word {word} out of range ({words} words)")));
        }
        let Some(w) = self.current_word(word as usize) else { return Ok((0, 0)) };
        let r = match op {
            3 => {
                *w |= mask;
                1
            }
            4 => {
                *w &= !mask;
                1
            }
            5 => {
                *w ^= mask;
                1
            }
            6 => u32::from(*w & mask == mask),
            7 => u32::from(*w & mask != 0),
            8 => u32::from(*w & mask == 0),
            _ => u32::from(*w & mask != mask),
        };
        Ok((r, *w))
    }

    /// Purges aged flows from the heads of the idle lists, at most `budget`; returns how many.
    fn purge(&mut self, mut budget: usize) -> usize {
        let start = budget;
        for class in 0..CLASSES {
            while budget > 0 {
                let h = self.lists[class].head;
                if h == NIL || !self.expired(h) {
                    break;
                }
                self.remove(h);
                self.counts[AGED_OUT] += 1;
                budget -= 1;
            }
        }
        start - budget
    }

    /// Inserts flow `f` with `bits` as it is (absorb), evicting if full;
    /// a flow of the same 5-tuple here is replaced if `f` is more recent.
    fn adopt(&mut self, f: &Flow, bits: &[u32]) {
        if let Some(s) = self.lookup(&f.key) {
            if self.flows[s as usize].last >= f.last {
                return;
            }
            self.remove(s);
        }
        let Some(slot) = self.allocate(f.key, f.client_is_a) else { return };
        self.counts[CREATED] -= 1;
        let g = &mut self.flows[slot as usize];
        g.flags = f.flags;
        g.last = f.last;
        g.packets = f.packets;
        let w = self.words;
        self.bits[slot as usize * w..][..w].copy_from_slice(bits);
        // Keep the idle lists in order of last packet.
        let class = class_of(f.flags, f.key.proto);
        let mut after = self.lists[class].tail;
        while after != NIL && self.flows[after as usize].last > f.last {
            after = self.flows[after as usize].prev;
        }
        self.link_after(slot, class, after);
    }

    /// Live, unexpired flows in list order, with their slots.
    fn live_slots(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len());
        for l in &self.lists {
            let mut s = l.head;
            while s != NIL {
                if !self.expired(s) {
                    out.push(s);
                }
                s = self.flows[s as usize].next;
            }
        }
        out
    }
}

impl Coprocessor for Flows {
    fn kind(&self) -> &str {
        "flow"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        *self.input.get_mut(usize::from(reg)).ok_or(CoproError::NoRegister(reg))? = value;
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        self.output.get(usize::from(reg)).copied().ok_or(CoproError::NoRegister(reg))
    }

    fn registers(&mut self) -> RegisterFile {
        RegisterFile::over(&mut self.input, &mut self.output)
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        match op {
            0 | 1 => {
                let p = if op == 0 {
                    Some(FlowPacket::from_registers(&self.input))
                } else {
                    FlowPacket::parse_ipv4(ctx.packet, self.input[5] as usize)
                };
                let word = match p {
                    Some(p) => self.track(&p, ctx.now),
                    None => {
                        self.counts[UNTRACKED] += 1;
                        self.current = None;
                        0
                    }
                };
                self.output = [word, self.current_handle(), 0];
            }
            2 => {
                let live = self.select(self.input[6]);
                self.output = [u32::from(live), self.current_handle(), 0];
            }
            3..=9 => {
                let (r, w) = self.flowbits(op, self.input[7], self.input[8])?;
                self.output = [r, self.current_handle(), w];
            }
            _ => return Err(CoproError::NoOperation(op)),
        }
        Ok(())
    }

    fn dump(&self) -> String {
        let mut slots = self.live_slots();
        slots.sort_unstable_by_key(|&s| self.flows[s as usize].key);
        let mut out = String::new();
        for s in slots {
            let f = &self.flows[s as usize];
            let k = f.key;
            let ((c, cp), (sv, sp)) = if f.client_is_a { ((k.a, k.pa), (k.b, k.pb)) } else { ((k.b, k.pb), (k.a, k.pa)) };
            let _ = write!(out, "{} {}:{cp} > {}:{sp}", proto_name(k.proto), addr(c), addr(sv));
            for (flag, name) in [(F_EST, "established"), (F_MID, "midstream"), (F_CLOSED, "closed")] {
                if f.flags & flag != 0 {
                    let _ = write!(out, " {name}");
                }
            }
            let _ = write!(
                out,
                " packets={}/{} last={}.{:09} handle={:#x} bits=",
                f.packets[0],
                f.packets[1],
                f.last / 1_000_000_000,
                f.last % 1_000_000_000,
                self.handle(s)
            );
            let w = self.words;
            let mut first = true;
            for (i, word) in self.bits[s as usize * w..][..w].iter().enumerate() {
                for b in (0..32).filter(|b| word >> b & 1 != 0) {
                    let _ = write!(out, "{}{}", if first { "" } else { "," }, i * 32 + b);
                    first = false;
                }
            }
            out.push('\n');
        }
        out
    }

    /// Removes every flow (slots keep their generations: the handles of
    /// the removed flows name no new flow, as after an eviction).
    fn clear(&mut self) {
        self.index.clear();
        for f in &mut self.flows {
            f.live = false;
        }
        self.free = (0..self.flows.len() as u32).rev().collect();
        self.lists = [EMPTY; CLASSES];
        self.current = None;
    }

    fn tick(&mut self, now: Timestamp) {
        self.clock = self.clock.max(now.as_nanos());
        self.purge(PURGE_PER_TICK);
    }

    /// At capacity: the documented `capacity × (bits / 8 + 80)` bytes.
    fn memory(&self) -> u64 {
        (self.config.capacity * (self.config.bits / 8 + 80)) as u64
    }

    fn stats(&self) -> Vec<(String, u64)> {
        let mut s = vec![("flows".to_string(), self.len() as u64), ("capacity".to_string(), self.config.capacity as u64)];
        s.extend(COUNT_NAMES.iter().zip(self.counts).map(|(k, v)| (k.to_string(), v)));
        s
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// An empty table of the same configuration.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(Flows::new(self.config)?))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::PerWorker
    }

    /// Moves the other worker's flows here (the most recently seen wins on
    /// a 5-tuple both hold) and adds its statistics, leaving it empty.
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        let Some(o) = crate::downcast::<Flows>(other) else { return };
        self.clock = self.clock.max(o.clock);
        let mut theirs: Vec<u32> = o.live_slots();
        // Flows aged there but not yet purged are purged now.
        self.counts[AGED_OUT] += (o.len() - theirs.len()) as u64;
        theirs.sort_by_key(|&s| o.flows[s as usize].last);
        let w = o.words.min(self.words);
        for s in theirs {
            let f = o.flows[s as usize];
            let mut bits = vec![0u32; self.words];
            bits[..w].copy_from_slice(&o.bits[s as usize * o.words..][..w]);
            self.adopt(&f, &bits);
        }
        for (a, b) in self.counts.iter_mut().zip(&mut o.counts) {
            *a += std::mem::take(b);
        }
        o.clear();
    }
}

#[cfg(test)]
mod tests;
