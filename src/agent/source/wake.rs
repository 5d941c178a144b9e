//! Wake: what inotify says changed, handed to the reader as a coalescing signal.
//!
//! The watcher's callback runs on notify's thread; the reader waits here between
//! rounds. Paths are collected in a set (a file written a thousand times between two
//! rounds is one entry), bounded: past [`MAX_PATHS`] the set is dropped and the
//! reader told to look at everything instead, so a flood of events during a sink
//! outage costs a fixed amount of memory. The same happens when inotify itself
//! overflowed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Changed paths kept between two rounds; past it, everything is looked at.
pub const MAX_PATHS: usize = 8192;

/// What changed since the last [`Wake::wait`].
#[derive(Debug, Default)]
pub struct Changes {
    pub paths: Vec<PathBuf>,
    /// Too much to list (or inotify lost events): look at every file and dir.
    pub everything: bool,
}

#[derive(Default)]
struct State {
    paths: HashSet<PathBuf>,
    everything: bool,
    woken: bool,
    /// The watches are being set up (see [`Wake::setting_up`]).
    setting_up: bool,
    /// They could not be: the reader polls.
    unwatched: bool,
}

/// The signal between the watcher and the reader.
#[derive(Default)]
pub struct Wake {
    state: Mutex<State>,
    cv: Condvar,
}

impl Wake {
    /// Records changed paths and wakes the reader.
    pub fn paths(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for p in paths {
            if s.everything {
                break;
            }
            s.paths.insert(p);
            if s.paths.len() > MAX_PATHS {
                s.paths = HashSet::new();
                s.everything = true;
            }
        }
        // Woken already: the reader has not taken the last change yet, and will
        // take this one with it (a waiter was notified then). Not notifying again
        // spares a system call per event while the reader lingers.
        if !std::mem::replace(&mut s.woken, true) {
            self.cv.notify_one();
        }
    }

    /// Tells the reader to look at everything (inotify overflowed or failed).
    pub fn everything(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.paths = HashSet::new();
        s.everything = true;
        s.woken = true;
        self.cv.notify_one();
    }

    /// The watches are being set up on another thread (`agent::watch`: a walk of
    /// every directory, a second at a million files), while the reader lists.
    pub fn setting_up(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).setting_up = true;
    }

    /// The watches are set up (`watching`), or could not be.
    pub fn set_up(&self, watching: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (s.setting_up, s.unwatched) = (false, !watching);
        self.cv.notify_all();
    }

    /// Waits up to `timeout` for the watches to be set up; `Some(watching)` once
    /// they are (at once when none were being set up).
    pub fn wait_set_up(&self, timeout: Duration) -> Option<bool> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (s, _) = self.cv.wait_timeout_while(s, timeout, |s| s.setting_up).unwrap_or_else(|e| e.into_inner());
        (!s.setting_up).then_some(!s.unwatched)
    }

    /// Waits up to `timeout` for a change (returns at once if one is pending), and
    /// takes what changed.
    pub fn wait(&self, timeout: Duration) -> Changes {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (mut s, _) = self.cv.wait_timeout_while(s, timeout, |s| !s.woken).unwrap_or_else(|e| e.into_inner());
        self.take_locked(&mut s)
    }

    /// Waits `d` whatever happens meanwhile (changes gather), and takes what
    /// changed: the reader's pause after a round that caught up.
    pub fn linger(&self, d: Duration) -> Changes {
        std::thread::sleep(d);
        self.take()
    }

    /// Takes what changed without waiting.
    pub fn take(&self) -> Changes {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.take_locked(&mut s)
    }

    fn take_locked(&self, s: &mut State) -> Changes {
        s.woken = false;
        Changes {
            paths: std::mem::take(&mut s.paths).into_iter().collect(),
            everything: std::mem::take(&mut s.everything),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_paths_coalesce_and_a_flood_becomes_one_flag() {
        let w = Wake::default();
        w.paths((0..1000).map(|_| PathBuf::from("/tmp/ray/x.log")));
        let c = w.wait(Duration::from_secs(5));
        assert_eq!((c.paths.len(), c.everything), (1, false));
        w.paths((0..MAX_PATHS + 10).map(|i| PathBuf::from(format!("/f{i}"))));
        let c = w.take();
        assert!(c.everything && c.paths.is_empty(), "bounded: {} paths kept", c.paths.len());
        let start = std::time::Instant::now();
        let c = w.wait(Duration::from_millis(50));
        assert!(c.paths.is_empty() && !c.everything && start.elapsed() >= Duration::from_millis(50));
    }

    /// Changes made while the reader lingers are taken when it is done; events after
    /// the first (which notified) are taken with it, though they notify no one.
    #[test]
    fn changes_made_while_the_reader_lingers_are_taken_after_it() {
        let w = std::sync::Arc::new(Wake::default());
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            w2.paths([PathBuf::from("/a")]);
            w2.paths([PathBuf::from("/b")]);
        });
        let start = std::time::Instant::now();
        let c = w.linger(Duration::from_millis(300));
        t.join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(300));
        let mut paths = c.paths;
        paths.sort();
        assert_eq!(paths, [PathBuf::from("/a"), PathBuf::from("/b")]);
        w.paths([PathBuf::from("/c")]);
        w.paths([PathBuf::from("/d")]);
        let start = std::time::Instant::now();
        let c = w.wait(Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(10), "woken by the first, pending");
        assert_eq!(c.paths.len(), 2);
        let c = w.wait(Duration::from_millis(20));
        assert!(c.paths.is_empty(), "taken: the next wait waits");
    }

    #[test]
    fn the_reader_waits_for_the_watches_being_set_up_and_learns_if_they_failed() {
        let w = std::sync::Arc::new(Wake::default());
        assert_eq!(w.wait_set_up(Duration::ZERO), Some(true), "none being set up: nothing to wait for");
        w.setting_up();
        assert_eq!(w.wait_set_up(Duration::from_millis(20)), None, "still being set up");
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.wait_set_up(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        w.set_up(false);
        assert_eq!(t.join().unwrap(), Some(false), "woken when they could not be set up");
    }
}
