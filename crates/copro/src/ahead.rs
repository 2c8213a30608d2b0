//! Answers found by the pre-lookup stage ([`netvm_vm::Coprocessor::ahead`])
//! for the lookups of the data path that follow.
//!
//! A kind whose bulk lookup costs no more than its prefetch can look a
//! sub-batch up in the stage and keep each answer with the packet it was
//! for and a copy of the packet bytes it depends on. A lookup of the data
//! path takes the answer only for the same packet (address and length),
//! offset and bytes, and only while the table is unchanged (the kind
//! clears the answers on every change); anything else looks up afresh, so
//! results never depend on the stage.

use crate::table::key_words;

/// One kept answer.
#[derive(Debug)]
struct Answer<const OUT: usize> {
    packet: usize,
    packet_len: usize,
    off: usize,
    /// How many bytes it depends on; up to 16 they are `words`
    /// (`table::key_words`: two words covering every byte), beyond in
    /// [`Answers::bytes`] from `at`.
    len: usize,
    words: (u64, u64),
    at: usize,
    output: [u32; OUT],
    /// What the kind counts per lookup besides (probes).
    extra: u32,
}

/// The answers of the last pre-lookup stage of one instance: output
/// registers (`OUT` words) per packet.
#[derive(Debug)]
pub(crate) struct Answers<const OUT: usize> {
    found: Vec<Answer<OUT>>,
    bytes: Vec<u8>,
    /// The first answer not used yet (lookups come in packet order).
    next: usize,
}

impl<const OUT: usize> Default for Answers<OUT> {
    fn default() -> Answers<OUT> {
        Answers { found: Vec::new(), bytes: Vec::new(), next: 0 }
    }
}

/// Answers a lookup passes over looking for its own (packets that left
/// the data path before their lookup).
const WINDOW: usize = 8;

impl<const OUT: usize> Answers<OUT> {
    /// Forgets every answer (a new stage, or the table changed).
    pub(crate) fn clear(&mut self) {
        self.found.clear();
        self.bytes.clear();
        self.next = 0;
    }

    /// Keeps `output` for the lookup at `off` in `packet`, which depends on
    /// `packet[off..end]` (and the table).
    pub(crate) fn keep(&mut self, packet: &[u8], off: usize, end: usize, output: [u32; OUT], extra: u32) {
        let Some(b) = packet.get(off..end) else { return };
        let (words, at) = if b.len() <= 16 {
            (key_words(b), 0)
        } else {
            self.bytes.extend_from_slice(b);
            ((0, 0), self.bytes.len() - b.len())
        };
        self.found.push(Answer { packet: packet.as_ptr() as usize, packet_len: packet.len(), off, len: b.len(), words, at, output, extra });
    }

    /// The answer kept for the lookup at `off` in `packet`, if it still holds
    /// (none kept, as without a pre-lookup stage: one compare inline).
    #[inline(always)]
    pub(crate) fn take(&mut self, packet: &[u8], off: usize) -> Option<([u32; OUT], u32)> {
        if self.next >= self.found.len() {
            return None;
        }
        self.search(packet, off)
    }

    #[inline(never)]
    fn search(&mut self, packet: &[u8], off: usize) -> Option<([u32; OUT], u32)> {
        let (ptr, end) = (packet.as_ptr() as usize, self.found.len().min(self.next + WINDOW));
        let i = (self.next..end).find(|&i| {
            let a = &self.found[i];
            a.packet == ptr
                && a.packet_len == packet.len()
                && a.off == off
                && packet.get(off..off + a.len).is_some_and(|b| {
                    if a.len <= 16 {
                        key_words(b) == a.words
                    } else {
                        b == &self.bytes[a.at..a.at + a.len]
                    }
                })
        })?;
        self.next = i + 1;
        Some((self.found[i].output, self.found[i].extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_holds_for_the_same_packet_offset_and_bytes_only() {
        let mut a = Answers::<2>::default();
        let (mut p, q, r) = (vec![1u8, 2, 3, 4], vec![1u8, 2, 3, 4], vec![9u8; 4]);
        a.keep(&p, 1, 3, [7, 8], 1);
        a.keep(&r, 0, 4, [5, 6], 2);
        a.keep(&r, 9, 12, [0, 0], 0); // out of the packet: not kept
        assert_eq!(a.take(&q, 1), None, "another packet with the same bytes");
        assert_eq!(a.take(&p, 0), None, "another offset");
        p[3] = 0; // outside the bytes the answer depends on
        assert_eq!(a.take(&p, 1), Some(([7, 8], 1)));
        assert_eq!(a.take(&p, 1), None, "taken once");
        let mut r2 = r.clone();
        r2[2] = 0;
        assert_eq!(a.take(&r2, 0), None);
        assert_eq!(a.take(&r, 0), Some(([5, 6], 2)));
        a.keep(&r, 0, 4, [5, 6], 2);
        a.clear();
        assert_eq!(a.take(&r, 0), None);
    }

    #[test]
    fn a_changed_byte_voids_the_answer() {
        let mut a = Answers::<1>::default();
        let mut p = vec![0u8; 8];
        a.keep(&p, 2, 6, [1], 0);
        p[5] = 1;
        assert_eq!(a.take(&p, 2), None);
    }

    #[test]
    fn lookups_skip_answers_of_packets_that_never_reached_theirs() {
        let mut a = Answers::<1>::default();
        let pkts: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 4]).collect();
        for (i, p) in pkts.iter().enumerate() {
            a.keep(p, 0, 4, [i as u32], 0);
        }
        assert_eq!(a.take(&pkts[3], 0), Some(([3], 0)));
        assert_eq!(a.take(&pkts[10], 0), Some(([10], 0)), "within the window");
        assert_eq!(a.take(&pkts[19], 0), None, "beyond it");
        assert_eq!(a.take(&pkts[11], 0), Some(([11], 0)));
    }
}
