//! Independent work on every core: what building a large application
//! (verifying its programs, loading its tables, and for the IDS checking
//! and assembling its rules) spreads over the host's threads. Results come
//! back in input order, so callers see what a serial loop would give.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// At most this many items are mapped on the calling thread: starting
/// threads costs more than a handful of programs to verify (and, on a busy
/// host, waits for the scheduler: the control plane's versions of a small
/// data path are built while the workers run).
const INLINE_ITEMS: usize = 8;

/// Threads to use for `jobs` jobs: the host's available parallelism, at most one per job.
fn threads(jobs: usize) -> usize {
    // Asked once: the answer reads the process's CPU set and cgroup limits.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    (*CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))).min(jobs).max(1)
}

/// `f` of every item, in order, on as many threads as the host has; each
/// thread takes the next `block` items in turn (small blocks balance work
/// that clusters in parts of the input).
pub fn map_ordered<T: Sync, R: Send>(items: &[T], block: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= INLINE_ITEMS {
        return items.iter().map(f).collect();
    }
    let block = block.max(1);
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Vec<R>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads(items.len().div_ceil(block)))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let at = block * next.fetch_add(1, Ordering::Relaxed);
                        let Some(part) = items.get(at..(at + block).min(items.len())).filter(|p| !p.is_empty()) else { break mine };
                        mine.push((at, part.iter().map(&f).collect()));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    done.sort_by_key(|(at, _)| *at);
    done.into_iter().flat_map(|(_, v)| v).collect()
}

/// `f` of every item, each given exclusively to one thread, on as many
/// threads as the host has; the results in order.
pub fn map_ordered_mut<T: Send, R: Send>(items: &mut [T], f: impl Fn(&mut T) -> R + Sync) -> Vec<R> {
    let queue = Mutex::new(items.iter_mut().enumerate());
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads(queue.lock().unwrap_or_else(PoisonError::into_inner).len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
                        let Some((i, item)) = job else { break mine };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order() {
        let items: Vec<u32> = (0..1000).collect();
        for block in [0, 1, 7, 64, 5000] {
            assert_eq!(map_ordered(&items, block, |x| x * 2), items.iter().map(|x| x * 2).collect::<Vec<_>>());
        }
        assert!(map_ordered(&[] as &[u32], 4, |x| *x).is_empty());
        let mut v: Vec<u32> = (0..100).collect();
        assert_eq!(
            map_ordered_mut(&mut v, |x| {
                *x += 1;
                *x
            }),
            (1..=100).collect::<Vec<_>>()
        );
        assert_eq!(v, (1..=100).collect::<Vec<_>>());
    }
}
