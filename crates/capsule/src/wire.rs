//! The capsule on the wire (docs/capsules.md §1): where a capsule sits in a
//! frame, its header, and building one.
//!
//! A capsule is the payload of a UDP datagram to [`CAPSULE_PORT`] (or a port
//! the operator chooses), or the data of an IPv4 option ([`IPV4_OPTION`]) or
//! of an option in an IPv6 hop-by-hop or destination options header
//! ([`IPV6_OPTION`]), over IPv4 or IPv6, on Ethernet (with up to two VLAN
//! tags) or raw IP ([`Carrier`]):
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
/// The IPv4 option type that carries a capsule: RFC 4727's experimental
/// value 158 (copied into fragments, class 0, number 30).
pub const IPV4_OPTION: u8 = 0x9e;
/// The IPv6 option type that carries a capsule, in a hop-by-hop or a
/// destination options header: RFC 4727's experimental 0x3e (the two high
/// bits 00: a node that does not know it skips it; the third bit set: its
/// data may change en route).
pub const IPV6_OPTION: u8 = 0x3e;
/// The largest capsule an IPv4 option holds: 40 bytes of options less the
/// option's type and length.
pub const MAX_IPV4_OPTION_CAPSULE: usize = 38;
/// The largest capsule an IPv6 option holds (its length is one byte).
pub const MAX_IPV6_OPTION_CAPSULE: usize = 255;

/// How a capsule travels in its packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Carrier {
    /// The payload of a UDP datagram to the capsule port (the capsule's
    /// payload is the rest of the datagram). The UDP checksum covers it.
    Udp,
    /// The data of an IPv4 option ([`IPV4_OPTION`]), at most
    /// [`MAX_IPV4_OPTION_CAPSULE`] bytes. The IPv4 header checksum covers it.
    Ipv4Option,
    /// The data of an option ([`IPV6_OPTION`]) of an IPv6 hop-by-hop or
    /// destination options header, at most [`MAX_IPV6_OPTION_CAPSULE`]
    /// bytes. No checksum covers it.
    Ipv6Option,
}

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
    /// How the capsule travels.
    pub carrier: Carrier,
    /// The UDP header, when the carrier is [`Carrier::Udp`].
    pub udp: Option<usize>,
    /// The capsule header.
    pub capsule: usize,
    /// The end of the packet capsule code sees: the UDP datagram's (as its
    /// length says) for a capsule in UDP, the IP datagram's for a capsule in
    /// an option; within the frame.
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

    /// The checksum that covers the capsule's bytes, if one does: the
    /// offset of its field in the frame and where the 16-bit words it sums
    /// are counted from (the UDP header, or the IPv4 header for an IPv4
    /// option).
    pub fn checksum(&self) -> Option<(usize, usize)> {
        match (self.carrier, self.udp) {
            (Carrier::Udp, Some(udp)) => Some((udp + 6, udp)),
            (Carrier::Ipv4Option, _) => Some((self.net + 10, self.net)),
            _ => None,
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Finds a capsule in `frame`: `Ok(None)` when the frame carries none (an
/// ordinary packet: no capsule option, and not a UDP datagram to `port`),
/// `Err` when it carries one that does not hold a valid capsule header. A
/// capsule option comes first: a packet with one is not looked at as a
/// datagram to `port`.
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
    // A capsule in an option: (the capsule, the end of the option's data,
    // the end of the IP datagram in the frame).
    let in_option = |ipv6: bool, (capsule, area_end): (usize, usize), ip_end: usize| {
        let carrier = if ipv6 { Carrier::Ipv6Option } else { Carrier::Ipv4Option };
        let header = header_at(frame, capsule, area_end.min(ip_end))?;
        Ok(Some(Located { net, ipv6, carrier, udp: None, capsule, end: ip_end, header }))
    };
    // (UDP header offset, IPv6, end of the IP datagram in the frame)
    let (udp, ipv6, ip_end) = match vb >> 4 {
        4 => {
            let ihl = usize::from(vb & 0xf) * 4;
            if ihl < 20 || frame.len() < net + ihl {
                return Ok(None);
            }
            let total = usize::from(be16(frame, net + 2).unwrap_or(0));
            let ip_end = (net + total).min(frame.len());
            let frag = be16(frame, net + 6).unwrap_or(0);
            if let Some(option) = ipv4_option(frame, net + 20, net + ihl)? {
                // The option is copied into every fragment: none is whole.
                return if frag & 0x3fff != 0 { Err(Malformed::Fragment) } else { in_option(false, option, ip_end) };
            }
            if frame[net + 9] != 17 {
                return Ok(None);
            }
            if frag & 0x3fff != 0 {
                // Only the first fragment has the UDP header to tell.
                let first_ours = frag & 0x1fff == 0 && udp_port_of(frame, net + ihl) == Some(port);
                return if first_ours { Err(Malformed::Fragment) } else { Ok(None) };
            }
            (net + ihl, false, ip_end)
        }
        6 => {
            if frame.len() < net + 40 {
                return Ok(None);
            }
            let payload = usize::from(be16(frame, net + 4).unwrap_or(0));
            let end = (net + 40 + payload).min(frame.len());
            // Skip the extension headers a UDP datagram may follow
            // (hop-by-hop, routing, destination options), looking for a
            // capsule option in the options headers; a fragment header
            // means a fragment.
            let (mut next, mut at) = (frame[net + 6], net + 40);
            let mut udp = None;
            let mut option = None;
            for _ in 0..8 {
                match next {
                    17 => {
                        udp = Some(at);
                        break;
                    }
                    0 | 43 | 60 => {
                        let (Some(&n), Some(&l)) = (frame.get(at), frame.get(at + 1)) else { break };
                        let header_end = at + (usize::from(l) + 1) * 8;
                        if next != 43 && option.is_none() {
                            option = ipv6_option(frame, at + 2, header_end.min(end))?;
                        }
                        next = n;
                        at = header_end;
                    }
                    44 => {
                        let first_ours = frame.get(at) == Some(&17)
                            && be16(frame, at + 2).is_some_and(|o| o & 0xfff8 == 0)
                            && udp_port_of(frame, at + 8) == Some(port);
                        return if option.is_some() || first_ours { Err(Malformed::Fragment) } else { Ok(None) };
                    }
                    _ => break,
                }
            }
            if let Some(option) = option {
                return in_option(true, option, end);
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
    let header = header_at(frame, capsule, end)?;
    Ok(Some(Located { net, ipv6, carrier: Carrier::Udp, udp: Some(udp), capsule, end, header }))
}

/// The capsule header at `capsule`, checked, with the code and the
/// scratchpad before `area_end` (the end of the datagram or of the option).
fn header_at(frame: &[u8], capsule: usize, area_end: usize) -> Result<Header, Malformed> {
    let h = frame.get(capsule..capsule + HEADER_LEN).ok_or(Malformed::Truncated)?;
    if capsule + HEADER_LEN > area_end {
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
    if capsule + HEADER_LEN + usize::from(header.code_len) + usize::from(header.scratch_len) > area_end {
        return Err(Malformed::Truncated);
    }
    Ok(header)
}

/// The capsule option among the IPv4 options in `frame[from..to]`: where
/// its data starts and ends. Options that do not parse hide no capsule
/// (`Ok(None)`: routers handle such packets as they do), but a capsule
/// option whose length runs past the options is a truncated capsule.
fn ipv4_option(frame: &[u8], from: usize, to: usize) -> Result<Option<(usize, usize)>, Malformed> {
    let mut at = from;
    while at < to {
        match frame[at] {
            0 => break,
            1 => at += 1,
            kind => {
                let len = frame.get(at + 1).filter(|_| at + 1 < to).map_or(0, |&l| usize::from(l));
                if len < 2 || at + len > to {
                    return if kind == IPV4_OPTION { Err(Malformed::Truncated) } else { Ok(None) };
                }
                if kind == IPV4_OPTION {
                    return Ok(Some((at + 2, at + len)));
                }
                at += len;
            }
        }
    }
    Ok(None)
}

/// The capsule option among the TLV options of an IPv6 hop-by-hop or
/// destination options header, `frame[from..to]`: where its data starts
/// and ends. As [`ipv4_option`] for options that do not parse.
fn ipv6_option(frame: &[u8], from: usize, to: usize) -> Result<Option<(usize, usize)>, Malformed> {
    let mut at = from;
    while at < to {
        let Some(&kind) = frame.get(at) else { break };
        if kind == 0 {
            at += 1; // Pad1
            continue;
        }
        let data = at + 2;
        let end = frame.get(at + 1).filter(|_| at + 1 < to).map(|&l| data + usize::from(l));
        match end {
            Some(end) if end <= to => {
                if kind == IPV6_OPTION {
                    return Ok(Some((data, end)));
                }
                at = end;
            }
            _ => return if kind == IPV6_OPTION { Err(Malformed::Truncated) } else { Ok(None) },
        }
    }
    Ok(None)
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
    let spec = FrameSpec { src: src.into(), dst: dst.into(), sport, port, ttl, carrier: Carrier::Udp };
    ethernet_frame(&spec, capsule, &[]).expect("a UDP capsule over IPv4 always fits")
}

/// The addresses and ports of a frame to carry a capsule in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSpec {
    /// IP source (IPv4 or IPv6, as the carrier needs).
    pub src: std::net::IpAddr,
    /// IP destination, of the family of `src`.
    pub dst: std::net::IpAddr,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port (the capsule port for [`Carrier::Udp`]).
    pub port: u16,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// How the capsule travels.
    pub carrier: Carrier,
}

/// An Ethernet frame carrying `capsule` (header, code and scratchpad, from
/// [`encode_capsule`] or [`crate::build::Built::encode`]) as `spec.carrier`
/// says, in a UDP datagram whose payload is `payload` (after the capsule for
/// [`Carrier::Udp`]), with every checksum right. An error names what does
/// not fit: addresses of different families or of the wrong family for
/// the carrier, a capsule too large for its option, a datagram past 65,535
/// bytes.
pub fn ethernet_frame(spec: &FrameSpec, capsule: &[u8], payload: &[u8]) -> Result<Vec<u8>, String> {
    use std::net::IpAddr;
    let ipv6 = match (spec.src, spec.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_)) => true,
        _ => return Err("the source and destination addresses are of different families".into()),
    };
    match (spec.carrier, ipv6) {
        (Carrier::Ipv4Option, true) => return Err("an IPv4 option needs IPv4 addresses".into()),
        (Carrier::Ipv6Option, false) => return Err("an IPv6 option needs IPv6 addresses".into()),
        _ => {}
    }
    // The UDP datagram, its checksum filled in once the IP header is there.
    let mut datagram = vec![0u8; 8];
    datagram[..2].copy_from_slice(&spec.sport.to_be_bytes());
    datagram[2..4].copy_from_slice(&spec.port.to_be_bytes());
    if spec.carrier == Carrier::Udp {
        datagram.extend_from_slice(capsule);
    }
    datagram.extend_from_slice(payload);
    let udp_len = u16::try_from(datagram.len()).map_err(|_| format!("a UDP datagram of {} bytes", datagram.len()))?;
    datagram[4..6].copy_from_slice(&udp_len.to_be_bytes());
    // The options: the capsule in one, padded as the header needs.
    let options = match spec.carrier {
        Carrier::Udp => Vec::new(),
        Carrier::Ipv4Option => {
            if capsule.len() > MAX_IPV4_OPTION_CAPSULE {
                return Err(format!(
                    "a capsule of {} bytes does not fit an IPv4 option (at most {MAX_IPV4_OPTION_CAPSULE})",
                    capsule.len()
                ));
            }
            let mut o = vec![IPV4_OPTION, 2 + capsule.len() as u8];
            o.extend_from_slice(capsule);
            o.resize(o.len().div_ceil(4) * 4, 0); // end of options
            o
        }
        Carrier::Ipv6Option => {
            if capsule.len() > MAX_IPV6_OPTION_CAPSULE {
                return Err(format!(
                    "a capsule of {} bytes does not fit an IPv6 option (at most {MAX_IPV6_OPTION_CAPSULE})",
                    capsule.len()
                ));
            }
            // A destination options header: next header, length, the option, padding.
            let mut o = vec![17, 0, IPV6_OPTION, capsule.len() as u8];
            o.extend_from_slice(capsule);
            match o.len().div_ceil(8) * 8 - o.len() {
                0 => {}
                1 => o.push(0), // Pad1
                n => {
                    o.extend_from_slice(&[1, n as u8 - 2]); // PadN
                    o.resize(o.len() + n - 2, 0);
                }
            }
            o[1] = (o.len() / 8 - 1) as u8;
            o
        }
    };
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    let net = 14;
    match (spec.src, spec.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let ihl = 20 + options.len();
            let total = u16::try_from(ihl + datagram.len()).map_err(|_| format!("an IPv4 datagram of {} bytes", ihl + datagram.len()))?;
            let mut ip = vec![0u8; 20];
            ip[0] = 0x40 | (ihl / 4) as u8;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[8] = spec.ttl;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            ip.extend_from_slice(&options);
            let c = !fold(sum16(&ip, 0));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let payload_len = u16::try_from(options.len() + datagram.len()).map_err(|_| "an IPv6 payload past 65,535 bytes".to_string())?;
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&payload_len.to_be_bytes());
            ip[6] = if options.is_empty() { 17 } else { 60 };
            ip[7] = spec.ttl;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            f.extend_from_slice(&ip);
            f.extend_from_slice(&options);
        }
        _ => unreachable!("families checked above"),
    }
    let udp = f.len();
    f.extend_from_slice(&datagram);
    let sum = udp_checksum(&f, net, udp, ipv6);
    f[udp + 6..udp + 8].copy_from_slice(&sum.to_be_bytes());
    Ok(f)
}

/// Whether the IPv4 header at `net` in `frame` has a right checksum.
pub fn ipv4_header_checksum_ok(frame: &[u8], net: usize) -> bool {
    let ihl = frame.get(net).map_or(0, |b| usize::from(b & 0xf) * 4);
    frame.get(net..net + ihl).is_some_and(|h| ihl >= 20 && fold(sum16(h, 0)) == 0xffff)
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
        assert_eq!((l.net, l.udp, l.capsule, l.end), (14, Some(34), 42, f.len()));
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

    fn spec(carrier: Carrier) -> FrameSpec {
        let (src, dst): (std::net::IpAddr, std::net::IpAddr) = match carrier {
            Carrier::Ipv6Option => ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap()),
            _ => ("192.0.2.1".parse().unwrap(), "198.51.100.1".parse().unwrap()),
        };
        FrameSpec { src, dst, sport: 4000, port: 9, ttl: 64, carrier }
    }

    fn small() -> (Header, Vec<u8>) {
        let h = Header { flags: 0, ingress: 0, egress: 1, code_len: 2, scratch_len: 3, hops: 3, cost_limit: 0 };
        (h, encode_capsule(&h, &[0x51, 0x51], &[1, 2, 3], b""))
    }

    #[test]
    fn a_capsule_in_an_option_is_found_again() {
        let (h, capsule) = small();
        for carrier in [Carrier::Ipv4Option, Carrier::Ipv6Option] {
            let f = ethernet_frame(&spec(carrier), &capsule, b"payload").unwrap();
            let l = locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
            assert_eq!((l.carrier, l.udp, l.end, l.header), (carrier, None, f.len(), h));
            assert_eq!(&f[l.code()], &[0x51, 0x51]);
            assert_eq!(&f[l.scratch()], &[1, 2, 3]);
            // The option comes first: a datagram to the capsule port under
            // it is its payload, not a second capsule.
            let on_port = ethernet_frame(&FrameSpec { port: CAPSULE_PORT, ..spec(carrier) }, &capsule, b"payload").unwrap();
            assert_eq!(locate(&on_port, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap().carrier, carrier);
            let udp = f.len() - 8 - 7;
            assert_eq!(udp_checksum(&f, 14, udp, carrier == Carrier::Ipv6Option), u16::from_be_bytes([f[udp + 6], f[udp + 7]]));
            assert_eq!(locate(&f[14..], Link::RawIp, CAPSULE_PORT).unwrap().unwrap().capsule, l.capsule - 14);
        }
        let f = ethernet_frame(&spec(Carrier::Ipv4Option), &capsule, b"").unwrap();
        assert!(ipv4_header_checksum_ok(&f, 14));
        assert_eq!(locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap().capsule, 14 + 20 + 2);
        // In a hop-by-hop header (the first extension header) as well.
        let mut f = ethernet_frame(&spec(Carrier::Ipv6Option), &capsule, b"").unwrap();
        f[14 + 6] = 0;
        assert_eq!(locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap().capsule, 14 + 40 + 4);
        // Over UDP on IPv6.
        let f =
            ethernet_frame(&FrameSpec { port: CAPSULE_PORT, carrier: Carrier::Udp, ..spec(Carrier::Ipv6Option) }, &capsule, b"x").unwrap();
        let l = locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap();
        assert_eq!((l.carrier, l.ipv6, l.udp), (Carrier::Udp, true, Some(54)));
    }

    #[test]
    fn what_does_not_fit_an_option_is_refused() {
        let h = Header { flags: 0, ingress: 0, egress: 0, code_len: 23, scratch_len: 0, hops: 1, cost_limit: 0 };
        let big = encode_capsule(&h, &[0x51; 23], &[], b"");
        assert!(ethernet_frame(&spec(Carrier::Ipv4Option), &big, b"").unwrap_err().contains("at most 38"));
        assert!(ethernet_frame(&spec(Carrier::Ipv4Option), &big[..38], b"").is_ok());
        assert!(ethernet_frame(&spec(Carrier::Ipv6Option), &[0; 256], b"").unwrap_err().contains("at most 255"));
        assert!(ethernet_frame(&FrameSpec { carrier: Carrier::Ipv6Option, ..spec(Carrier::Udp) }, &big, b"").is_err());
        assert!(ethernet_frame(&FrameSpec { carrier: Carrier::Ipv4Option, ..spec(Carrier::Ipv6Option) }, &big, b"").is_err());
        // Every padding length of the IPv6 header parses back.
        for n in 0..40 {
            let h = Header { flags: 0, ingress: 0, egress: 0, code_len: 1 + n, scratch_len: 0, hops: 1, cost_limit: 0 };
            let c = encode_capsule(&h, &vec![0x51; usize::from(1 + n)], &[], b"");
            let f = ethernet_frame(&spec(Carrier::Ipv6Option), &c, b"p").unwrap();
            assert_eq!(locate(&f, Link::Ethernet, CAPSULE_PORT).unwrap().unwrap().header, h, "{n}");
            assert_eq!((f.len() - 14 - 40 - 8 - 1) % 8, 0);
        }
    }

    #[test]
    fn malformed_options() {
        let (_, capsule) = small();
        let v4 = ethernet_frame(&spec(Carrier::Ipv4Option), &capsule, b"").unwrap();
        let with = |f: &[u8], i: usize, v: u8| {
            let mut f = f.to_vec();
            f[i] = v;
            locate(&f, Link::Ethernet, CAPSULE_PORT)
        };
        let opt = 14 + 20;
        assert_eq!(with(&v4, opt + 1, 60), Err(Malformed::Truncated), "an option past the header");
        assert_eq!(with(&v4, opt + 1, 1), Err(Malformed::Truncated), "an option shorter than its type and length");
        assert_eq!(with(&v4, opt + 1, 18), Err(Malformed::Truncated), "a capsule longer than its option");
        assert_eq!(with(&v4, opt + 2, b'X'), Err(Malformed::Magic));
        assert_eq!(with(&v4, 14 + 6, 0x20), Err(Malformed::Fragment), "more fragments");
        assert_eq!(with(&v4, opt, 0x44), Ok(None), "another option (timestamp) that does not parse: not a capsule");
        // Options before it are skipped.
        let mut f = v4.clone();
        f.splice(opt..opt, [1, 0x94, 4, 0, 0, 1, 1, 1]); // NOP, router alert, NOPs
        f[14] += 2; // IHL
        let total = u16::from_be_bytes([f[16], f[17]]) + 8;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        let l = locate(&f, Link::Ethernet, CAPSULE_PORT);
        assert!(matches!(l, Ok(Some(Located { carrier: Carrier::Ipv4Option, capsule, .. })) if capsule == opt + 10), "{l:?}");
        let v6 = ethernet_frame(&spec(Carrier::Ipv6Option), &capsule, b"").unwrap();
        let opt = 14 + 40 + 2;
        assert_eq!(with(&v6, opt + 1, 200), Err(Malformed::Truncated), "an option past its header");
        assert_eq!(with(&v6, opt + 1, 10), Err(Malformed::Truncated), "a capsule longer than its option");
        assert_eq!(with(&v6, opt + 2, b'X'), Err(Malformed::Magic));
        assert_eq!(with(&v6, 14 + 40, 44), Err(Malformed::Fragment), "a fragment header after it");
        for (good, cut_from) in [(&v4, 0), (&v6, 0)] {
            for cut in cut_from..good.len() {
                // Never a panic; short frames are ordinary or truncated capsules.
                let _ = locate(&good[..cut], Link::Ethernet, CAPSULE_PORT);
            }
        }
    }
}
