//! Tail: one open file, read as it grows, across rename rotation and copy-truncate.
//!
//! A [`Tailed`] file keeps its descriptor open, so a rename (`x` → `x.1`, or into
//! `old/`) changes nothing: the same inode is read to its end, and the new `x` is a
//! different inode found by discovery and read from the start. A file that shrinks
//! below what was read, or whose first bytes changed, was truncated in place
//! (copy-truncate): reading restarts at 0. A deleted file is drained, then closed. The bytes go to the file's
//! [`FileParser`], which holds partial lines and open records until they complete.
//!
//! Reads are positioned (`pread` at the parser's offset), because a read may stop
//! early: under a time limit the parser refuses a record dated after it, and the
//! bytes it did not take are read again when the limit has moved on. The read size
//! adapts to how much the file takes per read, so little is read twice.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use raylog_parsers::parser::FileStats;
use raylog_parsers::{Correlator, FileMeta, FileParser, Options, Record, Timestamp};

use crate::agent::checkpoint::{FileKey, Fingerprint, FINGERPRINT_MAX};
use crate::agent::enrich::FileRoute;

/// An open, followed file.
pub struct Tailed {
    /// Its incarnation (`checkpoint::born`): part of its document ids' seed.
    pub born: u32,
    pub key: FileKey,
    pub path: PathBuf,
    pub meta: Arc<FileMeta>,
    /// The node of the logs dir, kept for a parser restarted after truncation.
    node: Option<raylog_parsers::Id>,
    file: File,
    pub parser: FileParser,
    pub fingerprint: Fingerprint,
    /// Size and modification time at the last stat.
    pub size: u64,
    mtime: Option<std::time::SystemTime>,
    /// When bytes last arrived.
    pub last_data: Instant,
    /// A flush already happened since the last data (avoid re-flushing every round).
    flushed: bool,
    /// The last read reached the end of the file.
    pub at_eof: bool,
    /// The time of the last record read (where the file stands in time).
    pub last_time: Option<Timestamp>,
    /// Bytes to ask for in the next read (see the module docs).
    read_size: usize,
    /// Hash of the file's first line: with the inode, what document ids derive from.
    ident: u64,
    /// The first line was complete when `ident` was taken.
    ident_final: bool,
    /// Counts of the parsers a copy-truncate replaced: the file's counters must not
    /// go back when its parser starts over.
    retired: FileStats,
    /// Its first bytes changed (see [`Tailed::verify`]): the next read starts over.
    restart: bool,
}

/// What one read round found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadResult {
    pub bytes: u64,
    pub truncated: bool,
    pub at_eof: bool,
    /// The time limit stopped it before a record (see [`FileParser::blocked`]).
    pub blocked: bool,
}

/// Bounds of the adaptive read size.
const MIN_READ: usize = 16 << 10;

impl Tailed {
    /// Opens `path`, which should name file `want`, and positions the parser at
    /// `offset` with `ctx`. `None` when the path names another file (the one wanted
    /// was renamed or deleted since it was last seen there). When `expect` is given
    /// (the file was read before), the file's first bytes must still match it; if
    /// not, the inode was reused by another file, which is read from its start: the
    /// second value says so.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        path: PathBuf,
        want: FileKey,
        meta: Arc<FileMeta>,
        node: Option<raylog_parsers::Id>,
        mut offset: u64,
        mut ctx: raylog_parsers::parser::FileContext,
        expect: Option<Fingerprint>,
        mut born: u32,
    ) -> std::io::Result<Option<(Tailed, bool)>> {
        let file = File::open(&path)?;
        let md = file.metadata()?;
        let key = FileKey::of(&md);
        if key != want {
            return Ok(None);
        }
        let mut replaced = false;
        let now = crate::agent::checkpoint::born::of_file(&file, &md);
        // Another incarnation on the inode, or (none known) other first bytes.
        let other = match expect {
            _ if crate::agent::checkpoint::born::differ(born, now) => true,
            Some(fp) => offset > md.len() || Fingerprint::read_at(&file, fp.len)? != fp,
            None => false,
        };
        if other {
            (offset, ctx, replaced) = (0, Default::default(), true);
        }
        // A new file takes its incarnation; one from an older checkpoint keeps none.
        if replaced || born == crate::agent::checkpoint::born::UNKNOWN {
            born = now;
        }
        let fingerprint = Fingerprint::read_at(&file, md.len().min(offset.max(FINGERPRINT_MAX)))?;
        let mtime = md
            .modified()
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            // An mtime past 2262 (touch -d) is no hint at all, not a wrapped one.
            .and_then(|d| i64::try_from(d.as_nanos()).ok())
            .map(raylog_parsers::Timestamp);
        let mut parser = FileParser::new((*meta).clone(), node, mtime);
        parser.resume_at(offset, ctx);
        let last_time = parser.context().last_timestamp;
        let t = Tailed {
            key,
            born,
            path,
            meta,
            node,
            ident: 0,
            ident_final: false,
            retired: FileStats::default(),
            restart: false,
            file,
            parser,
            fingerprint,
            size: md.len(),
            mtime: md.modified().ok(),
            last_data: Instant::now(),
            flushed: true,
            at_eof: false,
            last_time,
            read_size: MIN_READ,
        };
        Ok(Some((t, replaced)))
    }

    /// Whether the file has no name left (deleted): nothing can open it again, and
    /// the descriptor is the only way to its unread bytes.
    pub fn deleted(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().is_ok_and(|md| md.nlink() == 0)
    }

    /// The first-line hash, once the first line was complete.
    pub fn ident(&self) -> Option<u64> {
        self.ident_final.then_some(self.ident)
    }

    /// Whether closing the file now loses nothing: no record or partial line held,
    /// none kept back by the time limit.
    pub fn is_clean(&self) -> bool {
        self.parser.unemitted_offset() == self.parser.offset() && self.parser.blocked().is_none()
    }

    /// Where the file stands in time, for reading files in time order: the record
    /// the limit stopped at, else the last one read (`i64::MIN` when none yet, so a
    /// new file is looked at first).
    pub fn head(&self) -> i64 {
        self.parser.blocked().or(self.last_time).map_or(i64::MIN, |t| t.0)
    }

    /// Whether reading may emit something: bytes not read yet, or a record the time
    /// limit kept back.
    pub fn has_work(&self) -> bool {
        self.size > self.parser.offset() || self.parser.blocked().is_some() || self.restart
    }

    /// Whether the bytes the fingerprint covers changed: a copy-truncate whose file
    /// grew back before the reader saw it shrink (see [`Tailed::verify`]).
    pub fn rewritten(&self) -> std::io::Result<bool> {
        let fp = self.fingerprint;
        Ok(fp.len > 0 && (self.size < fp.len || Fingerprint::read_at(&self.file, fp.len)? != fp))
    }

    /// Checks the file's first bytes now (something happened to it, yet it did not
    /// grow); if they changed, the next read starts over at 0. True if so.
    pub fn verify(&mut self) -> bool {
        self.restart |= self.rewritten().unwrap_or(false);
        self.restart
    }

    /// Refreshes the size; false when the file cannot be stat'ed.
    pub fn stat(&mut self) -> std::io::Result<()> {
        let md = self.file.metadata()?;
        (self.size, self.mtime) = (md.len(), md.modified().ok());
        Ok(())
    }

    /// How long the file has not been written to, as of the last stat.
    pub fn quiet_for(&self) -> std::time::Duration {
        self.mtime.and_then(|m| m.elapsed().ok()).unwrap_or_default()
    }

    /// Hash of the first line (identifies this file's content for document ids even
    /// if its inode is later reused). Taken once the first line is complete.
    pub fn first_line_hash(&mut self) -> u64 {
        if !self.ident_final {
            // From the open descriptor, not the path: after a rename rotation the
            // path names the next file, and the ids of this one must not change.
            let mut head = [0u8; 256];
            let n = self.file.read_at(&mut head, 0).unwrap_or(0);
            let line_end = memchr::memchr(b'\n', &head[..n]);
            self.ident_final = line_end.is_some() || n == head.len();
            let head = &head[..line_end.unwrap_or(n)];
            self.ident = crate::agent::fnv::hash64(head);
        }
        self.ident
    }

    /// Whether the node id is still unknown.
    pub fn node_unknown(&self) -> bool {
        self.node.is_none()
    }

    /// Sets the node id once raylet has announced it.
    pub fn set_node(&mut self, node: Option<raylog_parsers::Id>) {
        self.node = node;
        self.parser.set_node_id(node);
    }

    /// What this file's parsers counted since it was opened, across copy-truncates.
    pub fn stats(&self) -> FileStats {
        let mut s = self.retired;
        s.add(self.parser.stats());
        s
    }

    /// What the enrich stage needs to route this file's records: its key, its
    /// metadata and the seed of its document ids (its inode and its first line's
    /// hash, so a recycled inode gives different ids), and `wait_node`.
    pub fn route(&mut self, wait_node: Option<std::time::Instant>) -> FileRoute {
        let identity = crate::agent::enrich::route::identity(self.key, self.born, self.first_line_hash());
        let seed = crate::agent::batch::doc_id_seed(&identity);
        FileRoute { key: self.key, meta: self.meta.clone(), seed, wait_node }
    }

    /// Bytes between what was read and the end of the file.
    pub fn behind(&self) -> u64 {
        self.size.saturating_sub(self.parser.offset())
    }

    /// Stats the file; true when it was truncated or rewritten in place since it was
    /// read (copy-truncate): it shrank below what was read or fingerprinted, or grew
    /// with other first bytes (looked at only when there is something new: one
    /// positioned read). Then [`Tailed::start_over`] comes before the next read.
    pub fn refresh(&mut self) -> std::io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let before = self.mtime;
        let md = self.file.metadata()?;
        (self.size, self.mtime) = (md.len(), md.modified().ok());
        let grew = self.size > self.parser.offset();
        // Written to without growing past what was read: truncated and written
        // again to the same size (copy-truncate, then appends). Checked when its
        // mtime moved, and before a deleted file is read for the last time (its
        // mtime may not have: it ticks coarsely).
        let same_size = self.size == self.parser.offset() && (self.mtime != before || md.nlink() == 0);
        Ok(self.size < self.parser.offset()
            || self.restart
            || self.size < self.fingerprint.len
            || ((grew || same_size) && self.rewritten()?))
    }

    /// After a truncation: what the old content held goes to `out` (its identity is
    /// still the old one: route it before asking for [`Tailed::route_parts`] again),
    /// and reading starts over at 0 with a new first line to identify the file.
    pub fn start_over(&mut self, corr: &mut Correlator, opts: &Options, out: &mut dyn FnMut(&Record<'_>)) {
        self.restart = false;
        // A line cut by the truncation is not sent as a fragment: logrotate's copy
        // holds it, and is read from where the complete lines ended.
        let at = self.parser.complete_offset();
        let dropped = self.parser.finish_complete(corr, opts, out);
        if dropped > 0 {
            tracing::info!(path = %self.path.display(), offset = at, bytes = dropped, "a line being written was cut by a truncation in place; it is read from the copy, if one is found");
        }
        let ctx = self.parser.context().clone();
        self.retired = self.stats();
        self.parser = FileParser::new((*self.meta).clone(), self.node, None);
        self.parser.resume_at(0, raylog_parsers::parser::FileContext { last_timestamp: None, ..ctx });
        self.fingerprint = Fingerprint::default();
        self.ident_final = false;
    }

    /// Reads up to `budget` new bytes into the parser (as of the last
    /// [`Tailed::refresh`]), emitting no record dated after `limit`.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &mut self,
        buf: &mut [u8],
        budget: u64,
        limit: Option<Timestamp>,
        corr: &mut Correlator,
        opts: &Options,
        out: &mut dyn FnMut(&Record<'_>),
    ) -> std::io::Result<ReadResult> {
        let mut res = ReadResult::default();
        self.parser.set_limit(limit);
        let last_time = &mut self.last_time;
        let mut track = |r: &Record<'_>| {
            *last_time = r.timestamp.or(*last_time);
            out(r)
        };
        while res.bytes < budget {
            let want = (budget - res.bytes).min(self.read_size.min(buf.len()) as u64) as usize;
            let n = match self.file.read_at(&mut buf[..want], self.parser.offset()) {
                Ok(0) => {
                    res.at_eof = true;
                    // A record the limit kept back may be allowed now.
                    res.blocked = self.parser.blocked().is_some();
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let took = self.parser.push(&buf[..n], corr, opts, &mut track);
            res.bytes += took as u64;
            if took < n {
                // Next time ask for a little more than it took: a file read a little
                // at a time (interleaved with others) is then not read twice over.
                self.read_size = (took + MIN_READ).min(buf.len());
                res.blocked = true;
                break;
            }
            self.read_size = (2 * self.read_size).min(buf.len());
        }
        self.at_eof = res.at_eof;
        if res.bytes > 0 {
            self.last_data = Instant::now();
            self.flushed = false;
            if self.fingerprint.len < FINGERPRINT_MAX && self.parser.offset() > self.fingerprint.len {
                self.fingerprint = Fingerprint::read_at(&self.file, self.parser.offset())?;
            }
        }
        Ok(res)
    }

    /// At the end of a complete or quiet file: its open record goes out now, and with
    /// `partial` a last line without its newline too, unless dated after `limit`
    /// (then later). True when nothing was kept back.
    pub fn flush_within(
        &mut self,
        limit: Option<Timestamp>,
        partial: bool,
        corr: &mut Correlator,
        opts: &Options,
        out: &mut dyn FnMut(&Record<'_>),
    ) -> bool {
        self.parser.set_limit(limit);
        let done =
            if partial { self.parser.finish_within(corr, opts, out) } else { self.parser.flush(corr, opts, out) };
        self.flushed |= done;
        done
    }

    /// Whether [`Tailed::flush_if_idle`] would do anything (it is called for every
    /// open file each round; building its router costs more than this check).
    pub fn wants_flush(&self, now: Instant, idle: std::time::Duration, partial_timeout: std::time::Duration) -> bool {
        let quiet = now.duration_since(self.last_data);
        self.at_eof
            && ((quiet >= partial_timeout && self.parser.unemitted_offset() < self.parser.offset())
                || (quiet >= idle && !self.flushed))
    }

    /// After `idle` with no data: emit the record held open unless it is dated after
    /// `limit` (and, after `partial_timeout`, a last line still waiting for its
    /// newline, whatever its time).
    #[allow(clippy::too_many_arguments)]
    pub fn flush_if_idle(
        &mut self,
        now: Instant,
        idle: std::time::Duration,
        partial_timeout: std::time::Duration,
        limit: Option<Timestamp>,
        corr: &mut Correlator,
        opts: &Options,
        out: &mut dyn FnMut(&Record<'_>),
    ) {
        // Only a file with nothing more to read is idle; one merely not read for a
        // while (others took the round) is not, and flushing it would split records.
        if !self.wants_flush(now, idle, partial_timeout) {
            return;
        }
        let quiet = now.duration_since(self.last_data);
        if quiet >= partial_timeout && self.parser.unemitted_offset() < self.parser.offset() {
            self.parser.finish(corr, opts, out);
            self.flushed = true;
        } else if quiet >= idle && !self.flushed {
            self.parser.set_limit(limit);
            // Kept back by the limit: tried again at the next round.
            self.flushed = self.parser.flush(corr, opts, out);
        }
    }
}

#[cfg(test)]
#[path = "tail_tests.rs"]
mod tests;
