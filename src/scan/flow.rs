//! How work flows between the scan's threads: [`Permits`], a counting semaphore
//! that bounds the work in flight (the standard library has none, and one this
//! small is not worth a dependency), closable so a reader waiting for a permit
//! stops when the merge is gone (a panic there must end the scan, not leave the
//! reader waiting forever); and [`InOrder`], which hands results that arrive in any
//! order back in the order they were numbered.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// Counting semaphore: permits for work in flight.
pub struct Permits {
    /// Free permits, and whether the semaphore was closed.
    free: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Permits {
    pub fn new(n: usize) -> Permits {
        Permits { free: Mutex::new((n.max(1), false)), cv: Condvar::new() }
    }

    /// Waits for a permit; false once closed.
    pub fn take(&self) -> bool {
        let mut n = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while n.0 == 0 && !n.1 {
            n = self.cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        if n.1 {
            return false;
        }
        n.0 -= 1;
        true
    }

    /// Takes a permit if one is free now.
    pub fn try_take(&self) -> bool {
        let mut n = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let took = n.0 > 0 && !n.1;
        n.0 -= usize::from(took);
        took
    }

    pub fn give(&self) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        self.cv.notify_one();
    }

    /// Wakes every waiter with no permit, now and later.
    pub fn close(&self) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

/// Closes the permits when dropped: put on the merging thread, so that a panic
/// there (unwinding) stops the reader too.
pub struct CloseOnDrop<'a>(pub &'a Permits);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Results numbered 0, 1, 2... by whoever made the work, released in that order.
pub struct InOrder<T> {
    next: usize,
    waiting: VecDeque<Option<T>>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder { next: 0, waiting: VecDeque::new() }
    }
}

impl<T> InOrder<T> {
    /// Takes result `seq`; passes `each` every result now due, in order.
    pub fn put(&mut self, seq: usize, item: T, mut each: impl FnMut(T)) {
        let at = seq - self.next;
        if self.waiting.len() <= at {
            self.waiting.resize_with(at + 1, || None);
        }
        self.waiting[at] = Some(item);
        while let Some(Some(item)) = self.waiting.front_mut().map(Option::take) {
            self.waiting.pop_front();
            self.next += 1;
            each(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_gets_a_permit_given_back_and_stops_when_closed() {
        let p = Permits::new(1);
        assert!(p.try_take());
        assert!(!p.try_take(), "none left");
        p.give();
        assert!(p.take());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| p.take());
            std::thread::sleep(std::time::Duration::from_millis(20));
            p.give();
            assert!(waiter.join().unwrap(), "the permit given back");
            let waiter = s.spawn(|| p.take());
            {
                let _close = CloseOnDrop(&p);
            }
            assert!(!waiter.join().unwrap(), "closed: no permit, no wait");
        });
        assert!(!p.take());
        p.give();
        assert!(!p.try_take(), "closed");
    }

    #[test]
    fn results_come_out_in_their_order() {
        let (mut order, mut out) = (InOrder::default(), vec![]);
        for seq in [2, 0, 3, 1, 4] {
            order.put(seq, seq * 10, |x| out.push(x));
        }
        assert_eq!(out, [0, 10, 20, 30, 40]);
    }
}
