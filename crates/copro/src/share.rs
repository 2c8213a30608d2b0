//! What the kinds that serve several workers share: operation counters that
//! each handle writes alone and any handle reads summed.
//!
//! A [`netvm_vm::WorkerShare::Shared`] instance is reached by one handle per
//! worker, and its statistics are read from one of them, so they must cover
//! every worker's operations. A counter that all workers incremented in
//! place would bounce its cache line between their cores on every
//! operation; instead each handle owns a block of counters (a cache line of
//! its own) that only it writes, with plain relaxed loads and stores (no
//! atomic read-modify-write: one writer), and a registry shared by the
//! handles lists every block, so that a reader sums them. A block outlives
//! its handle in the registry: what a finished worker counted stays counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// `N` counters on a cache line (or more) of their own.
#[repr(align(64))]
struct Block<const N: usize>([AtomicU64; N]);

impl<const N: usize> Block<N> {
    fn new() -> Arc<Block<N>> {
        Arc::new(Block(std::array::from_fn(|_| AtomicU64::new(0))))
    }
}

/// One handle's counters, registered with those of the other handles of
/// the same instance (see the module documentation). Deliberately not
/// `Clone`: a block has exactly one writer.
pub(crate) struct Tally<const N: usize> {
    own: Arc<Block<N>>,
    all: Arc<Mutex<Vec<Arc<Block<N>>>>>,
}

impl<const N: usize> Default for Tally<N> {
    fn default() -> Tally<N> {
        Tally::new()
    }
}

impl<const N: usize> std::fmt::Debug for Tally<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.totals()).finish()
    }
}

impl<const N: usize> Tally<N> {
    /// Zeroed counters of a new instance (a registry of one).
    pub(crate) fn new() -> Tally<N> {
        let own = Block::new();
        Tally { all: Arc::new(Mutex::new(vec![Arc::clone(&own)])), own }
    }

    /// Zeroed counters for another handle of the same instance, counted in
    /// this one's totals.
    pub(crate) fn share(&self) -> Tally<N> {
        let own = Block::new();
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        // Fold the blocks of finished handles (only the registry holds them,
        // so nothing writes them any more) into one, so that an instance
        // forked for run after run keeps a registry as long as its workers.
        let mut dead = all.iter().filter(|b| Arc::strong_count(b) == 1);
        if let (Some(keep), Some(_)) = (dead.next(), dead.next()) {
            let keep = Arc::clone(keep);
            for b in all.iter().filter(|b| Arc::strong_count(b) == 1 && !Arc::ptr_eq(b, &keep)) {
                for (k, c) in keep.0.iter().zip(&b.0) {
                    k.store(k.load(Ordering::Relaxed).wrapping_add(c.load(Ordering::Relaxed)), Ordering::Relaxed);
                }
            }
            all.retain(|b| Arc::strong_count(b) > 1 || Arc::ptr_eq(b, &keep));
        }
        all.push(Arc::clone(&own));
        drop(all);
        Tally { own, all: Arc::clone(&self.all) }
    }

    /// Adds `n` to this handle's counter `i`.
    #[inline(always)]
    pub(crate) fn add(&self, i: usize, n: u64) {
        // This handle is the block's only writer: a load and a store (plain
        // moves on every target) cannot lose an update.
        let c = &self.own.0[i];
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// This handle's counters, for compiled code that increments them
    /// with a plain load and store as [`Tally::add`] does (valid as long
    /// as the handle).
    pub(crate) fn own_counters(&self) -> *mut u64 {
        // `AtomicU64` has the layout of `u64`; the cells are interior-mutable.
        self.own.0.as_ptr().cast::<u64>().cast_mut()
    }

    /// This handle's counter `i`.
    #[cfg(test)]
    pub(crate) fn own(&self, i: usize) -> u64 {
        self.own.0[i].load(Ordering::Relaxed)
    }

    /// Every counter summed over every handle of the instance.
    pub(crate) fn totals(&self) -> [u64; N] {
        let mut t = [0u64; N];
        for b in self.all.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            for (t, c) in t.iter_mut().zip(&b.0) {
                *t = t.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        t
    }

    /// Moves what `other` (a handle of another instance: a per-worker
    /// fork, which the caller holds exclusively) counted to this handle's
    /// counters, leaving `other`'s at zero.
    pub(crate) fn absorb(&self, other: &Tally<N>) {
        if Arc::ptr_eq(&self.all, &other.all) {
            return; // the same instance: already in the totals
        }
        for i in 0..N {
            self.add(i, other.own.0[i].swap(0, Ordering::Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_handles_sum_and_survive_their_handles() {
        let a = Tally::<2>::new();
        a.add(0, 3);
        let b = a.share();
        b.add(0, 4);
        b.add(1, 1);
        assert_eq!(a.totals(), [7, 1]);
        assert_eq!(b.totals()[0], 7);
        assert_eq!((a.own(0), b.own(0)), (3, 4));
        drop(b);
        assert_eq!(a.totals(), [7, 1], "a finished worker's counts stay");
        let c = Tally::<2>::new();
        c.add(1, 5);
        a.absorb(&c);
        assert_eq!(a.totals(), [7, 6]);
        assert_eq!(c.totals(), [0, 0], "moved, not copied");
        let d = a.share();
        a.absorb(&d);
        assert_eq!(a.totals(), [7, 6], "absorbing a handle of the same instance adds nothing");
        drop(d);
        for run in 0..100 {
            let forks: Vec<_> = (0..4).map(|_| a.share()).collect();
            forks.iter().for_each(|f| f.add(0, 1));
            assert_eq!(a.totals()[0], 7 + 4 * (run + 1));
        }
        assert!(a.all.lock().unwrap().len() <= 6, "finished handles' blocks are folded");
    }
}
