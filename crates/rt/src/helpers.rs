//! The helpers compiled code calls (`netvm_rt_*`): region functions and
//! coprocessors. They have a plain C ABI and take explicit pointers and
//! lengths (never a context), so the same compiled code calls them from a
//! single JIT-compiled handler, from a linked application and from an AOT
//! object linked into a C program. Their callers check every range before
//! the call: a helper only ever reads bytes it was given.
//!
//! Coprocessor instances are Rust objects (`Box<dyn Coprocessor>`); a C host
//! that has none passes an empty vector, and every coprocessor instruction
//! then faults (`copro`).

use netvm_vm::{region, Coprocessor, InvokeContext, Timestamp};

/// Flag bit in 64-bit helper results meaning "fault".
pub const HELPER_FAULT: u64 = 1 << 32;

/// A byte slice from a pointer and length given by compiled code.
///
/// # Safety
/// `(p, n)` must describe readable memory (compiled code passes a range it
/// checked against a live memory), or `n` must be 0.
unsafe fn bytes<'a>(p: *const u8, n: u64) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: see the function's contract.
    unsafe { std::slice::from_raw_parts(p, n as usize) }
}

/// `crc32` over `[p, p + n)`.
///
/// # Safety
/// `[p, p + n)` must be readable (checked by the caller).
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_crc32(p: *const u8, n: u64) -> u32 {
    // SAFETY: the caller's contract.
    region::crc32(unsafe { bytes(p, n) })
}

/// `hash` (MurmurHash3) over `[p, p + n)`.
///
/// # Safety
/// `[p, p + n)` must be readable (checked by the caller).
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_murmur3(p: *const u8, n: u64) -> u32 {
    // SAFETY: the caller's contract.
    region::murmur3_32(unsafe { bytes(p, n) })
}

/// `csum` (RFC 1071) over `[p, p + n)`.
///
/// # Safety
/// `[p, p + n)` must be readable (checked by the caller).
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_csum(p: *const u8, n: u64) -> u32 {
    // SAFETY: the caller's contract.
    region::internet_checksum(unsafe { bytes(p, n) })
}

/// The coprocessor instance `i` of the vector `(copros, n)`, if it exists.
///
/// # Safety
/// `(copros, n)` must describe a live vector of instances that nothing else
/// accesses during the returned borrow.
unsafe fn copro_at<'a>(copros: *mut Box<dyn Coprocessor>, n: u64, i: u32) -> Option<&'a mut Box<dyn Coprocessor>> {
    if u64::from(i) >= n {
        return None;
    }
    // SAFETY: `i` is in bounds of the live vector.
    Some(unsafe { &mut *copros.add(i as usize) })
}

/// `copro.in`: returns 0, or 1 for a coprocessor fault.
///
/// # Safety
/// `(copros, n)` must describe the NetPE's live coprocessor vector.
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_copro_in(copros: *mut Box<dyn Coprocessor>, n: u64, copro: u32, reg: u32, value: u32) -> u32 {
    // SAFETY: the caller's contract.
    match unsafe { copro_at(copros, n, copro) } {
        Some(c) => u32::from(c.write(reg as u8, value).is_err()),
        None => 1,
    }
}

/// `copro.out`: returns the register, or [`HELPER_FAULT`].
///
/// # Safety
/// `(copros, n)` must describe the NetPE's live coprocessor vector.
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_copro_out(copros: *mut Box<dyn Coprocessor>, n: u64, copro: u32, reg: u32) -> u64 {
    // SAFETY: the caller's contract.
    match unsafe { copro_at(copros, n, copro) }.map(|c| c.read(reg as u8)) {
        Some(Ok(v)) => u64::from(v),
        _ => HELPER_FAULT,
    }
}

/// `copro.invoke` with the current packet, its info memory, time and
/// sequence number: returns 0, or 1 for a coprocessor fault.
///
/// # Safety
/// `(copros, n)` must describe the NetPE's live coprocessor vector;
/// `(pkt, pkt_len)` and `(info, info_len)` live memories distinct from it.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_copro_invoke(
    copros: *mut Box<dyn Coprocessor>,
    n: u64,
    copro: u32,
    op: u32,
    pkt: *const u8,
    pkt_len: u64,
    info: *const u8,
    info_len: u64,
    ts_sec: u64,
    ts_nsec: u32,
    seq: u64,
) -> u32 {
    // SAFETY: the caller's contract: the memories are live and do not
    // overlap the coprocessor instances.
    let (packet, info) = unsafe { (bytes(pkt, pkt_len), bytes(info, info_len)) };
    let ctx = InvokeContext { packet, info, now: Timestamp { sec: ts_sec, nsec: ts_nsec }, seq };
    // SAFETY: the caller's contract.
    match unsafe { copro_at(copros, n, copro) } {
        Some(c) => u32::from(c.invoke(op as u8, &ctx).is_err()),
        None => 1,
    }
}
