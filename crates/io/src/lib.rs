//! Packet I/O for netvm: the ports that read and write capture files.
//!
//! This crate owns the conversion between capture files and
//! [`netvm_vm::Packet`]s:
//!
//! - [`CaptureReader`] streams the packets of a pcap (microsecond or
//!   nanosecond, either byte order) or pcapng file, detected from its magic
//!   number; [`read_capture`] reads a whole file.
//! - [`PcapWriter`] writes packets to a nanosecond pcap file that reads back
//!   identically.
//! - [`CaptureError`] reports every problem with the file name and, for bad
//!   contents, the byte offset of the bad record.
//!
//! Capture files are untrusted input: no input makes the reader panic, loop
//! or allocate more than the largest record it accepts ([`MAX_CAPLEN`]
//! bytes of packet data) plus a fixed read buffer. Only Ethernet packets
//! (LINKTYPE_ETHERNET) are supported; other link types are a clear error.
//! Live interfaces (AF_PACKET, AF_XDP) are not implemented yet.

#![warn(missing_docs)]

mod error;
mod linktype;
mod reader;
mod writer;

pub use error::CaptureError;
pub use linktype::{link_type_name, LINKTYPE_ETHERNET};
pub use reader::{read_capture, CaptureFormat, CaptureReader, MAX_CAPLEN};
pub use writer::PcapWriter;
