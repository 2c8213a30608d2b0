//! `http`: an HTTP/1.x message parser over one packet's bytes. It finds
//! where the request line or status line, its parts, the header block, a
//! cookie and the body lie, so that a NetPE can inspect them (an IDS's
//! `http_uri`, `http_header`, `file_data`, …) without parsing HTTP in
//! NetIL. One packet at a time: nothing is reassembled across TCP
//! segments, nothing is decoded (no percent-decoding or path
//! normalisation of the URI, no de-chunking or decompression of the body).
//!
//! # What is a message
//!
//! The region `in0 .. in0 + in1` of the packet is parsed as:
//!
//! - a **request**: a method (1 to 32 RFC 9110 token characters), one
//!   space, a request target (1 or more bytes, no space or control byte),
//!   one space, `HTTP/D.D`, and the end of the line (LF, or CR LF);
//! - a **response**: `HTTP/D.D`, one space, a three-digit status code,
//!   then either the end of the line or a space and a reason phrase (any
//!   bytes up to the end of the line);
//! - anything else, or a first line not ended within the region, is not
//!   HTTP (kind 0, no field).
//!
//! After the first line come header lines, up to an empty line (LF or
//! CR LF). The **header** field is every header line, each with its line
//! end, without the first line and without the empty line; when the
//! region ends before the empty line, it runs to the end of the region and
//! the message has no body. The **cookie** is the value of the first
//! `Cookie` header of a request, `Set-Cookie` of a response (names in any
//! case; the value without leading spaces or tabs, up to the line end).
//! The **body** is what follows the empty line, up to the end of the
//! region or, with a valid `Content-Length`, at most that many bytes.
//!
//! # Registers and operations
//!
//! | register | meaning |
//! |----------|---------|
//! | in 0     | packet offset where the message starts (a TCP payload) |
//! | in 1     | its length in bytes (clipped to the packet) |
//! | out 0    | kind: 0 not HTTP, 1 request ([`REQUEST`]), 2 response ([`RESPONSE`]) |
//! | out 1    | the present fields: bit `f` for field `f` below |
//! | out 2+2f | field `f`'s start (packet offset; 0 when absent) |
//! | out 3+2f | field `f`'s end (exclusive) |
//!
//! | f | field | request | response |
//! |---|-------|---------|----------|
//! | 0 | [`METHOD`]      | the method | absent |
//! | 1 | [`URI`]         | the request target, as sent | absent |
//! | 2 | [`VERSION`]     | `HTTP/D.D` | `HTTP/D.D` |
//! | 3 | [`STAT_CODE`]   | absent | the three digits |
//! | 4 | [`STAT_MSG`]    | absent | the reason phrase (may be empty) |
//! | 5 | [`START_LINE`]  | the request line without its line end | the status line without its line end |
//! | 6 | [`HEADER`]      | the header lines | the header lines |
//! | 7 | [`COOKIE`]      | the first `Cookie` value | the first `Set-Cookie` value |
//! | 8 | [`BODY`]        | the body, when the header block ends in the region | the same |
//!
//! | op | name  | effect |
//! |----|-------|--------|
//! | 0  | parse | parses the region `in0 .. in0 + in1` and sets every output |
//!
//! Statistics (`PerWorker`, summed over workers): `requests`,
//! `responses`, `other` (regions that are not HTTP).

use netvm_vm::{CoproConfig, CoproError, Coprocessor, InvokeContext, WorkerShare};

/// Kind of a request.
pub const REQUEST: u32 = 1;
/// Kind of a response.
pub const RESPONSE: u32 = 2;

/// Field: the request method.
pub const METHOD: usize = 0;
/// Field: the request target (the raw URI).
pub const URI: usize = 1;
/// Field: the protocol version, `HTTP/D.D`.
pub const VERSION: usize = 2;
/// Field: the status code.
pub const STAT_CODE: usize = 3;
/// Field: the reason phrase.
pub const STAT_MSG: usize = 4;
/// Field: the request or status line, without its line end.
pub const START_LINE: usize = 5;
/// Field: the header lines.
pub const HEADER: usize = 6;
/// Field: the first `Cookie` (request) or `Set-Cookie` (response) value.
pub const COOKIE: usize = 7;
/// Field: the message body (within the region).
pub const BODY: usize = 8;
/// Number of fields.
pub const FIELDS: usize = 9;

/// Longest method accepted.
const MAX_METHOD: usize = 32;

/// A parsed message: offsets relative to the start of the parsed bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// [`REQUEST`] or [`RESPONSE`].
    pub kind: u32,
    /// Bit `f` set when field `f` is present.
    pub present: u32,
    /// Each field's `(start, end)`, `(0, 0)` when absent.
    pub fields: [(usize, usize); FIELDS],
}

impl Message {
    fn set(&mut self, f: usize, start: usize, end: usize) {
        self.present |= 1 << f;
        self.fields[f] = (start, end);
    }

    /// Field `f`'s bytes in `msg` (the bytes it was parsed from), if present.
    pub fn field<'a>(&self, msg: &'a [u8], f: usize) -> Option<&'a [u8]> {
        (self.present & (1 << f) != 0).then(|| &msg[self.fields[f].0..self.fields[f].1])
    }
}

/// RFC 9110 `tchar`.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The end of the line starting at `at`: (end of its content, start of
/// the next line), or `None` when no LF follows within `msg`.
fn line_end(msg: &[u8], at: usize) -> Option<(usize, usize)> {
    let lf = at + memchr::memchr(b'\n', &msg[at..])?;
    let end = if lf > at && msg[lf - 1] == b'\r' { lf - 1 } else { lf };
    Some((end, lf + 1))
}

/// `HTTP/D.D` at `at`.
fn version_at(msg: &[u8], at: usize) -> bool {
    msg.len() >= at + 8
        && &msg[at..at + 5] == b"HTTP/"
        && msg[at + 5].is_ascii_digit()
        && msg[at + 6] == b'.'
        && msg[at + 7].is_ascii_digit()
}

/// Parses `msg` as an HTTP/1.x request or response (see the module docs).
pub fn parse(msg: &[u8]) -> Option<Message> {
    let (line_stop, next) = line_end(msg, 0)?;
    let line = &msg[..line_stop];
    let mut m = Message::default();
    if version_at(line, 0) {
        // HTTP/D.D SP DDD [SP reason]
        if line.len() < 12 || line[8] != b' ' || !line[9..12].iter().all(u8::is_ascii_digit) {
            return None;
        }
        let msg_start = match line.len() {
            12 => 12,
            _ if line[12] == b' ' => 13,
            _ => return None,
        };
        m.kind = RESPONSE;
        m.set(VERSION, 0, 8);
        m.set(STAT_CODE, 9, 12);
        m.set(STAT_MSG, msg_start, line_stop);
    } else {
        let method = line.iter().position(|&b| !is_token(b))?;
        if method == 0 || method > MAX_METHOD || line[method] != b' ' {
            return None;
        }
        let target = method + 1;
        let target_len = line[target..].iter().position(|&b| b <= b' ' || b == 0x7f)?;
        let version = target + target_len + 1;
        if target_len == 0 || line[target + target_len] != b' ' || !version_at(line, version) || line.len() != version + 8 {
            return None;
        }
        m.kind = REQUEST;
        m.set(METHOD, 0, method);
        m.set(URI, target, target + target_len);
        m.set(VERSION, version, version + 8);
    }
    m.set(START_LINE, 0, line_stop);
    // Header lines up to the empty line.
    let cookie_name: &[u8] = if m.kind == REQUEST { b"cookie" } else { b"set-cookie" };
    let mut content_length: Option<usize> = None;
    let mut at = next;
    let header_end = loop {
        let Some((stop, after)) = line_end(msg, at) else {
            // The region ends inside the header block: no body.
            m.set(HEADER, next, msg.len());
            return Some(m);
        };
        if stop == at {
            break (at, after);
        }
        let field = &msg[at..stop];
        if let Some(colon) = memchr::memchr(b':', field) {
            let name = &field[..colon];
            let mut v = colon + 1;
            while v < field.len() && (field[v] == b' ' || field[v] == b'\t') {
                v += 1;
            }
            if m.present & (1 << COOKIE) == 0 && name.eq_ignore_ascii_case(cookie_name) {
                m.set(COOKIE, at + v, stop);
            }
            if content_length.is_none() && name.eq_ignore_ascii_case(b"content-length") {
                content_length = std::str::from_utf8(&field[v..]).ok().and_then(|s| s.trim().parse().ok());
            }
        }
        at = after;
    };
    m.set(HEADER, next, header_end.0);
    let body = header_end.1;
    let stop = content_length.map_or(msg.len(), |n| msg.len().min(body.saturating_add(n)));
    m.set(BODY, body, stop);
    Some(m)
}

/// Counts kept per handle.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    requests: u64,
    responses: u64,
    other: u64,
}

/// One `http` instance.
#[derive(Debug, Default)]
pub struct Http {
    start: u32,
    len: u32,
    kind: u32,
    present: u32,
    fields: [(u32, u32); FIELDS],
    counts: Counts,
}

pub(crate) fn create(cfg: &CoproConfig) -> Result<Box<dyn Coprocessor>, String> {
    if let Some(k) = cfg.keys().next() {
        return Err(format!("http: unknown setting `{k}` (there is none)"));
    }
    Ok(Box::new(Http::default()))
}

impl Coprocessor for Http {
    fn kind(&self) -> &str {
        "http"
    }

    fn write(&mut self, reg: u8, value: u32) -> Result<(), CoproError> {
        match reg {
            0 => self.start = value,
            1 => self.len = value,
            _ => return Err(CoproError::NoRegister(reg)),
        }
        Ok(())
    }

    fn read(&mut self, reg: u8) -> Result<u32, CoproError> {
        let f = usize::from(reg.saturating_sub(2) / 2);
        match reg {
            0 => Ok(self.kind),
            1 => Ok(self.present),
            _ if f < FIELDS => Ok(if reg.is_multiple_of(2) { self.fields[f].0 } else { self.fields[f].1 }),
            _ => Err(CoproError::NoRegister(reg)),
        }
    }

    fn invoke(&mut self, op: u8, ctx: &InvokeContext<'_>) -> Result<(), CoproError> {
        if op != 0 {
            return Err(CoproError::NoOperation(op));
        }
        let start = (self.start as usize).min(ctx.packet.len());
        let end = start.saturating_add(self.len as usize).min(ctx.packet.len());
        let parsed = parse(&ctx.packet[start..end]);
        self.kind = 0;
        self.present = 0;
        self.fields = [(0, 0); FIELDS];
        match parsed {
            Some(m) => {
                self.kind = m.kind;
                self.present = m.present;
                for (f, (s, e)) in m.fields.iter().enumerate() {
                    if m.present & (1 << f) != 0 {
                        // Packet offsets: the packet is shorter than 4 GiB.
                        self.fields[f] = ((start + s) as u32, (start + e) as u32);
                    }
                }
                if m.kind == REQUEST {
                    self.counts.requests += 1;
                } else {
                    self.counts.responses += 1;
                }
            }
            None => self.counts.other += 1,
        }
        Ok(())
    }

    fn stats(&self) -> Vec<(String, u64)> {
        vec![("requests".into(), self.counts.requests), ("responses".into(), self.counts.responses), ("other".into(), self.counts.other)]
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// A parser of its own, counts at zero.
    fn fork(&mut self) -> Result<Box<dyn Coprocessor>, String> {
        Ok(Box::new(Http::default()))
    }

    fn share(&self) -> WorkerShare {
        WorkerShare::PerWorker
    }

    /// Adds the other worker's counts and zeroes them there.
    fn absorb(&mut self, other: &mut dyn Coprocessor) {
        if let Some(o) = crate::downcast::<Http>(other) {
            let c = std::mem::take(&mut o.counts);
            self.counts.requests += c.requests;
            self.counts.responses += c.responses;
            self.counts.other += c.other;
        }
    }
}

#[cfg(test)]
mod tests;
