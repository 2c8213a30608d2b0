//! Interesting packets: runts, Ethernet frames carrying IPv4 (with options),
//! IPv6, VLAN tags or ARP, random bytes, and truncated captures.

use arbitrary::{Result, Unstructured};
use netvm_traffic::internet_checksum;
use netvm_vm::{Packet, Timestamp};

fn bytes(u: &mut Unstructured<'_>, n: usize) -> Result<Vec<u8>> {
    let mut v = vec![0; n];
    u.fill_buffer(&mut v)?;
    Ok(v)
}

fn mac(u: &mut Unstructured<'_>) -> Result<[u8; 6]> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => [0xff; 6],
        1 => [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
        _ => {
            let mut m = [0u8; 6];
            u.fill_buffer(&mut m)?;
            m
        }
    })
}

/// A transport header and payload for IP protocol `proto`.
fn transport(u: &mut Unstructured<'_>, proto: u8) -> Result<Vec<u8>> {
    let payload_len = u.int_in_range(0usize..=64)?;
    let mut t = match proto {
        6 => {
            let mut h = bytes(u, 20)?;
            let doff = if u.ratio(1u8, 8)? { u.int_in_range(0u8..=15)? } else { 5 };
            h[12] = doff << 4 | (h[12] & 0x0f);
            h
        }
        17 => {
            let mut h = bytes(u, 8)?;
            let len = (8 + payload_len) as u16;
            h[4..6].copy_from_slice(&len.to_be_bytes());
            h
        }
        1 | 58 => bytes(u, 8)?,
        _ => Vec::new(),
    };
    t.extend(bytes(u, payload_len)?);
    Ok(t)
}

fn ipv4(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let ihl: u8 = match u.int_in_range(0u8..=9)? {
        0 => u.int_in_range(0u8..=4)?,
        1 | 2 => u.int_in_range(6u8..=15)?,
        _ => 5,
    };
    let proto = *u.choose(&[6u8, 6, 17, 17, 1, 47, 50, 255])?;
    let hlen = usize::from(ihl.max(5)) * 4;
    let mut h = bytes(u, hlen)?;
    h[0] = 0x40 | ihl;
    h[9] = proto;
    if u.ratio(3u8, 4)? {
        h[6] &= 0x1f; // mostly unfragmented
        h[7] = if h[6] & 0x1f == 0 { 0 } else { h[7] };
    }
    let body = transport(u, proto)?;
    let total = (hlen + body.len()) as u16;
    if u.ratio(7u8, 8)? {
        h[2..4].copy_from_slice(&total.to_be_bytes());
    }
    h[10] = 0;
    h[11] = 0;
    if u.ratio(3u8, 4)? {
        let c = internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
    h.extend(body);
    Ok(h)
}

fn ipv6(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut h = bytes(u, 40)?;
    h[0] = 0x60 | (h[0] & 0x0f);
    let next = *u.choose(&[6u8, 17, 58, 0, 43, 44, 59])?;
    h[6] = next;
    let body = transport(u, next)?;
    h[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend(body);
    Ok(h)
}

fn arp(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut a = vec![0x00, 0x01, 0x08, 0x00, 6, 4];
    a.extend_from_slice(&u.int_in_range(1u16..=2)?.to_be_bytes());
    a.extend(bytes(u, 20)?);
    Ok(a)
}

/// Generates one interesting packet:
///
/// - runts of 0 to 13 bytes (shorter than an Ethernet header);
/// - Ethernet II frames with IPv4 (IHL from 0 to 15, options, TCP/UDP/ICMP
///   and other protocols, correct or wrong checksums and lengths), IPv6
///   (TCP/UDP/ICMPv6/extension headers), ARP, or a random EtherType;
/// - the same behind one or two VLAN tags (0x8100 / 0x88a8);
/// - random bytes up to jumbo size;
///
/// with a random timestamp and input port 0 to 3; a quarter of them are
/// captured shorter than their wire length (a snap length), and a few claim
/// a wire length well beyond the captured bytes.
pub fn generate_packet(u: &mut Unstructured<'_>) -> Result<Packet> {
    let kind = u.int_in_range(0u8..=19)?;
    let mut data = match kind {
        0..=1 => {
            let n = u.int_in_range(0usize..=13)?;
            bytes(u, n)?
        }
        2 => {
            let n = u.int_in_range(14usize..=2000)?;
            bytes(u, n)?
        }
        _ => {
            let mut f = Vec::with_capacity(128);
            f.extend_from_slice(&mac(u)?);
            f.extend_from_slice(&mac(u)?);
            let tags = match kind {
                3..=5 => u.int_in_range(1u8..=2)?,
                _ => 0,
            };
            for i in 0..tags {
                let tpid: u16 = if i == 0 && tags == 2 { 0x88a8 } else { 0x8100 };
                f.extend_from_slice(&tpid.to_be_bytes());
                f.extend_from_slice(&u.arbitrary::<u16>()?.to_be_bytes());
            }
            let (ethertype, body): (u16, Vec<u8>) = match u.int_in_range(0u8..=9)? {
                0..=4 => (0x0800, ipv4(u)?),
                5..=6 => (0x86dd, ipv6(u)?),
                7 => (0x0806, arp(u)?),
                _ => {
                    let n = u.int_in_range(0usize..=100)?;
                    (u.arbitrary()?, bytes(u, n)?)
                }
            };
            f.extend_from_slice(&ethertype.to_be_bytes());
            f.extend(body);
            if u.ratio(1u8, 4)? {
                // Ethernet padding to the 60-byte minimum.
                f.resize(f.len().max(60), 0);
            }
            f
        }
    };
    let mut wire_len = data.len() as u32;
    match u.int_in_range(0u8..=15)? {
        0..=2 => {
            // Snap length: captured bytes are a prefix of the frame.
            let snap = if u.ratio(1u8, 4)? { u.int_in_range(0usize..=data.len())? } else { *u.choose(&[34usize, 54, 64, 68, 96, 128])? };
            data.truncate(snap);
        }
        3 => wire_len = wire_len.saturating_add(u.int_in_range(1u32..=65_535)?),
        _ => {}
    }
    let ts = Timestamp { sec: u.arbitrary::<u64>()? % (1 << 40), nsec: u.int_in_range(0u32..=999_999_999)? };
    let in_port = u.int_in_range(0u16..=3)?;
    Ok(Packet { data, wire_len, ts, in_port })
}

/// Generates `n` packets with [`generate_packet`].
pub fn generate_packets(u: &mut Unstructured<'_>, n: usize) -> Result<Vec<Packet>> {
    (0..n).map(|_| generate_packet(u)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_well_formed_captures() {
        let mut rng = netvm_traffic::SplitMix64::new(1);
        for _ in 0..500 {
            let buf = rng.bytes(512);
            let mut u = Unstructured::new(&buf);
            let p = generate_packet(&mut u).unwrap();
            assert!(p.wire_len as usize >= p.data.len());
            assert!(p.ts.nsec < 1_000_000_000);
        }
        // Exhausted input still gives a packet.
        let p = generate_packet(&mut Unstructured::new(&[])).unwrap();
        assert!(p.data.len() <= 13);
    }
}
