//! Classic pcap files of generated traces, without a dependency on a pcap
//! library (the format is the one libpcap, tcpdump and `netvm-io` read).

use std::io::{self, Write};

use netvm_vm::Packet;

/// Writes `packets` as a classic little-endian pcap file: version 2.4,
/// microsecond timestamps (magic `a1b2c3d4`), snaplen 262144, link type
/// Ethernet (1). Timestamps are truncated to the microsecond and must fit in
/// 32 bits of seconds; a wire length shorter than the captured length is
/// written as the captured length.
pub fn write_pcap<W: Write>(mut out: W, packets: &[Packet]) -> io::Result<()> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&262_144u32.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    out.write_all(&h)?;
    for p in packets {
        let caplen = u32::try_from(p.data.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet too long"))?;
        let sec = u32::try_from(p.ts.sec + u64::from(p.ts.nsec / 1_000_000_000))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "timestamp beyond 2106"))?;
        let mut r = [0u8; 16];
        r[0..4].copy_from_slice(&sec.to_le_bytes());
        r[4..8].copy_from_slice(&((p.ts.nsec % 1_000_000_000) / 1000).to_le_bytes());
        r[8..12].copy_from_slice(&caplen.to_le_bytes());
        r[12..16].copy_from_slice(&p.wire_len.max(caplen).to_le_bytes());
        out.write_all(&r)?;
        out.write_all(&p.data)?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvm_vm::Timestamp;

    #[test]
    fn pcap_layout() {
        let pkts = vec![Packet { data: vec![1, 2, 3], wire_len: 10, ts: Timestamp { sec: 5, nsec: 6_000_999 }, in_port: 0 }];
        let mut out = Vec::new();
        write_pcap(&mut out, &pkts).unwrap();
        assert_eq!(out.len(), 24 + 16 + 3);
        assert_eq!(&out[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&out[20..24], &[1, 0, 0, 0]);
        assert_eq!(&out[24..40], &[5, 0, 0, 0, 0x70, 0x17, 0, 0, 3, 0, 0, 0, 10, 0, 0, 0]);
        assert_eq!(&out[40..], &[1, 2, 3]);
    }
}
