//! The mixing step of the keyed hashes over what senders choose (the state
//! store's keys, the exact-match table's, the name FIB's components, the
//! capsule code cache's programs): defined once, used by each.

/// The 128-bit product of `a` and `b`, folded to 64 bits by xoring its
/// halves (the folded multiply of wyhash and its kin): with a secret
/// operand, nobody who does not know it can tell which inputs collide.
#[inline(always)]
pub fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}
