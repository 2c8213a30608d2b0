//! The execution context of one compiled handler: what the JIT's code for
//! a single NetPE and the baseline compiler's code read of the machine,
//! at fixed offsets, and write back (the budget left).

use std::mem::{offset_of, MaybeUninit};

use netvm_vm::{Coprocessor, PeState, RegisterFile, XbView};

/// The execution context of one invocation of a single compiled handler
/// (`#[repr(C)]`: compiled code reads its fields at fixed offsets): what
/// the JIT's per-NetPE code and the baseline compiler's code are given.
#[repr(C)]
#[derive(Debug)]
pub struct HandlerCtx {
    /// Packet memory.
    pub pkt: *mut u8,
    /// Captured length of the packet.
    pub pkt_len: u64,
    /// Info memory.
    pub info: *mut u8,
    /// Accessible info memory: min(.infosize, buffer length).
    pub info_len: u64,
    /// Data memory.
    pub data: *mut u8,
    /// Data memory length.
    pub data_len: u64,
    /// Budget the invocation starts with.
    pub budget: u64,
    /// Coprocessor instances (`*mut Box<dyn Coprocessor>`).
    pub copros: *mut Box<dyn Coprocessor>,
    /// Number of coprocessor instances.
    pub ncopros: u64,
    /// The instances' inline register files (see
    /// [`Coprocessor::registers`](netvm_vm::Coprocessor::registers)), or null.
    pub regs: *const RegisterFile,
    /// Number of register files at `regs`: `ncopros`, or 0, and then every
    /// register access calls the instance.
    pub nregs: u64,
    /// Timestamp seconds.
    pub ts_sec: u64,
    /// Wire length of the packet.
    pub wire_len: u32,
    /// NetPE input port.
    pub in_port: u32,
    /// Timestamp nanoseconds.
    pub ts_nsec: u32,
    /// The packet's sequence number in the run.
    pub seq: u64,
    /// Written by the code on return: the budget left (`budget` unless the
    /// handler has backward edges). Never read by compiled code.
    pub budget_left: u64,
}

/// Byte offsets of the fields compiled code reads.
pub mod offsets {
    use super::*;
    /// `pkt`
    pub const PKT: i32 = offset_of!(HandlerCtx, pkt) as i32;
    /// `pkt_len`
    pub const PKT_LEN: i32 = offset_of!(HandlerCtx, pkt_len) as i32;
    /// `info`
    pub const INFO: i32 = offset_of!(HandlerCtx, info) as i32;
    /// `info_len`
    pub const INFO_LEN: i32 = offset_of!(HandlerCtx, info_len) as i32;
    /// `data`
    pub const DATA: i32 = offset_of!(HandlerCtx, data) as i32;
    /// `data_len`
    pub const DATA_LEN: i32 = offset_of!(HandlerCtx, data_len) as i32;
    /// `budget`
    pub const BUDGET: i32 = offset_of!(HandlerCtx, budget) as i32;
    /// `copros`
    pub const COPROS: i32 = offset_of!(HandlerCtx, copros) as i32;
    /// `ncopros`
    pub const NCOPROS: i32 = offset_of!(HandlerCtx, ncopros) as i32;
    /// `regs`
    pub const REGS: i32 = offset_of!(HandlerCtx, regs) as i32;
    /// `nregs`
    pub const NREGS: i32 = offset_of!(HandlerCtx, nregs) as i32;
    /// `ts_sec`
    pub const TS_SEC: i32 = offset_of!(HandlerCtx, ts_sec) as i32;
    /// `wire_len`
    pub const WIRE_LEN: i32 = offset_of!(HandlerCtx, wire_len) as i32;
    /// `in_port`
    pub const IN_PORT: i32 = offset_of!(HandlerCtx, in_port) as i32;
    /// `ts_nsec`
    pub const TS_NSEC: i32 = offset_of!(HandlerCtx, ts_nsec) as i32;
    /// `seq`
    pub const SEQ: i32 = offset_of!(HandlerCtx, seq) as i32;
    /// `budget_left`
    pub const BUDGET_LEFT: i32 = offset_of!(HandlerCtx, budget_left) as i32;
}

impl HandlerCtx {
    /// The context of one call on `state` and `xb`.
    #[inline]
    pub fn new(state: &mut PeState, xb: &mut XbView<'_>, in_port: u16, info_size: usize, budget: u64) -> HandlerCtx {
        let info_len = info_size.min(xb.info.len());
        HandlerCtx {
            pkt: xb.packet.as_mut_ptr(),
            pkt_len: xb.packet.len() as u64,
            info: xb.info.as_mut_ptr(),
            info_len: info_len as u64,
            data: state.data.as_mut_ptr(),
            data_len: state.data.len() as u64,
            budget,
            copros: state.copros.as_mut_ptr(),
            ncopros: state.copros.len() as u64,
            regs: std::ptr::null(),
            nregs: 0,
            ts_sec: xb.ts.sec,
            wire_len: xb.wire_len,
            in_port: u32::from(in_port),
            ts_nsec: xb.ts.nsec,
            seq: xb.seq,
            budget_left: budget,
        }
    }
}

/// Instances up to which a handler's context passes their inline register
/// files ([`HandlerCtx::with_registers`]).
pub const MAX_FILES: usize = 8;

impl HandlerCtx {
    /// [`HandlerCtx::new`] with the inline register files
    /// ([`Coprocessor::registers`], asked now) of the instances whose bit
    /// is set in `used` (the others' are [`RegisterFile::NONE`]), kept in
    /// `files`, when the NetPE has at most [`MAX_FILES`] instances; more,
    /// and every register access and operation goes through a call. Only
    /// the instances' files are written: nothing is spent on the rest.
    #[inline]
    pub fn with_registers(
        state: &mut PeState,
        xb: &mut XbView<'_>,
        in_port: u16,
        info_size: usize,
        budget: u64,
        files: &mut [MaybeUninit<RegisterFile>; MAX_FILES],
        used: u64,
    ) -> HandlerCtx {
        let n = state.copros.len();
        let inline = n <= MAX_FILES && used != 0;
        if inline {
            for (i, (f, c)) in files.iter_mut().zip(state.copros.iter_mut()).enumerate() {
                f.write(if used & (1 << i) != 0 { c.registers() } else { RegisterFile::NONE });
            }
        }
        let mut ctx = HandlerCtx::new(state, xb, in_port, info_size, budget);
        if inline {
            // The first `n` files are written above; compiled code reads no other.
            ctx.regs = files.as_ptr().cast::<RegisterFile>();
            ctx.nregs = n as u64;
        }
        ctx
    }
}
