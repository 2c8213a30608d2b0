//! Packet I/O for netvm: the ports that read and write capture files.
//!
//! Reading is streaming and zero-copy. [`CaptureSource`] (a
//! [`Source`](netvm_vm::port::Source)) reads a pcap or pcapng file, or stdin,
//! into blocks of a [`BlockPool`](netvm_vm::buffer::BlockPool) and parses its
//! records where they lie: each packet's descriptor points at its bytes
//! inside the block, and the only copy is the kernel's `read()`. Records are
//! parsed as soon as they are whole, so packets from a pipe flow as they
//! arrive; memory is the pool's blocks and a fixed amount, whatever the size
//! of the capture.
//!
//! - [`CaptureSource`]: the source of a running application (fills batches,
//!   merges inputs by time with `until`, rewinds regular files).
//! - [`CaptureReader`] and [`read_capture`]: the same parser, each packet
//!   copied out into an owned [`netvm_vm::Packet`], for tests and tools.
//! - [`PcapSink`] (a [`Sink`](netvm_vm::port::Sink)) and [`PcapWriter`] (its
//!   record encoder): write a pcap file, or stdout, byte for byte as
//!   `tcpdump -r IN -w OUT` does, with the header [`CaptureSource::header`]
//!   describes ([`PcapHeaderSpec`]).
//! - [`CaptureError`] reports every problem with the file name and, for bad
//!   contents, the byte offset of the bad record.
//!
//! # Semantics: libpcap's
//!
//! Files read as libpcap 1.10 reads them (sf-pcap.c), so that what netvm
//! sees, filters and writes is what tcpdump sees, filters and writes:
//!
//! - pcap versions 2.0 to 2.4 and 543.0 (DG/UX); older ones are "archaic",
//!   newer ones unsupported. Versions 2.0-2.2 and 543.0 store the captured
//!   and original lengths swapped, 2.3 sometimes (swapped back when the
//!   captured length exceeds the original).
//! - The snapshot length is the header's snaplen, or [`MAX_CAPLEN`] when that
//!   is 0 or above `INT_MAX`. A record that captured more than [`MAX_CAPLEN`]
//!   bytes is an error; one that captured more than the snapshot length is
//!   cut to it (its extra bytes skipped).
//! - The wire length is the record's, as is, even when it is less than the
//!   captured length.
//! - Timestamps are kept to the nanosecond (pcap microseconds times 1000;
//!   pcapng per `if_tsresol` and `if_tsoffset`); a fraction out of range
//!   carries into the seconds (libpcap passes it through).
//! - The link type's upper six bits (`LT_LINKTYPE_EXT`, the FCS length) are
//!   kept apart and written back.
//! - pcapng: section, interface, enhanced, simple and obsolete packet
//!   blocks; other blocks are skipped. Blocks larger than a pool block are
//!   read in part (the packet) and the rest skipped; an interface
//!   description may be at most 64 KiB, a section at most 4096 interfaces.
//!   For the header of a written pcap, the link type and snapshot length are
//!   the first interface's, and the precision nanoseconds if its
//!   `if_tsresol` is finer than microseconds.
//!
//! pcapng is read more leniently than libpcap in a few cases, none of which
//! appears in tcpdump's test captures: libpcap refuses a file whose
//! interfaces differ in link type or snapshot length, whose sections differ
//! in byte order, or that describes no interface, and a packet block that
//! captured more than the first interface's snapshot length; netvm reads
//! them (packets of a non-Ethernet interface are an error when met). A
//! Simple Packet Block's captured length is its interface's snaplen or what
//! the block holds, where libpcap reports a block too short.
//!
//! Writing ([`PcapSink`], [`PcapWriter`]) is libpcap's `pcap_dump`: header
//! and records in host byte order, version 2.4, `thiszone` and `sigfigs` 0,
//! the record's lengths as given, timestamps in the header's precision
//! (nanoseconds truncated to microseconds) with their seconds modulo 2^32.
//! Only a timestamp fraction out of range in the input (normalized on
//! reading) is written differently from tcpdump.
//!
//! Only Ethernet packets (LINKTYPE_ETHERNET) are read; other link types are
//! a clear error. Live interfaces (AF_PACKET, AF_XDP) are not implemented
//! yet.
//!
//! # Hostile input
//!
//! Capture files are untrusted: no input makes the parser panic, loop or
//! allocate beyond the pool and a fixed amount; every record's lengths are
//! checked against the limits and what the file holds before anything is
//! made of them, and every error names the offset of the bad record.

#![warn(missing_docs)]

mod error;
mod format;
mod linktype;
mod parser;
mod reader;
mod source;
mod writer;

pub use error::CaptureError;
pub use format::{CaptureFormat, PcapHeaderSpec, TsPrecision, MAX_CAPLEN, MIN_BLOCK_SIZE};
pub use linktype::{link_type_name, LINKTYPE_ETHERNET};
pub use reader::{read_capture, CaptureReader};
pub use source::CaptureSource;
pub use writer::{PcapSink, PcapWriter, WRITE_BUFFER};
