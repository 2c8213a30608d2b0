//! Memory for the big tables: transparent huge pages.
//!
//! A lookup in a table of tens of MiB reaches a random page each time; on
//! 4 KiB pages that is a TLB miss and a page walk besides the cache miss.
//! DPDK puts its tables on hugepages for that reason; the tables here ask
//! Linux for transparent huge pages on their large allocations.

/// Bytes of a (transparent) huge page.
pub(crate) const HUGE: usize = 2 << 20;

/// Marks the whole 2 MiB pages inside `[p, p + bytes)` for transparent huge
/// pages (Linux; elsewhere nothing). The kernel still allocates on first touch.
pub(crate) fn advise_huge(p: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        let start = p as usize;
        let first = start.next_multiple_of(HUGE);
        let end = (start + bytes) / HUGE * HUGE;
        if end > first {
            // SAFETY: the range lies inside an allocation the caller owns
            // (initialised or spare capacity); MADV_HUGEPAGE only changes how
            // the kernel backs the pages, never their contents, and a failure
            // (THP disabled) is harmless.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, bytes);
}
