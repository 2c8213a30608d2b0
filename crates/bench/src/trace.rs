//! The filter benchmark's workloads on disk: the generators are
//! `netvm-traffic`'s ([`netvm_traffic::mixed`]); this module writes them as
//! pcap files with `netvm-io`, so that netvm and the C peers read the very
//! same bytes, and reads captures back.

use std::path::Path;

use netvm_traffic::mixed::MixedTrace;
use netvm_traffic::protomix::{ProtoMix, ProtoMixConfig};
use netvm_vm::Packet;

/// Writes `n` frames of the mixed trace of `seed` to a pcap file, as they
/// are generated (microsecond timestamps when `micro`, else nanosecond).
pub fn write_mixed_pcap(path: &Path, n: u64, seed: u64, micro: bool) -> Result<(), String> {
    let spec = netvm_io::PcapHeaderSpec {
        precision: if micro { netvm_io::TsPrecision::Micro } else { netvm_io::TsPrecision::Nano },
        ..netvm_io::PcapHeaderSpec::default()
    };
    let mut w = netvm_io::PcapWriter::create_with(path, spec).map_err(|e| e.to_string())?;
    for p in MixedTrace::new(seed).take(n as usize) {
        w.write(&p).map_err(|e| e.to_string())?;
    }
    w.finish().map(|_| ()).map_err(|e| e.to_string())
}

/// Writes the application-protocol mix of `seed` (HTTP, DNS, TLS and the
/// rest: [`netvm_traffic::protomix`]) to a pcap file as it is generated,
/// microsecond timestamps: `packets` packets, or fewer if `bytes` bytes of
/// frames come first. Returns the packets and bytes written.
pub fn write_protomix_pcap(path: &Path, packets: u64, bytes: u64, seed: u64) -> Result<(u64, u64), String> {
    let spec = netvm_io::PcapHeaderSpec { precision: netvm_io::TsPrecision::Micro, ..netvm_io::PcapHeaderSpec::default() };
    let mut w = netvm_io::PcapWriter::create_with(path, spec).map_err(|e| e.to_string())?;
    let (mut n, mut b) = (0, 0);
    for p in ProtoMix::new(ProtoMixConfig { seed, packets, bytes, ..ProtoMixConfig::default() }) {
        w.write(&p).map_err(|e| e.to_string())?;
        n += 1;
        b += u64::from(p.wire_len);
    }
    w.finish().map_err(|e| e.to_string())?;
    Ok((n, b))
}

/// Writes `packets` to a pcap file at `path` (nanosecond timestamps, Ethernet).
pub fn write_pcap(path: &Path, packets: &[Packet]) -> Result<(), String> {
    let mut w = netvm_io::PcapWriter::create(path).map_err(|e| e.to_string())?;
    for p in packets {
        w.write(p).map_err(|e| e.to_string())?;
    }
    w.finish().map(|_| ()).map_err(|e| e.to_string())
}

/// Reads every packet of a pcap or pcapng file, failing on any error.
pub fn read_pcap(path: &Path) -> Result<Vec<Packet>, String> {
    let (pkts, err) = netvm_io::read_capture(path, 0);
    match err {
        Some(e) => Err(e.to_string()),
        None => Ok(pkts),
    }
}
