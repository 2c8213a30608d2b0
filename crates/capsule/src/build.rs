//! Building capsules from NetIL text (what `netvm capsule build` does).
//!
//! The listing is an ordinary NetIL module with one `.push` segment: its
//! code is the capsule's code. The ingress hook starts at the label
//! `ingress` (else at the start), the egress hook at `egress` (else where
//! ingress does). `.infosize N` sizes the scratchpad (at most 256 bytes);
//! `.copro NAME ess` and `.copro NAME env`, in that order, name the two
//! coprocessors capsule code may use. Both entry points are checked by the
//! capsule verifier before a byte is written, so a capsule that builds is
//! one a node accepts (given enough bytes for its cost).

use netil::SegmentKind;

use crate::profile::{CapsuleCode, CostModel, Rejected, Verifier, LOCALS};
use crate::wire::{encode_capsule, Dialect, Header, FLAG_ADMIN, FLAG_SNAP, MAX_CODE, MAX_SCRATCH};

/// A capsule built from a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    /// The header (hops 0 and no flags but the dialect's: the caller sets them).
    pub header: Header,
    /// The code.
    pub code: Vec<u8>,
    /// The static cost of the ingress and the egress hook under the default weights.
    pub cost: (u64, u64),
}

impl Built {
    /// The capsule part of a datagram, with `scratch` (zero-padded or cut to
    /// the scratchpad's size) and `payload` after it.
    pub fn encode(&self, header: &Header, scratch: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut pad = vec![0u8; usize::from(header.scratch_len)];
        let n = scratch.len().min(pad.len());
        pad[..n].copy_from_slice(&scratch[..n]);
        encode_capsule(header, &self.code, &pad, payload)
    }
}

/// Assembles `src` into a capsule of `dialect` (`None`: WASP unless the
/// code jumps backward); `admin` sets the admin flag.
pub fn build(src: &str, dialect: Option<Dialect>, admin: bool) -> Result<Built, String> {
    let asm = netil::assemble(src).map_err(|e| e.to_string())?;
    let m = &asm.module;
    if m.init.is_some() {
        return Err("a capsule has no `.init` segment".into());
    }
    let code = m.push.clone().ok_or("no `.push` segment: the capsule's code")?;
    if code.is_empty() || code.len() > MAX_CODE {
        return Err(format!("{} bytes of code (1 to {MAX_CODE})", code.len()));
    }
    if m.data_size != 0 {
        return Err("capsule code has no data memory (`.datasize`)".into());
    }
    if m.info_size as usize > MAX_SCRATCH {
        return Err(format!("a scratchpad (`.infosize`) of {} bytes: at most {MAX_SCRATCH}", m.info_size));
    }
    if m.locals > LOCALS {
        return Err(format!("{} locals: at most {LOCALS}", m.locals));
    }
    for (i, c) in m.copros.iter().enumerate() {
        let want = ["ess", "env"].get(i).copied();
        if want != Some(c.kind.as_str()) {
            return Err(format!("coprocessor {i} is `{}`: capsules have `ess` (0) and `env` (1), in that order", c.kind));
        }
    }
    let label = |n: &str| asm.source_map.label(SegmentKind::Push, n);
    let ingress = label("ingress").unwrap_or(0);
    let egress = label("egress").unwrap_or(ingress);
    let mut v = Verifier::default();
    let costs = CostModel::default();
    let mut out = CapsuleCode::default();
    let check = |v: &mut Verifier, out: &mut CapsuleCode, d: Dialect, entry: u32| {
        v.verify(&code, entry as u16, d, &costs, out).map(|()| out.static_cost)
    };
    let dialect = match dialect {
        Some(d) => d,
        None => match (check(&mut v, &mut out, Dialect::Wasp, ingress), check(&mut v, &mut out, Dialect::Wasp, egress)) {
            (Err(Rejected::BackwardJump), _) | (_, Err(Rejected::BackwardJump)) => Dialect::Snap,
            _ => Dialect::Wasp,
        },
    };
    let hook = |name: &str, entry: u32| {
        let mut v = Verifier::default();
        let mut out = CapsuleCode::default();
        check(&mut v, &mut out, dialect, entry)
            .map_err(|r| format!("the {name} hook (offset {entry}) is outside the capsule profile: {}", r.name()))
    };
    let cost = (hook("ingress", ingress)?, hook("egress", egress)?);
    let mut flags = if dialect == Dialect::Snap { FLAG_SNAP } else { 0 };
    if admin {
        flags |= FLAG_ADMIN;
    }
    let header = Header {
        flags,
        ingress: ingress as u16,
        egress: egress as u16,
        code_len: code.len() as u16,
        scratch_len: m.info_size as u16,
        hops: 0,
        cost_limit: 0,
    };
    Ok(Built { header, code, cost })
}
