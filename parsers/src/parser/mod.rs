//! [`FileParser`]: bytes of one file in, records out.
//!
//! The parser is push-based so the CLI (whole files, archives) and the agent (tailed
//! chunks) drive it the same way: [`FileParser::push`] takes any chunk of the file,
//! splits lines with `memchr`, joins multi-line records ([`crate::assemble`]), and
//! calls the sink for each finished record. A record is only finished when the next
//! one starts, so the last record and a partial last line stay held until more bytes
//! arrive or the caller says the file is complete ([`FileParser::finish`]) or idle
//! ([`FileParser::flush`]). Buffers are reused: steady-state parsing allocates nothing
//! per line.
//!
//! Records without a time of their own (prints, bare tracebacks) are dated: from the
//! previous record of the file that had one; before any, from the file's first line
//! with a time (a hint its reader finds, see [`FileParser::set_time_hint`]) or the
//! newest time of the worker's core-worker log ([`Correlator::worker_time`]),
//! whichever is earlier; the file's mtime only when nothing else is known. The
//! result depends only on the files' content, however it is chunked, so `parse` and
//! `ship`, and a replay of the same bytes, give the same times.
//!
//! A time limit ([`FileParser::set_limit`]) makes the parser stop *before* a record
//! dated after it: the record stays pending, `push` returns how many bytes it took,
//! and [`FileParser::blocked`] says when the file's next record is. The agent uses
//! this to read many files interleaved in time order.

use crate::assemble::{Joiner, Marker};
use crate::classify::{FileKind, FileMeta};
use crate::correlate::Correlator;
use crate::formats::{self, Draft, LineFormat, ParseCtx};
use crate::id::{Id, JOB_HEX};
use crate::record::{AtRecord, Ids, Level, Record};
use crate::task_logs::Lookup;
use crate::time::{Timestamp, Zone};

/// Default cap on one line (and on one joined record).
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// Settings shared by every file of a run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Zone naive timestamps are read in.
    pub zone: Zone,
    /// Longer lines are cut and the record flagged `truncated`; a multi-line record
    /// is cut at the same size.
    pub max_line_bytes: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options { zone: Zone::Utc, max_line_bytes: DEFAULT_MAX_LINE_BYTES }
    }
}

/// Counters for one file, for reconciliation and for the agent's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    pub bytes: u64,
    pub lines: u64,
    pub markers: u64,
    pub records: u64,
    /// Records whose bytes were not valid UTF-8 (kept, decoded lossily).
    pub invalid_utf8: u64,
    /// Lines longer than `max_line_bytes`.
    pub truncated_lines: u64,
    /// Task worker prints no task range covered when parsed, while ranges of
    /// their session were known (`Record::task_pending`): offline, prints whose
    /// task event is not among the events given.
    pub task_untagged: u64,
}

impl FileStats {
    /// Adds another file's (or another part of the same file's) counters.
    pub fn add(&mut self, s: &FileStats) {
        self.bytes += s.bytes;
        self.lines += s.lines;
        self.markers += s.markers;
        self.records += s.records;
        self.invalid_utf8 += s.invalid_utf8;
        self.truncated_lines += s.truncated_lines;
        self.task_untagged += s.task_untagged;
    }
}

/// Context set by marker lines and earlier records of the same file.
#[derive(Clone, Debug, Default)]
pub struct FileContext {
    pub job_id: Option<Id>,
    pub actor_name: Option<String>,
    pub task_name: Option<String>,
    pub task_id: Option<Id>,
    /// The time of the last record of the file that carried one of its own.
    pub last_timestamp: Option<Timestamp>,
    /// Where the last task marker (`:task_name:`, `:task_attempt_start:`) starts: a
    /// task started there, so a range opened before it no longer covers what follows
    /// (see `crate::task_logs`).
    pub task_marker_at: Option<u64>,
}

impl FileContext {
    /// What a worker-file marker line sets for the records after it.
    pub fn apply_marker(&mut self, m: Marker<'_>) {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match m {
            Marker::JobId(j) => self.job_id = Id::parse_len(j, JOB_HEX),
            Marker::ActorName(a) => self.actor_name = Some(text(a)),
            Marker::TaskName(t) => {
                self.task_name = Some(text(t));
                self.task_id = None;
            }
            Marker::TaskAttemptStart(t, _) => self.task_id = Id::parse(t),
            Marker::TaskAttemptEnd(_) => self.task_id = None,
        }
    }

    /// Whether the marker-set parts (job, actor class, task) are the same.
    pub fn same_markers(&self, other: &FileContext) -> bool {
        self.job_id == other.job_id
            && self.actor_name == other.actor_name
            && self.task_name == other.task_name
            && self.task_id == other.task_id
    }
}

/// Where a record's time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSource {
    /// Written on the record.
    Own,
    /// The previous record of the file that had a time of its own.
    Previous,
    /// Estimated: the file's first timed line, or its worker's newest core-worker time.
    Estimated,
    /// The file's modification time: nothing else was known.
    Mtime,
}

/// The record being assembled.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// The record is `data[start..end]` of the chunk being pushed (not yet copied).
    in_chunk: Option<(usize, usize)>,
    offset: u64,
    lines: u32,
    truncated: bool,
    open: bool,
}

/// Where a line's bytes are: inside the chunk being pushed, or in a held buffer.
#[derive(Clone, Copy)]
enum Line<'a> {
    InChunk(usize, usize),
    Held(&'a [u8]),
}

impl<'a> Line<'a> {
    fn bytes(self, data: &'a [u8]) -> &'a [u8] {
        match self {
            Line::InChunk(s, e) => &data[s..e],
            Line::Held(b) => b,
        }
    }
}

/// What one push/finish call works with.
struct Io<'a> {
    corr: &'a mut Correlator,
    opts: &'a Options,
    out: &'a mut dyn FnMut(&Record<'_>),
    /// The chunk being pushed (empty outside `push`).
    data: &'a [u8],
}

impl<'a> Io<'a> {
    fn new(corr: &'a mut Correlator, opts: &'a Options, out: &'a mut dyn FnMut(&Record<'_>), data: &'a [u8]) -> Io<'a> {
        Io { corr, opts, out, data }
    }
}

/// What handling one line led to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Done,
    /// The record the line completed is dated after the limit: the line was not taken.
    Blocked,
}

impl Pending {
    /// Opens a record with its first line. A line inside the chunk is not copied:
    /// most records start and end in the same chunk and are parsed from it directly.
    fn start(&mut self, line: &[u8], span: Option<(usize, usize)>, offset: u64, cut: bool) {
        self.bytes.clear();
        self.in_chunk = span;
        if span.is_none() {
            self.bytes.extend_from_slice(line);
        }
        self.offset = offset;
        self.lines = 1;
        self.truncated = cut;
        self.open = true;
    }

    /// Adds a continuation line, keeping the record a chunk slice when the line
    /// directly follows it; records are capped at `max` bytes.
    fn append(&mut self, line: &[u8], span: Option<(usize, usize)>, cut: bool, data: &[u8], max: usize) {
        self.lines += 1;
        self.truncated |= cut;
        match (self.in_chunk, span) {
            (Some((s, e)), Some((ls, le))) if ls == e + 1 && le - s <= max => {
                self.in_chunk = Some((s, le));
                return;
            }
            _ => self.materialize(data),
        }
        if self.bytes.len() + 1 + line.len() <= max {
            self.bytes.push(b'\n');
            self.bytes.extend_from_slice(line);
        } else {
            self.truncated = true;
        }
    }

    /// Copies a chunk-slice record into the owned buffer (before the chunk goes away).
    fn materialize(&mut self, data: &[u8]) {
        if let Some((s, e)) = self.in_chunk.take() {
            self.bytes.clear();
            self.bytes.extend_from_slice(&data[s..e]);
        }
    }

    fn text<'a>(&'a self, data: &'a [u8]) -> &'a [u8] {
        match self.in_chunk {
            Some((s, e)) => &data[s..e],
            None => &self.bytes,
        }
    }
}

/// Parses one file incrementally. See the module docs.
#[derive(Debug)]
pub struct FileParser {
    meta: FileMeta,
    node_id: Option<Id>,
    mtime: Option<Timestamp>,
    /// The time of the file's first line that has one (see [`FileParser::set_time_hint`]).
    time_hint: Option<Timestamp>,
    /// File offset of the next byte `push` will see.
    offset: u64,
    /// An incomplete last line and its start offset.
    partial: Vec<u8>,
    partial_offset: u64,
    partial_truncated: bool,
    pending: Pending,
    joiner: Joiner,
    ctx: FileContext,
    scratch: String,
    lossy: String,
    stats: FileStats,
    /// Records dated after this are not emitted (see [`FileParser::set_limit`]).
    limit: Option<Timestamp>,
    /// The time of the pending record the limit stopped at.
    blocked: Option<Timestamp>,
    /// A record was dated from the context's `last_timestamp` (or its absence)
    /// before any record this parser emitted had a time of its own: what the
    /// context it resumed with said about time mattered (see
    /// [`FileParser::took_time_from_context`]).
    time_from_context: bool,
    /// A record this parser emitted had a time of its own.
    own_time_seen: bool,
}

impl FileParser {
    /// A parser for `meta`, whose node is `node_id` (from the logs dir) and whose
    /// modification time dates records that have no time of their own.
    pub fn new(meta: FileMeta, node_id: Option<Id>, mtime: Option<Timestamp>) -> FileParser {
        FileParser {
            meta,
            node_id,
            mtime,
            time_hint: None,
            offset: 0,
            partial: Vec::new(),
            partial_offset: 0,
            partial_truncated: false,
            pending: Pending::default(),
            joiner: Joiner::default(),
            ctx: FileContext::default(),
            scratch: String::new(),
            lossy: String::new(),
            stats: FileStats::default(),
            limit: None,
            blocked: None,
            time_from_context: false,
            own_time_seen: false,
        }
    }

    /// The time of the file's first line with a time of its own, found by the reader
    /// ahead of parsing (in the first 64 KiB, say). It dates the records before that
    /// line: they were written before it.
    pub fn set_time_hint(&mut self, hint: Option<Timestamp>) {
        self.time_hint = hint;
    }

    /// Emit no record dated after `limit` (`None`: no limit). The parser then stops
    /// in front of such a record, keeping it pending, until the limit is raised.
    pub fn set_limit(&mut self, limit: Option<Timestamp>) {
        self.limit = limit;
    }

    /// The time of the record the limit stopped at, while it is still pending.
    pub fn blocked(&self) -> Option<Timestamp> {
        self.blocked
    }

    /// Starts at `offset` instead of 0 (resuming), with the context saved then.
    pub fn resume_at(&mut self, offset: u64, ctx: FileContext) {
        self.offset = offset;
        self.ctx = ctx;
    }

    pub fn meta(&self) -> &FileMeta {
        &self.meta
    }

    pub fn stats(&self) -> &FileStats {
        &self.stats
    }

    pub fn context(&self) -> &FileContext {
        &self.ctx
    }

    /// Whether a record was dated from the resumed context's `last_timestamp` (or
    /// from its absence) before any record had a time of its own: a parser that
    /// resumed with a guessed context is right only if this is false or the guess's
    /// time was the true one.
    pub fn took_time_from_context(&self) -> bool {
        self.time_from_context
    }

    /// Whether `line` (the file's next line, without its newline), pushed next,
    /// would start a record the way it starts one in a fresh parser: no partial
    /// line held, the line does not join the open record, and the traceback state
    /// after it is the one a fresh parser would have. Then the open record can be
    /// emitted now ([`FileParser::finish`]) and the bytes from `line` on parsed by a
    /// parser resumed there with this context.
    pub fn breaks_before(&self, line: &[u8], opts: &Options) -> bool {
        if !self.partial.is_empty() || self.partial_truncated {
            return false;
        }
        let raw = &line[..line.len().min(opts.max_line_bytes)];
        let text = raw.strip_suffix(b"\r").unwrap_or(raw);
        let kind = self.meta.kind;
        if kind == FileKind::Worker && Marker::parse(text).is_some() {
            return true;
        }
        let (mut joiner, mut fresh) = (self.joiner, Joiner::default());
        let opens = joiner.opens_traceback(text);
        let joins = joiner.continues(kind, text, self.pending.open)
            && !(opens && !kind.headered() && below_warning(kind, &opts.zone, self.pending.text(&[])));
        fresh.continues(kind, text, false);
        !joins && joiner == fresh
    }

    /// Sets the node id (when it is learned after the parser was made).
    pub fn set_node_id(&mut self, node: Option<Id>) {
        self.node_id = node;
    }

    /// Offset of the first byte not yet emitted in a record: where a restart must
    /// resume so nothing held is lost.
    pub fn unemitted_offset(&self) -> u64 {
        if self.pending.open {
            self.pending.offset
        } else if !self.partial.is_empty() || self.partial_truncated {
            self.partial_offset
        } else {
            self.offset
        }
    }

    /// File offset just past the bytes pushed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// File offset just past the last complete line pushed (before a partial line
    /// held for its newline, if any).
    pub fn complete_offset(&self) -> u64 {
        if !self.partial.is_empty() || self.partial_truncated {
            self.partial_offset
        } else {
            self.offset
        }
    }

    /// Feeds the next chunk of the file; emits every record completed by it. Returns
    /// how many bytes of `data` were taken: all of them, unless the time limit stopped
    /// it before a record (then the rest must be pushed again later).
    pub fn push(
        &mut self,
        data: &[u8],
        corr: &mut Correlator,
        opts: &Options,
        out: &mut dyn FnMut(&Record<'_>),
    ) -> usize {
        let mut io = Io::new(corr, opts, out, data);
        let mut pos = 0;
        while pos < data.len() {
            let Some(nl) = memchr::memchr(b'\n', &data[pos..]) else {
                self.hold_partial(&data[pos..], self.offset + pos as u64, opts);
                pos = data.len();
                break;
            };
            let line_offset = self.offset + pos as u64;
            let step = if self.partial.is_empty() && !self.partial_truncated {
                let cut = nl > opts.max_line_bytes;
                let end = pos + if cut { opts.max_line_bytes } else { nl };
                self.on_line(Line::InChunk(pos, end), line_offset, cut, &mut io)
            } else {
                let held_before = (self.partial.len(), self.partial_truncated);
                self.hold_partial(&data[pos..pos + nl], 0, opts);
                let held = std::mem::take(&mut self.partial);
                let (off, cut) = (self.partial_offset, self.partial_truncated);
                self.partial_truncated = false;
                let step = self.on_line(Line::Held(&held), off, cut, &mut io);
                self.partial = held;
                if step == Step::Blocked {
                    // Not taken: the line stays held as it was before this chunk.
                    self.partial.truncate(held_before.0);
                    self.partial_truncated = held_before.1;
                } else {
                    self.partial.clear();
                }
                step
            };
            if step == Step::Blocked {
                break;
            }
            pos += nl + 1;
        }
        // The next chunk replaces `data`: keep the open record's bytes.
        self.pending.materialize(data);
        self.stats.bytes += pos as u64;
        self.offset += pos as u64;
        pos
    }

    /// Appends to the held partial line; `offset` is where `bytes` start in the file
    /// and only matters when nothing is held yet.
    fn hold_partial(&mut self, bytes: &[u8], offset: u64, opts: &Options) {
        if self.partial.is_empty() && !self.partial_truncated {
            self.partial_offset = offset;
        }
        let room = opts.max_line_bytes.saturating_sub(self.partial.len());
        if bytes.len() > room {
            self.partial_truncated = true;
        }
        self.partial.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The file is complete: emits the last line even without its newline, and the
    /// record held open, whatever the time limit.
    pub fn finish(&mut self, corr: &mut Correlator, opts: &Options, out: &mut dyn FnMut(&Record<'_>)) {
        let limit = self.limit.take();
        let mut io = Io::new(corr, opts, out, &[]);
        if !self.partial.is_empty() || self.partial_truncated {
            let held = std::mem::take(&mut self.partial);
            let (off, cut) = (self.partial_offset, self.partial_truncated);
            self.partial_truncated = false;
            self.on_line(Line::Held(&held), off, cut, &mut io);
        }
        self.emit_pending(&mut io);
        self.limit = limit;
    }

    /// The file's bytes are gone from under the parser (truncated in place):
    /// emits the record held open, and drops a partial line held for its newline
    /// (its rest never comes here; a copy of the file has it whole, read from
    /// [`FileParser::complete_offset`]). Returns the bytes dropped.
    pub fn finish_complete(
        &mut self,
        corr: &mut Correlator,
        opts: &Options,
        out: &mut dyn FnMut(&Record<'_>),
    ) -> usize {
        let limit = self.limit.take();
        let dropped = std::mem::take(&mut self.partial).len();
        self.partial_truncated = false;
        self.emit_pending(&mut Io::new(corr, opts, out, &[]));
        self.limit = limit;
        dropped
    }

    /// Like [`FileParser::finish`], but within the time limit: false when a record
    /// dated after it stays pending (call again once the limit has moved on).
    pub fn finish_within(&mut self, corr: &mut Correlator, opts: &Options, out: &mut dyn FnMut(&Record<'_>)) -> bool {
        let mut io = Io::new(corr, opts, out, &[]);
        if !self.partial.is_empty() || self.partial_truncated {
            let held = std::mem::take(&mut self.partial);
            let (off, cut) = (self.partial_offset, self.partial_truncated);
            self.partial_truncated = false;
            let step = self.on_line(Line::Held(&held), off, cut, &mut io);
            if step == Step::Blocked {
                (self.partial, self.partial_truncated) = (held, cut);
                return false;
            }
        }
        self.emit_pending(&mut io)
    }

    /// Emits the record held open whatever the time limit; a partial line stays
    /// held (its file was copied: the copy is read from where that line starts).
    pub fn flush_now(&mut self, corr: &mut Correlator, opts: &Options, out: &mut dyn FnMut(&Record<'_>)) {
        let limit = self.limit.take();
        self.emit_pending(&mut Io::new(corr, opts, out, &[]));
        self.limit = limit;
    }

    /// Emits the record held open (no more lines are expected soon); a partial line
    /// stays held. False when the time limit kept the record back.
    pub fn flush(&mut self, corr: &mut Correlator, opts: &Options, out: &mut dyn FnMut(&Record<'_>)) -> bool {
        self.emit_pending(&mut Io::new(corr, opts, out, &[]))
    }

    fn on_line(&mut self, line: Line<'_>, offset: u64, cut: bool, io: &mut Io<'_>) -> Step {
        let raw = line.bytes(io.data);
        let has_cr = raw.last() == Some(&b'\r');
        let text = if has_cr { &raw[..raw.len() - 1] } else { raw };
        let kind = self.meta.kind;
        if kind == FileKind::Worker {
            if let Some(m) = Marker::parse(text) {
                if !self.emit_pending(io) {
                    return Step::Blocked;
                }
                io.corr.learn_marker(self.meta.worker_id, &m);
                if matches!(m, Marker::TaskName(_) | Marker::TaskAttemptStart(..)) {
                    self.ctx.task_marker_at = Some(offset);
                }
                self.ctx.apply_marker(m);
                self.joiner.reset();
                self.count_line(cut);
                self.stats.markers += 1;
                return Step::Done;
            }
        }
        // A record can stay a slice of the chunk only while it is an exact copy of it.
        let span = match line {
            Line::InChunk(s, e) if !has_cr && !cut => Some((s, e)),
            _ => None,
        };
        // The joiner's state before this line: restored if the line is not taken.
        let joiner = self.joiner;
        let opens = self.joiner.opens_traceback(text);
        if self.joiner.continues(kind, text, self.pending.open)
            && !(opens && !kind.headered() && below_warning(kind, &io.opts.zone, self.pending.text(io.data)))
        {
            self.pending.append(text, span, cut, io.data, io.opts.max_line_bytes);
            self.count_line(cut);
            return Step::Done;
        }
        if !self.emit_pending(io) {
            self.joiner = joiner;
            return Step::Blocked;
        }
        self.pending.start(text, span, offset, cut);
        self.count_line(cut);
        Step::Done
    }

    fn count_line(&mut self, cut: bool) {
        self.stats.lines += 1;
        self.stats.truncated_lines += cut as u64;
    }

    /// Parses the pending record and hands it to `out`. False when it is dated after
    /// the time limit: it then stays pending and [`FileParser::blocked`] says when.
    fn emit_pending(&mut self, io: &mut Io<'_>) -> bool {
        if !self.pending.open {
            return true;
        }
        let opts = io.opts;
        let FileParser {
            meta,
            node_id,
            mtime,
            time_hint,
            pending,
            ctx,
            scratch,
            lossy,
            stats,
            limit,
            blocked,
            time_from_context,
            own_time_seen,
            ..
        } = self;
        let bytes = pending.text(io.data);
        let (text, valid) = match simdutf8::basic::from_utf8(bytes) {
            Ok(s) => (s, true),
            Err(_) => {
                lossy.clear();
                lossy.push_str(&String::from_utf8_lossy(bytes));
                (lossy.as_str(), false)
            }
        };
        let cx = ParseCtx { zone: &opts.zone, kind: meta.kind };
        let mut d = Draft::default();
        let format = LineFormat::detect(meta.kind, text.as_bytes());
        formats::parse(format, text, scratch, &cx, &mut d);
        if d.timestamp.is_none() && !*own_time_seen {
            *time_from_context = true;
        }
        let (timestamp, source) = match (d.timestamp, ctx.last_timestamp) {
            (Some(t), _) => (Some(t), TimeSource::Own),
            (None, Some(t)) => (Some(t), TimeSource::Previous),
            (None, None) => estimate(meta, *mtime, *time_hint, io.corr),
        };
        if let (Some(t), Some(lim)) = (timestamp, *limit) {
            if t > lim {
                *blocked = Some(t);
                return false;
            }
        }
        *blocked = None;
        if !valid {
            stats.invalid_utf8 += 1;
        }
        // Only a file's first record can lack its format's header: the file starts
        // mid-record (rotation split a record) or holds free text.
        d.flag_problems(format == LineFormat::Plain && meta.kind.headered());
        let corr = &mut *io.corr;
        corr.learn(meta, d.message, &d.ids, d.timestamp);
        for (w, a) in d.links.drain(..) {
            corr.link(w, a);
        }
        if meta.component == "ray_event" {
            corr.learn_task_log_of(meta, text);
        }
        corr.tag(meta, *node_id, ctx.job_id, ctx.task_id, &mut d.ids);
        let task_pending = tag_task(
            corr,
            meta,
            pending.offset,
            ctx.task_marker_at,
            d.actor_name.or(ctx.actor_name.as_deref()),
            &mut d.ids,
        );
        let last_before = ctx.last_timestamp;
        if d.timestamp.is_some() {
            ctx.last_timestamp = d.timestamp;
            *own_time_seen = true;
        }
        let ctx: &FileContext = ctx;
        let rec = Record {
            timestamp,
            timestamp_inferred: source != TimeSource::Own && timestamp.is_some(),
            timestamp_estimated: source == TimeSource::Estimated,
            level: d.level,
            message: d.message,
            file: meta,
            offset: pending.offset,
            lines: pending.lines,
            ids: &d.ids,
            pid: d.pid.or(meta.pid),
            task_name: d.task_name.or(ctx.task_name.as_deref()),
            actor_name: d.actor_name.or(ctx.actor_name.as_deref()).or_else(|| corr.class_of_file(meta)),
            fields: &d.fields,
            truncated: pending.truncated,
            task_pending,
            at: AtRecord {
                job_id: ctx.job_id.as_ref(),
                actor_name: ctx.actor_name.as_deref(),
                task_name: ctx.task_name.as_deref(),
                task_id: ctx.task_id.as_ref(),
                last_timestamp: last_before,
                task_marker_at: ctx.task_marker_at,
            },
        };
        stats.records += 1;
        stats.task_untagged += task_pending as u64;
        (io.out)(&rec);
        pending.open = false;
        true
    }
}

/// Tags a task worker's print with the attempt whose byte range holds it (the
/// event's range wins over a `:task_attempt_start:` marker). Returns whether the
/// print may still get one (see [`Record::task_pending`]): no range covers it yet,
/// ranges of its session are known, and its worker hosts no actor (an actor's
/// method calls come without ranges: its prints carry the actor instead).
fn tag_task(
    corr: &Correlator,
    meta: &FileMeta,
    offset: u64,
    marker_at: Option<u64>,
    actor_name: Option<&str>,
    ids: &mut Ids,
) -> bool {
    if !corr.tags_tasks() {
        // No task event known or coming: the common case, checked first on every record.
        return false;
    }
    match corr.task_at(meta, offset, marker_at) {
        Some(Lookup::Task { task_id, attempt }) => {
            ids.task_id = Some(task_id);
            ids.task_attempt = Some(attempt);
            false
        }
        Some(Lookup::NotYet) => {
            let actor = ids.actor_id.is_some() || actor_name.is_some() || corr.class_of_file(meta).is_some();
            !actor && corr.expects_tasks(meta)
        }
        _ => false,
    }
}

/// The time a file's first record gets when it has none of its own (a print before
/// any timed line), as [`FileParser`] dates it: for a reader that orders files by
/// their next record's time before opening them.
pub fn untimed_first(
    meta: &FileMeta,
    mtime: Option<Timestamp>,
    hint: Option<Timestamp>,
    corr: &Correlator,
) -> Option<Timestamp> {
    estimate(meta, mtime, hint, corr).0
}

/// The time of a record before any record of its file had one: the file's first
/// timed line (the record was written before it), but no later than the newest time
/// of the worker's core-worker log (a worker's output cannot come after its last log
/// line, give or take the minute between its event-stat dumps); the file's mtime
/// when neither is known.
fn estimate(
    meta: &FileMeta,
    mtime: Option<Timestamp>,
    hint: Option<Timestamp>,
    corr: &Correlator,
) -> (Option<Timestamp>, TimeSource) {
    let worker = corr.worker_time_of(meta);
    match (hint, worker) {
        (Some(h), Some(w)) => (Some(h.min(w)), TimeSource::Estimated),
        (Some(t), None) | (None, Some(t)) => (Some(t), TimeSource::Estimated),
        (None, None) => (mtime, TimeSource::Mtime),
    }
}

/// Whether `record` starts with a log line below WARNING. A traceback after such a
/// line is an uncaught exception printed on its own (`logger.exception` and
/// `exc_info` come with ERROR or WARNING lines), so it starts a record instead of
/// joining that line. Runs only when a traceback opens, so parsing twice is cheap.
fn below_warning(kind: FileKind, zone: &Zone, record: &[u8]) -> bool {
    let first = &record[..memchr::memchr(b'\n', record).unwrap_or(record.len())];
    let Ok(text) = std::str::from_utf8(first) else { return false };
    let (mut scratch, mut d) = (String::new(), Draft::default());
    formats::parse(LineFormat::detect(kind, first), text, &mut scratch, &ParseCtx { zone, kind }, &mut d);
    matches!(d.level, Some(Level::Trace | Level::Debug | Level::Info))
}

#[cfg(test)]
mod tests;
