//! The spool: Ray's events on disk between the 2xx raylog answers and their delivery.
//!
//! Segments `ray_events-<seq>.ndjson` in `<state_dir>/ray_events/`, one event per
//! line wrapped as `{"post":"<id>","i":<i>,"n":<n>,"event":{…}}` (what
//! `raylog_parsers::formats::ray_event` reads). A post's lines are written with one
//! write and fsynced before the receiver answers, so an accepted post survives a
//! SIGKILL or a power cut. The source tails the segments like log files, with the
//! same checkpoints; the forwarder reads them with its own cursor
//! (`<state_dir>/ray_events.forward.json`, outside the dir the source reads).
//!
//! A new segment starts at every start and past [`SEGMENT_BYTES`]; a sealed segment
//! is deleted once every sink acknowledged it ([`Delivered`]) and the forwarder
//! passed it. What is accepted but not yet done is bounded by
//! `events.spool_max_bytes`: past it [`Spool::append`] refuses and Ray gets a 503.
//!
//! Recovery (at start): a segment whose last post is incomplete (a crash during the
//! write, before the 2xx) is cut back to the end of its last complete post, unless
//! something past that point was already delivered; Ray sends that post again.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::agent::checkpoint::{FileCheckpoint, FileKey, Fingerprint, Observer, Resume, FINGERPRINT_MAX};

/// A segment is sealed and a new one started past this size.
pub const SEGMENT_BYTES: u64 = 8 << 20;
const PREFIX: &str = "ray_events-";
const SUFFIX: &str = ".ndjson";

/// A new post id, unique across restarts (the time in ns, then a count). Not under
/// the spool's lock, which a post's fsync may hold.
pub fn post_id() -> String {
    static POSTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = POSTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{ns:x}-{n}")
}

/// Whether a path inside a logs dir names a spool segment.
pub fn is_segment_name(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.starts_with(PREFIX) && name.ends_with(SUFFIX)
}

fn segment_name(seq: u64) -> String {
    format!("{PREFIX}{seq:012}{SUFFIX}")
}

fn seq_of(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// How far every sink acknowledged each spool segment, fed by the checkpoint store
/// as acknowledgements come in (see `CheckpointStore::observe`).
///
/// A checkpoint counts for a segment only when it names the segment's (device,
/// inode) and fingerprints the segment's first bytes: a deleted segment's inode is
/// soon reused by a new one, and the old one's checkpoints (late acknowledgements,
/// or those saved by the last run) must not delete the new one before it is read.
/// The fingerprint must also cover every delivered byte up to [`FINGERPRINT_MAX`]
/// (as the source's always do), or a short one would match any segment: a
/// segment's first line names its post, which no other segment's does.
#[derive(Debug, Default)]
pub struct Delivered(Mutex<HashMap<FileKey, Watched>>);

#[derive(Debug, Default)]
struct Watched {
    /// The segment's first bytes (up to `FINGERPRINT_MAX`), what checkpoints are
    /// checked against; grown before the bytes are written, so a source that read
    /// them finds them here.
    head: Vec<u8>,
    delivered: u64,
    /// The last fingerprint that matched `head` (saves hashing it again).
    matched: Option<Fingerprint>,
}

impl Watched {
    fn proves(&mut self, cp: &FileCheckpoint) -> bool {
        let fp = cp.fingerprint;
        if fp.len < cp.offset.min(FINGERPRINT_MAX) {
            return false;
        }
        if self.matched == Some(fp) {
            return true;
        }
        let ok = usize::try_from(fp.len).ok().and_then(|n| self.head.get(..n)).is_some_and(|h| fp.hash_matches(h));
        if ok {
            self.matched = Some(fp);
        }
        ok
    }
}

impl Observer for Delivered {
    /// Notes a delivered position, if it is a segment's (see the type's docs).
    fn note(&self, cp: &FileCheckpoint) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = m.get_mut(&cp.key) {
            if w.proves(cp) {
                w.delivered = w.delivered.max(cp.offset);
            }
        }
    }
}

impl Delivered {
    fn watch(&self, key: FileKey, head: &[u8], delivered: u64) {
        let head = head[..head.len().min(FINGERPRINT_MAX as usize)].to_vec();
        let w = Watched { head, delivered, matched: None };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(key, w);
    }

    /// Bytes about to be appended to the segment `key` holding `size` bytes.
    fn grow(&self, key: &FileKey, size: u64, bytes: &[u8]) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = m.get_mut(key) {
            if (w.head.len() as u64) == size {
                let room = (FINGERPRINT_MAX as usize).saturating_sub(w.head.len());
                w.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        }
    }

    /// The append failed: the segment is `size` bytes again.
    fn shrink(&self, key: &FileKey, size: u64) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = m.get_mut(key) {
            w.head.truncate(usize::try_from(size).unwrap_or(usize::MAX));
            w.matched = None;
        }
    }

    fn get(&self, key: &FileKey) -> u64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key).map_or(0, |w| w.delivered)
    }

    fn forget(&self, key: &FileKey) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

#[derive(Debug)]
struct Segment {
    key: FileKey,
    size: u64,
}

/// Why a post was not spooled.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("the spool holds {pending} bytes not yet delivered; events.spool_max_bytes is {max}")]
    Full { pending: u64, max: u64 },
    #[error("{path}: {source}; check that source.state_dir is writable and has room")]
    Io { path: String, source: std::io::Error },
}

/// A reader's position in the spool: the next byte it reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub seq: u64,
    pub offset: u64,
}

/// The segments, the one being written, and what each consumer has done.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    segments: BTreeMap<u64, Segment>,
    current: u64,
    file: File,
    delivered: Arc<Delivered>,
    /// `None` without `events.forward_to`.
    forwarded: Option<Cursor>,
    /// The object store's events cursor; `None` without an `object_store` sink.
    uploaded: Option<Cursor>,
    /// The source reads the spool (there are record sinks): a segment waits for
    /// their acknowledgements.
    records: bool,
}

/// Who reads the spool besides the source, and whether the source does.
#[derive(Clone, Copy, Debug)]
pub struct Readers {
    pub forwarded: Option<Cursor>,
    pub uploaded: Option<Cursor>,
    pub records: bool,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.display().to_string(), source }
}

impl Spool {
    /// Opens the spool in `dir` (created if needed): recovers the segments there
    /// (`saved` holds the checkpoints of the last run; one counts for a segment as
    /// [`Delivered`] says) and starts a new segment. `forwarded` is the forwarder's
    /// saved cursor, if it forwards.
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        delivered: Arc<Delivered>,
        saved: &Resume,
        forwarded: Option<Cursor>,
    ) -> Result<Spool, SpoolError> {
        Spool::open_with(dir, max_bytes, delivered, saved, Readers { forwarded, uploaded: None, records: true })
    }

    /// [`Spool::open`] with every reader's position.
    pub fn open_with(
        dir: &Path,
        max_bytes: u64,
        delivered: Arc<Delivered>,
        saved: &Resume,
        readers: Readers,
    ) -> Result<Spool, SpoolError> {
        let Readers { forwarded, uploaded, records } = readers;
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut segments = BTreeMap::new();
        for e in std::fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
            let Some(seq) = e.file_name().to_str().and_then(seq_of) else { continue };
            let path = e.path();
            let md = e.metadata().map_err(io_err(&path))?;
            let key = FileKey::of(&md);
            let mut bytes = vec![];
            File::open(&path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io_err(&path))?;
            // Checked against the bytes as the last run left them, before any cut.
            let mut w =
                Watched { head: bytes[..bytes.len().min(FINGERPRINT_MAX as usize)].to_vec(), ..Default::default() };
            let done = match saved.get(&key) {
                Some(cp) if w.proves(cp) => cp.offset,
                Some(_) => {
                    tracing::info!(path = %path.display(), "the saved checkpoint of this spool segment's inode is another file's (a deleted segment's); reading the segment whole");
                    0
                }
                None => 0,
            };
            let read_to = |c: Option<Cursor>| match c {
                Some(c) if c.seq > seq => bytes.len() as u64,
                Some(c) if c.seq == seq => c.offset,
                _ => 0,
            };
            let forwarded_to = read_to(forwarded).max(read_to(uploaded));
            let size = recover(&path, &bytes, done.max(forwarded_to))?;
            delivered.watch(key, &bytes[..size as usize], done);
            segments.insert(seq, Segment { key, size });
        }
        let current = segments.keys().next_back().map_or(1, |s| s + 1);
        let first = Cursor { seq: segments.keys().next().copied().unwrap_or(current), offset: 0 };
        let (forwarded, uploaded) = (forwarded.map(|c| c.max(first)), uploaded.map(|c| c.max(first)));
        let (file, key) = create_segment(dir, current)?;
        delivered.watch(key, &[], 0);
        segments.insert(current, Segment { key, size: 0 });
        let mut spool = Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            segments,
            current,
            file,
            delivered,
            forwarded,
            uploaded,
            records,
        };
        spool.clean();
        Ok(spool)
    }

    /// Bytes accepted and not yet done by every consumer.
    pub fn pending(&self) -> u64 {
        self.segments.iter().map(|(&seq, s)| s.size - self.done(seq, s).min(s.size)).sum()
    }

    fn done(&self, seq: u64, s: &Segment) -> u64 {
        let delivered = if self.records { self.delivered.get(&s.key) } else { u64::MAX };
        let read = |c: Option<Cursor>| match c {
            None => u64::MAX,
            Some(c) if c.seq > seq => u64::MAX,
            Some(c) if c.seq == seq => c.offset,
            Some(_) => 0,
        };
        delivered.min(read(self.forwarded)).min(read(self.uploaded))
    }

    /// Appends one post's lines and makes them durable; refuses when the spool is
    /// over its bound. Blocking (a write and an fsync).
    pub fn append(&mut self, lines: &[u8]) -> Result<(), SpoolError> {
        let pending = self.pending();
        if pending + lines.len() as u64 > self.max_bytes {
            self.clean();
            let pending = self.pending();
            if pending + lines.len() as u64 > self.max_bytes {
                return Err(SpoolError::Full { pending, max: self.max_bytes });
            }
        }
        if self.segments[&self.current].size >= SEGMENT_BYTES {
            self.rotate()?;
        }
        let path = self.dir.join(segment_name(self.current));
        let seg = self.segments.get_mut(&self.current).expect("the current segment is listed");
        self.delivered.grow(&seg.key, seg.size, lines);
        if let Err(e) = self.file.write_all(lines).and_then(|()| self.file.sync_data()) {
            // Whatever part was written is cut off again, so the next post starts
            // on a line of its own; Ray retries this one.
            let _ = self.file.set_len(seg.size);
            self.delivered.shrink(&seg.key, seg.size);
            return Err(SpoolError::Io { path: path.display().to_string(), source: e });
        }
        seg.size += lines.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), SpoolError> {
        let next = self.current + 1;
        let (file, key) = create_segment(&self.dir, next)?;
        self.delivered.watch(key, &[], 0);
        self.segments.insert(next, Segment { key, size: 0 });
        (self.current, self.file) = (next, file);
        self.clean();
        Ok(())
    }

    /// Deletes the sealed segments every consumer is done with.
    pub fn clean(&mut self) {
        let done: Vec<u64> = self
            .segments
            .iter()
            .filter(|(&seq, s)| seq < self.current && self.done(seq, s) >= s.size)
            .map(|(&seq, _)| seq)
            .collect();
        for seq in done {
            let path = self.dir.join(segment_name(seq));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete a delivered spool segment; will try again");
                    continue;
                }
            }
            if let Some(s) = self.segments.remove(&seq) {
                self.delivered.forget(&s.key);
            }
        }
    }

    /// The segments the forwarder may read at or after `from`: (seq, path, size,
    /// sealed). A segment's size only ever covers whole posts.
    pub fn readable(&self, from: Cursor) -> Vec<(u64, PathBuf, u64, bool)> {
        self.segments
            .range(from.seq..)
            .map(|(&seq, s)| (seq, self.dir.join(segment_name(seq)), s.size, seq < self.current))
            .collect()
    }

    /// The forwarder moved on.
    pub fn forwarded(&mut self, c: Cursor) {
        self.forwarded = Some(c);
    }

    pub fn forward_cursor(&self) -> Option<Cursor> {
        self.forwarded
    }

    /// The object store uploaded the events before `c`.
    pub fn uploaded(&mut self, c: Cursor) {
        self.uploaded = Some(c);
    }

    pub fn upload_cursor(&self) -> Option<Cursor> {
        self.uploaded
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn create_segment(dir: &Path, seq: u64) -> Result<(File, FileKey), SpoolError> {
    let path = dir.join(segment_name(seq));
    let file = OpenOptions::new().create(true).append(true).open(&path).map_err(io_err(&path))?;
    let key = FileKey::of(&file.metadata().map_err(io_err(&path))?);
    // The new name must survive a crash too, or a later segment could reuse the seq.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))?;
    Ok((file, key))
}

/// Cuts a segment holding `bytes` back to its last complete post when its tail is
/// torn, unless bytes past the cut were already consumed (`consumed`). Returns its
/// size.
fn recover(path: &Path, bytes: &[u8], consumed: u64) -> Result<u64, SpoolError> {
    let whole = complete_posts(bytes);
    if whole == bytes.len() as u64 {
        return Ok(whole);
    }
    if consumed > whole {
        tracing::warn!(path = %path.display(), at = whole, "spool segment ends in an incomplete post that was partly delivered already; keeping it");
        return Ok(bytes.len() as u64);
    }
    tracing::warn!(
        path = %path.display(),
        offset = whole,
        dropped = bytes.len() as u64 - whole,
        "spool segment ends in an incomplete post (raylog stopped while writing it, before answering Ray, which sends it again); cutting it off"
    );
    let f = OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
    f.set_len(whole).and_then(|()| f.sync_all()).map_err(io_err(path))?;
    Ok(whole)
}

/// The length of the prefix of `bytes` made of whole posts: every line complete,
/// and the last post's `n` lines all there.
pub fn complete_posts(bytes: &[u8]) -> u64 {
    let (mut good, mut at) = (0usize, 0usize);
    while at < bytes.len() {
        let Some(nl) = memchr::memchr(b'\n', &bytes[at..]) else { break };
        let line = std::str::from_utf8(&bytes[at..at + nl]).unwrap_or("");
        at += nl + 1;
        match wrapper(line) {
            Some((_, i, n)) if i + 1 == n => good = at,
            Some(_) => {}
            // A line that is not a post's: nothing raylog wrote, keep what precedes.
            None => break,
        }
    }
    good as u64
}

/// A spool line's `(post, i, n)` and the event as Ray sent it (its bytes, unchanged).
pub fn unwrap_line(line: &str) -> Option<((&str, u64, u64), &str)> {
    // The wrapper's `"event":` comes before the event (post ids are hex digits), and
    // the wrapper's `}` closes the line.
    let at = line.find("\"event\":")?;
    let event = line.get(at + 8..line.len().checked_sub(1)?)?;
    Some((wrapper(line)?, event))
}

/// `(post, i, n)` of a spool line.
pub fn wrapper(line: &str) -> Option<(&str, u64, u64)> {
    let (mut post, mut i, mut n) = (None, None, None);
    raylog_parsers::json::members(line, |k, v| match k {
        "post" => post = v.plain_str(),
        "i" => i = v.raw().parse().ok(),
        "n" => n = v.raw().parse().ok(),
        _ => {}
    })
    .ok()?;
    Some((post?, i?, n?))
}
