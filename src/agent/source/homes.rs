//! Where tracked files live, numbered so that an entry holds it in 2 bytes.
//!
//! An entry needs its file's device (half of its key) and its logs dir (for its
//! path). A node has a few devices and at most [`MAX_DIRS`] logs dirs, and nearly
//! every file of a dir is on the dir's device, so the pairs in use are few: an
//! entry keeps the index of its pair, a *home*, rather than a device index and a
//! dir index (2 bytes less in each of a million entries). The home also holds the
//! top 16 bits of the file's inode number, which the entry then need not (2 bytes
//! more): they are 0 on ext4 and nearly always on XFS and btrfs, and overlayfs puts
//! the few numbers of its layers there, so a dir's files share them.
//!
//! The lists are process-wide and only grow: a home is a pair of numbers, so
//! sources sharing a process share them harmlessly. Every lookup of a file by key
//! reads its device, so reading is lock-free; adding takes a lock (once a file).
//! The arrays' pages past the first are never touched, so they cost no memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Release};
use std::sync::Mutex;

/// The most logs dirs (sessions) followed: a dir's index is 16 bits in a home.
pub const MAX_DIRS: u32 = u16::MAX as u32 - 1;

/// The dir of no home: a vacant slot's (no logs dir has this index).
pub const VACANT_DIR: u16 = u16::MAX;

/// A vacant slot's home.
pub const VACANT: Home = Home(u16::MAX);

/// The index of a (device, logs dir, inode's top bits) triple in [`HOMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Home(u16);

/// The devices files were found on, in the order first seen. Linux numbers
/// devices in 32 bits, but only those in use need telling apart.
static DEVICES: [AtomicU64; u16::MAX as usize] = [const { AtomicU64::new(0) }; u16::MAX as usize];
static DEVICE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The homes: a device's index in [`DEVICES`] in bits 32-47, an inode's top 16 bits
/// in bits 16-31, a dir's index in the low 16. The last index is [`VACANT`], never
/// stored.
static HOMES: [AtomicU64; u16::MAX as usize] = [const { AtomicU64::new(0) }; u16::MAX as usize];

/// The homes by triple, to add one: held while adding (devices too).
static ADDING: Mutex<Option<HashMap<u64, u16>>> = Mutex::new(None);

/// The inode bits an entry keeps itself (the rest are its home's).
pub const INO_LOW: u64 = (1 << 48) - 1;

impl Home {
    /// The home of file `ino` on device `dev` in dir `dir` (added if new).
    ///
    /// # Panics
    /// When 65,535 devices or homes are in use: a node follows at most
    /// [`MAX_DIRS`] dirs, nearly all on one device each, with one inode prefix.
    pub fn of(dev: u64, ino: u64, dir: u32) -> Home {
        if dir == VACANT_DIR as u32 {
            return VACANT;
        }
        debug_assert!(dir <= MAX_DIRS);
        let mut adding = ADDING.lock().unwrap_or_else(|e| e.into_inner());
        let d = device_index(dev);
        let triple = (d as u64) << 32 | (ino >> 48) << 16 | dir as u64;
        let homes = adding.get_or_insert_with(HashMap::new);
        let n = homes.len();
        let i = *homes.entry(triple).or_insert_with(|| {
            assert!(n < VACANT.0 as usize, "files in over 65,534 (device, logs dir, inode prefix) triples");
            HOMES[n].store(triple, Release);
            n as u16
        });
        Home(i)
    }

    /// The same device and inode prefix in dir `dir`.
    pub fn with_dir(self, dir: u32) -> Home {
        Home::of(self.dev(), self.ino(0), dir)
    }

    fn triple(self) -> Option<u64> {
        (self != VACANT).then(|| HOMES[self.0 as usize].load(Acquire))
    }

    pub fn dev(self) -> u64 {
        self.triple().map_or(0, |t| DEVICES[(t >> 32) as usize].load(Acquire))
    }

    /// Whether a file on device `dev` whose inode has the top bits of `ino` lives
    /// here (one load of the triple: every lookup by key asks).
    pub fn holds(self, dev: u64, ino: u64) -> bool {
        self.triple().is_some_and(|t| t >> 16 & 0xFFFF == ino >> 48 && DEVICES[(t >> 32) as usize].load(Acquire) == dev)
    }

    /// The inode whose low 48 bits are `low`.
    pub fn ino(self, low: u64) -> u64 {
        self.triple().map_or(0, |t| (t >> 16 & 0xFFFF) << 48) | low
    }

    pub fn dir(self) -> u32 {
        self.triple().map_or(VACANT_DIR as u32, |t| (t & 0xFFFF) as u32)
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
                for ino in [5, u64::MAX, 0xABCD << 48 | 9] {
                    let h = Home::of(dev, ino, dir);
                    assert_eq!((h.dev(), h.dir(), h.ino(ino & INO_LOW)), (dev, dir, ino));
                    assert_ne!(h, VACANT);
                    assert_eq!(Home::of(dev, ino ^ 1, dir), h, "the same triple is the same home");
                    assert!(h.holds(dev, ino ^ 1) && !h.holds(dev, ino ^ 1 << 48) && !h.holds(dev ^ 1, ino));
                    let moved = h.with_dir(dir + 1 - (dir == MAX_DIRS) as u32 * 2);
                    assert_eq!((moved.dev(), moved.ino(7)), (dev, ino & !INO_LOW | 7));
                    seen.push(h);
                }
            }
        }
        let n = seen.len();
        seen.sort_by_key(|h| h.0);
        seen.dedup();
        assert_eq!(seen.len(), n, "different pairs are different homes");
        assert_eq!(Home::of(5, 1, VACANT_DIR as u32), VACANT);
        assert_eq!(VACANT.dir(), VACANT_DIR as u32);
    }
}
