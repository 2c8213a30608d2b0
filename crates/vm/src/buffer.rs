//! Packet memory: where a packet's bytes lie from the moment a port
//! receives them until the packet leaves the application or is dropped.
//!
//! Two kinds of memory, both allocated when a run starts, bounded by
//! configuration, and recycled rather than freed:
//!
//! - [`BlockPool`]: large blocks that a source fills with many packets at
//!   once, as the kernel fills a TPACKET_V3 ring block: a `read()` of a
//!   capture file lands in a block, and every packet in it is processed
//!   where it lies. A block returns to its pool when the last batch that
//!   holds one of its packets is recycled ([`BlockRef`] counts them).
//! - [`PacketPool`]: fixed-size packet buffers with headroom (a standard
//!   class and a jumbo class up to [`MAX_PACKET`] bytes), one packet each,
//!   like DPDK's mbufs or AF_XDP's UMEM frames: fan-out copies and private
//!   copies of packets that a program writes while they are replayed.
//!
//! A [`Batch`] is an array of descriptors ([`XbDesc`]) over that memory plus
//! the references that keep it alive: what engines run on, what moves
//! between threads, and what sinks write from.
//!
//! Free lists are LIFO, so the buffers used next are the ones used last:
//! they are still in the cache, and memory the run never needs at once is
//! never touched (resident memory follows what is in flight, not the size
//! of the pool's reservation).

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::XbDesc;

/// The largest packet a buffer can hold (256 KiB, libpcap's `MAXIMUM_SNAPLEN`).
pub const MAX_PACKET: usize = 256 * 1024;

/// Alignment of every block and buffer (a cache line).
const ALIGN: usize = 64;

/// Memory reserved with `alloc` and returned on drop: the one allocation
/// behind a pool.
struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Region {
    fn new(bytes: usize) -> Region {
        let layout = Layout::from_size_align(bytes.max(ALIGN), ALIGN).expect("pool size fits a layout");
        // SAFETY: the layout has a non-zero size. The memory is left
        // uninitialized: nothing reads a byte of a block or buffer before a
        // source or a copy wrote it.
        let ptr = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Region { ptr, layout }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `Region::new` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: a region is plain memory; who may access which part of it at a
// time is the business of the pools and batches built on it.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// A free list of slot indices with a wait for the next free slot.
struct FreeList {
    free: Mutex<Vec<u32>>,
    available: Condvar,
}

impl FreeList {
    fn new(n: u32) -> FreeList {
        // Reversed, so that slot 0 is taken first.
        FreeList { free: Mutex::new((0..n).rev().collect()), available: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u32>> {
        // A panic while holding this lock cannot leave the list inconsistent
        // (push and pop only), so a poisoned lock is still usable.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pop(&self) -> Option<u32> {
        self.lock().pop()
    }

    /// Pushes without waking anyone (lists nobody waits on).
    fn push_quiet(&self, i: u32) {
        self.lock().push(i);
    }

    fn pop_wait(&self, timeout: Option<Duration>) -> Option<u32> {
        let mut free = self.lock();
        loop {
            if let Some(i) = free.pop() {
                return Some(i);
            }
            match timeout {
                None => free = self.available.wait(free).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let (g, r) = self.available.wait_timeout(free, t).unwrap_or_else(|e| e.into_inner());
                    free = g;
                    if r.timed_out() {
                        return free.pop();
                    }
                }
            }
        }
    }

    fn push(&self, i: u32) {
        self.lock().push(i);
        self.available.notify_one();
    }

    fn len(&self) -> usize {
        self.lock().len()
    }
}

// ---------------------------------------------------------------------------
// Blocks

struct BlockShared {
    region: Region,
    block_size: usize,
    count: u32,
    refs: Box<[AtomicU32]>,
    free: FreeList,
    high_water: AtomicU32,
}

/// A pool of equal blocks, each holding many packets (see the module docs).
#[derive(Clone)]
pub struct BlockPool {
    shared: Arc<BlockShared>,
}

impl std::fmt::Debug for BlockPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockPool").field("block_size", &self.shared.block_size).field("count", &self.shared.count).finish()
    }
}

impl BlockPool {
    /// Reserves `count` blocks of `block_size` bytes (at least one block;
    /// sizes rounded up to a cache line).
    pub fn new(block_size: usize, count: usize) -> BlockPool {
        let block_size = block_size.max(ALIGN).next_multiple_of(ALIGN);
        let count = count.clamp(1, u32::MAX as usize) as u32;
        let region = Region::new(block_size.checked_mul(count as usize).expect("block pool size overflows"));
        let refs = (0..count).map(|_| AtomicU32::new(0)).collect();
        BlockPool {
            shared: Arc::new(BlockShared { region, block_size, count, refs, free: FreeList::new(count), high_water: AtomicU32::new(0) }),
        }
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.shared.block_size
    }

    /// Blocks in the pool.
    pub fn count(&self) -> usize {
        self.shared.count as usize
    }

    /// Blocks not in use now.
    pub fn available(&self) -> usize {
        self.shared.free.len()
    }

    /// The most blocks that were in use at once.
    pub fn high_water(&self) -> usize {
        self.shared.high_water.load(Ordering::Relaxed) as usize
    }

    /// A free block, if there is one.
    pub fn try_take(&self) -> Option<BlockRef> {
        self.shared.free.pop().map(|i| self.taken(i))
    }

    /// A free block, waiting at most `timeout` (forever with `None`) for one
    /// to be released.
    pub fn take_wait(&self, timeout: Option<Duration>) -> Option<BlockRef> {
        self.shared.free.pop_wait(timeout).map(|i| self.taken(i))
    }

    fn taken(&self, index: u32) -> BlockRef {
        let s = &self.shared;
        s.refs[index as usize].store(1, Ordering::Relaxed);
        let in_use = s.count - s.free.len() as u32;
        s.high_water.fetch_max(in_use, Ordering::Relaxed);
        BlockRef { shared: Arc::clone(s), index }
    }
}

/// A counted reference to one block of a [`BlockPool`]: the block returns
/// to the pool when the last reference is dropped.
pub struct BlockRef {
    shared: Arc<BlockShared>,
    index: u32,
}

impl BlockRef {
    /// The first byte of the block.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `index < count`, so the offset stays inside the region.
        unsafe { self.shared.region.ptr.as_ptr().add(self.index as usize * self.shared.block_size) }
    }

    /// Bytes in the block.
    pub fn capacity(&self) -> usize {
        self.shared.block_size
    }

    /// Whether `other` refers to the same block.
    pub fn same_block(&self, other: &BlockRef) -> bool {
        self.index == other.index && Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The bytes `[from, from + len)` of the block, to fill.
    ///
    /// # Safety
    /// No descriptor or other borrow may refer to those bytes while the
    /// returned slice lives (sources write only past what they handed out).
    pub unsafe fn spare_mut<'a>(&self, from: usize, len: usize) -> &'a mut [u8] {
        assert!(from.checked_add(len).is_some_and(|end| end <= self.capacity()), "range inside the block");
        // SAFETY: inside the block (checked); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(from), len) }
    }

    /// The bytes `[from, from + len)` of the block.
    ///
    /// # Safety
    /// Those bytes must have been written, and nothing may write them while
    /// the returned slice lives.
    pub unsafe fn bytes<'a>(&self, from: usize, len: usize) -> &'a [u8] {
        assert!(from.checked_add(len).is_some_and(|end| end <= self.capacity()), "range inside the block");
        // SAFETY: inside the block (checked); the rest is the caller's contract.
        unsafe { std::slice::from_raw_parts(self.as_ptr().add(from), len) }
    }
}

impl Clone for BlockRef {
    fn clone(&self) -> BlockRef {
        self.shared.refs[self.index as usize].fetch_add(1, Ordering::Relaxed);
        BlockRef { shared: Arc::clone(&self.shared), index: self.index }
    }
}

impl Drop for BlockRef {
    fn drop(&mut self) {
        if self.shared.refs[self.index as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.free.push(self.index);
        }
    }
}

impl std::fmt::Debug for BlockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockRef({})", self.index)
    }
}

// ---------------------------------------------------------------------------
// Packet buffers

/// Sizes and counts of a [`PacketPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketPoolConfig {
    /// Bytes reserved in front of a standard buffer's data (for headers a
    /// program may prepend).
    pub headroom: usize,
    /// Data bytes of a standard buffer.
    pub data_room: usize,
    /// Standard buffers.
    pub buffers: usize,
    /// Jumbo buffers (data room [`MAX_PACKET`], no headroom).
    pub jumbo_buffers: usize,
}

impl Default for PacketPoolConfig {
    /// 4,096 buffers of 128 + 2,048 bytes and 16 jumbo buffers: 12.5 MiB reserved.
    fn default() -> Self {
        PacketPoolConfig { headroom: 128, data_room: 2048, buffers: 4096, jumbo_buffers: 16 }
    }
}

struct BufClass {
    region: Region,
    /// Bytes per buffer (headroom included).
    stride: usize,
    headroom: usize,
    free: FreeList,
}

/// The memory and free lists of a [`PacketPool`], shared by its handles,
/// its buffers and the threads' caches.
///
/// Lifetime: `refs` counts the pool's handles plus every slot that is not
/// in a shared free list (each buffer out, each slot in a thread's cache);
/// whoever takes it to zero frees the pool. Slots move between the shared
/// lists and the caches in bulk, so the count changes once per
/// [`CACHE_BULK`] buffers, not per buffer: unlike an `Arc` per buffer, the
/// workers and the I/O stage do not fight over one counter per packet.
struct PoolShared {
    /// Unique among the pools of the process (keys the per-thread caches).
    id: u64,
    refs: AtomicUsize,
    classes: [BufClass; 2],
    /// Copies that found their class exhausted and went to the heap.
    overflow: AtomicU64,
}

/// Source of [`PoolShared::id`].
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A counted pointer to a [`PoolShared`] (see its lifetime rules).
#[derive(Clone, Copy)]
struct PoolPtr(NonNull<PoolShared>);

// SAFETY: the pool is shared between threads by design: its counters are
// atomic, its free lists behind mutexes, and its buffer memory is handed to
// one owner at a time.
unsafe impl Send for PoolPtr {}
// SAFETY: as above.
unsafe impl Sync for PoolPtr {}

impl PoolPtr {
    /// The pool.
    ///
    /// # Safety
    /// The caller must hold one of the pool's references (a handle, a
    /// buffer, or a non-empty cache of its slots).
    unsafe fn get<'a>(self) -> &'a PoolShared {
        // SAFETY: the caller's contract keeps the pool alive.
        unsafe { self.0.as_ref() }
    }

    /// Drops `n` references, freeing the pool at zero.
    ///
    /// # Safety
    /// The caller holds those `n` references and does not use the pointer
    /// afterwards.
    unsafe fn release(self, n: usize) {
        // SAFETY: the caller holds references, so the pool is alive.
        let prev = unsafe { self.get() }.refs.fetch_sub(n, Ordering::AcqRel);
        if prev == n {
            // SAFETY: allocated by `Box::into_raw` in `PacketPool::new`; the
            // count reached zero here, so nothing refers to it any more.
            drop(unsafe { Box::from_raw(self.0.as_ptr()) });
        }
    }
}

/// Free slots a thread keeps for itself, per pool and class, as DPDK's
/// mempool cache does: a thread that takes and returns buffers touches the
/// shared free list (and the pool's reference count) once per
/// [`CACHE_BULK`] of them.
struct LocalCache {
    pool: u64,
    class: u8,
    slots: Vec<u32>,
    ptr: PoolPtr,
}

/// Slots a thread's cache holds at most (per pool and class).
const CACHE_MAX: usize = 128;
/// Slots moved between a thread's cache and the shared free list at once.
const CACHE_BULK: usize = 32;

impl LocalCache {
    /// Moves the top `n` cached slots back to the shared list.
    fn flush(&mut self, n: usize) {
        let n = n.min(self.slots.len());
        if n == 0 {
            return;
        }
        let at = self.slots.len() - n;
        // SAFETY: the cached slots are references, so the pool is alive.
        let shared = unsafe { self.ptr.get() };
        shared.classes[self.class as usize].free.lock().extend(self.slots.drain(at..));
        // SAFETY: the `n` slots just returned were `n` references.
        unsafe { self.ptr.release(n) };
    }
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        self.flush(self.slots.len());
    }
}

thread_local! {
    static CACHES: std::cell::RefCell<Vec<LocalCache>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's cache for `(pool, class)`, made on first use; when the
/// thread has many, empty caches (of pools that may be gone) are dropped on
/// the way.
fn cache_of(caches: &mut Vec<LocalCache>, ptr: PoolPtr, id: u64, class: usize) -> &mut LocalCache {
    if let Some(i) = caches.iter().position(|c| c.pool == id && c.class as usize == class) {
        return &mut caches[i];
    }
    if caches.len() >= 64 {
        caches.retain(|c| !c.slots.is_empty());
    }
    caches.push(LocalCache { pool: id, class: class as u8, slots: Vec::with_capacity(CACHE_MAX + CACHE_BULK), ptr });
    caches.last_mut().expect("just pushed")
}

impl PoolShared {
    /// A free slot of `class` (counted as a reference): from this thread's
    /// cache, refilled in bulk from the shared list.
    fn take(&self, ptr: PoolPtr, class: usize) -> Option<u32> {
        let cached = CACHES.try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            let c = cache_of(&mut caches, ptr, self.id, class);
            if c.slots.is_empty() {
                let mut free = self.classes[class].free.lock();
                let n = free.len().min(CACHE_BULK);
                let at = free.len() - n;
                // The slots leave the shared list: `n` more references.
                self.refs.fetch_add(n, Ordering::Relaxed);
                c.slots.extend(free.drain(at..));
            }
            c.slots.pop()
        });
        match cached {
            Ok(Some(slot)) => Some(slot),
            Ok(None) => None,
            // No cache (the thread is ending): the shared list directly.
            Err(_) => {
                let slot = self.classes[class].free.pop()?;
                self.refs.fetch_add(1, Ordering::Relaxed);
                Some(slot)
            }
        }
    }

    /// Returns a slot (and its reference): to this thread's cache, flushed
    /// in bulk when full.
    ///
    /// # Safety
    /// `slot` is out of `ptr`'s pool, and the caller does not use `ptr` afterwards.
    unsafe fn give(ptr: PoolPtr, class: usize, slot: u32) {
        // SAFETY: the caller's contract.
        unsafe { PoolShared::give_all(ptr, class, std::slice::from_ref(&slot)) }
    }

    /// Up to `n` free slots of `class` (each counted as a reference) onto
    /// `out`: from this thread's cache, refilled in bulk from the shared
    /// list, in one visit of the cache; fewer where the class runs out.
    fn take_many(&self, ptr: PoolPtr, class: usize, n: usize, out: &mut Vec<u32>) {
        let start = out.len();
        let cached = CACHES.try_with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else { return };
            let c = cache_of(&mut caches, ptr, self.id, class);
            while out.len() - start < n {
                if c.slots.is_empty() {
                    let mut free = self.classes[class].free.lock();
                    let k = free.len().min(CACHE_BULK.max(n - (out.len() - start)));
                    if k == 0 {
                        return;
                    }
                    let at = free.len() - k;
                    // The slots leave the shared list: `k` more references.
                    self.refs.fetch_add(k, Ordering::Relaxed);
                    c.slots.extend(free.drain(at..));
                }
                let k = c.slots.len().min(n - (out.len() - start));
                let at = c.slots.len() - k;
                out.extend(c.slots.drain(at..));
            }
        });
        if cached.is_err() {
            // No cache (the thread is ending): one at a time.
            while out.len() - start < n {
                let Some(slot) = self.take(ptr, class) else { break };
                out.push(slot);
            }
        }
    }

    /// Returns slots (and their references) of `class`: to this thread's
    /// cache, flushed in bulk when full.
    ///
    /// # Safety
    /// Every slot is out of `ptr`'s pool, and the caller uses neither them
    /// nor `ptr` afterwards.
    unsafe fn give_all(ptr: PoolPtr, class: usize, slots: &[u32]) {
        if slots.is_empty() {
            return;
        }
        let kept = CACHES.try_with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else { return false };
            // SAFETY: the slots are references, so the pool is alive.
            let id = unsafe { ptr.get() }.id;
            let c = cache_of(&mut caches, ptr, id, class);
            c.slots.extend_from_slice(slots);
            if c.slots.len() > CACHE_MAX {
                c.flush(c.slots.len() - CACHE_MAX - 1 + CACHE_BULK);
            }
            true
        });
        if kept != Ok(true) {
            for &slot in slots {
                // SAFETY: the slot is a reference, so the pool is alive; it
                // goes back to the shared list, then its reference is dropped.
                unsafe {
                    ptr.get().classes[class].free.push_quiet(slot);
                    ptr.release(1);
                }
            }
        }
    }

    /// Data bytes a standard buffer (class 0) holds; longer packets take a jumbo one.
    fn standard_room(&self) -> usize {
        self.classes[0].stride - self.classes[0].headroom
    }

    /// The first data byte of `class`'s slot `index`.
    fn slot_data(&self, class: usize, index: u32) -> *mut u8 {
        let c = &self.classes[class];
        // SAFETY: `index` is a slot of this class, so the offset stays inside its region.
        unsafe { c.region.ptr.as_ptr().add(index as usize * c.stride + c.headroom) }
    }
}

/// A pool of fixed-size packet buffers (see the module docs).
pub struct PacketPool {
    ptr: PoolPtr,
}

impl PacketPool {
    fn shared(&self) -> &PoolShared {
        // SAFETY: a handle is a reference.
        unsafe { self.ptr.get() }
    }
}

impl Clone for PacketPool {
    fn clone(&self) -> PacketPool {
        self.shared().refs.fetch_add(1, Ordering::Relaxed);
        PacketPool { ptr: self.ptr }
    }
}

impl Drop for PacketPool {
    fn drop(&mut self) {
        // SAFETY: the handle's reference, not used afterwards.
        unsafe { self.ptr.release(1) };
    }
}

impl std::fmt::Debug for PacketPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketPool").field("overflow", &self.overflow()).finish()
    }
}

impl Default for PacketPool {
    fn default() -> Self {
        PacketPool::new(PacketPoolConfig::default())
    }
}

impl PacketPool {
    /// Reserves the buffers `cfg` describes.
    pub fn new(cfg: PacketPoolConfig) -> PacketPool {
        let class = |headroom: usize, room: usize, n: usize| {
            let stride = (headroom + room).max(1).next_multiple_of(ALIGN);
            let n = n.min(u32::MAX as usize);
            BufClass {
                region: Region::new(stride.checked_mul(n).expect("pool size overflows")),
                stride,
                headroom,
                free: FreeList::new(n as u32),
            }
        };
        let standard = class(cfg.headroom, cfg.data_room.min(MAX_PACKET), cfg.buffers);
        let jumbo = class(0, MAX_PACKET, cfg.jumbo_buffers);
        let id = NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed);
        let shared = Box::new(PoolShared { id, refs: AtomicUsize::new(1), classes: [standard, jumbo], overflow: AtomicU64::new(0) });
        PacketPool { ptr: PoolPtr(NonNull::from(Box::leak(shared))) }
    }

    /// A buffer holding a copy of `bytes` (at most [`MAX_PACKET`] of them):
    /// from the smallest class it fits, or from the heap when that class is
    /// exhausted (counted by [`PacketPool::overflow`]).
    pub fn copy_of(&self, bytes: &[u8]) -> PacketBuf {
        let len = bytes.len().min(MAX_PACKET);
        let s = self.shared();
        let c = usize::from(len > s.standard_room());
        let inner = match s.take(self.ptr, c) {
            Some(index) => BufInner::Pooled { ptr: self.ptr, class: c as u8, index },
            None => {
                s.overflow.fetch_add(1, Ordering::Relaxed);
                BufInner::Heap(vec![0; len.max(1)].into_boxed_slice())
            }
        };
        let mut buf = PacketBuf { inner, len: len as u32 };
        buf.bytes_mut().copy_from_slice(&bytes[..len]);
        buf
    }

    /// Makes this thread's caches of the pool's buffers now (a thread's
    /// first copy would make them), so that a warm run allocates nothing.
    pub fn prepare_thread(&self) {
        let _ = CACHES.try_with(|caches| {
            if let Ok(mut caches) = caches.try_borrow_mut() {
                for class in 0..2 {
                    cache_of(&mut caches, self.ptr, self.shared().id, class);
                }
            }
        });
    }

    /// Copies that went to the heap because their class was exhausted (the
    /// pool is too small for the run's fan-out).
    pub fn overflow(&self) -> u64 {
        self.shared().overflow.load(Ordering::Relaxed)
    }

    /// Whether `other` is a handle on this same pool.
    pub fn same(&self, other: &PacketPool) -> bool {
        self.ptr.0 == other.ptr.0
    }

    /// Standard buffers in the shared free list (not counting those cached by threads).
    pub fn available(&self) -> usize {
        self.shared().classes[0].free.len()
    }
}

enum BufInner {
    Pooled { ptr: PoolPtr, class: u8, index: u32 },
    Heap(Box<[u8]>),
}

/// One packet buffer of a [`PacketPool`], returned to it on drop.
pub struct PacketBuf {
    inner: BufInner,
    len: u32,
}

impl PacketBuf {
    /// The first data byte.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.data_ptr()
    }

    fn data_ptr(&self) -> *mut u8 {
        match &self.inner {
            // SAFETY: the buffer's slot is a reference to the pool.
            BufInner::Pooled { ptr, class, index } => unsafe { ptr.get() }.slot_data(*class as usize, *index),
            BufInner::Heap(b) => b.as_ptr().cast_mut(),
        }
    }

    /// Data bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the buffer holds no data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the buffer's `len` data bytes were written by `copy_of`;
        // the shared borrow of `self` excludes writers through this handle,
        // and no one else has this slot while the handle lives.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), self.len()) }
    }

    /// The data, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, with the exclusive borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), self.len()) }
    }

    /// Whether the buffer came from the heap (its pool class was exhausted).
    pub fn is_overflow(&self) -> bool {
        matches!(self.inner, BufInner::Heap(_))
    }
}

impl Drop for PacketBuf {
    fn drop(&mut self) {
        if let BufInner::Pooled { ptr, class, index } = self.inner {
            // SAFETY: the slot is out of the pool and goes back with its
            // reference; the buffer is gone after this.
            unsafe { PoolShared::give(ptr, class as usize, index) };
        }
    }
}

impl std::fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBuf").field("len", &self.len).field("overflow", &self.is_overflow()).finish()
    }
}

// SAFETY: a buffer is owned by its handle (the slot is off the free lists
// until the handle drops), so it may move between threads.
unsafe impl Send for PacketBuf {}
// SAFETY: shared access only reads the data.
unsafe impl Sync for PacketBuf {}

// ---------------------------------------------------------------------------
// Batches

/// What keeps the memory of a batch's packets alive.
#[derive(Debug)]
enum Hold {
    Block(BlockRef),
    /// Held only to be released with the batch.
    Buf(#[allow(dead_code)] PacketBuf),
    /// Standard buffers of a pool taken at once, released at once.
    Slots(#[allow(dead_code)] PoolSlots),
}

/// Slots of one class of a pool, returned to it together on drop
/// ([`Batch::make_all_private`]).
struct PoolSlots {
    ptr: PoolPtr,
    class: u8,
    slots: Vec<u32>,
}

impl std::fmt::Debug for PoolSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolSlots").field("class", &self.class).field("slots", &self.slots.len()).finish()
    }
}

impl Drop for PoolSlots {
    fn drop(&mut self) {
        // SAFETY: the slots were taken out of the pool for this value alone,
        // and go back with their references; nothing uses them after.
        unsafe { PoolShared::give_all(self.ptr, usize::from(self.class), &self.slots) };
    }
}

/// A batch: descriptors of packets (what engines run on) and the references
/// that keep their memory alive until the batch is cleared or dropped.
///
/// Invariants the runtime keeps: every descriptor points into memory the
/// batch holds (or, for [`Batch::push_external`], memory its caller keeps
/// alive and unshared); a batch is processed by one thread at a time; and
/// two descriptors of a batch handed to a program that writes packet memory
/// never overlap.
#[derive(Debug, Default)]
pub struct Batch {
    /// The packets, in order.
    pub descs: Vec<XbDesc>,
    holds: Vec<Hold>,
}

impl Batch {
    /// An empty batch with room for `n` packets.
    pub fn with_capacity(n: usize) -> Batch {
        Batch { descs: Vec::with_capacity(n), holds: Vec::with_capacity(n.min(64)) }
    }

    /// Packets in the batch.
    pub fn len(&self) -> usize {
        self.descs.len()
    }

    /// Whether the batch holds no packet.
    pub fn is_empty(&self) -> bool {
        self.descs.is_empty()
    }

    /// Forgets every packet and releases the memory they were in.
    pub fn clear(&mut self) {
        self.descs.clear();
        self.holds.clear();
    }

    /// Adds a packet whose bytes lie in `block` (the descriptor points there).
    pub fn push_in_block(&mut self, desc: XbDesc, block: &BlockRef) {
        self.hold_block(block);
        self.descs.push(desc);
    }

    /// Keeps `block` alive as long as the batch (once, however many of its
    /// packets the batch has).
    pub fn hold_block(&mut self, block: &BlockRef) {
        let held = self.holds.iter().rev().take(4).any(|h| matches!(h, Hold::Block(b) if b.same_block(block)));
        if !held {
            self.holds.push(Hold::Block(block.clone()));
        }
    }

    /// Adds a packet held in its own buffer: `desc.data` and `desc.caplen`
    /// are set to the buffer's.
    pub fn push_buf(&mut self, mut desc: XbDesc, mut buf: PacketBuf) {
        desc.data = buf.as_mut_ptr();
        desc.caplen = buf.len() as u32;
        self.holds.push(Hold::Buf(buf));
        self.descs.push(desc);
    }

    /// Adds a packet whose memory the caller keeps alive, unshared, for as
    /// long as the batch refers to it.
    ///
    /// # Safety
    /// `desc.data` must point to `desc.caplen` bytes that stay valid, and
    /// that nothing else accesses while the batch is processed, until the
    /// batch is cleared or dropped.
    pub unsafe fn push_external(&mut self, desc: XbDesc) {
        self.descs.push(desc);
    }

    /// Another batch of the same packets, sharing their memory: `None` if
    /// some packet is in a buffer of its own (which cannot be shared).
    pub fn clone_shared(&self) -> Option<Batch> {
        let mut holds = Vec::with_capacity(self.holds.len());
        for h in &self.holds {
            match h {
                Hold::Block(b) => holds.push(Hold::Block(b.clone())),
                Hold::Buf(_) | Hold::Slots(_) => return None,
            }
        }
        Some(Batch { descs: self.descs.clone(), holds })
    }

    /// Adds packets whose memory the caller keeps alive (see [`Batch::push_external`]).
    ///
    /// # Safety
    /// As [`Batch::push_external`], for every descriptor.
    pub unsafe fn extend_external(&mut self, descs: &[XbDesc]) {
        self.descs.extend_from_slice(descs);
    }

    /// Replaces every packet's bytes by a private copy from `pool`, as
    /// [`Batch::make_private`] does one by one: the standard-size copies
    /// in buffers taken from the pool at once (one visit of the thread's
    /// cache, not two per packet), the others one at a time.
    pub fn make_all_private(&mut self, pool: &PacketPool) {
        let s = pool.shared();
        let room = s.standard_room();
        let fits = |d: &XbDesc| (d.caplen as usize).min(MAX_PACKET) <= room;
        let want = self.descs.iter().filter(|d| fits(d)).count();
        let mut slots = Vec::with_capacity(want);
        s.take_many(pool.ptr, 0, want, &mut slots);
        let mut next = 0;
        for i in 0..self.descs.len() {
            let d = self.descs[i];
            match slots.get(next) {
                Some(&slot) if fits(&d) => {
                    next += 1;
                    let to = s.slot_data(0, slot);
                    let len = (d.caplen as usize).min(MAX_PACKET);
                    // SAFETY: the descriptor points to `caplen` bytes the
                    // batch holds; the slot is this batch's alone and has
                    // room for `len <= room` bytes; they do not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(d.data.cast_const(), to, len) };
                    self.descs[i].data = to;
                }
                _ => self.make_private(i, pool),
            }
        }
        if !slots.is_empty() {
            self.holds.push(Hold::Slots(PoolSlots { ptr: pool.ptr, class: 0, slots }));
        }
    }

    /// Replaces packet `i`'s bytes by a private copy from `pool` (before a
    /// program that writes packet memory runs on bytes that are shared).
    pub fn make_private(&mut self, i: usize, pool: &PacketPool) {
        let d = self.descs[i];
        // SAFETY: the descriptor points into memory the batch holds, and
        // nothing writes it while the batch is borrowed exclusively here.
        let mut buf = pool.copy_of(unsafe { d.bytes() });
        self.descs[i].data = buf.as_mut_ptr();
        self.holds.push(Hold::Buf(buf));
    }
}

/// Read-only access to the packets of a batch: what a coprocessor's
/// [`ahead`](crate::Coprocessor::ahead) stage looks at.
#[derive(Clone, Copy, Debug)]
pub struct Packets<'a> {
    descs: &'a [XbDesc],
}

impl<'a> Packets<'a> {
    /// Packets over `descs`.
    ///
    /// # Safety
    /// Every descriptor must point to `caplen` readable bytes that nothing
    /// writes during `'a`.
    pub unsafe fn new(descs: &'a [XbDesc]) -> Packets<'a> {
        Packets { descs }
    }

    /// Number of packets.
    pub fn len(&self) -> usize {
        self.descs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.descs.is_empty()
    }

    /// The bytes of packet `i`.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        // SAFETY: the constructor's contract.
        self.descs.get(i).map(|d| unsafe { d.bytes() })
    }

    /// The bytes of every packet, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        // SAFETY: the constructor's contract.
        self.descs.iter().map(|d| unsafe { d.bytes() })
    }
}

impl Batch {
    /// The packets, read-only.
    pub fn packets(&self) -> Packets<'_> {
        // SAFETY: the batch's invariant: every descriptor points into memory
        // it holds; the shared borrow excludes writers.
        unsafe { Packets::new(&self.descs) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Packet;

    fn pool(buffers: usize, jumbo: usize) -> PacketPool {
        // Standard buffers of exactly 128 data bytes (192-byte stride).
        PacketPool::new(PacketPoolConfig { headroom: 64, data_room: 128, buffers, jumbo_buffers: jumbo })
    }

    /// A batch of `packets` in buffers of `pool`.
    fn batch_of(pool: &PacketPool, packets: &[Vec<u8>]) -> Batch {
        let mut b = Batch::default();
        for (i, p) in packets.iter().enumerate() {
            let mut pk = Packet::from_bytes(p.clone());
            b.push_buf(XbDesc::of(&mut pk, i as u64), pool.copy_of(p));
        }
        b
    }

    fn bytes(b: &Batch) -> Vec<Vec<u8>> {
        // SAFETY: the batch holds its packets' memory.
        b.descs.iter().map(|d| unsafe { d.bytes() }.to_vec()).collect()
    }

    /// Copies land in the standard or the jumbo class by size, hold the
    /// bytes, go to the heap (counted) once their class runs out, and come
    /// back to the pool when dropped.
    #[test]
    fn copies_by_class_overflow_and_return() {
        let p = pool(4, 1);
        let sources: Vec<Vec<u8>> =
            [3usize, 128, 129, 60, 0, 200, 7].iter().map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect()).collect();
        let copies: Vec<PacketBuf> = sources.iter().map(|s| p.copy_of(s)).collect();
        for (c, s) in copies.iter().zip(&sources) {
            assert_eq!(c.bytes(), &s[..]);
        }
        // Five standard-size packets (3, 128, 60, 0, 7 bytes) for four
        // buffers, two jumbo ones (129, 200) for one: the last of each to the heap.
        let heap: Vec<bool> = copies.iter().map(PacketBuf::is_overflow).collect();
        assert_eq!(heap, [false, false, false, false, false, true, true]);
        assert_eq!(p.overflow(), 2);
        drop(copies);
        let again: Vec<PacketBuf> = sources.iter().map(|s| p.copy_of(s)).collect();
        assert_eq!(again.iter().filter(|c| !c.is_overflow()).count(), 5);
    }

    /// Clearing a batch returns its buffers, of any pool and class; a
    /// private copy is the packet's bytes in a buffer of its own; a
    /// thread's cached slots go back to the shared lists when it ends.
    #[test]
    fn batches_return_their_buffers() {
        let (a, b) = (pool(200, 2), pool(8, 0));
        let (ta, tb) = (a.clone(), b.clone());
        // A thread of its own, joined (its caches are flushed when it ends).
        std::thread::spawn(move || {
            for round in 0..3u8 {
                let packets: Vec<Vec<u8>> = (0..150).map(|i| vec![round; if i % 50 == 7 { 300 } else { 64 }]).collect();
                let mut batch = batch_of(&ta, &packets);
                let mut extra = batch_of(&tb, &packets[..10]);
                batch.descs.append(&mut extra.descs);
                batch.holds.append(&mut extra.holds);
                let before: Vec<*mut u8> = batch.descs.iter().map(|d| d.data).collect();
                for i in 0..batch.len() {
                    batch.make_private(i, &ta);
                }
                let mut want = packets.clone();
                want.extend_from_slice(&packets[..10]);
                assert_eq!(bytes(&batch), want);
                assert!(batch.descs.iter().zip(&before).all(|(d, b)| d.data != *b));
                batch.clear();
                assert!(batch.holds.is_empty() && batch.descs.is_empty());
            }
        })
        .join()
        .expect("the thread ran");
        assert_eq!((a.available(), a.shared().classes[1].free.len(), b.available()), (200, 2, 8));
        assert!(a.overflow() > 0 && b.overflow() == 3 * 2);
    }

    /// `make_all_private` copies as `make_private` does packet by packet:
    /// the same bytes in buffers of their own, standard-size ones taken at
    /// once, jumbo ones and those past the class's last buffer one at a
    /// time (the latter to the heap, counted); clearing returns them all.
    #[test]
    fn all_private_at_once() {
        let (src, to) = (pool(300, 4), pool(100, 2));
        let tt = to.clone();
        let packets: Vec<Vec<u8>> = (0..150u32)
            .map(|i| (0..if i % 40 == 3 { 129 + i as usize } else { (i * 7 % 129) as usize }).map(|j| (j as u32 * 31 + i) as u8).collect())
            .collect();
        let jumbo = packets.iter().filter(|p| p.len() > 128).count();
        assert_eq!(jumbo, 4);
        std::thread::spawn(move || {
            for round in 0..3 {
                let mut batch = batch_of(&src, &packets);
                let before: Vec<*mut u8> = batch.descs.iter().map(|d| d.data).collect();
                batch.make_all_private(&tt);
                assert_eq!(bytes(&batch), packets, "round {round}");
                assert!(batch.descs.iter().zip(&before).all(|(d, b)| d.data != *b));
                let mut at: Vec<*mut u8> = batch.descs.iter().map(|d| d.data).collect();
                at.sort_unstable();
                at.dedup();
                assert_eq!(at.len(), packets.len(), "each packet in a buffer of its own");
                batch.clear();
            }
        })
        .join()
        .expect("the thread ran");
        // 146 standard-size packets for 100 buffers, 4 jumbo ones for 2, in each round.
        assert_eq!(to.overflow(), 3 * (46 + 2));
        assert_eq!((to.available(), to.shared().classes[1].free.len()), (100, 2));
    }
}
