//! [`SplitMix64`]: the one pseudo-random generator of the tests and
//! benchmarks.

/// SplitMix64 (Steele, Lea and Flood, 2014): a small, fast, deterministic
/// generator, not for cryptography. The state is the tuple field: the
/// generator started from seed `s` is `SplitMix64(s)` (or
/// [`SplitMix64::new`]`(s)`), so a seed names a sequence on every machine.
///
/// Every helper draws whole 64-bit outputs of [`next_u64`](Self::next_u64),
/// one per call unless it says otherwise, so the sequences that tests and
/// committed samples depend on stay what they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The generator started from `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// SplitMix64's output function: a bijection on `u64` (distinct inputs
    /// give distinct outputs) that spreads every input bit over the output.
    pub const fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        Self::mix(self.0)
    }

    /// The low 32 bits of [`next_u64`](Self::next_u64).
    pub fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }

    /// The low 16 bits of [`next_u64`](Self::next_u64).
    pub fn next_u16(&mut self) -> u16 {
        self.next_u64() as u16
    }

    /// The low 8 bits of [`next_u64`](Self::next_u64).
    pub fn next_u8(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// A number in `0..n` (0 when `n` is 0). The modulo's bias, below
    /// `n / 2^64`, does not matter to tests and workloads.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A number in `lo..=hi` (`lo <= hi`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// True with probability `per_mille` / 1000.
    pub fn per_mille(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// An element of `xs` (not empty), uniformly.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// `n` pseudo-random bytes: the little-endian bytes of `n / 8` outputs
    /// (rounded up; the last one cut).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n.div_ceil(8)).flat_map(|_| self.next_u64().to_le_bytes()).take(n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_sequence() {
        // The first outputs for seed 1234567 (the reference implementation's example).
        let mut r = SplitMix64::new(1_234_567);
        let want = [6_457_827_717_110_365_317u64, 3_203_168_211_198_807_973, 9_817_491_932_198_370_423, 4_593_380_528_125_082_431];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
    }

    #[test]
    fn helpers_draw_whole_outputs() {
        let mut a = SplitMix64::new(9);
        let mut b = SplitMix64::new(9);
        let bytes: Vec<u8> = [b.next_u64().to_le_bytes(), b.next_u64().to_le_bytes()].concat();
        assert_eq!(a.bytes(11), bytes[..11]);
        assert_eq!(a.below(7), b.next_u64() % 7);
        assert_eq!(a.below(0), 0);
        b.next_u64();
        assert_eq!(a.range(3, 5), 3 + b.next_u64() % 3);
        assert_eq!(a.chance(30), b.next_u64() % 100 < 30);
        assert_eq!(a.per_mille(30), b.next_u64() % 1000 < 30);
        assert_eq!(a.pick(&[1, 2, 3]), [1, 2, 3][(b.next_u64() % 3) as usize]);
        assert_eq!(a.next_u16(), b.next_u64() as u16);
        assert_eq!(a, b);
    }
}
