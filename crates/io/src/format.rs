//! What the crate knows about the pcap and pcapng formats: limits, the
//! file-level facts a capture exposes ([`CaptureFormat`], [`TsPrecision`],
//! [`PcapHeaderSpec`]), and libpcap's rules for snapshot lengths.

use netvm_vm::Timestamp;

use crate::linktype::LINKTYPE_ETHERNET;

/// The largest captured length accepted in a record (256 KiB, libpcap's
/// `MAXIMUM_SNAPLEN`, its `max_snaplen_for_dlt` for Ethernet). A record
/// claiming more is an error ([`CaptureError::CaplenTooLarge`](crate::CaptureError::CaplenTooLarge))
/// whatever the file's snaplen says, as in libpcap ("invalid packet capture
/// length").
pub const MAX_CAPLEN: u32 = 256 * 1024;

/// The smallest block of a [`BlockPool`](netvm_vm::buffer::BlockPool) that
/// holds every record this crate accepts: a pcap record header, [`MAX_CAPLEN`]
/// bytes of packet and 64 bytes to spare (a pcapng Enhanced Packet Block's
/// 28 bytes of header fit too). Smaller blocks work for captures whose records
/// are smaller; a record that does not fit in one block is an error
/// ([`CaptureError::RecordTooLarge`](crate::CaptureError::RecordTooLarge)).
pub const MIN_BLOCK_SIZE: usize = 16 + MAX_CAPLEN as usize + 64;

/// Bits of the pcap header's link-type field that hold the link type
/// (libpcap's `LT_LINKTYPE`); the upper six carry FCS information
/// (`LT_LINKTYPE_EXT`).
pub(crate) const LINKTYPE_MASK: u32 = 0x03FF_FFFF;

/// The format of a capture file, detected from its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap.
    Pcap {
        /// Timestamps have nanosecond resolution (magic `a1b23c4d`), else microsecond.
        nanosecond: bool,
        /// Headers are big-endian.
        big_endian: bool,
    },
    /// pcapng.
    PcapNg,
}

/// The resolution of the timestamps a capture file stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TsPrecision {
    /// Microseconds (pcap magic `a1b2c3d4`; pcapng's default `if_tsresol`).
    #[default]
    Micro,
    /// Nanoseconds (pcap magic `a1b23c4d`).
    Nano,
}

impl TsPrecision {
    /// The pcap magic number for this precision.
    pub fn magic(self) -> u32 {
        match self {
            TsPrecision::Micro => 0xA1B2_C3D4,
            TsPrecision::Nano => 0xA1B2_3C4D,
        }
    }

    /// The fraction of a second of `ts` in this precision's units
    /// (nanoseconds become microseconds by truncation, as in libpcap).
    pub fn fraction(self, ts: Timestamp) -> u32 {
        match self {
            TsPrecision::Micro => ts.nsec / 1000,
            TsPrecision::Nano => ts.nsec,
        }
    }
}

/// The file header of a pcap file to write: what `tcpdump -r IN -w OUT`
/// keeps of its input (see [`CaptureSource::header`](crate::CaptureSource::header)).
///
/// The header written is libpcap's: the magic for `precision` in host byte
/// order, version 2.4, `thiszone` 0, `sigfigs` 0, `snaplen`, `link_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PcapHeaderSpec {
    /// Timestamp resolution of the records.
    pub precision: TsPrecision,
    /// The link-type field: a LINKTYPE_* value, with the upper six "ext" bits
    /// (libpcap's `LT_LINKTYPE_EXT`: FCS length) of the input kept.
    pub link_type: u32,
    /// The snapshot length.
    pub snaplen: u32,
}

impl Default for PcapHeaderSpec {
    /// Nanoseconds, Ethernet, snaplen [`MAX_CAPLEN`]: a file that holds any
    /// packet netvm reads, to the nanosecond.
    fn default() -> Self {
        PcapHeaderSpec { precision: TsPrecision::Nano, link_type: LINKTYPE_ETHERNET, snaplen: MAX_CAPLEN }
    }
}

impl PcapHeaderSpec {
    /// The 24 bytes of the pcap file header, in host byte order.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&self.precision.magic().to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        // thiszone and sigfigs: 0.
        h[16..20].copy_from_slice(&self.snaplen.to_ne_bytes());
        h[20..24].copy_from_slice(&self.link_type.to_ne_bytes());
        h
    }
}

/// libpcap's `max_snaplen_for_dlt`: the largest captured length it accepts
/// for a link type.
pub(crate) fn max_snaplen_for_link(link_type: u32) -> u32 {
    match link_type {
        231 => 128 * 1024 * 1024, // DBUS
        279 => 8 * 1024 * 1024,   // EBHSCR
        249 => 1024 * 1024,       // USBPCAP
        _ => MAX_CAPLEN,
    }
}

/// libpcap's `pcap_adjust_snapshot` (1.10): a snaplen of 0 or above
/// `INT_MAX` becomes the link type's maximum; others are kept as they are.
pub(crate) fn adjust_snapshot(link_type: u32, snaplen: u32) -> u32 {
    if snaplen == 0 || snaplen > i32::MAX as u32 {
        max_snaplen_for_link(link_type)
    } else {
        snaplen
    }
}

/// `sec` plus a fraction counted in `per_sec` units, normalized: whole
/// seconds in the fraction (a damaged file's `usec >= 1_000_000`) carry into
/// `sec`.
pub(crate) fn normalize(sec: u32, frac: u32, per_sec: u32) -> Timestamp {
    let carry = u64::from(frac / per_sec);
    let rest = frac % per_sec;
    Timestamp { sec: u64::from(sec) + carry, nsec: rest * (1_000_000_000 / per_sec) }
}

/// What a pcapng Interface Description Block says about its packets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interface {
    pub link_type: u32,
    pub snaplen: u32,
    /// Timestamp units per second (from if_tsresol).
    pub units_per_sec: u64,
    /// Seconds added to every timestamp (if_tsoffset).
    pub offset_sec: i64,
}

impl Interface {
    /// The time of a packet block's timestamp of `units`.
    pub fn timestamp(&self, units: u64) -> Timestamp {
        let ups = self.units_per_sec.max(1);
        let sec = units / ups;
        let frac = units % ups;
        // frac < ups, so the quotient is < 10^9.
        let nsec = (u128::from(frac) * 1_000_000_000 / u128::from(ups)) as u32;
        let sec = if self.offset_sec >= 0 {
            sec.saturating_add(self.offset_sec.unsigned_abs())
        } else {
            sec.saturating_sub(self.offset_sec.unsigned_abs())
        };
        Timestamp { sec, nsec }
    }

    /// Parses the body of an IDB (between the block length and the trailing
    /// length): link type, snaplen and the timestamp options. Errors are the
    /// detail of a corrupt block.
    pub fn parse(body: &[u8], be: bool) -> Result<Interface, String> {
        let link_type = u32::from(rd16(arr(body, 0), be));
        let snaplen = rd32(arr(body, 4), be);
        let mut iface = Interface { link_type, snaplen, units_per_sec: 1_000_000, offset_sec: 0 };
        let mut p = 8usize;
        while p + 4 <= body.len() {
            let code = rd16(arr(body, p), be);
            let olen = usize::from(rd16(arr(body, p + 2), be));
            if code == 0 {
                break;
            }
            let Some(value) = body.get(p + 4..p + 4 + olen) else {
                return Err(format!("interface option {code} of {olen} bytes runs past the end of the block"));
            };
            match code {
                9 => {
                    let [v] = <[u8; 1]>::try_from(value).map_err(|_| format!("if_tsresol option of {olen} bytes, not 1"))?;
                    let units = if v & 0x80 != 0 { 1u64.checked_shl(u32::from(v & 0x7F)) } else { 10u64.checked_pow(u32::from(v)) };
                    iface.units_per_sec = units.ok_or_else(|| format!("if_tsresol {v:#04x} is out of range"))?;
                }
                14 => {
                    let b = <[u8; 8]>::try_from(value).map_err(|_| format!("if_tsoffset option of {olen} bytes, not 8"))?;
                    iface.offset_sec = if be { i64::from_be_bytes(b) } else { i64::from_le_bytes(b) };
                }
                _ => {}
            }
            p += 4 + olen.next_multiple_of(4);
        }
        Ok(iface)
    }
}

pub(crate) fn rd16(b: [u8; 2], be: bool) -> u16 {
    if be {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

pub(crate) fn rd32(b: [u8; 4], be: bool) -> u32 {
    if be {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// Bytes `at..at + N` of `b` as an array; zeros if out of range (callers check lengths first).
pub(crate) fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = b.get(at..at + N) {
        out.copy_from_slice(s);
    }
    out
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}
