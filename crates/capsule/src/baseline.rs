//! Capsule code through the baseline compiler (`netvm-baseline`,
//! docs/capsules.md §4): the code's depths from its entry, and the capsule
//! weights on the segment, so that a taken backward edge pays what the
//! capsule verifier charged (docs/capsules.md §2.3).
//!
//! The capsule verifier has already checked the code (one fixed depth per
//! instruction, targets on instructions, the profile's instructions only),
//! so this pass only records, per instruction from the entry, its depth and
//! its weight, as the NetIL verifier's `SegmentInfo` does for a module.

use std::collections::HashMap;
use std::sync::Arc;

use netil::insn::decode_one;
use netil::Operands;
use netvm_baseline::{BaselineCode, Shape};
use netvm_verify::{SegmentInfo, SegmentKind};

use crate::profile::CostModel;

/// The segment of verified capsule code from `entry`, with its weights.
fn segment(code: &[u8], entry: u16, costs: &CostModel) -> Result<SegmentInfo, String> {
    let body = code.get(usize::from(entry)..).ok_or("entry point past the code")?;
    let (mut insns, mut depth, mut weights) = (Vec::new(), Vec::new(), Vec::new());
    let mut at: HashMap<u32, u16> = HashMap::new();
    let mut cur = Some(0u16);
    let mut pc = 0u32;
    while (pc as usize) < body.len() {
        let insn = decode_one(body, pc).map_err(|e| e.to_string())?;
        if let Some(&d) = at.get(&pc) {
            cur = Some(d);
        }
        let here = cur;
        let w = match (here, &insn.operands) {
            (None, _) => 0,
            (Some(_), Operands::CoproOp { copro, .. }) => costs.invoke.get(usize::from(*copro)).copied().unwrap_or(u32::MAX),
            (Some(_), _) => costs.weights[insn.op as usize],
        };
        if let Some(d) = here {
            let after = (u32::from(d) - insn.op.pops().min(u32::from(d)) + insn.op.pushes()) as u16;
            if let Operands::Target(t) = insn.operands {
                at.entry(t as u32).or_insert(after);
            }
            cur = (!insn.op.ends_block()).then_some(after);
        }
        pc = insn.next();
        insns.push(insn);
        depth.push(here);
        weights.push(w);
    }
    let index_of = insns.iter().enumerate().map(|(i, x)| (x.offset, i)).collect();
    Ok(SegmentInfo { kind: SegmentKind::Push, insns, depth, index_of, weights: Some(weights) })
}

/// Compiles verified capsule code from `entry` with the weights of `costs`.
pub fn compile(code: &[u8], entry: u16, costs: &CostModel) -> Result<Arc<BaselineCode>, String> {
    let seg = segment(code, entry, costs)?;
    let handler = netvm_baseline::compile_segment(&seg, Shape { out_ports: 2 })?;
    Ok(Arc::new(BaselineCode::from_push(handler)))
}
