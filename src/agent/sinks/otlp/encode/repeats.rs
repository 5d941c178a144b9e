//! The runs of a record's attributes that repeat from the last record of the same
//! file, and the two bodies they are written into.
//!
//! A record's attributes start with [`attrs::RUNS`] runs that change now and then
//! within a file: what it says of the file and its writer, then each id with its
//! name ([`attrs::each_in_run`]). For each of the last [`SLOTS`] files of a request,
//! [`Repeats`] keeps every run encoded, the record it was encoded from and where it
//! was last written. A run of a record that says the same (compared field by field,
//! [`attrs::same_in_run`]) is not encoded again: the gzip body ([`GzWriter`]) sends
//! it as a deflate match of its last copy, the plain body copies the kept bytes.
//! Both bodies are the same protobuf, byte for byte.
//!
//! After the runs, every slot holds one more: the key and framing of the record's
//! id (`log.record.uid`), the same in every record, so it extends the match.

use raylog_parsers::id::IdHasher;
use std::hash::Hasher;

use crate::agent::batch::{Batch, BatchRecord, Span};
use crate::agent::sinks::crc::Piece;
use crate::agent::sinks::gzip::{GzWriter, MIN_COPY, WINDOW};
use crate::agent::sinks::otlp::attrs;

/// Where an encoder writes a request's records.
pub trait Out {
    /// The body, to append bytes to.
    fn lit(&mut self) -> &mut Vec<u8>;
    /// Appends `bytes`, the same as those written `dist` bytes before (at least 3
    /// bytes, `dist` within [`WINDOW`] and not less than `bytes.len()`), whose CRC
    /// is that of `pieces` one after the other.
    fn repeat(&mut self, bytes: &[u8], dist: usize, pieces: &[Piece]);
    /// Bytes written so far, before compression.
    fn raw_len(&self) -> usize;
}

impl Out for GzWriter {
    fn lit(&mut self) -> &mut Vec<u8> {
        GzWriter::lit(self)
    }

    fn repeat(&mut self, bytes: &[u8], dist: usize, pieces: &[Piece]) {
        GzWriter::repeat_known(self, bytes, dist, pieces)
    }

    fn raw_len(&self) -> usize {
        GzWriter::raw_len(self)
    }
}

/// The uncompressed body, after `front` bytes left for the request's head.
pub struct Plain {
    out: Vec<u8>,
    front: usize,
}

impl Plain {
    pub fn new(mut out: Vec<u8>, front: usize) -> Plain {
        out.clear();
        out.resize(front, 0);
        Plain { out, front }
    }

    /// The buffer with `head` written just before the records, and where it starts.
    pub fn finish(mut self, head: &[u8]) -> (Vec<u8>, usize) {
        let start = self.front.checked_sub(head.len()).expect("room for the head was reserved");
        self.out[start..self.front].copy_from_slice(head);
        (self.out, start)
    }
}

impl Out for Plain {
    fn lit(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    fn repeat(&mut self, bytes: &[u8], dist: usize, _: &[Piece]) {
        let at = self.out.len() - dist;
        debug_assert!(dist >= bytes.len() && self.out[at..at + bytes.len()] == *bytes, "a true repeat");
        self.out.extend_from_slice(bytes);
    }

    fn raw_len(&self) -> usize {
        self.out.len() - self.front
    }
}

/// Files whose runs are kept. More would rarely help: at ~900 bytes a record, the
/// last record of a file that many files back is past deflate's 32 KiB window.
const SLOTS: usize = 32;
/// The runs of [`attrs::each_in_run`] and the record id's framing.
pub const RUNS: usize = attrs::RUNS + 1;
/// `Slot::at` of a run not written since it was encoded.
const NOWHERE: usize = usize::MAX;

/// The runs of the last files of one request.
pub struct Repeats {
    slots: Vec<Slot>,
    clock: u64,
    /// The slot used last: its file's next record is usually the next record.
    last: usize,
    /// A run being encoded.
    run: Vec<u8>,
    /// Never repeat (tests: the body without repeats, to compare).
    pub off: bool,
}

/// One file's runs, side by side in `bytes` as a record has them, so runs repeated
/// together are one match over one slice (one CRC update).
#[derive(Default)]
struct Slot {
    /// The file's name as the last record gave it (a batch shares one span between
    /// a file's consecutive records), and its hash.
    file: Span,
    hash: u64,
    /// When it was last used; 0 if empty.
    used: u64,
    bytes: Vec<u8>,
    /// Where each run ends in `bytes`.
    ends: [usize; RUNS],
    /// The entry each run was encoded from (valid while `used` is not 0).
    from: [u32; RUNS],
    /// Where each run was last written, or [`NOWHERE`].
    at: [usize; RUNS],
    /// Each run's version before (a Ray process's log names an id in one line and
    /// none in the next, or two ids in turns).
    before: [Before; RUNS],
    /// The CRC of each run, when known: kept while the run stays the same, so a
    /// record's repeat is not summed again (see [`crate::agent::sinks::crc`]).
    pieces: [Option<Piece>; RUNS],
}

/// A run's version before the one in [`Slot::bytes`].
#[derive(Default)]
struct Before {
    bytes: Vec<u8>,
    from: u32,
    at: usize,
}

impl Slot {
    fn run(&self, r: usize) -> std::ops::Range<usize> {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        start..self.ends[r]
    }
}

/// Puts `with` in the place of `range` of `bytes` (`Vec::splice`, without its
/// per-byte iterator: a tenth of the encoder's time when ids change often).
fn replace(bytes: &mut Vec<u8>, range: std::ops::Range<usize>, with: &[u8]) {
    let (len, tail) = (bytes.len(), bytes.len() - range.end);
    let end = range.start + with.len();
    if end > range.end {
        bytes.resize(len + end - range.end, 0);
    }
    bytes.copy_within(range.end..range.end + tail, end);
    bytes.truncate(end + tail);
    bytes[range.start..end].copy_from_slice(with);
}

impl Default for Repeats {
    fn default() -> Repeats {
        let slots = (0..SLOTS).map(|_| Slot::default()).collect();
        Repeats { slots, clock: 0, last: 0, run: Vec::new(), off: false }
    }
}

impl Repeats {
    /// Forgets the last request (runs are found within one body).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| s.used = 0);
        self.clock = 0;
    }

    /// The slot of entry `i` (`e`) with its runs brought up to date; `encode(run,
    /// buf)` writes a run's attributes of `e` into `buf` (empty).
    pub fn update(
        &mut self,
        batch: &Batch,
        i: u32,
        e: &BatchRecord,
        encode: &mut impl FnMut(usize, &mut Vec<u8>),
    ) -> usize {
        let s = self.find(batch, e);
        let slot = &mut self.slots[s];
        for r in 0..RUNS {
            let same_as = |from: u32| {
                (batch.entries.get(from as usize))
                    .is_some_and(|was| r == attrs::RUNS || attrs::same_in_run(r, batch, was, e))
            };
            if !same_as(slot.from[r]) {
                let range = slot.run(r);
                let before = &mut slot.before[r];
                self.run.clear();
                if same_as(before.from) {
                    // Back to the version before: its bytes, and where they were written.
                    self.run.extend_from_slice(&before.bytes);
                } else {
                    encode(r, &mut self.run);
                    before.at = NOWHERE;
                }
                slot.pieces[r] = None;
                before.bytes.clear();
                before.bytes.extend_from_slice(&slot.bytes[range.clone()]);
                (before.from, before.at, slot.at[r]) = (slot.from[r], slot.at[r], before.at);
                let grown = self.run.len() as isize - range.len() as isize;
                replace(&mut slot.bytes, range, &self.run);
                slot.ends[r..].iter_mut().for_each(|end| *end = end.wrapping_add_signed(grown));
            }
            slot.from[r] = i;
        }
        s
    }

    /// Finds `e`'s file among the slots, or empties the least recently used for it
    /// (its runs then made from `e` by [`Repeats::update`]).
    fn find(&mut self, batch: &Batch, e: &BatchRecord) -> usize {
        self.clock += 1;
        let last = &mut self.slots[self.last];
        if last.used != 0 && last.file == e.file {
            last.used = self.clock;
            return self.last;
        }
        let name = batch.str(e.file);
        let mut h = IdHasher::default();
        h.write(name.as_bytes());
        let hash = h.finish();
        let found = self.slots.iter().position(|s| s.used != 0 && s.hash == hash && batch.str(s.file) == name);
        let s = found.unwrap_or_else(|| {
            let (s, _) = self.slots.iter().enumerate().min_by_key(|(_, s)| s.used).expect("slots");
            s
        });
        let slot = &mut self.slots[s];
        if found.is_none() {
            // Made from `e` by `update`: its runs are compared with nothing.
            slot.bytes.clear();
            slot.ends = [0; RUNS];
            slot.from = [u32::MAX; RUNS];
            slot.before.iter_mut().for_each(|b| b.from = u32::MAX);
            slot.pieces = [None; RUNS];
        }
        (slot.file, slot.hash, slot.used) = (e.file, hash, self.clock);
        self.last = s;
        s
    }

    /// The bytes of the runs of slot `s`.
    pub fn len(&self, s: usize) -> usize {
        self.slots[s].bytes.len()
    }

    /// Writes the runs of slot `s`: as repeats of their last copy when it is in
    /// the window, and as one repeat for runs in a row whose last copies were side
    /// by side (as they are when the runs before them kept their size).
    pub fn write(&mut self, s: usize, o: &mut impl Out) {
        let slot = &mut self.slots[s];
        let base = o.raw_len();
        // The distance run `r` repeats from, or None if it is written out.
        let dist = |slot: &Slot, r: usize| {
            let at = base + slot.run(r).start;
            let dist = at.wrapping_sub(slot.at[r]);
            (!self.off && slot.at[r] != NOWHERE && dist <= WINDOW).then_some(dist)
        };
        let mut r = 0;
        while r < RUNS {
            if slot.run(r).is_empty() {
                r += 1;
                continue;
            }
            let d = dist(slot, r);
            let mut end = r + 1;
            while end < RUNS && (slot.run(end).is_empty() || dist(slot, end) == d) {
                end += 1;
            }
            let bytes = &slot.bytes[slot.run(r).start..slot.run(end - 1).end];
            match d {
                // A short repeat costs more as a match than as literals.
                Some(d) if bytes.len() >= MIN_COPY => {
                    let mut pieces = [Piece::default(); RUNS];
                    let mut n = 0;
                    for k in r..end {
                        let run = slot.run(k);
                        if !run.is_empty() {
                            pieces[n] = *slot.pieces[k].get_or_insert_with(|| Piece::of(&slot.bytes[run]));
                            n += 1;
                        }
                    }
                    o.repeat(bytes, d, &pieces[..n])
                }
                _ => o.lit().extend_from_slice(bytes),
            }
            r = end;
        }
        for r in 0..RUNS {
            slot.at[r] = base + slot.run(r).start;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replace_grows_shrinks_and_keeps_the_tail() {
        for (range, with, want) in [
            (1..3, &b"XYZW"[..], &b"aXYZWdef"[..]),
            (1..5, b"X", b"aXf"),
            (0..0, b"XY", b"XYabcdef"),
            (6..6, b"XY", b"abcdefXY"),
            (2..4, b"XY", b"abXYef"),
            (0..6, b"", b""),
        ] {
            let mut bytes = b"abcdef".to_vec();
            super::replace(&mut bytes, range.clone(), with);
            assert_eq!(bytes, want, "{range:?}");
        }
    }
}
