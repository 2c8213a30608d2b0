//! Link-layer header types (the LINKTYPE_* registry of tcpdump.org).

use pcap_file::DataLink;

/// LINKTYPE_ETHERNET: IEEE 802.3 Ethernet, the only link type netvm reads.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// The registry name of a link type (`1` → `ETHERNET`, `113` → `LINUX_SLL`,
/// `127` → `IEEE802_11_RADIOTAP`, ...), or `None` for a value the registry
/// (as known to the pcap-file crate) does not list.
pub fn link_type_name(link_type: u32) -> Option<String> {
    match DataLink::from(link_type) {
        DataLink::Unknown(_) => None,
        known => Some(format!("{known:?}")),
    }
}

/// `N (NAME)`, or just `N` for an unlisted link type.
pub(crate) fn link_type_label(link_type: &u32) -> String {
    match link_type_name(*link_type) {
        Some(name) => format!("{link_type} ({name})"),
        None => link_type.to_string(),
    }
}
