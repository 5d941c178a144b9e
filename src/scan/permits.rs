//! A counting semaphore: how the scan's threads bound the work in flight (the
//! standard library has none, and one this small is not worth a dependency).

use std::sync::{Condvar, Mutex};

/// Counting semaphore: permits for work in flight.
pub struct Permits {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Permits {
    pub fn new(n: usize) -> Permits {
        Permits { free: Mutex::new(n.max(1)), cv: Condvar::new() }
    }

    pub fn take(&self) {
        let mut n = self.free.lock().unwrap();
        while *n == 0 {
            n = self.cv.wait(n).unwrap();
        }
        *n -= 1;
    }

    pub fn give(&self) {
        *self.free.lock().unwrap() += 1;
        self.cv.notify_one();
    }
}
