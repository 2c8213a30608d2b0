//! The five filters of the NetVM paper, §6.3.1, written by hand in NetIL.
//!
//! Each listing lives in `benches/filters/` and implements one tcpdump
//! expression on Ethernet frames exactly as libpcap does: `ret 1` accepts,
//! `ret 0` rejects. Where libpcap's `bpf_filter` returns 0 because a load is
//! beyond the captured length, the listing rejects with `ret 0` after an
//! explicit `pktlen` check, so the filters never fault and their accepted set
//! is libpcap's packet for packet (checked by `tests/filters_vs_tcpdump.rs`).

use std::path::{Path, PathBuf};

use netvm_verify::Verified;

/// One benchmark filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Short name, used in reports (`f1_ip`, …); also the listing's file stem.
    pub name: &'static str,
    /// The tcpdump (pcap-filter) expression the listing implements.
    pub expr: &'static str,
}

impl Filter {
    /// The listing's file name (`NAME.nil`).
    pub fn file_name(&self) -> String {
        format!("{}.nil", self.name)
    }

    /// The listing's path in `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }
}

/// The five filters, in the paper's order.
pub const FILTERS: [Filter; 5] = [
    Filter { name: "f1_ip", expr: "ip" },
    Filter { name: "f2_ip_src", expr: "ip src 10.1.1.1" },
    Filter { name: "f3_ip_tcp", expr: "ip and tcp" },
    Filter { name: "f4_ip_tcp_4field", expr: "ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and tcp dst port 30" },
    Filter { name: "f5_ip_src_or4", expr: "ip src 10.4.4.4 or ip src 10.3.3.3 or ip src 10.2.2.2 or ip src 10.1.1.1" },
];

/// The output port on which a filter accepts a packet.
pub const ACCEPT_PORT: u16 = 1;

/// `benches/filters` of the source tree this crate was built from.
pub fn default_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../benches/filters"))
}

/// Loads and verifies a filter's listing from `dir`.
pub fn load(filter: &Filter, dir: &Path) -> Result<Verified, String> {
    let prog = netvm_runtime::load_program(&filter.path(dir)).map_err(|e| e.to_string())?;
    prog.verify().map_err(|e| e.to_string())
}
