//! Computation batching (the paper "Compiler Based Optimization For
//! Software Packet Processing", §2.4-2.6 and its Algorithm 1): the
//! pre-lookup stage of an application.
//!
//! The compiler finds the coprocessor operations of the data path whose
//! input registers are set, in the same basic block, from constants and
//! packet bytes ([`find_sites`]: the lookups of a router or a bridge), and
//! compiles `netvm_ahead(descs, n, out, enabled)`, which computes those
//! registers for every packet of a batch before any NetPE runs
//! ([`define_ahead`]). The runtime ([`LinkedApp`](super::LinkedApp)) then
//! hands each lookup's keys to its instance ([`Coprocessor::ahead`]), which
//! prefetches the buckets or first-level entries they will touch, and only
//! then runs the batch through `netvm_run`: key extraction and hashing,
//! prefetch, then lookup and the rest, stage by stage over the batch.
//!
//! Where a site's instance offers its operation as a DIR-24-8 walk
//! ([`netvm_vm::Dir24Walk`], the `lpm` kind's IPv4 lookups), the stage also
//! lists the addresses the walks will take, and the runtime prefetches
//! their entries from the walk's tables itself, a sub-batch ahead
//! ([`Dir24Walk::prefetch_first`](netvm_vm::Dir24Walk::prefetch_first),
//! then [`Dir24Walk::prefetch_second`](netvm_vm::Dir24Walk::prefetch_second)),
//! instead of calling the instance's `ahead`.
//!
//! The stage is advisory, which keeps the semantics: it runs on the packets
//! as they arrive, stores nothing any NetPE can see, and a key it gets
//! wrong (a packet the data path changes first, a branch that never
//! reaches the lookup) only costs a useless prefetch.
//!
//! [`Coprocessor::ahead`]: netvm_vm::Coprocessor::ahead

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, Block, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_frontend::FunctionBuilder;
use netil::{Opcode, Operands};
use netvm_verify::Verified;
use netvm_vm::{WalkForm, WalkKey, WalkKind};

use super::build::off;
use crate::translate::{ctx_flags, I32, I64};

/// Lookup sites the pre-lookup stage computes keys for, at most.
pub const MAX_SITES: usize = 16;
/// Packets one call of `netvm_ahead` takes, at most (the room of its output).
pub const MAX_PACKETS: usize = 256;

/// A value the pre-lookup stage can compute from the packet alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyExpr {
    /// A constant.
    Const(u32),
    /// A big-endian packet load of 1, 2 or 4 bytes at an offset.
    Load(u8, Box<KeyExpr>),
    /// A binary ALU operation (`add`, `sub`, `mul`, `and`, `or`, `xor`, `shl`, `shr`).
    Alu(Opcode, Box<KeyExpr>, Box<KeyExpr>),
}

/// One coprocessor operation of the data path whose input registers the
/// pre-lookup stage computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The NetPE.
    pub node: usize,
    /// Its coprocessor instance.
    pub copro: u8,
    /// The operation.
    pub op: u8,
    /// The input registers computed, one bit each.
    pub regs: u32,
    /// Their values, in ascending register order.
    pub exprs: Vec<KeyExpr>,
    /// Where the site's words start in `netvm_ahead`'s output: per packet
    /// `1 + regs.count_ones()` words (valid flag, registers), for
    /// [`MAX_PACKETS`] packets.
    pub words_at: usize,
    /// Where the operation is a DIR-24-8 walk of its kind whose key the
    /// stage computes: the stage also lists the walks' addresses.
    pub dir24: Option<Dir24Stage>,
}

/// Where the pre-lookup stage finds, and lists, the addresses of a site's DIR-24-8 walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dir24Stage {
    /// Which of the site's `exprs` holds the key (the address itself), or
    /// the packet offset of the big-endian address (`in_packet`).
    pub expr: usize,
    /// Whether the key is in the packet at that offset.
    pub in_packet: bool,
    /// Where the walk's addresses start in `netvm_ahead`'s output: their
    /// number, then the addresses (at most [`MAX_PACKETS`]), in packet
    /// order, of the packets whose address lies within the captured bytes.
    pub walk_at: usize,
}

impl Site {
    /// Words per packet: the valid flag and the registers.
    pub fn stride(&self) -> usize {
        1 + self.regs.count_ones() as usize
    }
}

/// The words `netvm_ahead` writes for `sites`: the room its output needs.
pub fn output_words(sites: &[Site]) -> usize {
    let records = sites.last().map_or(0, |s| s.words_at + s.stride() * MAX_PACKETS);
    let walks = sites.iter().filter_map(|s| s.dir24).map(|d| d.walk_at + 1 + MAX_PACKETS).max();
    walks.unwrap_or(0).max(records)
}

/// What a basic block has computed so far, symbolically.
#[derive(Default)]
struct Sym {
    stack: Vec<Option<KeyExpr>>,
    locals: Vec<Option<KeyExpr>>,
    /// Per coprocessor: its input registers 0..32 set in this block.
    regs: Vec<[Option<KeyExpr>; 32]>,
}

impl Sym {
    fn pop(&mut self) -> Option<KeyExpr> {
        self.stack.pop().flatten()
    }
}

/// The operations of every NetPE's `.push` whose input registers are set
/// in the same basic block from constants and packet loads (at most
/// [`MAX_SITES`], in NetPE order).
pub fn find_sites(modules: &[Verified]) -> Vec<Site> {
    let mut sites: Vec<Site> = Vec::new();
    for (node, v) in modules.iter().enumerate() {
        let seg = &v.push;
        let ncopros = v.module.copros.len();
        let mut starts = std::collections::BTreeSet::from([0usize]);
        for (i, insn) in seg.insns.iter().enumerate() {
            if !seg.is_reachable(i) {
                continue;
            }
            for t in insn.targets() {
                if let Some(&to) = u32::try_from(t).ok().and_then(|t| seg.index_of.get(&t)) {
                    starts.insert(to);
                }
            }
            if insn.op.ends_block() || insn.op.is_jump() {
                starts.insert(i + 1);
            }
        }
        let fresh = || Sym { stack: Vec::new(), locals: vec![None; usize::from(v.module.locals)], regs: vec![Default::default(); ncopros] };
        let mut sym = fresh();
        for (i, insn) in seg.insns.iter().enumerate() {
            if starts.contains(&i) {
                sym = fresh();
            }
            if !seg.is_reachable(i) {
                continue;
            }
            step(&mut sym, insn, |copro, op, regs| {
                let known: Vec<(u8, KeyExpr)> = regs.iter().enumerate().filter_map(|(r, e)| e.clone().map(|e| (r as u8, e))).collect();
                if known.is_empty() || sites.len() >= MAX_SITES {
                    return;
                }
                let words_at = sites.last().map_or(0, |s| s.words_at + s.stride() * MAX_PACKETS);
                let regs = known.iter().fold(0u32, |m, (r, _)| m | 1 << r);
                let exprs = known.into_iter().map(|(_, e)| e).collect();
                sites.push(Site { node, copro, op, regs, exprs, words_at, dir24: None });
            });
        }
    }
    // The DIR-24-8 walks, their address lists after every record.
    let mut walk_at = sites.last().map_or(0, |s| s.words_at + s.stride() * MAX_PACKETS);
    for s in &mut sites {
        let kind = modules[s.node].module.copros.get(usize::from(s.copro)).and_then(|c| WalkKind::of(&c.kind));
        let Some(kind) = kind.filter(|k| k.form == WalkForm::Dir24) else { continue };
        let (reg, in_packet) = match kind.key(s.op) {
            WalkKey::Register(r) => (r, false),
            WalkKey::Packet(r) => (r, true),
            WalkKey::None => continue,
        };
        if reg >= 32 || s.regs & (1 << reg) == 0 {
            continue;
        }
        let expr = (s.regs & ((1u32 << reg) - 1)).count_ones() as usize;
        s.dir24 = Some(Dir24Stage { expr, in_packet, walk_at });
        walk_at += 1 + MAX_PACKETS;
    }
    sites
}

/// Executes one instruction symbolically; calls `site` at a `copro.invoke`.
fn step(sym: &mut Sym, insn: &netil::Insn, mut site: impl FnMut(u8, u8, &[Option<KeyExpr>; 32])) {
    use Opcode::*;
    let op = insn.op;
    match (&insn.operands, op) {
        (Operands::Imm(k), Push) => sym.stack.push(Some(KeyExpr::Const(*k))),
        (_, Dup) => {
            let v = sym.pop();
            sym.stack.push(v.clone());
            sym.stack.push(v);
        }
        (_, Swap) => {
            let (b, a) = (sym.pop(), sym.pop());
            sym.stack.push(b);
            sym.stack.push(a);
        }
        (_, Over) => {
            let (b, a) = (sym.pop(), sym.pop());
            sym.stack.push(a.clone());
            sym.stack.push(b);
            sym.stack.push(a);
        }
        (_, Upload8 | Upload16 | Upload32) => {
            let w = match op {
                Upload8 => 1,
                Upload16 => 2,
                _ => 4,
            };
            let off = sym.pop();
            sym.stack.push(off.map(|o| KeyExpr::Load(w, Box::new(o))));
        }
        (_, Add | Sub | Mul | And | Or | Xor | Shl | Shr) => {
            let (b, a) = (sym.pop(), sym.pop());
            sym.stack.push(a.zip(b).map(|(a, b)| KeyExpr::Alu(op, Box::new(a), Box::new(b))));
        }
        (Operands::Local(l), Locstore) => {
            let v = sym.pop();
            if let Some(slot) = sym.locals.get_mut(usize::from(*l)) {
                *slot = v;
            }
        }
        (Operands::Local(l), Locload) => {
            let v = sym.locals.get(usize::from(*l)).cloned().flatten();
            sym.stack.push(v);
        }
        (Operands::CoproReg { copro, reg }, CoproIn) => {
            let v = sym.pop();
            if let Some(r) = sym.regs.get_mut(usize::from(*copro)).and_then(|r| r.get_mut(usize::from(*reg))) {
                *r = v;
            }
        }
        (Operands::CoproOp { copro, op }, CoproInvoke) => {
            if let Some(regs) = sym.regs.get(usize::from(*copro)) {
                site(*copro, *op, regs);
            }
        }
        _ => {
            for _ in 0..op.pops() {
                sym.pop();
            }
            for _ in 0..op.pushes() {
                sym.stack.push(None);
            }
        }
    }
}

/// The signature of `netvm_ahead(descs, n, out, enabled, walk)`.
pub fn ahead_signature(ptr: types::Type, call_conv: cranelift_codegen::isa::CallConv) -> Signature {
    let mut s = Signature::new(call_conv);
    s.params.push(AbiParam::new(ptr));
    s.params.push(AbiParam::new(I32));
    s.params.push(AbiParam::new(ptr));
    s.params.push(AbiParam::new(I64));
    s.params.push(AbiParam::new(I64));
    s
}

/// Fills `netvm_ahead`'s body: for packets `0..n` of `descs` and every
/// site whose bit is set in `enabled`, the site's words at
/// `out + words_at + packet * stride` (32-bit words): 1 and the registers,
/// or 0 where a packet load would read past the captured bytes. One loop
/// over the packets per site, entered only if the site is enabled: the
/// sites no instance takes (a drop counter's `invoke`) cost nothing per
/// packet.
///
/// A site with a [`Dir24Stage`] whose bit is also set in `walk` gets,
/// instead of its records, the list of its walks' addresses at
/// `out + walk_at`: their number, then the addresses (where the bit is
/// clear, its records and an empty list). Which of the two loops runs is
/// decided once per call, and the listing loop computes only the key.
pub fn define_ahead(b: &mut FunctionBuilder, ptr: types::Type, sites: &[Site]) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let p = b.block_params(entry).to_vec();
    let (descs, n, out, enabled, walk) = (p[0], p[1], p[2], p[3], p[4]);
    let n = b.ins().uextend(I64, n);
    let stage = Stage { ptr, descs, n, out };
    for (k, s) in sites.iter().enumerate() {
        let (pre, records, next) = (b.create_block(), b.create_block(), b.create_block());
        let on = b.ins().band_imm_u(enabled, 1i64 << k);
        b.ins().brif(on, pre, &[], next, &[]);

        // Whether the site is walked is tested once, not per packet: one
        // loop lists the walks' addresses, the other writes the records (a
        // walked site's records go unread: the engine prefetches from the
        // walk's tables).
        b.switch_to_block(pre);
        match s.dir24 {
            Some(d24) => {
                let list = b.create_block();
                let walking = b.ins().band_imm_u(walk, 1i64 << k);
                b.ins().brif(walking, list, &[], records, &[]);
                b.switch_to_block(list);
                stage.packet_loop(b, PerPacket::List(s, d24), next);
            }
            None => {
                b.ins().jump(records, &[]);
            }
        }
        b.switch_to_block(records);
        stage.packet_loop(b, PerPacket::Record(s), next);
        b.switch_to_block(next);
    }
    b.ins().return_(&[]);
    b.seal_all_blocks();
}

/// What a loop of `netvm_ahead` writes for each packet of a site.
#[derive(Clone, Copy)]
enum PerPacket<'a> {
    /// Its record: 1 and the registers, or 0 where a packet load would
    /// read past the captured bytes.
    Record(&'a Site),
    /// The address its walk will take, appended to the site's list unless
    /// it lies past the captured bytes.
    List(&'a Site, Dir24Stage),
}

/// `netvm_ahead`'s parameters, for its loops.
struct Stage {
    ptr: types::Type,
    descs: Value,
    /// The number of packets, as an `i64`.
    n: Value,
    out: Value,
}

impl Stage {
    /// Emits, in the current block, the loop over the packets that writes
    /// `what` for each, then jumps to `done`.
    fn packet_loop(&self, b: &mut FunctionBuilder, what: PerPacket, done: Block) {
        let out = self.out;
        // head(i, listed): packet i, addresses listed so far.
        let (head, body, after) = (b.create_block(), b.create_block(), b.create_block());
        b.append_block_param(head, I64);
        b.append_block_param(head, I64);
        let zero = b.ins().iconst(I64, 0);
        b.ins().jump(head, &[zero.into(), zero.into()]);

        b.switch_to_block(head);
        let hp = b.block_params(head).to_vec();
        let (i, listed) = (hp[0], hp[1]);
        let more = b.ins().icmp(IntCC::UnsignedLessThan, i, self.n);
        b.ins().brif(more, body, &[], after, &[]);

        b.switch_to_block(body);
        let (invalid, step) = (b.create_block(), b.create_block());
        let listed_now = b.append_block_param(step, I64);
        let d = b.ins().imul_imm_s(i, off::XB_SIZE);
        let d = b.ins().iadd(self.descs, d);
        let data = b.ins().load(self.ptr, ctx_flags(), d, off::XB_DATA);
        let caplen = b.ins().load(I32, ctx_flags(), d, off::XB_CAPLEN);
        let caplen = b.ins().uextend(I64, caplen);
        let pkt = Pkt { data, caplen, invalid };
        match what {
            PerPacket::Record(s) => {
                let vals: Vec<Value> = s.exprs.iter().map(|e| eval(b, &pkt, e)).collect();
                let rec = rec_of(b, i, out, s);
                let one = b.ins().iconst(I32, 1);
                b.ins().store(MemFlagsData::trusted(), one, rec, 0);
                for (j, v) in vals.iter().enumerate() {
                    b.ins().store(MemFlagsData::trusted(), *v, rec, 4 * (1 + j as i32));
                }
                b.ins().jump(step, &[listed.into()]);
            }
            PerPacket::List(s, d24) => {
                let key = eval(b, &pkt, &s.exprs[d24.expr]);
                list_address(b, &pkt, d24, key, out, listed, step);
            }
        }

        b.switch_to_block(invalid);
        if let PerPacket::Record(s) = what {
            let z = b.ins().iconst(I32, 0);
            let at = rec_of(b, i, out, s);
            b.ins().store(MemFlagsData::trusted(), z, at, 0);
        }
        b.ins().jump(step, &[listed.into()]);

        b.switch_to_block(step);
        let i1 = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(head, &[i1.into(), listed_now.into()]);

        // A site with a walk lists its addresses, or none where it is not walked.
        b.switch_to_block(after);
        let (PerPacket::Record(s) | PerPacket::List(s, _)) = what;
        if let Some(d24) = s.dir24 {
            let count = b.ins().ireduce(I32, listed);
            b.ins().store(MemFlagsData::trusted(), count, out, 4 * d24.walk_at as i32);
        }
        b.ins().jump(done, &[]);
    }
}

/// In a packet's loop body, its key computed as `key`, of a site walked
/// in this call: the walk's address (read from the packet where the key is
/// its offset) appended to the site's list (`listed` so far), unless it
/// lies past the captured bytes; then a jump to `step(listed now)`.
fn list_address(b: &mut FunctionBuilder, pkt: &Pkt, d24: Dir24Stage, key: Value, out: Value, listed: Value, step: Block) {
    let append = b.create_block();
    let addr = b.append_block_param(append, I32);
    if d24.in_packet {
        let o = b.ins().uextend(I64, key);
        let end = b.ins().iadd_imm_s(o, 4);
        let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, pkt.caplen);
        let read = b.create_block();
        b.ins().brif(fits, read, &[], step, &[listed.into()]);
        b.switch_to_block(read);
        let at = b.ins().iadd(pkt.data, o);
        let raw = b.ins().load(I32, MemFlagsData::new().with_notrap(), at, 0);
        let a = b.ins().bswap(raw);
        b.ins().jump(append, &[a.into()]);
    } else {
        b.ins().jump(append, &[key.into()]);
    }
    b.switch_to_block(append);
    // out[walk_at + 1 + listed] = addr
    let x = b.ins().ishl_imm_u(listed, 2);
    let x = b.ins().iadd(out, x);
    b.ins().store(MemFlagsData::trusted(), addr, x, 4 * (d24.walk_at as i32 + 1));
    let listed1 = b.ins().iadd_imm_s(listed, 1);
    b.ins().jump(step, &[listed1.into()]);
}

/// The address of packet `i`'s record of site `s` in `out`.
fn rec_of(b: &mut FunctionBuilder, i: Value, out: Value, s: &Site) -> Value {
    let rec = b.ins().imul_imm_s(i, 4 * s.stride() as i64);
    let rec = b.ins().iadd_imm_s(rec, 4 * s.words_at as i64);
    b.ins().iadd(out, rec)
}

/// The current packet, for [`eval`].
struct Pkt {
    data: Value,
    caplen: Value,
    /// Where a load past the captured bytes goes.
    invalid: Block,
}

/// Code computing `e` (an `i32`) in the current block; a packet load out
/// of bounds branches to `pkt.invalid`.
fn eval(b: &mut FunctionBuilder, pkt: &Pkt, e: &KeyExpr) -> Value {
    match e {
        KeyExpr::Const(k) => b.ins().iconst(I32, i64::from(*k)),
        KeyExpr::Load(w, o) => {
            let o = eval(b, pkt, o);
            let o = b.ins().uextend(I64, o);
            let end = b.ins().iadd_imm_s(o, i64::from(*w));
            let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, pkt.caplen);
            let ok = b.create_block();
            b.ins().brif(fits, ok, &[], pkt.invalid, &[]);
            b.switch_to_block(ok);
            let addr = b.ins().iadd(pkt.data, o);
            let flags = MemFlagsData::new().with_notrap();
            match w {
                1 => b.ins().uload8(I32, flags, addr, 0),
                2 => {
                    let v = b.ins().load(types::I16, flags, addr, 0);
                    let v = b.ins().bswap(v);
                    b.ins().uextend(I32, v)
                }
                _ => {
                    let v = b.ins().load(I32, flags, addr, 0);
                    b.ins().bswap(v)
                }
            }
        }
        KeyExpr::Alu(op, x, y) => {
            let x = eval(b, pkt, x);
            let y = eval(b, pkt, y);
            match op {
                Opcode::Add => b.ins().iadd(x, y),
                Opcode::Sub => b.ins().isub(x, y),
                Opcode::Mul => b.ins().imul(x, y),
                Opcode::And => b.ins().band(x, y),
                Opcode::Or => b.ins().bor(x, y),
                Opcode::Xor => b.ins().bxor(x, y),
                Opcode::Shl => b.ins().ishl(x, y),
                _ => b.ins().ushr(x, y),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(src: &str) -> Verified {
        netvm_verify::verify(&netil::assemble(src).expect("assembles").module).expect("verifies")
    }

    fn load(w: u8, off: u32) -> KeyExpr {
        KeyExpr::Load(w, Box::new(KeyExpr::Const(off)))
    }

    #[test]
    fn the_routers_and_the_bridges_lookups_are_found() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
        let read = |p: &str| verified(&std::fs::read_to_string(format!("{root}/{p}")).expect("example"));
        let sites = find_sites(&[read("ipv4-router/ttl.nil"), read("ipv4-router/lookup.nil")]);
        // lpm lookup_pkt at offset 30 (instance 0, op 3); the drop counters' invokes are sites too.
        // Its DIR-24-8 walk's addresses come after every site's records.
        let walk_at = sites.last().map(|s| s.words_at + s.stride() * MAX_PACKETS).expect("sites");
        let dir24 = Some(Dir24Stage { expr: 0, in_packet: true, walk_at });
        assert_eq!(sites[0], Site { node: 1, copro: 0, op: 3, regs: 1 << 8, exprs: vec![KeyExpr::Const(30)], words_at: 0, dir24 });
        assert!(sites[1..].iter().all(|s| s.dir24.is_none()));
        assert_eq!(output_words(&sites), walk_at + 1 + MAX_PACKETS);
        assert!(sites.iter().all(|s| s.node == 1));
        let sites = find_sites(&[read("l2-bridge/bridge.nil")]);
        let fib: Vec<_> = sites.iter().filter(|s| s.copro == 0).map(|s| (s.op, s.regs, s.exprs.clone())).collect();
        // insert_pkt (key at 6, value in4 = the input port: not known) and lookup_pkt (key at 0).
        assert_eq!(fib, vec![(4, 1 << 8, vec![KeyExpr::Const(6)]), (3, 1 << 8, vec![KeyExpr::Const(0)])]);
        // Each site's words follow the previous one's.
        for w in sites.windows(2) {
            assert_eq!(w[1].words_at, w[0].words_at + w[0].stride() * MAX_PACKETS);
        }
    }

    #[test]
    fn keys_from_packet_loads_and_arithmetic_are_followed_through_the_stack_and_locals() {
        let v = verified(
            ".copro t table\n.locals 1\n.ports 1\nsegment .push\n    pop\n    push 14\n    upload.8\n    push 15\n    and\n    push 2\n    shl\n    locstore 0\n    push 26\n    upload.32\n    copro.in t, 0\n    locload 0\n    dup\n    copro.in t, 1\n    pop\n    copro.invoke t, 0\n    ret 0\nends\n",
        );
        let sites = find_sites(&[v]);
        assert_eq!(sites.len(), 1);
        let ihl4 = KeyExpr::Alu(
            Opcode::Shl,
            Box::new(KeyExpr::Alu(Opcode::And, Box::new(load(1, 14)), Box::new(KeyExpr::Const(15)))),
            Box::new(KeyExpr::Const(2)),
        );
        assert_eq!((sites[0].regs, sites[0].exprs.clone()), (0b11, vec![load(4, 26), ihl4]));
    }

    #[test]
    fn registers_set_in_another_block_or_from_other_memories_are_not_keys() {
        // in0 comes from data memory; in1 was set before a branch: neither is known at the invoke.
        let v = verified(
            ".copro t table\n.datasize 4\n.ports 1\nsegment .push\n    pop\n    push 0\n    copro.in t, 1\n    push 0\n    upload.8\n    jz next\nnext:\n    push 0\n    dload.32\n    copro.in t, 0\n    copro.invoke t, 0\n    ret 0\nends\n",
        );
        assert!(find_sites(&[v]).is_empty());
    }
}
