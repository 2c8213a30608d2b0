//! What the tests of changing a running application share: a paced
//! stream of numbered frames, and a counting program.

#![allow(dead_code)]

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A pcap stream of 64-byte frames, each carrying its number in bytes
/// 0..8, that goes on until `stop` is set and then ends after `tail` more.
pub struct Stream {
    buf: Vec<u8>,
    at: usize,
    next: u64,
    stop: Arc<AtomicBool>,
    end: Option<u64>,
    tail: u64,
}

impl Stream {
    pub fn new(stop: Arc<AtomicBool>, tail: u64) -> Stream {
        let mut buf = Vec::new();
        buf.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
        buf.extend_from_slice(&2u16.to_le_bytes());
        buf.extend_from_slice(&4u16.to_le_bytes());
        buf.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(&65535u32.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes());
        Stream { buf, at: 0, next: 0, stop, end: None, tail }
    }
}

impl Read for Stream {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
            if self.end.is_none() && self.stop.load(Ordering::Acquire) {
                self.end = Some(self.next + self.tail);
            }
            if self.end.is_some_and(|e| self.next >= e) {
                return Ok(0);
            }
            // A few packets at a time, paced, so that the stream outlasts the changes.
            for _ in 0..32 {
                let ts = self.next as u32;
                self.buf.extend_from_slice(&(ts / 1_000_000).to_le_bytes());
                self.buf.extend_from_slice(&(ts % 1_000_000).to_le_bytes());
                self.buf.extend_from_slice(&64u32.to_le_bytes());
                self.buf.extend_from_slice(&64u32.to_le_bytes());
                let mut frame = [0u8; 64];
                frame[..8].copy_from_slice(&self.next.to_be_bytes());
                frame[12] = 0x08;
                self.buf.extend_from_slice(&frame);
                self.next += 1;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A NetPE that counts every packet in its `counters` instance `n` (counter 0).
pub const COUNT: &str = "\
.copro n counters
.ports 1
segment .push
    pop
    push 0
    copro.in n, 0
    push 1
    copro.in n, 1
    copro.invoke n, 0
    ret 0
ends
";
