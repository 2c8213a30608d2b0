//! How packets are spread over workers, and the symmetric flow hash.

/// How the driver spreads packets over several workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// By a symmetric flow hash ([`flow_hash`]): both directions of a
    /// connection go to the same worker, so per-flow state held by one
    /// worker (data memory, a sharded table, per-worker meters) sees every
    /// packet of its flows. The default for applications that keep state.
    Flow,
    /// Whole batches to whichever worker is free: the best balance, for
    /// stateless applications (the default for them).
    RoundRobin,
}

impl Distribution {
    /// `flow` or `round-robin`.
    pub const fn name(self) -> &'static str {
        match self {
            Distribution::Flow => "flow",
            Distribution::RoundRobin => "round-robin",
        }
    }

    /// Parses [`Distribution::name`].
    pub fn from_name(s: &str) -> Option<Distribution> {
        [Distribution::Flow, Distribution::RoundRobin].into_iter().find(|d| d.name() == s)
    }
}

fn mix(mut x: u64) -> u64 {
    // The finalizer of MurmurHash3 (fmix64): every input bit reaches every output bit.
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn be16(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*p.get(at)?, *p.get(at + 1)?]))
}

/// Hashes an endpoint pair so that swapping the two ends gives the same value.
fn pair(a: u64, b: u64, proto: u64) -> u64 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    mix(mix(lo ^ proto.rotate_left(56)) ^ hi)
}

/// A flow hash of an Ethernet frame that is the same for both directions
/// of a connection: over the IPv4 or IPv6 addresses, the protocol and, for
/// TCP, UDP and SCTP, the ports (after up to three VLAN tags); over the
/// addresses alone for IPv4 fragments (so that every fragment of a datagram
/// goes where its first one goes) and for IPv6 with extension headers; over
/// the MAC address pair for frames that are not IP; and 0 for runts.
pub fn flow_hash(frame: &[u8]) -> u64 {
    let mac = |i: usize| frame.get(i..i + 6).map_or(0, |m| m.iter().fold(0u64, |a, b| a << 8 | u64::from(*b)));
    let Some(mut ethertype) = be16(frame, 12) else { return 0 };
    let mut l3 = 14;
    for _ in 0..3 {
        if !matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) {
            break;
        }
        match be16(frame, l3 + 2) {
            Some(t) => ethertype = t,
            None => return pair(mac(0), mac(6), 0),
        }
        l3 += 4;
    }
    let ports = |proto: u8, at: usize| -> (u64, u64) {
        if matches!(proto, 6 | 17 | 132) {
            if let (Some(s), Some(d)) = (be16(frame, at), be16(frame, at + 2)) {
                return (u64::from(s), u64::from(d));
            }
        }
        (0, 0)
    };
    match ethertype {
        0x0800 => {
            let Some(ip) = frame.get(l3..l3 + 20) else { return pair(mac(0), mac(6), 0) };
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let proto = ip[9];
            let src = u64::from(u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]));
            let dst = u64::from(u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]));
            let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
            let (sp, dp) = if fragment || ihl < 20 { (0, 0) } else { ports(proto, l3 + ihl) };
            pair(src << 16 | sp, dst << 16 | dp, u64::from(proto))
        }
        0x86dd => {
            let Some(ip) = frame.get(l3..l3 + 40) else { return pair(mac(0), mac(6), 0) };
            let fold = |a: &[u8]| a.chunks(8).fold(0u64, |h, c| mix(h ^ c.iter().fold(0u64, |x, b| x << 8 | u64::from(*b))));
            let nh = ip[6];
            let (sp, dp) = ports(nh, l3 + 40);
            pair(fold(&ip[8..24]) ^ sp, fold(&ip[24..40]) ^ dp, u64::from(nh))
        }
        _ => pair(mac(0), mac(6), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        f
    }

    #[test]
    fn both_directions_hash_alike() {
        let a = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80, 0);
        let b = tcp4([10, 0, 0, 2], [10, 0, 0, 1], 80, 1234, 0);
        assert_eq!(flow_hash(&a), flow_hash(&b));
        let c = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 1235, 80, 0);
        assert_ne!(flow_hash(&a), flow_hash(&c));
        // Fragments hash on addresses only, in both directions.
        let f1 = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 0x2000);
        let f2 = tcp4([10, 0, 0, 2], [10, 0, 0, 1], 7, 9, 0x0010);
        assert_eq!(flow_hash(&f1), flow_hash(&f2));
        // MAC pairs for other frames; runts hash to 0.
        let mut arp = vec![0u8; 42];
        arp[0..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        arp[6..12].copy_from_slice(&[6, 5, 4, 3, 2, 1]);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mut rev = arp.clone();
        rev[0..6].copy_from_slice(&[6, 5, 4, 3, 2, 1]);
        rev[6..12].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(flow_hash(&arp), flow_hash(&rev));
        assert_eq!(flow_hash(&[1, 2, 3]), 0);
    }
}
