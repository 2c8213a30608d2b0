//! Ports: where packets enter a running application ([`Source`]) and where
//! they leave it ([`Sink`]).
//!
//! Capture files are the ports `netvm-io` implements; live interfaces
//! (AF_PACKET rings, AF_XDP) are sources and sinks of the same kind. A
//! source appends descriptors of packets that lie where it received them
//! (a block of a read, a ring slot) to a [`Batch`]; a sink writes packets
//! from wherever they lie. The runtime's driver owns the loop between them.

use crate::buffer::Batch;
use crate::Timestamp;

/// Why a port failed.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The other end went away (a closed pipe, `| head`): the run ends
    /// quietly, as a Unix tool does.
    #[error("{0}: the reader went away")]
    Closed(String),
    /// Anything else; the message names the port and what went wrong (for
    /// bad input, where in it).
    #[error("{0}")]
    Failed(String),
}

/// How much a [`Source::fill`] could do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// This many packets were appended (at least one).
    Packets(usize),
    /// Nothing now: the source needs packet memory that is still in use by
    /// batches in flight (the caller retires some and tries again).
    Starved,
    /// The input is exhausted.
    End,
}

/// A port packets arrive from.
pub trait Source: Send {
    /// The name used in errors and statistics (a file name, `-` for stdin).
    fn name(&self) -> &str;
    /// The application input port its packets arrive on.
    fn in_port(&self) -> u16;
    /// The arrival time of the next packet, reading input as needed; `None`
    /// at the end of input. Errors end the source.
    fn peek_time(&mut self) -> Result<Option<Timestamp>, PortError>;
    /// Appends up to `max` packets to `batch` (descriptors pointing where
    /// the packets lie, with the batch holding that memory; `seq` is set by
    /// the caller), stopping before the first packet whose `(time, in_port)`
    /// is not below `until`, if given. Errors end the source; packets
    /// appended before an error stay in the batch.
    fn fill(&mut self, batch: &mut Batch, max: usize, until: Option<(Timestamp, u16)>) -> Result<Fill, PortError>;
    /// Starts over from the first packet, for another repetition of a
    /// trace; `Ok(false)` if this source cannot (a pipe).
    fn rewind(&mut self) -> Result<bool, PortError> {
        Ok(false)
    }
    /// Packets this source has delivered.
    fn packets(&self) -> u64;
}

/// A packet as a sink receives it: its bytes where they lie and its metadata.
#[derive(Clone, Copy, Debug)]
pub struct OutPacket<'a> {
    /// The captured bytes.
    pub data: &'a [u8],
    /// Length on the wire.
    pub wire_len: u32,
    /// Arrival time.
    pub ts: Timestamp,
    /// The application input port it arrived on.
    pub in_port: u16,
    /// Its sequence number in the run.
    pub seq: u64,
}

/// A port packets leave through.
pub trait Sink: Send {
    /// The name used in errors (a file name, `-` for stdout).
    fn name(&self) -> &str;
    /// Writes a packet that left the application (in the order they leave).
    fn write(&mut self, packet: &OutPacket<'_>) -> Result<(), PortError>;
    /// Pushes buffered packets to the other end (`-U`: after every batch).
    fn flush(&mut self) -> Result<(), PortError>;
    /// Flushes and closes; called once at the end of a run.
    fn finish(&mut self) -> Result<(), PortError> {
        self.flush()
    }
}
