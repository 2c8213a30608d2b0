//! Run-time support of compiled netvm code, without a code generator.
//!
//! Compiled applications (the JIT's linked code and the relocatable
//! objects of `netvm compile -o`) share one C ABI, declared in
//! include/netvm.h: the structures they read ([`abi`]), the helpers they
//! import for the instructions not worth inlining ([`helpers`]: region
//! functions and coprocessors), and the hooks through which the host keeps
//! the pending copies of a duplicated exchange buffer ([`fanout`]). The
//! code of a single NetPE (the JIT's per-NetPE code, the baseline
//! compiler's) reads one context ([`handler`]).
//!
//! This crate builds as an rlib (for the JIT) and as `libnetvm_rt.a`, the
//! static library a C program links next to an AOT object.

pub mod abi;
pub mod fanout;
pub mod handler;
pub mod helpers;

pub use abi::{AppCtx, AppLayoutHeader, NodeLayout, NodeMem, XbDesc, ABI_VERSION};
pub use fanout::{Emitted, FanoutState};
pub use handler::HandlerCtx;
