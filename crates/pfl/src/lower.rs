//! From the syntax tree to a predicate, with the protocol database: where
//! each protocol's header is, how its presence is tested, what `host`,
//! `net`, `port`, `proto`, `broadcast`… mean for it.
//!
//! Primitives are lowered left to right, as libpcap generates them, because
//! `vlan` and `mpls` change the offsets of every primitive after them.

use crate::db::{Link, Protocol, ProtocolDb};
use crate::ir::{Offset, Pred, Val};
use crate::lexer::tokenize;
use crate::parser::{Arith, BinOp, Dir, Expr, Id, Kind, Parser, RelOp, Span, Special};
use crate::FilterError;

/// The link-layer state that shims change.
#[derive(Debug, Clone)]
struct LinkState {
    /// Offset of the type field.
    type_off: u32,
    /// Offset of the link payload.
    pl_off: u32,
    /// The opaque shim (mpls) on top of the stack, and the offset of its last entry.
    opaque: Option<(String, u32)>,
}

/// The lowering context.
pub struct Lower<'a> {
    db: &'a ProtocolDb,
    st: LinkState,
}

type LResult<T> = Result<T, FilterError>;

/// One way to reach a protocol: the condition and where its header starts.
#[derive(Debug, Clone)]
struct Path {
    cond: Pred,
    at: Offset,
}

const MAX_PATHS: usize = 64;

fn err<T>(msg: impl Into<String>, span: &Span) -> LResult<T> {
    Err(FilterError::new(msg, span.clone()))
}

impl<'a> Lower<'a> {
    /// A fresh context at the start of an expression.
    pub fn new(db: &'a ProtocolDb) -> Self {
        let st = LinkState { type_off: db.link.type_offset, pl_off: db.link.payload_offset, opaque: None };
        Lower { db, st }
    }

    fn proto(&self, name: &str, span: &Span) -> LResult<&'a Protocol> {
        match self.db.protocol(name) {
            Some(p) => Ok(p),
            None => err(format!("`{name}` is not a protocol of the protocol database"), span),
        }
    }

    fn is_link(&self, name: &str) -> bool {
        name == self.db.link.protocol
    }

    /// Lowers an expression.
    pub fn expr(&mut self, e: &Expr) -> LResult<Pred> {
        Ok(match e {
            Expr::And(a, b) => {
                let a = self.expr(a)?;
                let b = self.expr(b)?;
                Pred::and(a, b)
            }
            Expr::Or(a, b) => {
                let a = self.expr(a)?;
                let b = self.expr(b)?;
                Pred::or(a, b)
            }
            Expr::Not(a) => Pred::negate(self.expr(a)?),
            Expr::Proto(name, span) => {
                if self.is_link(name) {
                    return err(format!("`{name}` alone is not a filter: say what of it (`{name} host`, `{name}[…]`)"), span);
                }
                if self.db.protocol(name).is_none() {
                    return err(format!("`{name}` is not supported on Ethernet captures"), span);
                }
                if self.db.protocol(name).unwrap().shim.is_some() {
                    return self.shim(name, None, span);
                }
                let paths = self.paths(name, false, false, span)?;
                Pred::any(paths.into_iter().map(|p| p.cond))
            }
            Expr::Rel(op, a, b, span) => self.relation(*op, a, b, span)?,
            Expr::Special(s, span) => self.special(s, span)?,
            Expr::Prim { q, id, span } => self.prim(q, id, span)?,
        })
    }

    // ---- reaching protocols -------------------------------------------------

    /// The ways to reach `name` in the current link state. `fields`: only
    /// links through which its bytes may be read; `access`: use the links'
    /// access tests and guards (to read fields) rather than presence tests.
    fn paths(&self, name: &str, fields: bool, access: bool, span: &Span) -> LResult<Vec<Path>> {
        self.paths_depth(name, fields, access, span, 0)
    }

    /// For each way to reach `name`, in order: its condition, then `test` of
    /// the header where that way puts it; the alternatives joined by `or`.
    fn on_each_path(&self, name: &str, access: bool, span: &Span, mut test: impl FnMut(&Offset) -> LResult<Pred>) -> LResult<Pred> {
        let mut out = Pred::False;
        for path in self.paths(name, false, access, span)? {
            let t = test(&path.at)?;
            out = Pred::or(out, Pred::and(path.cond, t));
        }
        Ok(out)
    }

    /// Where field `f` of protocol `n` is, for a header at `at`.
    fn field_at(&self, p: &Protocol, n: &str, f: &str, at: &Offset, span: &Span) -> LResult<(Offset, u8)> {
        match p.fields.get(f) {
            Some(fd) => Ok((at.plus(Val::Const(fd.offset)), fd.size as u8)),
            None => err(format!("protocol database: `{n}` has no field `{f}`"), span),
        }
    }

    fn paths_depth(&self, name: &str, fields: bool, access: bool, span: &Span, depth: u32) -> LResult<Vec<Path>> {
        if depth > 16 {
            return err(format!("the protocol database's encapsulation of `{name}` is circular"), span);
        }
        if self.is_link(name) {
            return Ok(vec![Path { cond: Pred::True, at: Offset::at(0) }]);
        }
        let p = self.proto(name, span)?;
        let mut out = Vec::new();
        for l in &p.over {
            if fields && !l.fields {
                continue;
            }
            if self.is_link(&l.parent) {
                // Reached by the link layer's type field: not under an opaque shim.
                if self.st.opaque.is_some() {
                    continue;
                }
                let Some(v) = l.value else { continue };
                let mut cond = self.ethertype_test(v, span)?;
                let at = Offset::at(self.st.pl_off);
                if let Some(t) = &l.test {
                    cond = Pred::and(cond, self.raw(t, &[(name, at.clone())], None, span)?);
                }
                out.push(Path { cond, at });
            } else if self.db.protocol(&l.parent).is_some_and(|q| q.shim.is_some()) {
                // Reached from the entry of an opaque shim on top of the stack.
                let Some((shim, entry)) = &self.st.opaque else { continue };
                if *shim != l.parent {
                    continue;
                }
                let parent_at = Offset::at(*entry);
                let at = Offset::at(self.st.pl_off);
                let mut cond = Pred::True;
                if let Some(t) = &l.parent_test {
                    cond = self.raw(t, &[(&l.parent, parent_at)], l.value, span)?;
                }
                if let Some(t) = &l.test {
                    cond = Pred::and(cond, self.raw(t, &[(name, at.clone())], l.value, span)?);
                }
                out.push(Path { cond, at });
            } else {
                let parent = self.proto(&l.parent, span)?;
                for pp in self.paths_depth(&l.parent, fields, access, span, depth + 1)? {
                    let ctx = [(l.parent.as_str(), pp.at.clone())];
                    let sel = self.selector(l, parent, &ctx, access, span)?;
                    let mut cond = Pred::and(pp.cond, sel);
                    if access {
                        if let Some(g) = &l.guard {
                            cond = Pred::and(cond, self.raw(g, &ctx, l.value, span)?);
                        }
                    }
                    let at = match &l.offset {
                        Some(o) => pp.at.plus(self.raw_val(o, &ctx, span)?),
                        None => match &parent.header {
                            Some(h) => pp.at.plus(self.raw_val(h, &ctx, span)?),
                            None => return err(format!("the protocol database gives no header length for `{}`", l.parent), span),
                        },
                    };
                    if let Some(t) = &l.test {
                        cond = Pred::and(cond, self.raw(t, &[(name, at.clone())], l.value, span)?);
                    }
                    out.push(Path { cond, at });
                    if out.len() > MAX_PATHS {
                        return err(format!("`{name}` can be reached in too many ways"), span);
                    }
                }
            }
        }
        if out.is_empty() {
            let why = if self.st.opaque.is_some() { " after `mpls`" } else { "" };
            return err(format!("`{name}` cannot be matched here{why}"), span);
        }
        Ok(out)
    }

    /// The test that `l`'s protocol follows a `parent` header at `ctx`.
    fn selector(&self, l: &Link, parent: &Protocol, ctx: &[(&str, Offset)], access: bool, span: &Span) -> LResult<Pred> {
        if access {
            if let Some(a) = &l.access {
                return self.raw(a, ctx, l.value, span);
            }
        }
        if let Some(t) = &l.parent_test {
            return self.raw(t, ctx, l.value, span);
        }
        match (&parent.next, l.value) {
            (Some(n), Some(v)) => self.raw(n, ctx, Some(v), span),
            _ => err(format!("the protocol database says no way to find what `{}` carries", l.parent), span),
        }
    }

    /// `ether proto v` in the current link state.
    fn ethertype_test(&self, v: u32, span: &Span) -> LResult<Pred> {
        if let Some(rule) = self.db.link.rules.get(&v.to_string()) {
            // A rule of the database, in the link header's terms, shifted past any vlan tags.
            let at = Offset::at(self.st.pl_off - self.db.link.payload_offset);
            return self.raw(rule, &[(self.db.link.protocol.as_str(), at)], Some(v), span);
        }
        Ok(self.ethertype_default(v))
    }

    fn ethertype_default(&self, v: u32) -> Pred {
        let ty = Offset::at(self.st.type_off).load(2);
        if v > self.db.link.length_max {
            return Pred::cmp(RelOp::Eq, ty, Val::Const(v));
        }
        // An 802.3 frame: the type field is a length; the LLC header follows.
        let is_len = Pred::cmp(RelOp::Le, ty, Val::Const(self.db.link.length_max));
        let llc = Offset::at(self.st.pl_off);
        let sap = if self.db.link.llc_pair_saps.contains(&v) {
            Pred::cmp(RelOp::Eq, llc.load(2), Val::Const((v << 8) | v))
        } else {
            Pred::cmp(RelOp::Eq, llc.load(1), Val::Const(v))
        };
        Pred::and(is_len, sap)
    }

    // ---- expressions of the database ---------------------------------------

    fn parse_raw(&self, text: &str, v: Option<u32>, span: &Span) -> LResult<Expr> {
        let text = match v {
            Some(v) => text.replace("$v", &v.to_string()),
            None => text.to_string(),
        };
        if let Some(e) = self.db.parsed.preds.lock().ok().and_then(|c| c.get(&text).cloned()) {
            return Ok(e);
        }
        let bad = |e: FilterError| FilterError::new(format!("protocol database expression `{text}`: {}", e.message), span.clone());
        let toks = tokenize(&text).map_err(bad)?;
        let is_proto = |w: &str| self.db.protocol(w).is_some();
        let constant = |w: &str| self.db.constants.get(w).copied();
        match Parser::new(toks, text.len(), &is_proto, &constant).parse().map_err(bad)? {
            Some(e) => {
                if let Ok(mut c) = self.db.parsed.preds.lock() {
                    c.insert(text, e.clone());
                }
                Ok(e)
            }
            None => err("protocol database expression is empty", span),
        }
    }

    /// A raw predicate of the database, with protocol headers at `ctx`.
    fn raw(&self, text: &str, ctx: &[(&str, Offset)], v: Option<u32>, span: &Span) -> LResult<Pred> {
        let e = self.parse_raw(text, v, span)?;
        self.raw_pred(&e, ctx, span)
    }

    fn raw_pred(&self, e: &Expr, ctx: &[(&str, Offset)], span: &Span) -> LResult<Pred> {
        Ok(match e {
            Expr::And(a, b) => Pred::and(self.raw_pred(a, ctx, span)?, self.raw_pred(b, ctx, span)?),
            Expr::Or(a, b) => Pred::or(self.raw_pred(a, ctx, span)?, self.raw_pred(b, ctx, span)?),
            Expr::Not(a) => Pred::negate(self.raw_pred(a, ctx, span)?),
            Expr::Rel(op, a, b, _) => {
                let x = self.arith(a, ctx)?;
                let y = self.arith(b, ctx)?;
                // `v & M = 0` and `v & M != 0` in the database are bit tests, as libpcap writes them.
                match (op, x, y) {
                    (RelOp::Eq | RelOp::Ne, Val::Bin(BinOp::And, v, m), Val::Const(0)) if matches!(*m, Val::Const(_)) => {
                        let Val::Const(m) = *m else { unreachable!() };
                        Pred::cmp(*op, Val::Bits(v, m), Val::Const(0))
                    }
                    (op, x, y) => Pred::cmp(*op, x, y),
                }
            }
            _ => return err("protocol database expressions may only compare values", span),
        })
    }

    /// A raw value of the database.
    fn raw_val(&self, text: &str, ctx: &[(&str, Offset)], span: &Span) -> LResult<Val> {
        if let Some(a) = self.db.parsed.values.lock().ok().and_then(|c| c.get(text).cloned()) {
            return self.arith(&a, ctx);
        }
        let bad = |e: FilterError| FilterError::new(format!("protocol database expression `{text}`: {}", e.message), span.clone());
        let toks = tokenize(text).map_err(bad)?;
        let is_proto = |w: &str| self.db.protocol(w).is_some();
        let constant = |w: &str| self.db.constants.get(w).copied();
        let mut p = Parser::new(toks, text.len(), &is_proto, &constant);
        let a = p.arith_only().map_err(bad)?;
        if let Ok(mut c) = self.db.parsed.values.lock() {
            c.insert(text.to_string(), a.clone());
        }
        self.arith(&a, ctx)
    }

    // ---- arithmetic ------------------------------------------------------

    /// Lowers arithmetic with protocol headers at `ctx` (every protocol it names must be there).
    fn arith(&self, a: &Arith, ctx: &[(&str, Offset)]) -> LResult<Val> {
        Ok(match a {
            Arith::Num(n, _) => Val::Const(*n),
            Arith::Len(_) => Val::WireLen,
            Arith::Name(name, sp) => {
                let Some((pname, fname)) = name.split_once('.') else {
                    return err(format!("unknown name `{name}`"), sp);
                };
                let at = self.ctx_at(pname, ctx, sp)?;
                let p = self.proto(pname, sp)?;
                let Some(f) = p.fields.get(fname) else {
                    return err(format!("protocol `{pname}` has no field `{fname}`"), sp);
                };
                if !matches!(f.size, 1 | 2 | 4) {
                    return err(format!("`{name}` is an address: use `{pname} host` or `{pname} net`"), sp);
                }
                let mut v = at.plus(Val::Const(f.offset)).load(f.size as u8);
                if let Some(m) = f.mask {
                    v = Val::bin(BinOp::And, v, Val::Const(m));
                }
                if let Some(s) = f.shift {
                    v = Val::bin(BinOp::Shr, v, Val::Const(s));
                }
                v
            }
            Arith::Load { proto, off, size, .. } => {
                let at = self.ctx_at(&proto.0, ctx, &proto.1)?;
                let off = self.arith(off, ctx)?;
                at.plus(off).load(*size)
            }
            Arith::Bin(op, x, y, sp) => {
                let x = self.arith(x, ctx)?;
                let y = self.arith(y, ctx)?;
                if let Val::Const(c) = y {
                    match op {
                        BinOp::Div if c == 0 => return err("division by zero", sp),
                        BinOp::Mod if c == 0 => return err("modulus by zero", sp),
                        BinOp::Shl | BinOp::Shr if c > 31 => return err("shift by more than 31 bits", sp),
                        _ => {}
                    }
                }
                Val::bin(*op, x, y)
            }
            Arith::Neg(x, _) => Val::negate(self.arith(x, ctx)?),
        })
    }

    fn ctx_at(&self, name: &str, ctx: &[(&str, Offset)], span: &Span) -> LResult<Offset> {
        match ctx.iter().find(|(n, _)| *n == name) {
            Some((_, at)) => Ok(at.clone()),
            None => err(format!("`{name}` cannot be read here"), span),
        }
    }

    /// The protocols an arithmetic expression reads, in order of appearance,
    /// and whether their presence is tested (`guarded`). libpcap keeps only
    /// the left operand's protocol tests in arithmetic (`gen_arth` returns
    /// the left operand with its tests): in `ip[0] + tcp[0] > 0` only `ip`
    /// is tested, and `tcp[0]` is read at the TCP offset of an IPv4 header.
    /// netvm does the same.
    fn protos_of(a: &Arith, guarded: bool, out: &mut Vec<(String, Span, bool)>) {
        fn add(out: &mut Vec<(String, Span, bool)>, p: &str, sp: &Span, guarded: bool) {
            match out.iter_mut().find(|(x, _, _)| x == p) {
                Some(e) => e.2 |= guarded,
                None => out.push((p.to_string(), sp.clone(), guarded)),
            }
        }
        match a {
            Arith::Num(..) | Arith::Len(_) => {}
            Arith::Name(n, sp) => {
                if let Some((p, _)) = n.split_once('.') {
                    add(out, p, sp, guarded);
                }
            }
            Arith::Load { proto, off, .. } => {
                Self::protos_of(off, guarded, out);
                add(out, &proto.0, &proto.1, guarded);
            }
            Arith::Bin(_, x, y, _) => {
                Self::protos_of(x, guarded, out);
                Self::protos_of(y, false, out);
            }
            Arith::Neg(x, _) => Self::protos_of(x, guarded, out),
        }
    }

    /// `a op b`: for each way to reach the protocols it reads, their tests, then the comparison.
    fn relation(&mut self, op: RelOp, a: &Arith, b: &Arith, span: &Span) -> LResult<Pred> {
        let mut protos = Vec::new();
        Self::protos_of(a, true, &mut protos);
        Self::protos_of(b, true, &mut protos);
        // Every combination of paths, in order.
        let mut combos: Vec<(Pred, Vec<(String, Offset)>)> = vec![(Pred::True, Vec::new())];
        for (p, sp, guarded) in &protos {
            if self.db.protocol(p).is_none() {
                return err(format!("`{p}` is not supported on Ethernet captures"), sp);
            }
            let mut paths =
                if self.is_link(p) { vec![Path { cond: Pred::True, at: Offset::at(0) }] } else { self.paths(p, true, true, sp)? };
            if !guarded {
                // Read where the first way would have it, untested.
                paths.truncate(1);
                paths[0].cond = Pred::True;
            }
            let mut next = Vec::new();
            for (cond, ctx) in &combos {
                for path in &paths {
                    let mut ctx = ctx.clone();
                    ctx.push((p.clone(), path.at.clone()));
                    next.push((Pred::and(cond.clone(), path.cond.clone()), ctx));
                }
            }
            if next.len() > MAX_PATHS {
                return err("this relation reads protocols that can be reached in too many ways", span);
            }
            combos = next;
        }
        let mut out = Pred::False;
        for (cond, ctx) in combos {
            let ctx: Vec<(&str, Offset)> = ctx.iter().map(|(n, o)| (n.as_str(), o.clone())).collect();
            let x = self.arith(a, &ctx)?;
            let y = self.arith(b, &ctx)?;
            out = Pred::or(out, Pred::and(cond, Pred::cmp(op, x, y)));
        }
        Ok(out)
    }

    // ---- keyword primitives ----------------------------------------------

    fn special(&mut self, s: &Special, span: &Span) -> LResult<Pred> {
        match s {
            Special::Less(n) => Ok(Pred::cmp(RelOp::Le, Val::WireLen, Val::Const(*n))),
            Special::Greater(n) => Ok(Pred::cmp(RelOp::Ge, Val::WireLen, Val::Const(*n))),
            Special::Vlan(id) => self.shim("vlan", *id, span),
            Special::Mpls(id) => self.shim("mpls", *id, span),
            Special::Broadcast(p) | Special::Multicast(p) => {
                let bc = matches!(s, Special::Broadcast(_));
                let (name, psp) = match p {
                    Some((n, sp)) => (n.clone(), sp.clone()),
                    None => (self.db.link.protocol.clone(), span.clone()),
                };
                let proto = self.proto(&name, &psp)?;
                let text = if bc { &proto.broadcast } else { &proto.multicast };
                let Some(text) = text else {
                    let what = if bc { "broadcast" } else { "multicast" };
                    return err(format!("`{name} {what}` is not supported"), span);
                };
                self.on_each_path(&name, false, &psp, |at| self.raw(text, &[(name.as_str(), at.clone())], None, span))
            }
        }
    }

    /// `vlan [id]`, `mpls [label]`: match the shim, then shift every later offset.
    fn shim(&mut self, name: &str, id: Option<u32>, span: &Span) -> LResult<Pred> {
        let p = self.proto(name, span)?;
        let len = p.shim.unwrap_or(0);
        let paths = self.paths(name, false, false, span)?;
        let mut out = Pred::False;
        for path in paths {
            let mut cond = path.cond;
            if let Some(v) = id {
                if let Some(max) = p.id_max {
                    if v > max {
                        return err(format!("{name} id {v} greater than maximum {max}"), span);
                    }
                }
                let Some(t) = &p.id else {
                    return err(format!("`{name}` takes no id"), span);
                };
                cond = Pred::and(cond, self.raw(t, &[(name, path.at.clone())], Some(v), span)?);
            }
            out = Pred::or(out, cond);
        }
        // Shift: the shim sits at the link payload.
        let entry = self.st.pl_off;
        match p.fields.get("type") {
            Some(ty) => {
                self.st.type_off = entry + ty.offset;
            }
            None => {
                self.st.opaque = Some((name.to_string(), entry));
            }
        }
        self.st.pl_off = entry + len;
        Ok(out)
    }

    // ---- qualified primitives -----------------------------------------------

    fn prim(&mut self, q: &crate::parser::Qual, id: &Id, span: &Span) -> LResult<Pred> {
        let proto = q.proto.clone();
        let pspan = proto.as_ref().map(|p| p.1.clone()).unwrap_or(span.clone());
        match q.kind {
            Kind::Gateway => err("`gateway` needs host name resolution, which netvm does not do", span),
            Kind::Protochain => err("`protochain` is not supported (see docs/filter-language.md)", span),
            Kind::Proto => {
                if q.dir != Dir::Default {
                    return err("`proto` takes no direction", span);
                }
                self.proto_prim(proto.as_ref().map(|p| p.0.as_str()), id, span, &pspan)
            }
            Kind::Port | Kind::PortRange => self.port_prim(q, id, span),
            Kind::Host | Kind::Net | Kind::Default => self.addr_prim(q, id, span),
        }
    }

    fn proto_prim(&mut self, proto: Option<&str>, id: &Id, span: &Span, pspan: &Span) -> LResult<Pred> {
        let link = proto.is_some_and(|p| self.is_link(p));
        let v = match id {
            Id::Num(n) => *n,
            Id::Name(n) => {
                let table = if link { &self.db.ethertypes } else { &self.db.ipprotos };
                match table.get(n.as_str()) {
                    Some(v) => *v,
                    None => return err(format!("unknown protocol name `{n}`"), span),
                }
            }
            _ => return err("`proto` takes a number or a protocol name", span),
        };
        if link {
            if self.st.opaque.is_some() {
                return err("`ether proto` cannot be matched after `mpls`", span);
            }
            return self.ethertype_test(v, span);
        }
        let names: Vec<String> = match proto {
            Some(p) => {
                let pr = self.proto(p, pspan)?;
                if pr.next.is_none() {
                    return err(format!("`{p} proto` is not supported: `{p}` names no protocol it carries"), pspan);
                }
                vec![p.to_string()]
            }
            // `proto N`: every network-layer protocol that names what it carries.
            None => self
                .db
                .protocols
                .iter()
                .filter(|(_, p)| p.next.is_some() && p.over.iter().any(|l| self.is_link(&l.parent)))
                .map(|(n, _)| n.clone())
                .collect(),
        };
        if v > 255 && proto.is_none() {
            return err(format!("protocol number {v} greater than 255"), span);
        }
        let mut out = Pred::False;
        for n in names {
            let p = self.proto(&n, pspan)?;
            let next = p.next.clone().unwrap();
            let t = self.on_each_path(&n, false, pspan, |at| self.raw(&next, &[(n.as_str(), at.clone())], Some(v), span))?;
            out = Pred::or(out, t);
        }
        Ok(out)
    }

    fn port_prim(&mut self, q: &crate::parser::Qual, id: &Id, span: &Span) -> LResult<Pred> {
        let kw = if q.kind == Kind::Port { "port" } else { "portrange" };
        let proto = q.proto.as_ref().map(|p| p.0.as_str());
        if let Some(p) = proto {
            if self.db.protocol(p).is_none_or(|x| x.ports.is_none()) {
                return err(format!("illegal qualifier of '{kw}': `{p}` has no ports"), span);
            }
        }
        let service = |name: &str, sp: &Span| -> LResult<(u32, Option<Vec<String>>)> {
            if let Some(n) = crate::lexer::parse_number(name) {
                return Ok((n, None));
            }
            match self.db.services.get(name) {
                Some(s) => Ok((s.port, Some(s.protocols.clone()))),
                None => err(format!("unknown port name `{name}`"), sp),
            }
        };
        let (lo, hi, named) = match (q.kind, id) {
            (_, Id::Num(n)) => (*n, *n, None),
            (Kind::Port, Id::Name(n)) => {
                let (p, protos) = service(n, span)?;
                (p, p, protos)
            }
            (Kind::PortRange, Id::Name(n)) => {
                let (a, b) = match n.split_once('-') {
                    Some((a, b)) if !a.is_empty() && !b.is_empty() => (a, b),
                    _ => (n.as_str(), n.as_str()),
                };
                let (a, _) = service(a, span)?;
                let (b, _) = service(b, span)?;
                (a.min(b), a.max(b), None)
            }
            _ => return err(format!("`{kw}` takes a port number or name"), span),
        };
        if hi > 65535 {
            return err(format!("illegal port number {hi} > 65535"), span);
        }
        // The protocols with ports it applies to.
        let mut names: Vec<String> = Vec::new();
        for (n, p) in &self.db.protocols {
            if p.ports.is_none() || proto.is_some_and(|x| x != n) {
                continue;
            }
            if let Some(list) = &named {
                if list.len() == 1 && proto.is_none() && !list.contains(n) {
                    continue;
                }
                if proto.is_some() && !list.contains(n) {
                    return err(format!("port {} is {}", id_name(id), list.join("/")), span);
                }
            }
            names.push(n.clone());
        }
        let mut out = Pred::False;
        for n in names {
            let p = self.proto(&n, span)?;
            let ports = p.ports.clone().unwrap();
            let test = |v: Val| -> Pred {
                if lo == hi {
                    Pred::cmp(RelOp::Eq, v, Val::Const(lo))
                } else {
                    Pred::and(Pred::cmp(RelOp::Ge, v.clone(), Val::Const(lo)), Pred::cmp(RelOp::Le, v, Val::Const(hi)))
                }
            };
            let t = self.on_each_path(&n, true, span, |at| {
                let port = |f: &str| self.field_at(p, &n, f, at, span).map(|(o, size)| o.load(size));
                Ok(dir_combine(q.dir, test(port(&ports.src)?), test(port(&ports.dst)?)))
            })?;
            out = Pred::or(out, t);
        }
        Ok(out)
    }

    fn addr_prim(&mut self, q: &crate::parser::Qual, id: &Id, span: &Span) -> LResult<Pred> {
        let kind = q.kind;
        // The address, its mask and its family.
        let (family, addr, mask): (&str, Vec<u8>, Vec<u8>) = match id {
            Id::Num(n) => {
                if kind == Kind::Net {
                    // A short net number is promoted: `net 10` is 10.0.0.0/8.
                    let (mut v, mut m) = (*n, u32::MAX);
                    while v != 0 && v & 0xff00_0000 == 0 {
                        v <<= 8;
                        m <<= 8;
                    }
                    ("ipv4", v.to_be_bytes().to_vec(), m.to_be_bytes().to_vec())
                } else {
                    ("ipv4", n.to_be_bytes().to_vec(), u32::MAX.to_be_bytes().to_vec())
                }
            }
            Id::V4(v, bits) => {
                let sh = 32 - bits;
                let m = if sh == 32 { 0 } else { u32::MAX << sh };
                let v = if sh == 32 { 0 } else { v << sh };
                ("ipv4", v.to_be_bytes().to_vec(), m.to_be_bytes().to_vec())
            }
            Id::V4Len(v, bits, len) | Id::V4Mask(v, bits, len) => {
                if kind == Kind::Host {
                    return err("mask syntax for networks only", span);
                }
                let v = if *bits == 0 { 0 } else { v << (32 - bits) };
                let m = if matches!(id, Id::V4Mask(..)) {
                    *len
                } else {
                    if *len > 32 {
                        return err("mask length must be <= 32", span);
                    }
                    if *len == 0 {
                        0
                    } else {
                        u32::MAX << (32 - len)
                    }
                };
                if v & !m != 0 {
                    return err("non-network bits set in the address", span);
                }
                ("ipv4", v.to_be_bytes().to_vec(), m.to_be_bytes().to_vec())
            }
            Id::V6(a) => ("ipv6", a.octets().to_vec(), vec![0xff; 16]),
            Id::V6Len(a, len) => {
                if kind == Kind::Host {
                    return err("mask syntax for networks only", span);
                }
                if *len > 128 {
                    return err("mask length must be <= 128", span);
                }
                let m: u128 = if *len == 0 { 0 } else { u128::MAX << (128 - len) };
                let v = u128::from_be_bytes(a.octets());
                if v & !m != 0 {
                    return err("non-network bits set in the address", span);
                }
                ("ipv6", a.octets().to_vec(), m.to_be_bytes().to_vec())
            }
            Id::Mac(m) => {
                if kind == Kind::Net {
                    return err("a MAC address is not a network", span);
                }
                match &q.proto {
                    Some((p, _)) if self.db.protocol(p).and_then(|x| x.addresses.as_ref()).is_some_and(|a| a.family == "mac") => {}
                    _ => return err("ethernet address used in non-ether expression", span),
                }
                ("mac", m.to_vec(), vec![0xff; 6])
            }
            Id::Name(n) => {
                return err(format!("unknown host `{n}`: netvm resolves no names; write the address"), span);
            }
        };
        // The protocols with addresses of that family.
        let mut names = Vec::new();
        for (n, p) in &self.db.protocols {
            let Some(a) = &p.addresses else { continue };
            if a.family != family {
                continue;
            }
            match &q.proto {
                Some((qp, _)) if qp != n => continue,
                None if family == "mac" => continue,
                None if self.paths(n, false, false, span).is_err() => continue,
                _ => {}
            }
            names.push(n.clone());
        }
        if names.is_empty() {
            let what = if kind == Kind::Net { "net" } else { "host" };
            return match &q.proto {
                Some((p, sp)) => err(format!("'{p}' modifier applied to {what}"), sp),
                None => err(format!("no protocol has {family} addresses"), span),
            };
        }
        let mut out = Pred::False;
        for n in names {
            let p = self.proto(&n, span)?;
            let a = p.addresses.clone().unwrap();
            let t = self.on_each_path(&n, false, span, |at| {
                let field = |f: &str| self.field_at(p, &n, f, at, span).map(|(o, _)| o);
                Ok(dir_combine(q.dir, addr_cmp(family, &field(&a.src)?, &addr, &mask), addr_cmp(family, &field(&a.dst)?, &addr, &mask)))
            })?;
            out = Pred::or(out, t);
        }
        Ok(out)
    }
}

fn id_name(id: &Id) -> String {
    match id {
        Id::Name(n) => n.clone(),
        Id::Num(n) => n.to_string(),
        _ => String::new(),
    }
}

fn dir_combine(dir: Dir, src: Pred, dst: Pred) -> Pred {
    match dir {
        Dir::Src => src,
        Dir::Dst => dst,
        Dir::Default | Dir::SrcOrDst => Pred::or(src, dst),
        Dir::SrcAndDst => Pred::and(src, dst),
    }
}

/// Compares an address field with `addr` under `mask`, in libpcap's order:
/// a MAC from its last four bytes back, IPv4 as one word, IPv6 word by word
/// from the first, skipping words the mask clears.
fn addr_cmp(family: &str, at: &Offset, addr: &[u8], mask: &[u8]) -> Pred {
    let word = |i: usize, size: usize| -> (u32, u32) {
        let mut v = 0u32;
        let mut m = 0u32;
        for j in 0..size {
            v = (v << 8) | addr[i + j] as u32;
            m = (m << 8) | mask[i + j] as u32;
        }
        (v, m)
    };
    let one = |off: usize, size: usize| -> Pred {
        let (v, m) = word(off, size);
        let full = if size == 4 { u32::MAX } else { (1 << (8 * size)) - 1 };
        let load = at.plus(Val::Const(off as u32)).load(size as u8);
        if m == 0 {
            return Pred::True;
        }
        let lhs = if m == full { load } else { Val::bin(BinOp::And, load, Val::Const(m)) };
        Pred::cmp(RelOp::Eq, lhs, Val::Const(v & m))
    };
    match family {
        "mac" => Pred::and(one(2, 4), one(0, 2)),
        "ipv6" => (0..4).fold(Pred::True, |acc, i| Pred::and(acc, one(4 * i, 4))),
        _ => one(0, 4),
    }
}
