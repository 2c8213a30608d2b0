//! The host side of fan-out (NetVM paper §3: when a port feeds several
//! inputs, the exchange buffer is duplicated and each copy runs to
//! completion in order). Compiled code keeps the pending copies through four
//! C-ABI hooks on a [`FanoutState`] (the `rt` of [`crate::AppCtx`]); a C
//! host creates one with [`netvm_rt_fanout_new`] and reads what left with
//! [`netvm_rt_fanout_emitted`].

use netvm_vm::buffer::{PacketBuf, PacketPool, PacketPoolConfig};
use netvm_vm::graph::FanoutExit;

/// A pending copy: the destination route, the buffer it runs on, and where
/// its info memory's snapshot is in the state's arena.
#[derive(Debug)]
struct Pending {
    route: i32,
    data: *mut u8,
    len: u64,
    /// The copy it runs on (its slot among the batch's copies), or `None`
    /// for the packet's original buffer.
    slot: Option<usize>,
    info_at: usize,
}

/// What left the application while a packet was duplicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emitted {
    /// The original buffer (in its batch slot).
    Original,
    /// A copy: its slot among the batch's copies.
    Copy(usize),
}

/// The host side of fan-out for one batch (the `rt` of [`crate::AppCtx`]).
///
/// Copies come from a [`PacketPool`] (the runtime's, or a small private one
/// for a C host) and live until the end of the batch, or, for those that
/// leave the application, until the host has taken them
/// ([`FanoutState::take_exits`]). Info-memory snapshots go to an arena that
/// keeps its capacity, so a run allocates nothing per packet once warm.
#[derive(Debug, Default)]
pub struct FanoutState {
    /// The copy the code works on now (its slot), or `None` for the packet's original.
    cur: Option<usize>,
    pending: Vec<Pending>,
    /// Copies made in this batch.
    copies: Vec<Option<PacketBuf>>,
    /// Info-memory snapshots of the pending copies.
    infos: Vec<u8>,
    /// Per packet index that was duplicated: what left, in order.
    emitted: Vec<(u32, u16, Emitted)>,
    /// Packet indices that were duplicated, in order.
    fanned: Vec<u32>,
    pool: Option<PacketPool>,
    /// Added to the packet index the hooks receive: the position in the
    /// batch of the first packet of the current call, when the batch runs
    /// in several calls (computation batching).
    base: u64,
}

impl FanoutState {
    /// Takes copies from `pool` from now on.
    pub fn set_pool(&mut self, pool: &PacketPool) {
        if !self.pool.as_ref().is_some_and(|p| p.same(pool)) {
            self.pool = Some(pool.clone());
        }
    }

    /// Makes room for the fan-out of a batch of `packets` packets (each
    /// duplicated once), so that a run that stays within that allocates
    /// nothing per batch.
    pub fn reserve(&mut self, packets: usize, info_size: usize) {
        self.infos.reserve(packets * info_size);
        self.pending.reserve(packets);
        self.copies.reserve(packets);
        self.emitted.reserve(2 * packets);
        self.fanned.reserve(packets);
    }

    /// The next calls of the code run the packets of the batch from
    /// position `base` on (their index 0 is the batch's `base`).
    pub fn set_base(&mut self, base: usize) {
        self.base = base as u64;
    }

    /// Forgets the batch: pending copies, copies, what left. Call after each batch.
    pub fn clear(&mut self) {
        self.base = 0;
        self.pending.clear();
        self.copies.clear();
        self.infos.clear();
        self.emitted.clear();
        self.fanned.clear();
        self.cur = None;
    }

    /// Indices (in the batch) of the packets that were duplicated, in order.
    pub fn fanned(&self) -> &[u32] {
        &self.fanned
    }

    /// What left the application from duplicated packets, in order:
    /// `(packet index, output port, buffer)`.
    pub fn emitted(&self) -> &[(u32, u16, Emitted)] {
        &self.emitted
    }

    /// The bytes of a copy that left.
    pub fn copy_bytes(&self, slot: usize) -> Option<&[u8]> {
        self.copies.get(slot).and_then(Option::as_ref).map(PacketBuf::bytes)
    }

    /// Moves what left from duplicated packets into `out`, in order (copies
    /// change hands: they return to the pool when `out` lets them go).
    pub fn take_exits(&mut self, out: &mut Vec<FanoutExit>) {
        for &(idx, port, e) in &self.emitted {
            let copy = match e {
                Emitted::Original => None,
                Emitted::Copy(slot) => self.copies.get_mut(slot).and_then(Option::take),
            };
            out.push(FanoutExit { idx, port, copy });
        }
    }

    /// Notes that packet `idx` is being duplicated; its first hook call
    /// starts on the original buffer.
    fn at(&mut self, idx: u64) {
        if self.fanned.last() != Some(&(idx as u32)) {
            self.fanned.push(idx as u32);
            self.cur = None;
        }
    }

    /// A copy of `(data, len)` from the pool; returns its bytes and its slot.
    fn copy_of(&mut self, data: *const u8, len: u64) -> (*mut u8, usize) {
        // SAFETY: the caller's pointer: compiled code passes the current
        // buffer, a live allocation of `len` bytes.
        let bytes = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data, len as usize) } };
        let pool = self
            .pool
            .get_or_insert_with(|| PacketPool::new(PacketPoolConfig { buffers: 256, jumbo_buffers: 2, ..PacketPoolConfig::default() }));
        let mut buf = pool.copy_of(bytes);
        let p = buf.as_mut_ptr();
        self.copies.push(Some(buf));
        (p, self.copies.len() - 1)
    }
}

/// Hook: keeps a pending copy of the current buffer for `route` (`keep`:
/// the buffer itself, for the last destination, or for every destination
/// of an application whose NetPEs never write packet memory), with a
/// snapshot of info memory.
///
/// # Safety
/// `rt` is the [`FanoutState`] of the running batch; `(data, len)` the
/// current buffer; `(info, info_len)` the info memory.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_save(
    rt: *mut FanoutState,
    idx: u64,
    route: u32,
    data: *mut u8,
    len: u64,
    info: *const u8,
    info_len: u64,
    keep: u32,
) {
    // SAFETY: the caller's contract.
    let st = unsafe { &mut *rt };
    let idx = idx + st.base;
    st.at(idx);
    let info_at = st.infos.len();
    if info_len > 0 {
        // SAFETY: `(info, info_len)` is the live info memory.
        st.infos.extend_from_slice(unsafe { std::slice::from_raw_parts(info, info_len as usize) });
    }
    let (data, slot) = if keep != 0 {
        (data, st.cur)
    } else {
        let (d, s) = st.copy_of(data, len);
        (d, Some(s))
    };
    st.pending.push(Pending { route: route as i32, data, len, slot, info_at });
}

/// Hook: a fresh copy of the current buffer, which the code continues on.
///
/// # Safety
/// As [`netvm_rt_fanout_save`].
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_copy(rt: *mut FanoutState, idx: u64, data: *const u8, len: u64) -> *mut u8 {
    // SAFETY: the caller's contract.
    let st = unsafe { &mut *rt };
    let idx = idx + st.base;
    st.at(idx);
    let (d, slot) = st.copy_of(data, len);
    st.cur = Some(slot);
    d
}

/// Hook: the next pending copy of packet `idx`: restores its info memory,
/// writes its buffer (pointer, length) to `out`, returns its route (`-1`: none).
///
/// # Safety
/// As [`netvm_rt_fanout_save`]; `out` points to 16 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_pop(rt: *mut FanoutState, idx: u64, info: *mut u8, info_len: u64, out: *mut u64) -> i32 {
    // SAFETY: the caller's contract.
    let st = unsafe { &mut *rt };
    let idx = idx + st.base;
    if st.fanned.last() != Some(&(idx as u32)) {
        return -1;
    }
    let Some(p) = st.pending.pop() else { return -1 };
    if info_len > 0 {
        let snap = &st.infos[p.info_at..p.info_at + info_len as usize];
        // SAFETY: `info` is the info memory of `info_len` bytes; the snapshot has that size.
        unsafe { std::ptr::copy_nonoverlapping(snap.as_ptr(), info, info_len as usize) };
    }
    st.infos.truncate(p.info_at);
    // SAFETY: `out` has room for a pointer and a length.
    unsafe {
        *out = p.data as u64;
        *out.add(1) = p.len;
    }
    st.cur = p.slot;
    p.route
}

/// Hook: the current buffer of a duplicated packet leaves on `port`.
///
/// # Safety
/// As [`netvm_rt_fanout_save`].
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_emit(rt: *mut FanoutState, idx: u64, port: u32, data: *const u8, len: u64) {
    // SAFETY: the caller's contract.
    let st = unsafe { &mut *rt };
    let idx = idx + st.base;
    st.at(idx);
    let _ = len;
    let _ = data;
    let e = match st.cur {
        None => Emitted::Original,
        Some(slot) => Emitted::Copy(slot),
    };
    st.emitted.push((idx as u32, port as u16, e));
}

/// A fresh fan-out state for a C host, to put in `netvm_app.rt`; free it
/// with [`netvm_rt_fanout_free`].
#[no_mangle]
pub extern "C" fn netvm_rt_fanout_new() -> *mut FanoutState {
    Box::into_raw(Box::default())
}

/// Frees a state of [`netvm_rt_fanout_new`] (null is ignored).
///
/// # Safety
/// `rt` comes from [`netvm_rt_fanout_new`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_free(rt: *mut FanoutState) {
    if !rt.is_null() {
        // SAFETY: the caller's contract: `rt` is a leaked box of ours.
        drop(unsafe { Box::from_raw(rt) });
    }
}

/// Forgets the batch ([`FanoutState::clear`]): the buffers returned by
/// [`netvm_rt_fanout_emitted`] are freed. Call after each `netvm_run`.
///
/// # Safety
/// `rt` comes from [`netvm_rt_fanout_new`].
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_clear(rt: *mut FanoutState) {
    // SAFETY: the caller's contract.
    unsafe { &mut *rt }.clear();
}

/// Number of buffers that left from duplicated packets in the last batch.
///
/// # Safety
/// `rt` comes from [`netvm_rt_fanout_new`].
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_emitted_count(rt: *const FanoutState) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { &*rt }.emitted.len() as u64
}

/// The `k`-th buffer that left from a duplicated packet: its packet index,
/// output port and bytes (`*data` null: the packet's own buffer, in its
/// descriptor). Returns 0, or -1 if there is no such entry.
///
/// # Safety
/// `rt` comes from [`netvm_rt_fanout_new`]; the out pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_emitted(
    rt: *const FanoutState,
    k: u64,
    idx: *mut u32,
    port: *mut u16,
    data: *mut *const u8,
    len: *mut u64,
) -> i32 {
    // SAFETY: the caller's contract.
    let st = unsafe { &*rt };
    let Some((i, p, e)) = usize::try_from(k).ok().and_then(|k| st.emitted.get(k)) else { return -1 };
    let (d, l) = match e {
        Emitted::Original => (std::ptr::null(), 0),
        Emitted::Copy(slot) => st.copy_bytes(*slot).map_or((std::ptr::null(), 0), |b| (b.as_ptr(), b.len() as u64)),
    };
    // SAFETY: the caller's contract: the out pointers are writable.
    unsafe {
        *idx = *i;
        *port = *p;
        *data = d;
        *len = l;
    }
    0
}

/// Whether packet `idx` of the last batch was duplicated (1) or not (0).
/// Its verdict in `netvm_run`'s array is then that of its last copy; what
/// left is in [`netvm_rt_fanout_emitted`].
///
/// # Safety
/// `rt` comes from [`netvm_rt_fanout_new`].
#[no_mangle]
pub unsafe extern "C" fn netvm_rt_fanout_fanned(rt: *const FanoutState, idx: u32) -> i32 {
    // SAFETY: the caller's contract.
    i32::from(unsafe { &*rt }.fanned.binary_search(&idx).is_ok())
}
