//! Pass two's input, cut into segments for [`super::parallel`]: every file and
//! archive entry, in the order the serial scan reads them, as pieces of about
//! [`SEGMENT`] bytes that end on a line boundary.
//!
//! A segment is parsed on its own by a parser resumed at its offset, so the reader
//! says what such a parser needs to be right, and what lets the merge check it:
//! - the cut is put before a line that looks like a record's start (a C++ header,
//!   a line that is not indented), and that next line travels with the segment
//!   before it, so its parser can tell whether the line really starts a record
//!   ([`raylog_parsers::FileParser::breaks_before`]);
//! - the marker lines of worker files (`:job_id:`, `:task_name:`...) are tracked
//!   here as the bytes go by, so each segment starts with the marker context the
//!   serial parser would have there (the time of the last record is not known
//!   without parsing: the merge checks whether it mattered).
//!
//! A line with no end in sight (longer than the cap) is cut where it is; the rest of
//! that file is then marked unfit for a parse of its own and the merge reads it
//! serially.

use std::io::{self, Read};
use std::sync::Arc;

use memchr::memmem;
use raylog_parsers::assemble::Marker;
use raylog_parsers::formats::LineFormat;
use raylog_parsers::parser::FileContext;
use raylog_parsers::{FileKind, FileMeta, Id, Timestamp};

/// Bytes a segment aims at.
pub const SEGMENT: usize = 512 << 10;

/// One file or archive entry: what every parser of its segments needs.
#[derive(Debug)]
pub struct Unit {
    /// How failures and warnings name it.
    pub label: String,
    pub meta: FileMeta,
    pub node: Option<Id>,
    pub mtime: Option<Timestamp>,
    pub hint: Option<Timestamp>,
}

/// A piece of a unit's bytes.
#[derive(Debug)]
pub struct Segment {
    pub unit: Arc<Unit>,
    /// Where `bytes` start in the unit.
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// The unit's next line (without its newline), when the segment ends on a line
    /// boundary and that line was read whole; `None` at the end or after a forced cut.
    pub next_line: Option<Vec<u8>>,
    /// The unit ends with this segment.
    pub last: bool,
    /// The marker context at `offset` (its `last_timestamp` is unknown: `None`).
    pub guess: FileContext,
    /// `offset` is a line start and `guess` is exact: a parser of its own can try.
    pub fit: bool,
    /// The read error that ended the unit (last segment only).
    pub error: Option<io::Error>,
}

/// Cuts `r` into segments, handing each to `send` (false: stop reading); true when
/// reading stopped early: a read error (sent with the bytes read before it, in the
/// last segment), or `send` said so. `buffer` gives an empty buffer to fill.
pub fn cut(
    mut r: impl Read,
    unit: &Arc<Unit>,
    max_line: usize,
    buffer: &dyn Fn() -> Vec<u8>,
    send: &mut dyn FnMut(Segment) -> bool,
) -> bool {
    let worker = unit.meta.kind == FileKind::Worker;
    let cap = SEGMENT + max_line + (64 << 10);
    let (mut offset, mut ctx, mut fit) = (0u64, FileContext::default(), true);
    let mut buf = buffer();
    loop {
        let want = SEGMENT.saturating_sub(buf.len()).max(64 << 10) as u64;
        let (eof, error) = match (&mut r).take(want).read_to_end(&mut buf) {
            Ok(n) => (n == 0, None),
            Err(e) => (true, Some(e)),
        };
        if eof {
            let failed = error.is_some();
            let (guess, bytes) = (ctx.clone(), std::mem::take(&mut buf));
            let sent =
                send(Segment { unit: unit.clone(), offset, bytes, next_line: None, last: true, guess, fit, error });
            return failed || !sent;
        }
        if buf.len() < SEGMENT {
            continue;
        }
        let (at, next_line) = match boundary(&buf, unit.meta.kind) {
            Some((at, end)) => (at, Some(buf[at..end].to_vec())),
            None if buf.len() >= cap => (buf.len(), None),
            None => continue,
        };
        let mut rest = buffer();
        rest.extend_from_slice(&buf[at..]);
        buf.truncate(at);
        let guess = ctx.clone();
        if worker && fit {
            track_markers(&buf, &mut ctx);
        }
        let seg_fit = fit;
        fit &= next_line.is_some();
        let bytes = std::mem::replace(&mut buf, rest);
        let len = bytes.len() as u64;
        if !send(Segment {
            unit: unit.clone(),
            offset,
            bytes,
            next_line,
            last: false,
            guess,
            fit: seg_fit,
            error: None,
        }) {
            return true;
        }
        offset += len;
    }
}

/// Where to cut `buf`: the start of its last whole line that looks like a record's
/// start (searched for in the last 64 KiB), else of its last whole line; with that
/// line's end. `None` when no line ends after a line start.
fn boundary(buf: &[u8], kind: FileKind) -> Option<(usize, usize)> {
    let last_nl = memchr::memrchr(b'\n', buf)?;
    let floor = last_nl.saturating_sub(64 << 10);
    let mut end = last_nl;
    let mut fallback = None;
    while end > floor {
        let Some(nl) = memchr::memrchr(b'\n', &buf[..end]) else { break };
        let start = nl + 1;
        let line = &buf[start..end];
        fallback.get_or_insert((start, end));
        if starts_record(kind, line) {
            return Some((start, end));
        }
        end = start - 1;
    }
    fallback
}

/// A line a record is likely to start with: a header in headered files; elsewhere
/// one that is not indented and does not open or close a traceback.
fn starts_record(kind: FileKind, line: &[u8]) -> bool {
    if kind.headered() {
        return LineFormat::is_header(kind, line);
    }
    match line.first() {
        Some(c) if c.is_ascii_digit() || *c == b':' => true,
        Some(b'[' | b'{') => true,
        _ => false,
    }
}

/// Applies the marker lines of `bytes` (whole lines from a line start) to `ctx`, as
/// the parser does.
fn track_markers(bytes: &[u8], ctx: &mut FileContext) {
    let mut apply = |from: usize| {
        let end = memchr::memchr(b'\n', &bytes[from..]).map_or(bytes.len(), |e| from + e);
        let line = &bytes[from..end];
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(m) = Marker::parse(text) {
            ctx.apply_marker(m);
        }
    };
    if bytes.first() == Some(&b':') {
        apply(0);
    }
    for at in memmem::find_iter(bytes, b"\n:") {
        apply(at + 1);
    }
}
