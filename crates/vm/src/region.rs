//! The region functions of NetIL (`crc32`, `hash`, `hash32`, `csum`,
//! `csum.upd`), defined once here so that every engine computes exactly the
//! same values (the JIT calls these functions).

/// CRC-32 as used by Ethernet, zlib and PNG (reflected polynomial 0xEDB88320,
/// initial value and final xor 0xFFFFFFFF).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// MurmurHash3, x86 32-bit variant, seed 0.
pub fn murmur3_32(bytes: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut chunks = bytes.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= bytes.len() as u32;
    fmix32(h)
}

/// The MurmurHash3 finalizer.
#[inline]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// `hash32`: MurmurHash3 of the four big-endian bytes of `v`.
#[inline]
pub fn hash32(v: u32) -> u32 {
    murmur3_32(&v.to_be_bytes())
}

/// The Internet checksum (RFC 1071): the ones' complement of the ones'
/// complement sum of the region taken as big-endian 16-bit words, an odd
/// final byte padded with zero. A region that includes a correct checksum
/// field sums to 0.
pub fn internet_checksum(bytes: &[u8]) -> u32 {
    let mut sum: u64 = 0;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u32::from(!(sum as u16))
}

/// Incremental checksum update (RFC 1624, eqn. 3): `HC' = ~(~HC + ~m + m')`
/// for a 16-bit field changing from `old` to `new`. Only the low 16 bits of
/// each argument are used; the result is a 16-bit value.
pub fn csum_update(hc: u32, old: u32, new: u32) -> u32 {
    let mut sum = u32::from(!(hc as u16)) + u32::from(!(old as u16)) + u32::from(new as u16);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u32::from(!(sum as u16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur_vectors() {
        // Reference values of MurmurHash3_x86_32 with seed 0.
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"a"), 0x3c25_69b2);
        assert_eq!(murmur3_32(b"abcd"), 0x43ed_676a); // checked against Python mmh3
        assert_eq!(murmur3_32(b"Hello, world!"), 0xc036_3e43);
    }

    #[test]
    fn crc_vector() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn checksum_rfc1071_and_1624() {
        // IPv4 header from RFC 1071-style examples: checksum field zero.
        let mut h =
            [0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];
        let c = internet_checksum(&h);
        assert_eq!(c, 0xb861);
        h[10] = (c >> 8) as u8;
        h[11] = c as u8;
        assert_eq!(internet_checksum(&h), 0);
        // Decrement TTL (byte 8, high byte of word 4) and update incrementally.
        let old = u32::from(u16::from_be_bytes([h[8], h[9]]));
        h[8] -= 1;
        let new = u32::from(u16::from_be_bytes([h[8], h[9]]));
        let c2 = csum_update(c, old, new);
        h[10] = (c2 >> 8) as u8;
        h[11] = c2 as u8;
        assert_eq!(internet_checksum(&h), 0);
    }
}
