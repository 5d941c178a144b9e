//! A counting semaphore: how the scan's threads bound the work in flight (the
//! standard library has none, and one this small is not worth a dependency). It
//! can be closed, so a reader waiting for a permit stops when the merge is gone
//! (a panic there must end the scan, not leave the reader waiting forever).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_gets_a_permit_given_back_and_stops_when_closed() {
        let p = Permits::new(1);
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
    }
}
