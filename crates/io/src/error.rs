//! [`CaptureError`]: everything that can go wrong reading or writing a capture file.

use crate::linktype::link_type_label;

/// An error reading or writing a capture file.
///
/// Every variant carries the file name (as given to
/// [`CaptureSource::open`](crate::CaptureSource::open),
/// [`CaptureReader::open`](crate::CaptureReader::open), their `from_reader`
/// or a writer's constructor), and its
/// `Display` starts with it. Errors about the contents of a file carry the byte
/// offset, from the start of the file, of the record (pcap packet record or
/// pcapng block) that is bad; see [`CaptureError::offset`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The operating system failed to open, read or write the file.
    #[error("{file}: {source}")]
    Io {
        /// File name.
        file: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with a pcap or pcapng magic number.
    #[error("{file}: not a pcap or pcapng capture file (starts with {magic})")]
    NotCapture {
        /// File name.
        file: String,
        /// The first bytes of the file, in hex.
        magic: String,
    },
    /// The file ends inside its file header (pcap global header, or the first
    /// pcapng section header block). The offset is 0.
    #[error("{file}: truncated file header ({got} of {needed} bytes)")]
    TruncatedFileHeader {
        /// File name.
        file: String,
        /// Bytes the header needs.
        needed: u64,
        /// Bytes the file has.
        got: u64,
    },
    /// The file ends inside a pcap record header or a pcapng block header.
    #[error("{file}: truncated record header at byte {offset} ({got} of {needed} bytes)")]
    TruncatedRecordHeader {
        /// File name.
        file: String,
        /// Offset of the record.
        offset: u64,
        /// Bytes the header needs.
        needed: u64,
        /// Bytes that remain in the file.
        got: u64,
    },
    /// The file ends inside the captured bytes of a pcap packet record.
    #[error("{file}: truncated packet record at byte {offset} (header says {caplen} captured bytes, {remain} remain)")]
    TruncatedRecord {
        /// File name.
        file: String,
        /// Offset of the record (its 16-byte header).
        offset: u64,
        /// Captured length the record header claims.
        caplen: u32,
        /// Captured bytes present in the file.
        remain: u64,
    },
    /// The file ends inside a pcapng block.
    #[error("{file}: truncated block at byte {offset} (block length {block_len}, {remain} bytes remain)")]
    TruncatedBlock {
        /// File name.
        file: String,
        /// Offset of the block.
        offset: u64,
        /// Total length the block header claims.
        block_len: u32,
        /// Bytes of the block present in the file (from its start).
        remain: u64,
    },
    /// A record claims more captured bytes than [`MAX_CAPLEN`](crate::MAX_CAPLEN);
    /// nothing is allocated for it.
    #[error("{file}: record at byte {offset} claims {caplen} captured bytes, more than the maximum {max}")]
    CaplenTooLarge {
        /// File name.
        file: String,
        /// Offset of the record.
        offset: u64,
        /// Captured length the record claims.
        caplen: u32,
        /// The maximum ([`MAX_CAPLEN`](crate::MAX_CAPLEN)).
        max: u32,
    },
    /// A record needs more contiguous bytes than a block of the buffer pool
    /// the capture is read into holds (blocks of at least
    /// [`MIN_BLOCK_SIZE`](crate::MIN_BLOCK_SIZE) bytes hold every record
    /// this crate accepts).
    #[error("{file}: record at byte {offset} needs {needed} bytes in one buffer block, more than the block size {block_size}")]
    RecordTooLarge {
        /// File name.
        file: String,
        /// Offset of the record.
        offset: u64,
        /// Bytes the record needs in one block.
        needed: u64,
        /// The pool's block size.
        block_size: u64,
    },
    /// A pcapng block length is invalid: too small for its type, not a
    /// multiple of 4, too large to buffer, or different from the trailing copy.
    #[error("{file}: invalid block length {block_len} at byte {offset}: {reason}")]
    BadBlockLength {
        /// File name.
        file: String,
        /// Offset of the block.
        offset: u64,
        /// The block length from the block header.
        block_len: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// A record is inconsistent (an unknown interface, a bad option, a
    /// captured length that does not fit its block, a bad section header).
    #[error("{file}: corrupt record at byte {offset}: {detail}")]
    Corrupt {
        /// File name.
        file: String,
        /// Offset of the record.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// The packets' link type is not Ethernet. For pcap the offset is 20, the
    /// link-type field of the file header; for pcapng it is the packet block's.
    #[error("{file}: unsupported link type {} at byte {offset}; only ETHERNET (1) is supported", link_type_label(.link_type))]
    UnsupportedLinkType {
        /// File name.
        file: String,
        /// Offset of the header or block that names the link type.
        offset: u64,
        /// The link type (a LINKTYPE_* value).
        link_type: u32,
    },
    /// A packet cannot be represented in a pcap file (writing only).
    #[error("{file}: cannot write packet {index}: {detail}")]
    Unwritable {
        /// File name.
        file: String,
        /// Index of the packet among those written (0-based).
        index: u64,
        /// Why.
        detail: String,
    },
}

impl CaptureError {
    /// The file name the error is about.
    pub fn file(&self) -> &str {
        match self {
            CaptureError::Io { file, .. }
            | CaptureError::NotCapture { file, .. }
            | CaptureError::TruncatedFileHeader { file, .. }
            | CaptureError::TruncatedRecordHeader { file, .. }
            | CaptureError::TruncatedRecord { file, .. }
            | CaptureError::TruncatedBlock { file, .. }
            | CaptureError::CaplenTooLarge { file, .. }
            | CaptureError::RecordTooLarge { file, .. }
            | CaptureError::BadBlockLength { file, .. }
            | CaptureError::Corrupt { file, .. }
            | CaptureError::UnsupportedLinkType { file, .. }
            | CaptureError::Unwritable { file, .. } => file,
        }
    }

    /// Byte offset in the file of the header or record the error is about;
    /// `None` for OS errors and write errors.
    pub fn offset(&self) -> Option<u64> {
        match self {
            CaptureError::Io { .. } | CaptureError::Unwritable { .. } => None,
            CaptureError::NotCapture { .. } | CaptureError::TruncatedFileHeader { .. } => Some(0),
            CaptureError::TruncatedRecordHeader { offset, .. }
            | CaptureError::TruncatedRecord { offset, .. }
            | CaptureError::TruncatedBlock { offset, .. }
            | CaptureError::CaplenTooLarge { offset, .. }
            | CaptureError::RecordTooLarge { offset, .. }
            | CaptureError::BadBlockLength { offset, .. }
            | CaptureError::Corrupt { offset, .. }
            | CaptureError::UnsupportedLinkType { offset, .. } => Some(*offset),
        }
    }

    /// A short stable name for the kind of error, for statistics
    /// (`io`, `not-capture`, `truncated-file-header`, `truncated-record-header`,
    /// `truncated-record`, `truncated-block`, `caplen-too-large`,
    /// `record-too-large`, `bad-block-length`, `corrupt`, `unsupported-link-type`, `unwritable`).
    pub fn kind(&self) -> &'static str {
        match self {
            CaptureError::Io { .. } => "io",
            CaptureError::NotCapture { .. } => "not-capture",
            CaptureError::TruncatedFileHeader { .. } => "truncated-file-header",
            CaptureError::TruncatedRecordHeader { .. } => "truncated-record-header",
            CaptureError::TruncatedRecord { .. } => "truncated-record",
            CaptureError::TruncatedBlock { .. } => "truncated-block",
            CaptureError::CaplenTooLarge { .. } => "caplen-too-large",
            CaptureError::RecordTooLarge { .. } => "record-too-large",
            CaptureError::BadBlockLength { .. } => "bad-block-length",
            CaptureError::Corrupt { .. } => "corrupt",
            CaptureError::UnsupportedLinkType { .. } => "unsupported-link-type",
            CaptureError::Unwritable { .. } => "unwritable",
        }
    }

    /// True for errors that mean the file ends early (any `Truncated*` variant).
    pub fn is_truncation(&self) -> bool {
        matches!(
            self,
            CaptureError::TruncatedFileHeader { .. }
                | CaptureError::TruncatedRecordHeader { .. }
                | CaptureError::TruncatedRecord { .. }
                | CaptureError::TruncatedBlock { .. }
        )
    }
}
