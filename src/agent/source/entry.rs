//! One tracked file's entry, in 58 bytes.
//!
//! A node with a million finished workers keeps a million of these, so every
//! byte is a megabyte: the device, logs dir and the inode's top 16 bits are a
//! 2-byte index into a process-wide list of the few triples in use ([`Home`]),
//! the parser context a 4-byte reference into the table's pool ([`Ctx`]), sizes
//! and offsets 48 bits (256 TiB), the fingerprint's hash the 48 bits that count
//! ([`Fingerprint::HASH_MASK`]) and its length (at most 1,025) shares 16 bits
//! with the flags, where the file stands in time is 4 bytes from the last
//! record's time (or, rarely, kept by the table), and the entry is packed to an
//! alignment of 2, so that no padding rounds it up to a multiple of 4 or 8. The
//! file's incarnation (`checkpoint::born`, 4 bytes) tells it from an earlier file
//! on the same inode. What
//! the reader asks about a file also depends on whether it is open: [`View`]
//! pairs an entry with its open state.

use std::time::Instant;

use super::contexts::Ctx;
use super::homes::{Home, INO_LOW, VACANT};
use super::names::Name;
use super::tail::Tailed;
use crate::agent::checkpoint::{FileKey, Fingerprint, FINGERPRINT_MAX};

/// A coarse clock: tenths of a second since the agent started (13 years fit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(u32);

impl Tick {
    fn start() -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *START.get_or_init(Instant::now)
    }

    pub fn now() -> Tick {
        Tick((Tick::start().elapsed().as_millis() / 100).min(u32::MAX as u128) as u32)
    }

    /// Time since this tick (to a tenth of a second).
    pub fn elapsed(self) -> std::time::Duration {
        std::time::Duration::from_millis(100 * Tick::now().0.saturating_sub(self.0) as u64)
    }
}

/// A 48-bit number (sizes and offsets: 256 TiB), aligned to 2 bytes so that it
/// packs with the 16-bit fields.
#[derive(Clone, Copy, Debug, Default)]
struct U48([u16; 3]);

impl U48 {
    const MAX: u64 = (1 << 48) - 1;

    fn new(v: u64) -> U48 {
        let v = v.min(U48::MAX);
        U48([v as u16, (v >> 16) as u16, (v >> 32) as u16])
    }

    fn get(self) -> u64 {
        self.0[0] as u64 | (self.0[1] as u64) << 16 | (self.0[2] as u64) << 32
    }
}

/// A 64-bit number aligned to 4 bytes (an entry of `u64`s would be padded to a
/// multiple of 8).
#[derive(Clone, Copy, Debug, Default)]
struct U64([u32; 2]);

impl U64 {
    fn new(v: u64) -> U64 {
        U64([v as u32, (v >> 32) as u32])
    }

    fn get(self) -> u64 {
        self.0[0] as u64 | (self.0[1] as u64) << 32
    }

    fn signed(v: i64) -> U64 {
        U64::new(v as u64)
    }

    fn get_signed(self) -> i64 {
        self.get() as i64
    }
}

/// One tracked file. Packed: its fields are read by value, never borrowed.
#[repr(C, packed(2))]
pub struct Tracked {
    /// The inode's low 48 bits (the rest are the home's).
    ino: U48,
    /// Its device, logs dir and the top 16 bits of its inode (see [`Tracked::dir`]).
    home: Home,
    /// Path inside the logs dir (`events/event_GCS.log`), in the table's [`Names`](super::names::Names).
    pub name: Name,
    /// Size at the last stat.
    size: U48,
    /// Where reading resumes when the file is opened: the first byte not yet
    /// emitted, the parser context there, and the last time a record there had.
    resume: U48,
    /// Shared with the files that ended in the same context (the table's pool).
    pub(super) ctx: Ctx,
    /// The time of the last record before `resume` that had one (see
    /// [`Tracked::last_time`]), or with [`NO_LAST`] the head while there is none.
    /// `i64::MIN`: none (an `Option` would take 8 bytes more in each of a million
    /// entries).
    time: U64,
    /// Fingerprint of the file's start, as last known (see [`Tracked::fingerprint`]):
    /// the 48 bits of its hash that count.
    fp_hash: U48,
    /// The fingerprint's length (low [`FP_BITS`] bits: at most 1,025, or
    /// [`FP_DAMAGED`]), then [`UNVERIFIED`], [`OPEN`], the [`Place`] and [`NO_LAST`].
    bits: u16,
    /// Where the file stands in time while closed, in nanoseconds after `time`:
    /// the record it stopped at, else the last one read (so mostly 0). Beyond
    /// ±2.1 s (closed with a later record kept back), [`HEAD_ASIDE`]: the table
    /// keeps it. See `Tailed::head`.
    head_delta: i32,
    /// When data last arrived, or the file was last found changed ([`Tick`]: a
    /// 16-byte `Instant` in each of 100,000 entries would cost 1 MiB more).
    pub active: Tick,
    /// The number of the last dir listing that saw it (see `Source::rescan`).
    pub listed: u16,
    /// Its incarnation (`checkpoint::born`), as two halves (alignment 2).
    born: [u16; 2],
}

const FP_BITS: u16 = 11;
const FP_MASK: u16 = (1 << FP_BITS) - 1;
/// A length no real fingerprint has (from a damaged checkpoint).
const FP_DAMAGED: u16 = FP_MASK;
/// The resume point came from a checkpoint and has not been checked against the
/// file's fingerprint yet (done when it is first opened).
const UNVERIFIED: u16 = 1 << FP_BITS;
/// The file has a [`Tailed`] in the table's open files.
pub(super) const OPEN: u16 = 1 << (FP_BITS + 1);
const PLACE_SHIFT: u16 = FP_BITS + 2;
const PLACE_MASK: u16 = 3 << PLACE_SHIFT;
/// `time` is the head: no record before `resume` had a time.
const NO_LAST: u16 = 1 << 15;
/// A `head_delta` that says the table keeps the head (`Table::head_of`).
const HEAD_ASIDE: i32 = i32::MIN;

const _: () = assert!(FINGERPRINT_MAX + 1 < FP_DAMAGED as u64);

/// Where a tracked file is, as far as the reader knows.
///
/// A file is forgotten only on proof that it left: its descriptor says it has no
/// name left (deleted), or a complete listing missed a file already `Unknown`. A
/// path that names another file proves nothing: rotation renames every file of a
/// family, and inotify reports the two halves of a rename in separate batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At `rel`.
    Here,
    /// Not at `rel` any more (renamed, or deleted): the next listing looks for it by
    /// inode. Not closed meanwhile, as it cannot be reopened by its path.
    Unknown,
    /// Deleted, or in no logs dir: read to its end if open, then forgotten.
    Departed,
}

impl Tracked {
    /// A closed file at `name` of dir `dir`, read from its start.
    pub fn new(key: FileKey, dir: u32, name: Name, size: u64, listed: u16) -> Tracked {
        Tracked {
            ino: U48::new(key.ino & INO_LOW),
            home: Home::of(key.dev, key.ino, dir),
            name,
            size: U48::new(size),
            resume: U48::default(),
            ctx: Ctx::NONE,
            time: U64::signed(i64::MIN),
            fp_hash: U48::default(),
            bits: NO_LAST,
            head_delta: 0,
            active: Tick::now(),
            listed,
            born: [0; 2],
        }
    }

    /// Its incarnation (`checkpoint::born`).
    pub fn born(&self) -> u32 {
        self.born[0] as u32 | (self.born[1] as u32) << 16
    }

    pub fn set_born(&mut self, born: u32) {
        self.born = [born as u16, (born >> 16) as u16];
    }

    pub fn key(&self) -> FileKey {
        FileKey { dev: self.home.dev(), ino: self.home.ino(self.ino.get()) }
    }

    /// Whether this is file `key` (looking its device up only if the inode is its).
    pub fn is(&self, key: &FileKey) -> bool {
        self.ino.get() == key.ino & INO_LOW && self.home.holds(key.dev, key.ino)
    }

    pub fn size(&self) -> u64 {
        self.size.get()
    }

    pub fn set_size(&mut self, size: u64) {
        self.size = U48::new(size);
    }

    pub fn resume(&self) -> u64 {
        self.resume.get()
    }

    pub fn set_resume(&mut self, at: u64) {
        self.resume = U48::new(at);
    }

    pub fn unverified(&self) -> bool {
        self.bits & UNVERIFIED != 0
    }

    pub fn set_unverified(&mut self, yes: bool) {
        self.bits = if yes { self.bits | UNVERIFIED } else { self.bits & !UNVERIFIED };
    }

    /// Whether the file has a descriptor (its [`Tailed`] is `Table::open_of`).
    pub fn is_open(&self) -> bool {
        self.bits & OPEN != 0
    }

    pub(super) fn set_open(&mut self, yes: bool) {
        self.bits = if yes { self.bits | OPEN } else { self.bits & !OPEN };
    }

    pub fn place(&self) -> Place {
        match (self.bits & PLACE_MASK) >> PLACE_SHIFT {
            0 => Place::Here,
            1 => Place::Unknown,
            _ => Place::Departed,
        }
    }

    pub fn set_place(&mut self, p: Place) {
        self.bits = (self.bits & !PLACE_MASK) | ((p as u16) << PLACE_SHIFT);
    }

    /// Index of its logs dir in the source's dir list.
    pub fn dir(&self) -> u32 {
        self.home.dir()
    }

    pub(super) fn set_dir(&mut self, dir: u32) {
        self.home = self.home.with_dir(dir);
    }

    /// Whether the slot holds no file.
    pub(super) fn vacant(&self) -> bool {
        self.home == VACANT
    }

    pub fn fingerprint(&self) -> Fingerprint {
        let len = match self.bits & FP_MASK {
            FP_DAMAGED => u64::MAX,
            n => n as u64,
        };
        Fingerprint { len, hash: self.fp_hash.get() }
    }

    pub fn set_fingerprint(&mut self, fp: Fingerprint) {
        // A length no real fingerprint has (a damaged checkpoint) stays one: it
        // will not match the file, which is then read from its start.
        let len = if fp.len == u64::MAX { FP_DAMAGED } else { fp.len.min(FINGERPRINT_MAX + 1) as u16 };
        self.bits = (self.bits & !FP_MASK) | len;
        self.fp_hash = U48::new(fp.hash & Fingerprint::HASH_MASK);
    }

    /// The time of the last record before `resume` that had one of its own.
    pub fn last_time(&self) -> Option<i64> {
        let t = self.time.get_signed();
        (self.bits & NO_LAST == 0 && t != i64::MIN).then_some(t)
    }

    /// Where the file stands in time while closed, unless the table keeps it
    /// (`Table::head_of` knows either way).
    pub(super) fn head_here(&self) -> Option<i64> {
        (self.head_delta != HEAD_ASIDE).then(|| self.time.get_signed().saturating_add(self.head_delta as i64))
    }

    /// Sets the last record's time and the head (see `Tailed::head`). False: the
    /// head is too far from it to be held here, and the table must keep it.
    #[must_use]
    pub(super) fn set_times(&mut self, last: Option<i64>, head: i64) -> bool {
        let base = last.unwrap_or(head);
        self.time = U64::signed(base);
        self.bits = if last.is_some() { self.bits & !NO_LAST } else { self.bits | NO_LAST };
        let delta = i32::try_from(head as i128 - base as i128).ok().filter(|&d| d != HEAD_ASIDE);
        self.head_delta = delta.unwrap_or(HEAD_ASIDE);
        delta.is_some()
    }
}

/// A tracked file with its open state, if it has one: what the reader asks about
/// a file (how far it is read, whether it has work) depends on both.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub t: &'a Tracked,
    pub open: Option<&'a Tailed>,
    /// The head of a closed file whose entry does not hold it (`Table::view_of`
    /// looks it up).
    pub(super) head_aside: i64,
}

impl View<'_> {
    /// Bytes not yet read (for a closed file: since its resume point).
    pub fn behind(&self) -> u64 {
        match self.open {
            Some(o) => o.behind(),
            None => self.t.size().saturating_sub(self.t.resume()),
        }
    }

    /// Where reading stands: the parser's offset if open, else the resume point.
    pub fn read_to(&self) -> u64 {
        match self.open {
            Some(o) => o.parser.offset(),
            None => self.t.resume(),
        }
    }

    /// Whether reading may emit something: bytes not read yet, or a record the time
    /// limit kept back.
    pub fn has_work(&self) -> bool {
        match self.open {
            Some(o) => o.has_work() || o.size < o.parser.offset() || o.size < o.fingerprint.len,
            None => self.t.size() != self.t.resume() || self.t.size() < self.t.fingerprint().len,
        }
    }

    /// Where the file stands in time, for reading files in time order (see
    /// `Tailed::head`).
    pub fn head(&self) -> i64 {
        match self.open {
            Some(o) => o.head(),
            None => self.t.head_here().unwrap_or(self.head_aside),
        }
    }
}

impl std::ops::Deref for View<'_> {
    type Target = Tracked;

    fn deref(&self) -> &Tracked {
        self.t
    }
}
