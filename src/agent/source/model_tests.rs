//! Model-based test of the source: every line exactly once, in file order, with the
//! document id it would have had without the faults, through random interleavings.
//!
//! A proptest state machine drives the real reader ([`Rig`], `max_open_files` 2)
//! round by round against real files, and a model of what was written. Each step is
//! a file-system operation as Ray and logrotate make them (appends, rename rotation
//! with shifted backups, copy-truncate, moves into `old/`, deletes, new sessions),
//! a line written in two parts (the reader may look in between), a close as
//! `close_inactive` or the cap makes one, a restart (the agent killed, a new reader
//! resuming from the checkpoints of the batches acknowledged, the last few batches
//! not), or a round of the reader with a wake batch drawn from the inotify events the
//! operations produced: split across rounds, reordered, dropped, or replaced by an
//! overflow; a listing may fail, and a file may change between the reader taking in
//! its events and reading.
//!
//! The lines are prints (no time of their own): a line sent in a batch a restart
//! left unacknowledged must come again, with the document id and the time it was
//! sent with (#57), and is the only kind of line that may come twice.
//!
//! The model knows every line's file (inode and content generation), offset and
//! document id. Each record sent must match one line not sent before, after the
//! previous record of its file. At the end (an overflow, then rounds until the reader
//! has settled) every line must have been sent, except where Ray destroyed it before
//! it could be read: a file deleted or overwritten while the reader held no
//! descriptor to it, or bytes a truncation removed.
//!
//! `RAYLOG_MODEL_CASES` sets the number of cases (96 by default: seconds in CI;
//! thousands to hunt); the regressions proptest found are kept in
//! `proptest-regressions/agent/source/model_tests.txt` and run first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::tests::{write, Rig, Sent};
use super::*;

/// Live files (one rotating family each) at the start; new sessions add one each.
const STREAMS: usize = 3;
/// Rotated files kept (`x.1` … `x.BACKUPS`); the oldest is overwritten by the next.
const BACKUPS: usize = 2;

#[derive(Clone, Debug)]
enum Fs {
    Write {
        stream: usize,
        lines: usize,
    },
    /// `x.(i)` → `x.(i+1)` from the oldest, then `x` → `x.1` (Ray's rotating handlers).
    Rotate {
        stream: usize,
    },
    /// Shift the backups, copy `x` to `x.1`, write `between` lines to `x` (after
    /// the copy, so only in `x`), truncate `x` in place (logrotate).
    CopyTruncate {
        stream: usize,
        between: usize,
    },
    /// The family moves into `old/` (Ray does this with a dead worker's files).
    MoveOld {
        stream: usize,
    },
    /// One file of the family is deleted (`which` 0 is `x`, `i` is `x.i`).
    Delete {
        stream: usize,
        which: usize,
    },
    NewSession,
    /// The first `cut` bytes of a line (no newline yet); the next operation on the
    /// stream writes the rest first, as a writer finishing its line.
    Partial {
        stream: usize,
        cut: usize,
    },
}

#[derive(Clone, Debug)]
enum Wake {
    /// Pending event `i` is delivered now when bit `i` of `take` is set, dropped for
    /// good when that of `drop` is, else kept for a later round; delivered ones are
    /// shuffled by `seed`.
    Events { take: u64, drop: u64, seed: u64 },
    /// inotify overflowed: look at everything.
    Overflow,
    /// A round woken by the timer.
    Nothing,
}

#[derive(Clone, Debug)]
enum Step {
    Fs(Fs),
    /// A reader round; `mid` happens after it took in its changes, before it reads.
    Round {
        wake: Wake,
        mid: Option<Fs>,
        fail_listing: bool,
    },
    /// A file the reader may close is closed (by `close_inactive` or at the cap).
    Close {
        pick: usize,
    },
    /// The agent killed and started again from its saved checkpoints, the last
    /// `unacked` batches never acknowledged (their records are sent again, with the
    /// same document id and time).
    Restart {
        unacked: usize,
    },
}

fn fs_op() -> impl Strategy<Value = Fs> {
    let s = 0..8usize;
    prop_oneof![
        6 => (s.clone(), 1..4usize).prop_map(|(stream, lines)| Fs::Write { stream, lines }),
        3 => s.clone().prop_map(|stream| Fs::Rotate { stream }),
        1 => (s.clone(), prop_oneof![3 => Just(0usize), 1 => 1..3usize])
            .prop_map(|(stream, between)| Fs::CopyTruncate { stream, between }),
        1 => s.clone().prop_map(|stream| Fs::MoveOld { stream }),
        1 => (s.clone(), 0..=BACKUPS).prop_map(|(stream, which)| Fs::Delete { stream, which }),
        1 => Just(Fs::NewSession),
        1 => (s, 1..12usize).prop_map(|(stream, cut)| Fs::Partial { stream, cut }),
    ]
}

fn wake() -> impl Strategy<Value = Wake> {
    prop_oneof![
        1 => (any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(take, drop, seed)| Wake::Events { take: take | 1, drop: drop & !take, seed }),
        2 => any::<u64>().prop_map(|seed| Wake::Events { take: u64::MAX, drop: 0, seed }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(take, seed)| Wake::Events { take, drop: 0, seed }),
        1 => Just(Wake::Overflow),
        1 => Just(Wake::Nothing),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => fs_op().prop_map(Step::Fs),
        4 => (wake(), proptest::option::weighted(0.2, fs_op()), proptest::bool::weighted(0.1))
            .prop_map(|(wake, mid, fail_listing)| Step::Round { wake, mid, fail_listing }),
        2 => (0..4usize).prop_map(|pick| Step::Close { pick }),
        1 => (0..3usize).prop_map(|unacked| Step::Restart { unacked }),
    ]
}

/// Lines of copy-truncate copies sent from both the copy and its original, and
/// lines of copies, over all cases (printed at the end).
static TWIN_SENT_TWICE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static TWIN_LINES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One line the model expects to be sent.
struct Line {
    message: String,
    offset: u64,
    /// Index of its file in [`Model::files`], and the file's content generation.
    file: usize,
    generation: u32,
    sent: u32,
    /// The batch (the agent's incarnation, the batch's number) and the time it
    /// was last sent with.
    sent_in: Option<((usize, u64), i64)>,
    /// Sent in a batch a restart left unacknowledged: it must come again, with
    /// the time it had.
    again: Option<i64>,
    /// Destroyed before it may have been read (see the module docs).
    may_miss: bool,
    /// The same bytes in the other file of a copy-truncate (see `copy_truncate`).
    twin: Option<usize>,
}

/// One inode as the model knows it.
struct File {
    key: FileKey,
    born: u32,
    first: Option<String>,
    len: u64,
    generation: u32,
}

/// A family of rotated files: `dir/base`, `dir/base.1`, …
struct Stream {
    dir: PathBuf,
    base: String,
}

struct Model {
    rig: Rig,
    streams: Vec<Stream>,
    sessions: usize,
    /// Path → index in `files`.
    at: HashMap<PathBuf, usize>,
    files: Vec<File>,
    lines: Vec<Line>,
    by_id: HashMap<u128, usize>,
    /// Offset of the last record sent, by (file, generation).
    last: HashMap<(usize, u32), u64>,
    /// inotify's events not delivered yet.
    events: Vec<PathBuf>,
    written: usize,
    /// A line begun and not finished: its stream, message and the bytes written.
    partial: Option<(usize, String, usize)>,
    restarts: usize,
}

impl Model {
    fn new() -> Model {
        // A partial line waits for its newline however long the writer takes.
        let rig = Rig::with_source("model", 2, true, "partial_line_timeout = \"1h\"\n");
        let logs = rig.logs();
        let streams = (0..STREAMS).map(|i| Stream { dir: logs.clone(), base: name(i) }).collect();
        Model {
            rig,
            streams,
            sessions: 1,
            at: HashMap::new(),
            files: vec![],
            lines: vec![],
            by_id: HashMap::new(),
            last: HashMap::new(),
            events: vec![],
            written: 0,
            partial: None,
            restarts: 0,
        }
    }

    fn path(&self, stream: usize, which: usize) -> PathBuf {
        let s = &self.streams[stream];
        match which {
            0 => s.dir.join(&s.base),
            i => s.dir.join(format!("{}.{i}", s.base)),
        }
    }

    /// Whether the reader holds a descriptor to file `f` (then it reads it to the
    /// end even after Ray deletes it).
    fn reader_has_open(&self, f: usize) -> bool {
        self.rig.source.table.get(&self.files[f].key).is_some_and(|t| t.is_open())
    }

    /// File `f`'s lines not sent yet may be missed from now on.
    fn destroyed(&mut self, f: usize, even_if_open: bool) {
        if !even_if_open && self.reader_has_open(f) {
            return;
        }
        let g = self.files[f].generation;
        for l in self.lines.iter_mut().filter(|l| l.file == f && l.generation == g) {
            l.may_miss = true;
        }
    }

    fn append(&mut self, path: &Path, text: &str, messages: Vec<String>) {
        write(path, text);
        self.events.push(path.to_path_buf());
        self.register(path, messages);
    }

    /// Lines now complete at the end of the file at `path`.
    fn register(&mut self, path: &Path, messages: Vec<String>) {
        let f = match self.at.get(path) {
            Some(&f) => f,
            None => {
                // The incarnation as the file system gives it (its birth time, else
                // its inode's generation).
                let md = std::fs::metadata(path).unwrap();
                let file = std::fs::File::open(path).unwrap();
                let born = crate::agent::checkpoint::born::of_file(&file, &md);
                self.files.push(File { key: FileKey::of(&md), born, first: None, len: 0, generation: 0 });
                self.at.insert(path.to_path_buf(), self.files.len() - 1);
                self.files.len() - 1
            }
        };
        for m in messages {
            let file = &mut self.files[f];
            let first = file.first.get_or_insert_with(|| m.clone()).clone();
            let id = doc_id(file.key, file.born, &first, file.len, &m);
            let line = Line {
                offset: file.len,
                file: f,
                generation: file.generation,
                sent: 0,
                sent_in: None,
                again: None,
                may_miss: false,
                twin: None,
                message: m,
            };
            file.len += line.message.len() as u64 + 1;
            self.by_id.insert(id, self.lines.len());
            self.lines.push(line);
        }
    }

    fn rename(&mut self, from: &Path, to: &Path) {
        let Some(f) = self.at.remove(from) else { return };
        if let Some(old) = self.at.remove(to) {
            self.destroyed(old, false);
        }
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::rename(from, to).unwrap();
        self.at.insert(to.to_path_buf(), f);
        self.events.extend([from.to_path_buf(), to.to_path_buf()]);
    }

    /// Shifts `x.i` → `x.(i+1)`, the oldest overwriting what is past [`BACKUPS`].
    fn shift_backups(&mut self, stream: usize) {
        for i in (1..BACKUPS).rev() {
            let (from, to) = (self.path(stream, i), self.path(stream, i + 1));
            self.rename(&from, &to);
        }
    }

    fn apply(&mut self, op: &Fs) {
        if std::env::var_os("RAYLOG_MODEL_DEBUG").is_some() {
            eprintln!("fs {op:?}");
        }
        self.finish_partial(op);
        match *op {
            Fs::Write { stream, lines } => {
                let stream = stream % self.streams.len();
                let messages: Vec<String> = (0..lines)
                    .map(|_| {
                        self.written += 1;
                        format!("L{} of stream {stream}", self.written)
                    })
                    .collect();
                let text: String = messages.iter().map(|m| format!("{m}\n")).collect();
                self.append(&self.path(stream, 0), &text, messages);
            }
            Fs::Rotate { stream } => {
                let stream = stream % self.streams.len();
                if self.at.contains_key(&self.path(stream, 0)) {
                    self.shift_backups(stream);
                    self.rename(&self.path(stream, 0), &self.path(stream, 1));
                }
            }
            Fs::CopyTruncate { stream, between } => self.copy_truncate(stream % self.streams.len(), between),
            Fs::MoveOld { stream } => {
                let stream = stream % self.streams.len();
                let s = &self.streams[stream];
                if s.dir.ends_with("old") {
                    return;
                }
                let old = s.dir.join("old");
                std::fs::create_dir_all(&old).unwrap();
                for which in 0..=BACKUPS {
                    let from = self.path(stream, which);
                    let to = old.join(from.file_name().unwrap());
                    self.rename(&from, &to);
                }
                self.events.push(old.clone());
                self.streams[stream].dir = old;
            }
            Fs::Delete { stream, which } => {
                let path = self.path(stream % self.streams.len(), which);
                if let Some(f) = self.at.remove(&path) {
                    self.destroyed(f, false);
                    std::fs::remove_file(&path).unwrap();
                    self.events.push(path);
                }
            }
            Fs::NewSession => self.new_session(),
            Fs::Partial { stream, cut } => {
                let stream = stream % self.streams.len();
                self.written += 1;
                let message = format!("L{} of stream {stream}", self.written);
                let cut = cut.min(message.len() - 1);
                write(&self.path(stream, 0), &message[..cut]);
                self.events.push(self.path(stream, 0));
                self.partial = Some((stream, message, cut));
            }
        }
    }

    /// Before `op` touches the stream with a line begun, its writer finishes it.
    fn finish_partial(&mut self, op: &Fs) {
        let Some((stream, _, _)) = &self.partial else { return };
        let touched = match *op {
            Fs::Write { stream: s, .. }
            | Fs::Rotate { stream: s }
            | Fs::CopyTruncate { stream: s, .. }
            | Fs::MoveOld { stream: s }
            | Fs::Delete { stream: s, .. } => s % self.streams.len() == *stream,
            // One line begun at a time.
            Fs::Partial { .. } => true,
            Fs::NewSession => false,
        };
        if touched {
            let (stream, message, cut) = self.partial.take().unwrap();
            let path = self.path(stream, 0);
            write(&path, &format!("{}\n", &message[cut..]));
            self.events.push(path.clone());
            self.register(&path, vec![message]);
        }
    }

    fn copy_truncate(&mut self, stream: usize, between: usize) {
        let path = self.path(stream, 0);
        let Some(&f) = self.at.get(&path) else { return };
        self.shift_backups(stream);
        let copy = self.path(stream, 1);
        if let Some(old) = self.at.remove(&copy) {
            self.destroyed(old, false);
            std::fs::remove_file(&copy).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let messages: Vec<String> = text.lines().map(str::to_string).collect();
        let (originals, g) = (self.lines.len(), self.files[f].generation);
        self.append(&copy, &text, messages);
        // Each line of the copy is the twin of the line at its offset in `x`: one
        // of the two is sent, never both (the reader read it as `x`'s, or from the
        // copy), unless the truncation destroyed `x`'s before it was read.
        let at: HashMap<u64, usize> = (0..originals)
            .filter(|&i| self.lines[i].file == f && self.lines[i].generation == g)
            .map(|i| (self.lines[i].offset, i))
            .collect();
        for c in originals..self.lines.len() {
            if let Some(&o) = at.get(&self.lines[c].offset) {
                (self.lines[c].twin, self.lines[o].twin) = (Some(o), Some(c));
                TWIN_LINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if between > 0 {
            self.apply(&Fs::Write { stream, lines: between });
        }
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
        // What the reader had not read of it is gone, descriptor or not.
        self.destroyed(f, true);
        let file = &mut self.files[f];
        (file.len, file.first, file.generation) = (0, None, file.generation + 1);
        self.events.push(path);
    }

    fn new_session(&mut self) {
        if self.sessions >= 3 {
            return;
        }
        self.sessions += 1;
        let session =
            self.rig.dir.join(format!("ray/session_2026-11-30_09-0{}-00_000000_{}", self.sessions, self.sessions));
        let logs = session.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        self.events.push(session);
        self.streams.push(Stream { dir: logs, base: name(self.streams.len()) });
        let stream = self.streams.len() - 1;
        self.apply(&Fs::Write { stream, lines: 2 });
    }

    /// The changes a round is woken with.
    fn changes(&mut self, w: &Wake) -> Changes {
        match *w {
            Wake::Events { take, drop, seed } => {
                let mut paths = vec![];
                let mut kept = vec![];
                for (i, p) in std::mem::take(&mut self.events).into_iter().enumerate() {
                    let bit = 1u64 << (i % 64);
                    if take & bit != 0 {
                        paths.push(p);
                    } else if drop & bit == 0 {
                        kept.push(p);
                    }
                }
                self.events = kept;
                shuffle(&mut paths, seed);
                Changes { paths, everything: false }
            }
            Wake::Overflow => {
                self.events.clear();
                Changes { paths: vec![], everything: true }
            }
            Wake::Nothing => Changes::default(),
        }
    }

    fn round(&mut self, wake: &Wake, mid: Option<&Fs>, fail_listing: bool) -> Result<(), TestCaseError> {
        let changes = self.changes(wake);
        self.rig.source.list_fault = fail_listing.then(|| self.rig.logs());
        self.rig.source.look(changes);
        self.rig.source.list_fault = None;
        if let Some(op) = mid {
            self.apply(op);
        }
        let sent = self.rig.rest_of_round();
        if std::env::var_os("RAYLOG_MODEL_DEBUG").is_some() {
            for k in self.rig.source.table.open_keys() {
                let o = self.rig.source.table.open_of(&k).unwrap();
                let held = self.rig.source.enrich.hold.holds_file(&k);
                eprintln!(
                    "  open {} read {} unemitted {} held {held}",
                    k.ino,
                    o.parser.offset(),
                    o.parser.unemitted_offset()
                );
            }
            eprintln!(
                "round {wake:?} mid {mid:?} fail {fail_listing}: {:?}",
                sent.iter().map(|s| (&s.message, s.offset, s.time % 10_000_000)).collect::<Vec<_>>()
            );
        }
        self.check(&sent)
    }

    fn close(&mut self, pick: usize) {
        let s = &mut self.rig.source;
        let mut keys: Vec<FileKey> = s.table.open_keys().into_iter().filter(|k| s.closable(*k)).collect();
        keys.sort();
        if !keys.is_empty() {
            s.close(keys[pick % keys.len()]);
        }
    }

    /// Each record sent is a line written and not sent before, after the last
    /// record sent of its file, with that line's offset and document id.
    fn check(&mut self, sent: &[Sent]) -> Result<(), TestCaseError> {
        for s in sent {
            let Some(&i) = self.by_id.get(&s.doc_id) else {
                self.dump();
                return Err(TestCaseError::fail(format!("{s:?}: no line was written with that document id")));
            };
            let l = &mut self.lines[i];
            prop_assert_eq!((&s.message, s.offset), (&l.message, l.offset), "record of document id {:x}", s.doc_id);
            l.sent += 1;
            prop_assert_eq!(l.sent, 1, "{:?} sent twice", s.message);
            // Read again after a restart: the same entry (its id matched above).
            if let Some(time) = l.again.take() {
                prop_assert_eq!(s.time, time, "{:?} sent again after a restart with another time", s.message);
            }
            l.sent_in = Some(((self.restarts, s.seq), s.time));
            let (l, twin) = (&self.lines[i], self.lines[i].twin.map(|t| self.lines[t].sent));
            // Each line of a copy goes out from the copy or its original; both is a
            // double send, counted, not failed: the reader can lose the original's
            // trail (deleted, renamed or its inode reused before the copy is looked
            // for) and then reads the copy whole. Nothing is lost either way (see
            // `finish`); copies_tests.rs holds the plain cases to exactly once.
            if twin.is_some_and(|n| n > 0) {
                TWIN_SENT_TWICE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let last = self.last.insert((l.file, l.generation), l.offset);
            prop_assert!(last.is_none_or(|o| o < l.offset), "{:?} sent after offset {:?} of its file", s.message, last);
        }
        Ok(())
    }

    /// With `RAYLOG_MODEL_DEBUG` set, prints the model's files and the reader's
    /// table (for a failure proptest found).
    fn dump(&self) {
        if std::env::var_os("RAYLOG_MODEL_DEBUG").is_none() {
            return;
        }
        for (i, f) in self.files.iter().enumerate() {
            let at: Vec<_> = self.at.iter().filter(|(_, v)| **v == i).map(|(p, _)| p.to_owned()).collect();
            eprintln!("file {i} {:?} first {:?} len {} gen {} at {at:?}", f.key, f.first, f.len, f.generation);
        }
        for t in self.rig.source.table.values() {
            let o = t.open.map(|o| (o.parser.offset(), o.parser.unemitted_offset(), o.size, o.fingerprint));
            eprintln!(
                "table {:?} {} {:?} open {o:?} resume {} size {} fp {:?}",
                t.key(),
                self.rig.source.table.rel(&t),
                t.place(),
                t.resume(),
                t.size(),
                t.fingerprint()
            );
        }
    }

    /// The agent killed and started again (see [`Step::Restart`]). What the last
    /// `unacked` batches carried is sent again; a file with no name left cannot be
    /// reopened (the new agent holds no descriptor), so what it had not had
    /// acknowledged may be missed; records go in file order again from the
    /// checkpoints.
    fn restart(&mut self, unacked: usize) -> Result<(), TestCaseError> {
        let lost = self.rig.restart_unacked(unacked);
        let lost: Vec<(usize, u64)> = lost.into_iter().map(|seq| (self.restarts, seq)).collect();
        self.restarts += 1;
        if std::env::var_os("RAYLOG_MODEL_DEBUG").is_some() {
            eprintln!("restart: batches {lost:?} unacknowledged");
        }
        for l in &mut self.lines {
            if let Some((_, time)) = l.sent_in.filter(|(batch, _)| lost.contains(batch)) {
                (l.sent, l.sent_in, l.again) = (0, None, Some(time));
            }
        }
        let named: std::collections::HashSet<usize> = self.at.values().copied().collect();
        for f in 0..self.files.len() {
            if !named.contains(&f) {
                self.destroyed(f, true);
            }
        }
        self.last.clear();
        // The new agent lists everything, and hears of nothing that came before.
        self.events.clear();
        self.round(&Wake::Overflow, None, false)
    }

    /// An overflow, then rounds until nothing more comes; every line must be in.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        if let Some((stream, _, _)) = self.partial {
            self.finish_partial(&Fs::Write { stream, lines: 0 });
        }
        for i in 0..40 {
            std::thread::sleep(Duration::from_millis(2));
            let wake = if i % 10 == 0 { Wake::Overflow } else { Wake::Nothing };
            self.round(&wake, None, false)?;
        }
        // A line not sent is lost unless Ray destroyed it first, or its twin went.
        let lost = |l: &Line| l.sent == 0 && !l.may_miss && l.twin.is_none_or(|t| self.lines[t].sent == 0);
        if self.lines.iter().any(lost) {
            self.dump();
        }
        let missing: Vec<&str> = self.lines.iter().filter(|l| lost(l)).map(|l| l.message.as_str()).collect();
        prop_assert!(missing.is_empty(), "{} of {} lines never sent: {:?}", missing.len(), self.lines.len(), missing);
        Ok(())
    }
}

fn name(i: usize) -> String {
    format!("worker-{:056x}-01000000-{}.out", 0xe000 + i, 50_000 + i)
}

fn doc_id(key: FileKey, born: u32, first_line: &str, offset: u64, message: &str) -> u128 {
    let identity = crate::agent::enrich::route::identity(key, born, crate::agent::fnv::hash64(first_line.as_bytes()));
    doc_id_from(crate::agent::batch::doc_id_seed(&identity), offset, message)
}

fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    if std::env::var_os("RAYLOG_MODEL_DEBUG").is_some() {
        eprintln!("=== run");
    }
    let mut m = Model::new();
    for i in 0..STREAMS {
        m.apply(&Fs::Write { stream: i, lines: 2 });
    }
    m.round(&Wake::Overflow, None, false)?;
    for s in steps {
        match s {
            Step::Fs(op) => m.apply(op),
            Step::Round { wake, mid, fail_listing } => m.round(wake, mid.as_ref(), *fail_listing)?,
            Step::Close { pick } => m.close(*pick),
            Step::Restart { unacked } => m.restart(*unacked)?,
        }
    }
    m.finish()?;
    if std::env::var_os("RAYLOG_MODEL_DEBUG").is_some() {
        let (twice, lines) = (
            TWIN_SENT_TWICE.load(std::sync::atomic::Ordering::Relaxed),
            TWIN_LINES.load(std::sync::atomic::Ordering::Relaxed),
        );
        eprintln!("copy-truncate: {twice} of {lines} copied lines so far sent from both the copy and its original");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("RAYLOG_MODEL_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_line_once_in_order_with_its_id_through_any_interleaving(steps in proptest::collection::vec(step(), 1..60)) {
        run(&steps)?;
    }
}
