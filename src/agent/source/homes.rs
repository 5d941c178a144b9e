//! Where tracked files live, numbered so that an entry holds it in 2 bytes.
//!
//! An entry needs its file's device (half of its key) and its logs dir (for its
//! path). A node has a few devices and at most [`MAX_DIRS`] logs dirs, and nearly
//! every file of a dir is on the dir's device, so the pairs in use are few: an
//! entry keeps the index of its pair, a *home*, rather than a device index and a
//! dir index (2 bytes less in each of a million entries).
//!
//! The lists are process-wide and only grow: a home is a pair of numbers, so
//! sources sharing a process share them harmlessly. Every lookup of a file by key
//! reads its device, so reading is lock-free; adding takes a lock (once a file).
//! The arrays' pages past the first are never touched, so they cost no memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Release};
use std::sync::Mutex;

/// The most logs dirs (sessions) followed: a dir's index is 16 bits in a home.
pub const MAX_DIRS: u32 = u16::MAX as u32 - 1;

/// The dir of no home: a vacant slot's (no logs dir has this index).
pub const VACANT_DIR: u16 = u16::MAX;

/// A vacant slot's home.
pub const VACANT: Home = Home(u16::MAX);

/// The index of a (device, logs dir) pair in [`HOMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Home(u16);

/// The devices files were found on, in the order first seen. Linux numbers
/// devices in 32 bits, but only those in use need telling apart.
static DEVICES: [AtomicU64; u16::MAX as usize] = [const { AtomicU64::new(0) }; u16::MAX as usize];
static DEVICE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The homes: a device's index in [`DEVICES`] in the high half, a dir's index in
/// the low half. The last index is [`VACANT`], never stored.
static HOMES: [AtomicU32; u16::MAX as usize] = [const { AtomicU32::new(0) }; u16::MAX as usize];

/// The homes by pair, to add one: held while adding (devices too).
static ADDING: Mutex<Option<HashMap<u32, u16>>> = Mutex::new(None);

impl Home {
    /// The home of a file on device `dev` in dir `dir` (added if new).
    ///
    /// # Panics
    /// When 65,535 devices or homes are in use: a node follows at most
    /// [`MAX_DIRS`] dirs, nearly all on one device each.
    pub fn of(dev: u64, dir: u32) -> Home {
        if dir == VACANT_DIR as u32 {
            return VACANT;
        }
        debug_assert!(dir <= MAX_DIRS);
        let mut adding = ADDING.lock().unwrap_or_else(|e| e.into_inner());
        let d = device_index(dev);
        let pair = (d as u32) << 16 | dir;
        let homes = adding.get_or_insert_with(HashMap::new);
        let n = homes.len();
        let i = *homes.entry(pair).or_insert_with(|| {
            assert!(n < VACANT.0 as usize, "files in over 65,534 (device, logs dir) pairs");
            HOMES[n].store(pair, Release);
            n as u16
        });
        Home(i)
    }

    /// The same dir on this home's device.
    pub fn with_dir(self, dir: u32) -> Home {
        Home::of(self.dev(), dir)
    }

    pub fn dev(self) -> u64 {
        match self {
            VACANT => 0,
            Home(i) => DEVICES[(HOMES[i as usize].load(Acquire) >> 16) as usize].load(Acquire),
        }
    }

    pub fn dir(self) -> u32 {
        match self {
            VACANT => VACANT_DIR as u32,
            Home(i) => HOMES[i as usize].load(Acquire) & 0xFFFF,
        }
    }
}

/// The index of device `dev` in [`DEVICES`] (added if new); called under the lock.
fn device_index(dev: u64) -> u16 {
    let n = DEVICE_COUNT.load(Acquire);
    if let Some(i) = DEVICES[..n].iter().position(|d| d.load(Acquire) == dev) {
        return i as u16;
    }
    assert!(n < DEVICES.len(), "files on over 65,535 devices");
    DEVICES[n].store(dev, Release);
    DEVICE_COUNT.store(n + 1, Release);
    n as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_give_back_their_device_and_dir() {
        let devs = [u64::MAX, 0, 7, 1 << 40];
        let mut seen = Vec::new();
        for &dev in &devs {
            for dir in [0, 1, MAX_DIRS, 300] {
                let h = Home::of(dev, dir);
                assert_eq!((h.dev(), h.dir()), (dev, dir));
                assert_ne!(h, VACANT);
                assert_eq!(Home::of(dev, dir), h, "the same pair is the same home");
                assert_eq!(h.with_dir(dir + 1 - (dir == MAX_DIRS) as u32 * 2).dev(), dev);
                seen.push(h);
            }
        }
        let n = seen.len();
        seen.sort_by_key(|h| h.0);
        seen.dedup();
        assert_eq!(seen.len(), n, "different pairs are different homes");
        assert_eq!(Home::of(5, VACANT_DIR as u32), VACANT);
        assert_eq!(VACANT.dir(), VACANT_DIR as u32);
    }
}
