//! The capsule on the wire (docs/capsules.md §1): where a capsule sits in a
//! frame, its header, and building one.
//!
//! A capsule is the payload of a UDP datagram to [`CAPSULE_PORT`] (or a port
//! the operator chooses), over IPv4 or IPv6, on Ethernet (with up to two
//! VLAN tags) or raw IP:
//!
//! ```text
//! 0        2        3       4                6               8
//! +--------+--------+-------+----------------+---------------+
//! | "NC"   | version| flags | ingress entry  | egress entry  |
//! +--------+--------+-------+----------------+---------------+
//! | code length     | scratchpad length      | hops  | rsvd  | cost limit (u16)
//! +-----------------+------------------------+-------+-------+----------------
//! | code (NetIL instruction encoding, code length bytes)
//! | scratchpad (scratchpad length bytes, at most 256): the only bytes capsule code writes
//! | payload (the rest of the datagram): read-only
//! ```
//!
//! All fields are big-endian. Parsing never trusts a length: every range is
//! checked against the bytes present, and what does not parse is a
//! [`Malformed`] reason, counted by the node.

/// The well-known UDP port of capsules (an operator may choose another).
pub const CAPSULE_PORT: u16 = 7737;
/// The first two bytes of every capsule.
pub const MAGIC: [u8; 2] = *b"NC";
/// The format version this code reads and writes.
pub const VERSION: u8 = 1;
/// Bytes of the capsule header.
pub const HEADER_LEN: usize = 16;
/// Largest scratchpad (bytes), as WASP's.
pub const MAX_SCRATCH: usize = 256;
/// Largest code section (bytes).
pub const MAX_CODE: usize = 1024;

/// `flags` bit: the SNAP dialect (backward jumps, weighted cost); clear:
/// the WASP dialect (forward jumps only).
pub const FLAG_SNAP: u8 = 1;
/// `flags` bit: the capsule has been returned to its source once; it may
/// not return again.
pub const FLAG_RETURNED: u8 = 2;
/// `flags` bit: an admin capsule, asking for operator rights on the
/// ephemeral state store (granted only from configured sources).
pub const FLAG_ADMIN: u8 = 4;
const KNOWN_FLAGS: u8 = FLAG_SNAP | FLAG_RETURNED | FLAG_ADMIN;

/// Which verification rules and cost accounting the code follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// WASP: forward jumps only, so time is linear in code length.
    Wasp,
    /// SNAP (the JIT seed's dialect): backward jumps allowed; every
    /// instruction charges its weight against the packet's local bound.
    Snap,
}

/// The capsule header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The flags byte ([`FLAG_SNAP`], [`FLAG_RETURNED`], [`FLAG_ADMIN`]).
    pub flags: u8,
    /// Byte offset in the code where the ingress hook starts.
    pub ingress: u16,
    /// Byte offset in the code where the egress hook starts.
    pub egress: u16,
    /// Bytes of code.
    pub code_len: u16,
    /// Bytes of scratchpad.
    pub scratch_len: u16,
    /// The network part of the resource bound: capsule nodes still allowed
    /// to run the code (each decrements it; 0 on arrival: dropped).
    pub hops: u8,
    /// The sender's own cap on the local cost per node, in units of 16
    /// (0: none beyond the node's bound).
    pub cost_limit: u16,
}

impl Header {
    /// The dialect the flags name.
    pub fn dialect(&self) -> Dialect {
        if self.flags & FLAG_SNAP != 0 {
            Dialect::Snap
        } else {
            Dialect::Wasp
        }
    }

    /// Writes the header in wire format.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..2].copy_from_slice(&MAGIC);
        h[2] = VERSION;
        h[3] = self.flags;
        h[4..6].copy_from_slice(&self.ingress.to_be_bytes());
        h[6..8].copy_from_slice(&self.egress.to_be_bytes());
        h[8..10].copy_from_slice(&self.code_len.to_be_bytes());
        h[10..12].copy_from_slice(&self.scratch_len.to_be_bytes());
        h[12] = self.hops;
        h[14..16].copy_from_slice(&self.cost_limit.to_be_bytes());
        h
    }
}

/// Why a packet addressed as a capsule is not one (a counted drop).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Malformed {
    /// Fewer bytes than the IP or UDP header, or the capsule header, claims.
    Truncated,
    /// An IP fragment: capsule code needs the whole datagram.
    Fragment,
    /// The first bytes are not [`MAGIC`].
    Magic,
    /// A version this node does not read.
    Version,
    /// A flags bit this version does not define.
    Flags,
    /// The reserved byte is not zero.
    Reserved,
    /// Code longer than [`MAX_CODE`], or empty.
    CodeLength,
    /// Scratchpad longer than [`MAX_SCRATCH`].
    ScratchLength,
    /// An entry point outside the code.
    Entry,
}

impl Malformed {
    /// The reason's name in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::Truncated => "truncated",
            Malformed::Fragment => "fragment",
            Malformed::Magic => "magic",
            Malformed::Version => "version",
            Malformed::Flags => "flags",
            Malformed::Reserved => "reserved",
            Malformed::CodeLength => "code_length",
            Malformed::ScratchLength => "scratch_length",
            Malformed::Entry => "entry",
        }
    }
}

/// The link layer a frame starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Ethernet II (with up to two 802.1Q / 802.1ad tags).
    Ethernet,
    /// Raw IPv4 or IPv6 (the version nibble says which).
    RawIp,
}

/// Where a capsule lies in a frame (byte offsets into the frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    /// The IP header: capsule code sees the packet from here.
    pub net: usize,
    /// IPv6 (else IPv4).
    pub ipv6: bool,
    /// The UDP header.
    pub udp: usize,
    /// The capsule header.
    pub capsule: usize,
    /// The end of the datagram (as the UDP length says, within the frame).
    pub end: usize,
    /// The decoded header.
    pub header: Header,
}

impl Located {
    /// Byte range of the code in the frame.
    pub fn code(&self) -> std::ops::Range<usize> {
        let s = self.capsule + HEADER_LEN;
        s..s + usize::from(self.header.code_len)
    }

    /// Byte range of the scratchpad in the frame.
    pub fn scratch(&self) -> std::ops::Range<usize> {
        let s = self.code().end;
        s..s + usize::from(self.header.scratch_len)
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Finds a capsule in `frame`: `Ok(None)` when the frame is not a UDP
/// datagram to `port` (an ordinary packet), `Err` when it is one but does
/// not hold a valid capsule header.
pub fn locate(frame: &[u8], link: Link, port: u16) -> Result<Option<Located>, Malformed> {
    let mut net = 0;
    if link == Link::Ethernet {
        let mut ethertype = match be16(frame, 12) {
            Some(t) => t,
            None => return Ok(None),
        };
        net = 14;
        for _ in 0..2 {
            if ethertype == 0x8100 || ethertype == 0x88a8 {
                ethertype = match be16(frame, net + 2) {
                    Some(t) => t,
                    None => return Ok(None),
                };
                net += 4;
            }
        }
        if ethertype != 0x0800 && ethertype != 0x86dd {
            return Ok(None);
        }
    }
    let Some(&vb) = frame.get(net) else { return Ok(None) };
    // (UDP header offset, IPv6, end of the IP datagram in the frame)
    let (udp, ipv6, ip_end) = match vb >> 4 {
        4 => {
            let ihl = usize::from(vb & 0xf) * 4;
            if ihl < 20 || frame.len() < net + ihl || frame[net + 9] != 17 {
                return Ok(None);
            }
            let total = usize::from(be16(frame, net + 2).unwrap_or(0));
            let frag = be16(frame, net + 6).unwrap_or(0);
            if frag & 0x3fff != 0 {
                // Only the first fragment has the UDP header to tell.
                let first_ours = frag & 0x1fff == 0 && udp_port_of(frame, net + ihl) == Some(port);
                return if first_ours { Err(Malformed::Fragment) } else { Ok(None) };
            }
            (net + ihl, false, (net + total).min(frame.len()))
        }
        6 => {
            if frame.len() < net + 40 {
                return Ok(None);
            }
            let payload = usize::from(be16(frame, net + 4).unwrap_or(0));
            let end = (net + 40 + payload).min(frame.len());
            // Skip the extension headers a UDP datagram may follow
            // (hop-by-hop, routing, destination options); a fragment header
            // means a fragment.
            let (mut next, mut at) = (frame[net + 6], net + 40);
            let mut udp = None;
            for _ in 0..8 {
                match next {
                    17 => {
                        udp = Some(at);
                        break;
                    }
                    0 | 43 | 60 => {
                        let (Some(&n), Some(&l)) = (frame.get(at), frame.get(at + 1)) else { return Ok(None) };
                        next = n;
                        at += (usize::from(l) + 1) * 8;
                    }
                    44 => {
                        let first_ours = frame.get(at) == Some(&17)
                            && be16(frame, at + 2).is_some_and(|o| o & 0xfff8 == 0)
                            && udp_port_of(frame, at + 8) == Some(port);
                        return if first_ours { Err(Malformed::Fragment) } else { Ok(None) };
                    }
                    _ => return Ok(None),
                }
            }
            match udp {
                Some(u) => (u, true, end),
                None => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    if udp_port_of(frame, udp) != Some(port) {
        return Ok(None);
    }
    let udp_len = usize::from(be16(frame, udp + 4).unwrap_or(0));
    if udp_len < 8 || udp + udp_len > ip_end {
        return Err(Malformed::Truncated);
    }
    let end = udp + udp_len;
    let capsule = udp + 8;
    let h = frame.get(capsule..capsule + HEADER_LEN).ok_or(Malformed::Truncated)?;
    if capsule + HEADER_LEN > end {
        return Err(Malformed::Truncated);
    }
    if h[..2] != MAGIC {
        return Err(Malformed::Magic);
    }
    if h[2] != VERSION {
        return Err(Malformed::Version);
    }
    if h[3] & !KNOWN_FLAGS != 0 {
        return Err(Malformed::Flags);
    }
    if h[13] != 0 {
        return Err(Malformed::Reserved);
    }
    let header = Header {
        flags: h[3],
        ingress: u16::from_be_bytes([h[4], h[5]]),
        egress: u16::from_be_bytes([h[6], h[7]]),
        code_len: u16::from_be_bytes([h[8], h[9]]),
        scratch_len: u16::from_be_bytes([h[10], h[11]]),
        hops: h[12],
        cost_limit: u16::from_be_bytes([h[14], h[15]]),
    };
    if header.code_len == 0 || usize::from(header.code_len) > MAX_CODE {
        return Err(Malformed::CodeLength);
    }
    if usize::from(header.scratch_len) > MAX_SCRATCH {
        return Err(Malformed::ScratchLength);
    }
    if header.ingress >= header.code_len || header.egress >= header.code_len {
        return Err(Malformed::Entry);
    }
    let l = Located { net, ipv6, udp, capsule, end, header };
    if l.scratch().end > end {
        return Err(Malformed::Truncated);
    }
    Ok(Some(l))
}

fn udp_port_of(frame: &[u8], udp: usize) -> Option<u16> {
    be16(frame, udp + 2)
}

/// The capsule part of a datagram: header, code and scratchpad, then the payload.
pub fn encode_capsule(header: &Header, code: &[u8], scratch: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + code.len() + scratch.len() + payload.len());
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(code);
    out.extend_from_slice(scratch);
    out.extend_from_slice(payload);
    out
}

/// The Internet checksum's ones' complement sum of `bytes` (not folded).
fn sum16(bytes: &[u8], mut acc: u32) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// An Ethernet frame carrying `capsule` (from [`encode_capsule`]) in a UDP
/// datagram from `src` to `dst` (IPv4), source port `sport`, to `port`,
/// with correct IPv4 and UDP checksums.
pub fn ethernet_ipv4_frame(src: [u8; 4], dst: [u8; 4], sport: u16, port: u16, ttl: u8, capsule: &[u8]) -> Vec<u8> {
    let udp_len = 8 + capsule.len();
    let total = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + total);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[8] = ttl;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = !fold(sum16(&ip, 0));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut udp = [0u8; 8];
    udp[..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&port.to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&udp);
    f.extend_from_slice(capsule);
    let at = 14 + 20;
    let sum = udp_checksum(&f, 14, at, false);
    f[at + 6..at + 8].copy_from_slice(&sum.to_be_bytes());
    f
}

/// A UDP checksum `sum` updated for one 16-bit word of the datagram
/// changing from `old` to `new` (RFC 1624, eqn. 3); 0 is sent as 0xffff.
pub fn checksum_update(sum: u16, old: u16, new: u16) -> u16 {
    match netvm_vm::region::csum_update(u32::from(sum), u32::from(old), u32::from(new)) as u16 {
        0 => 0xffff,
        c => c,
    }
}

/// The UDP checksum of the datagram at `udp` in `frame` (IP header at
/// `net`), the checksum field counted as zero; 0 is sent as 0xffff.
pub fn udp_checksum(frame: &[u8], net: usize, udp: usize, ipv6: bool) -> u16 {
    let len = usize::from(be16(frame, udp + 4).unwrap_or(0)).min(frame.len().saturating_sub(udp));
    let mut acc =
        if ipv6 { sum16(&frame[net + 8..net + 40], 0) + 17 + len as u32 } else { sum16(&frame[net + 12..net + 20], 0) + 17 + len as u32 };
    acc = sum16(&frame[udp..udp + 6], acc);
    acc = sum16(&frame[udp + 8..udp + len], acc);
    match !fold(acc) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header { flags: 0, ingress: 0, egress: 1, code_len: 2, scratch_len: 4, hops: 3, cost_limit: 0 }
    }

    fn frame(h: &Header, code: &[u8], scratch: &[u8]) -> Vec<u8> {
        ethernet_ipv4_frame([10, 0, 0, 1], [10, 0, 0, 2], 5000, CAPSULE_PORT, 64, &encode_capsule(h, code, scratch, b"payload"))
    }

    #[test]
    fn a_built_capsule_is_found_again() {
        let f = frame(&header(), &[0x51, 0x51], &[1, 2, 3, 4]);
        let l = locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
        assert_eq!((l.net, l.udp, l.capsule, l.end), (14, 34, 42, f.len()));
        assert_eq!(l.header, header());
        assert_eq!(&f[l.code()], &[0x51, 0x51]);
        assert_eq!(&f[l.scratch()], &[1, 2, 3, 4]);
        assert_eq!(udp_checksum(&f, 14, 34, false), u16::from_be_bytes([f[40], f[41]]));
        assert_eq!(locate(&f[14..], Link::RawIp, CAPSULE_PORT).unwrap().unwrap().capsule, 28);
        assert_eq!(locate(&f, Link::Ethernet, 53).unwrap(), None, "another port: an ordinary packet");
    }

    #[test]
    fn every_malformation_is_named() {
        let good = frame(&header(), &[0x51, 0x51], &[1, 2, 3, 4]);
        let with = |i: usize, v: u8| {
            let mut f = good.clone();
            f[i] = v;
            locate(&f, Link::Ethernet, CAPSULE_PORT)
        };
        assert_eq!(with(42, b'X'), Err(Malformed::Magic));
        assert_eq!(with(44, 2), Err(Malformed::Version));
        assert_eq!(with(45, 0x80), Err(Malformed::Flags));
        assert_eq!(with(55, 1), Err(Malformed::Reserved));
        assert_eq!(with(51, 0), Err(Malformed::CodeLength));
        assert_eq!(with(50, 0x10), Err(Malformed::CodeLength));
        assert_eq!(with(52, 0x10), Err(Malformed::ScratchLength));
        assert_eq!(with(47, 2), Err(Malformed::Entry));
        assert_eq!(with(53, 200), Err(Malformed::Truncated), "a scratchpad past the datagram");
        assert_eq!(with(20, 0x20), Err(Malformed::Fragment), "more fragments");
        for cut in 0..good.len() - 7 {
            // Never a panic; short frames are ordinary or truncated capsules.
            let _ = locate(&good[..cut], Link::Ethernet, CAPSULE_PORT);
        }
    }
}
