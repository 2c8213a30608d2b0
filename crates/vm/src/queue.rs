//! A bounded queue between the threads of a run (the driver's workers and
//! I/O stage, a sink's background writer): a ring of fixed capacity under a
//! mutex, with condition variables to wait on. It allocates its ring once,
//! when it is made, and never again (a general-purpose channel allocates
//! when waiters register), so that a run allocates nothing per batch once
//! it is warm. Several threads may send and receive.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// A bounded multi-producer, multi-consumer queue.
pub struct Queue<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
}

struct State<T> {
    items: VecDeque<T>,
    closed: bool,
}

impl<T> Queue<T> {
    /// A queue holding at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> Queue<T> {
        let capacity = capacity.max(1);
        Queue {
            state: Mutex::new(State { items: VecDeque::with_capacity(capacity), closed: false }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while holding the lock in a way that breaks the
        // ring's invariants (push and pop only).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an item, waiting while the queue is full; gives it back if the
    /// queue is closed.
    pub fn send(&self, item: T) -> Result<(), T> {
        let mut s = self.lock();
        while s.items.len() >= self.capacity && !s.closed {
            s = self.not_full.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.closed {
            return Err(item);
        }
        s.items.push_back(item);
        drop(s);
        self.not_empty.notify_one();
        Ok(())
    }

    /// Takes the oldest item, waiting while the queue is empty; `None` once
    /// it is closed and empty.
    pub fn recv(&self) -> Option<T> {
        let mut s = self.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                drop(s);
                self.not_full.notify_one();
                return Some(item);
            }
            if s.closed {
                return None;
            }
            s = self.not_empty.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Takes the oldest item if there is one.
    pub fn try_recv(&self) -> Option<T> {
        let item = self.lock().items.pop_front();
        if item.is_some() {
            self.not_full.notify_one();
        }
        item
    }

    /// Closes the queue: receivers get what is left, then `None`; senders are refused.
    pub fn close(&self) {
        self.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::Queue;

    #[test]
    fn delivers_in_order_across_threads_and_closes() {
        let q = Queue::new(3);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..1000 {
                    q.send(i).unwrap();
                }
                q.close();
            });
            let mut got = Vec::new();
            while let Some(i) = q.recv() {
                got.push(i);
            }
            assert_eq!(got, (0..1000).collect::<Vec<_>>());
        });
        assert_eq!(q.send(1), Err(1));
        assert_eq!(q.try_recv(), None);
    }
}
