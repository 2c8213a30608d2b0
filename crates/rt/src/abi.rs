//! The structures of the C ABI of compiled applications (include/netvm.h):
//! `#[repr(C)]`, read by compiled code at fixed offsets.

use std::ffi::c_void;

pub use netvm_abi::{FaultKind, ABI_VERSION, VERDICT_DROP, VERDICT_FAULT};

/// One packet of a batch, as compiled applications read it (`struct netvm_xb`):
/// defined with the machine model, where the runtime builds it.
pub use netvm_vm::XbDesc;

/// Where an instance keeps its registers (`struct netvm_regfile`).
pub use netvm_vm::RegisterFile;

/// The memories of one NetPE (`struct netvm_node`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NodeMem {
    /// Data memory: exactly `.datasize` bytes.
    pub data: *mut u8,
    /// `.datasize`.
    pub data_len: u64,
    /// Coprocessor instances, opaque to compiled code (passed to the hooks).
    pub copros: *mut c_void,
    /// Number of coprocessor instances.
    pub ncopros: u64,
    /// Their inline register files, `ncopros` of them (null when there are
    /// none), valid for the call: see [`Coprocessor::registers`](netvm_vm::Coprocessor::registers).
    pub regs: *const RegisterFile,
}

/// What compiled applications receive (`struct netvm_app`).
#[repr(C)]
#[derive(Debug)]
pub struct AppCtx {
    /// The budget every handler invocation starts with.
    pub budget: u64,
    /// Info memory: [`AppLayout::info_size`] bytes, zeroed by the code for every packet.
    pub info: *mut u8,
    /// One [`NodeMem`] per NetPE, in application order.
    pub nodes: *const NodeMem,
    /// [`AppLayout::counters`] counters, added to by every batch.
    pub counters: *mut u64,
    /// The host's fan-out state, passed to the fan-out hooks (may be null
    /// if the application has no fan-out).
    pub rt: *mut c_void,
    /// Scratch: non-zero while the current packet has been duplicated.
    pub fanned: u32,
    /// Zero.
    pub reserved: u32,
}

/// The fixed part of `netvm_layout`, the data object an AOT object exports
/// to describe what its host must allocate; `nodes` entries of
/// [`NodeLayout`] follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppLayoutHeader {
    /// [`ABI_VERSION`].
    pub abi_version: u32,
    /// Number of NetPEs (entries of [`AppCtx::nodes`]).
    pub nodes: u32,
    /// Number of counters (entries of [`AppCtx::counters`]).
    pub counters: u32,
    /// Bytes of info memory ([`AppCtx::info`]).
    pub info_size: u32,
    /// Application input ports with a source.
    pub sources: u32,
    /// First per-source counter.
    pub source_base: u32,
    /// Counter of packets on an input port without a source.
    pub no_source: u32,
    /// Fault kinds (counters per NetPE after its ports and `drop`).
    pub fault_kinds: u32,
    /// The application's instruction budget (its manifest's, or the
    /// default), saturated to `u32::MAX`: what to put in [`AppCtx::budget`].
    pub budget: u32,
}

/// One NetPE's entry in `netvm_layout`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLayout {
    /// `.datasize`: bytes of [`NodeMem::data`].
    pub data_size: u32,
    /// Output ports.
    pub out_ports: u32,
    /// First counter of the NetPE.
    pub counter_base: u32,
    /// Coprocessors the NetPE declares.
    pub copros: u32,
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The sizes and offsets include/netvm.h gives (its host asserts the same sizes).
    #[test]
    fn layout_matches_netvm_h() {
        assert_eq!(size_of::<XbDesc>(), 40);
        assert_eq!((offset_of!(XbDesc, caplen), offset_of!(XbDesc, ts_sec), offset_of!(XbDesc, in_port)), (8, 16, 28));
        assert_eq!(offset_of!(XbDesc, seq), 32);
        assert_eq!(size_of::<NodeMem>(), 40);
        assert_eq!(size_of::<RegisterFile>(), 48);
        assert_eq!((offset_of!(RegisterFile, walk_ops), offset_of!(RegisterFile, walk)), (36, 40));
        assert_eq!(size_of::<netvm_vm::Dir24Walk>(), 32);
        use netvm_vm::Dir24Walk as W;
        assert_eq!((offset_of!(W, groups), offset_of!(W, counters), offset_of!(W, default_hop)), (8, 16, 24));
        assert_eq!(offset_of!(W, has_default), 28);
        use netvm_vm::BucketWalk as B;
        assert_eq!(size_of::<B>(), 112);
        assert_eq!((offset_of!(B, entries), offset_of!(B, counters), offset_of!(B, handle_now), offset_of!(B, store_now)), (8, 16, 24, 32));
        assert_eq!((offset_of!(B, seed), offset_of!(B, nbuckets), offset_of!(B, idle_ns), offset_of!(B, a_mask)), (40, 56, 64, 72));
        assert_eq!((offset_of!(B, stride), offset_of!(B, key_size), offset_of!(B, ts_off), offset_of!(B, reach)), (80, 84, 88, 92));
        assert_eq!((offset_of!(B, b_off), offset_of!(B, b_shift), offset_of!(B, value_mask), offset_of!(B, shape)), (96, 100, 104, 108));
        assert_eq!((offset_of!(RegisterFile, output), offset_of!(RegisterFile, inputs), offset_of!(RegisterFile, outputs)), (8, 16, 20));
        assert_eq!((offset_of!(RegisterFile, direct), offset_of!(RegisterFile, ops)), (24, 32));
        assert_eq!(size_of::<netvm_vm::DirectOp>(), 16);
        assert_eq!(size_of::<AppCtx>(), 48);
        assert_eq!((offset_of!(AppCtx, counters), offset_of!(AppCtx, rt), offset_of!(AppCtx, fanned)), (24, 32, 40));
        assert_eq!(size_of::<AppLayoutHeader>(), 36);
        assert_eq!(size_of::<NodeLayout>(), 16);
    }
}
