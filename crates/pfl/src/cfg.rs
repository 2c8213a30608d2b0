//! The decision graph: a predicate as a DAG of tests, each with a true and
//! a false successor, ending in accept or reject (libpcap's "blocks").
//!
//! Optimizations, all keeping libpcap's rule that a packet too short for a
//! byte the filter reads is rejected:
//! - jump threading: a test whose outcome is known on an edge (the same
//!   test, or the same value compared before: `ethertype == 0x800` true
//!   decides `ethertype == 0x86dd`) is bypassed on that edge;
//! - a test whose two successors are the same is bypassed (as libpcap's
//!   optimizer does);
//! - the length every accepting path needs is computed, so that the filter
//!   can reject short packets with one check up front.

use crate::ir::{eval_rel, Pred, Val};
use crate::parser::{BinOp, RelOp};
use std::collections::HashMap;

/// The most facts carried along an edge.
const MAX_FACTS: usize = 128;

/// Index of the accept node.
pub const ACCEPT: usize = 0;
/// Index of the reject node.
pub const REJECT: usize = 1;

/// A comparison.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Test {
    /// Operator.
    pub op: RelOp,
    /// Left side.
    pub a: Val,
    /// Right side.
    pub b: Val,
}

/// A node of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    /// The packet matches.
    Accept,
    /// It does not.
    Reject,
    /// A comparison.
    Test {
        /// What is compared.
        test: Test,
        /// Successor when it holds.
        t: usize,
        /// Successor when it does not.
        f: usize,
    },
}

/// The decision graph.
#[derive(Debug, Clone)]
pub struct Graph {
    /// Nodes; 0 is accept, 1 is reject.
    pub nodes: Vec<Node>,
    /// The first node.
    pub entry: usize,
    dedup: HashMap<Node, usize>,
}

impl Graph {
    /// The graph of a predicate.
    pub fn build(p: &Pred) -> Graph {
        let mut g = Graph { nodes: vec![Node::Accept, Node::Reject], entry: ACCEPT, dedup: HashMap::new() };
        g.entry = g.add(p, ACCEPT, REJECT);
        g
    }

    fn add(&mut self, p: &Pred, t: usize, f: usize) -> usize {
        match p {
            Pred::True => t,
            Pred::False => f,
            Pred::Not(a) => self.add(a, f, t),
            Pred::And(a, b) => {
                let bt = self.add(b, t, f);
                self.add(a, bt, f)
            }
            Pred::Or(a, b) => {
                let bf = self.add(b, t, f);
                self.add(a, t, bf)
            }
            Pred::Cmp(op, a, b) => {
                let n = Node::Test { test: Test { op: *op, a: a.clone(), b: b.clone() }, t, f };
                if let Some(&i) = self.dedup.get(&n) {
                    return i;
                }
                self.nodes.push(n.clone());
                let i = self.nodes.len() - 1;
                self.dedup.insert(n, i);
                i
            }
        }
    }

    /// Nodes reachable from the entry, each before its successors.
    pub fn order(&self) -> Vec<usize> {
        // Reverse postorder of a depth-first walk.
        let mut seen = vec![false; self.nodes.len()];
        let mut post = Vec::new();
        let mut stack = vec![(self.entry, false)];
        while let Some((n, done)) = stack.pop() {
            if done {
                post.push(n);
                continue;
            }
            if seen[n] {
                continue;
            }
            seen[n] = true;
            stack.push((n, true));
            if let Node::Test { t, f, .. } = &self.nodes[n] {
                for s in [*t, *f] {
                    if !seen[s] {
                        stack.push((s, false));
                    }
                }
            }
        }
        post.reverse();
        post
    }

    /// Jump threading and removal of tests that decide nothing.
    pub fn optimize(&mut self) {
        for _ in 0..8 {
            let threaded = self.thread_pass();
            let pulled = self.pullup_pass();
            if !threaded && !pulled {
                break;
            }
        }
    }

    /// libpcap's `or_pullup` and `and_pullup`: in a chain of alternatives
    /// (false edges, one true target) or of conjuncts (true edges, one false
    /// target), a later test of the value an earlier test read is moved up
    /// next to it. The result is the same except for which load a short
    /// packet fails on, and then it is libpcap's (`port 80 or 443` tests
    /// the source port against 443 before it reads the destination port).
    fn pullup_pass(&mut self) -> bool {
        // A move keeps every node's number of predecessors.
        let preds = self.preds();
        let mut changed = false;
        for _ in 0..64 {
            let mut moved = false;
            for n in self.order() {
                while self.pull(n, &preds, true) || self.pull(n, &preds, false) {
                    moved = true;
                }
            }
            if !moved {
                break;
            }
            changed = true;
        }
        changed
    }

    fn pull(&mut self, n: usize, preds: &[usize], or: bool) -> bool {
        let Node::Test { test, t, f } = &self.nodes[n] else { return false };
        let (value, target) = (test.a.clone(), if or { *t } else { *f });
        let next = |g: &Graph, x: usize| match &g.nodes[x] {
            Node::Test { t, f, .. } => Some(if or { *f } else { *t }),
            _ => None,
        };
        let in_chain = |g: &Graph, x: usize| match &g.nodes[x] {
            Node::Test { t, f, .. } => preds[x] == 1 && (if or { *t } else { *f }) == target,
            _ => false,
        };
        // Past the tests of the same value already next to n.
        let mut last_same = n;
        let mut diff = next(self, n).unwrap();
        while in_chain(self, diff) && self.value(diff) == Some(&value) {
            last_same = diff;
            diff = next(self, diff).unwrap();
        }
        if !in_chain(self, diff) {
            return false;
        }
        // The next test of the same value further down the chain.
        let mut before = diff;
        let mut same = next(self, diff).unwrap();
        loop {
            if !in_chain(self, same) {
                return false;
            }
            if self.value(same) == Some(&value) {
                break;
            }
            before = same;
            same = next(self, same).unwrap();
        }
        let after_same = next(self, same).unwrap();
        self.set_next(before, or, after_same);
        self.set_next(same, or, diff);
        self.set_next(last_same, or, same);
        true
    }

    fn value(&self, n: usize) -> Option<&Val> {
        match &self.nodes[n] {
            Node::Test { test, .. } => Some(&test.a),
            _ => None,
        }
    }

    fn set_next(&mut self, n: usize, or: bool, to: usize) {
        if let Node::Test { t, f, .. } = &mut self.nodes[n] {
            if or {
                *f = to;
            } else {
                *t = to;
            }
        }
    }

    fn thread_pass(&mut self) -> bool {
        let mut changed = false;
        let order = self.order();
        let mut facts: HashMap<usize, Vec<(Test, bool)>> = HashMap::new();
        facts.insert(self.entry, Vec::new());
        // The entry itself may be decided by nothing, or be a useless test.
        self.entry = self.skip(self.entry, &[]);
        facts.insert(self.entry, Vec::new());
        for u in order {
            let Some(fin) = facts.get(&u).cloned() else { continue };
            let Node::Test { test, t, f } = self.nodes[u].clone() else { continue };
            for (succ, outcome) in [(t, true), (f, false)] {
                let mut fe = fin.clone();
                if fe.len() >= MAX_FACTS {
                    // Bound the work on huge filters: forget the oldest facts.
                    fe.drain(..fe.len() - MAX_FACTS + 1);
                }
                fe.push((test.clone(), outcome));
                let v = self.skip(succ, &fe);
                if v != succ {
                    changed = true;
                    if let Node::Test { t, f, .. } = &mut self.nodes[u] {
                        if outcome {
                            *t = v;
                        } else {
                            *f = v;
                        }
                    }
                }
                match facts.get_mut(&v) {
                    None => {
                        facts.insert(v, fe);
                    }
                    Some(old) => {
                        let keep: std::collections::HashSet<&(Test, bool)> = fe.iter().collect();
                        old.retain(|x| keep.contains(x));
                    }
                }
            }
        }
        changed
    }

    /// Follows `n` past tests decided by `facts` or with one successor.
    fn skip(&self, mut n: usize, facts: &[(Test, bool)]) -> usize {
        for _ in 0..self.nodes.len() {
            let Node::Test { test, t, f } = &self.nodes[n] else { return n };
            if t == f {
                n = *t;
                continue;
            }
            match decide(facts, test) {
                Some(true) => n = *t,
                Some(false) => n = *f,
                None => return n,
            }
        }
        n
    }

    /// The smallest captured length with which a packet can reach accept
    /// from each node (`u32::MAX`: it cannot).
    pub fn need(&self) -> Vec<u32> {
        let mut need = vec![u32::MAX; self.nodes.len()];
        need[ACCEPT] = 0;
        for i in self.order().into_iter().rev() {
            if let Node::Test { test, t, f } = &self.nodes[i] {
                let after = need[*t].min(need[*f]);
                need[i] = if after == u32::MAX { u32::MAX } else { after.max(load_end(&test.a).max(load_end(&test.b))) };
            }
        }
        need
    }

    /// Number of predecessors of each node, among reachable nodes.
    pub fn preds(&self) -> Vec<usize> {
        let mut p = vec![0; self.nodes.len()];
        for i in self.order() {
            if let Node::Test { t, f, .. } = &self.nodes[i] {
                p[*t] += 1;
                p[*f] += 1;
            }
        }
        p
    }
}

/// The end of the furthest byte a value surely reads.
pub fn load_end(v: &Val) -> u32 {
    let mut loads = Vec::new();
    v.loads(&mut loads);
    loads
        .iter()
        .map(|l| match l {
            Val::Load { k, size, .. } => k.saturating_add(*size as u32),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// The outcome of `test` if the facts decide it.
fn decide(facts: &[(Test, bool)], test: &Test) -> Option<bool> {
    for (f, out) in facts.iter().rev() {
        if f == test {
            return Some(*out);
        }
    }
    let Val::Const(c2) = test.b else { return None };
    // A value known from an equality.
    let known = |v: &Val| -> Option<u32> {
        facts.iter().find_map(|(f, out)| match (&f.b, f.op, out) {
            (Val::Const(c1), RelOp::Eq, true) | (Val::Const(c1), RelOp::Ne, false) if f.a == *v => Some(*c1),
            _ => None,
        })
    };
    if let Some(c1) = known(&test.a) {
        return Some(eval_rel(test.op, c1, c2));
    }
    if let Val::Bin(BinOp::And, x, m) = &test.a {
        if let (Some(c1), Val::Const(m)) = (known(x), &**m) {
            return Some(eval_rel(test.op, c1 & m, c2));
        }
    }
    if let Val::Bits(x, m) = &test.a {
        if let Some(c1) = known(x) {
            return Some(eval_rel(test.op, c1 & m, c2));
        }
    }
    // A value known to differ from a constant.
    if matches!(test.op, RelOp::Eq | RelOp::Ne) {
        for (f, out) in facts {
            let differs = matches!((f.op, out), (RelOp::Eq, false) | (RelOp::Ne, true));
            if differs && f.a == test.a && f.b == test.b {
                return Some(test.op == RelOp::Ne);
            }
        }
    }
    None
}
