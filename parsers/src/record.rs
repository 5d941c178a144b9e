//! The record: one log event with its Ray ids, borrowed from parser buffers.
//!
//! A [`Record`] lives only for the duration of the callback that receives it: its
//! strings point into the parser's reused buffers, so producing one costs no heap
//! allocation. Consumers that need to keep a record serialize it
//! ([`crate::ndjson`]) or copy what they need.

use crate::classify::FileMeta;
pub use crate::classify::Stream;
use crate::id::Id;
use crate::keyset::KeySet;
use crate::time::Timestamp;

/// Severity, normalised across Ray's spellings (`I`, `INFO`, `info`, `WARN`...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warning,
    Error,
    Fatal,
}

impl Level {
    /// The schema spelling: TRACE DEBUG INFO WARNING ERROR FATAL.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warning => "WARNING",
            Level::Error => "ERROR",
            Level::Fatal => "FATAL",
        }
    }

    /// A spdlog level letter (`I W E F D T C`).
    #[inline]
    pub fn from_letter(c: u8) -> Option<Level> {
        Some(match c {
            b'I' => Level::Info,
            b'W' => Level::Warning,
            b'E' => Level::Error,
            b'F' | b'C' => Level::Fatal,
            b'D' => Level::Debug,
            b'T' => Level::Trace,
            _ => return None,
        })
    }

    /// A level name in any case, including Python's and spdlog's aliases.
    pub fn from_name(s: &[u8]) -> Option<Level> {
        let mut buf = [0u8; 8];
        if s.is_empty() || s.len() > buf.len() {
            return None;
        }
        for (d, c) in buf.iter_mut().zip(s) {
            *d = c.to_ascii_uppercase();
        }
        Some(match &buf[..s.len()] {
            b"TRACE" => Level::Trace,
            b"DEBUG" => Level::Debug,
            b"INFO" => Level::Info,
            b"WARNING" | b"WARN" => Level::Warning,
            b"ERROR" | b"ERR" => Level::Error,
            b"FATAL" | b"CRITICAL" => Level::Fatal,
            _ => return None,
        })
    }
}

/// An extra key/value pair under the record's `fields` object.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FieldValue<'a> {
    /// Text, escaped when written as JSON.
    Str(&'a str),
    /// Already-valid JSON (a number, object, array, bool, or escaped string).
    Json(&'a str),
}

/// One `fields` entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Field<'a> {
    pub key: &'a str,
    pub value: FieldValue<'a>,
}

/// Inline capacity for extracted fields; more spill to the heap.
pub const INLINE_FIELDS: usize = 6;

/// Up to this many pairs, a repeated key is found by comparing with each pair: a
/// record has a handful, and building an index would allocate per record. Past it
/// an index takes over, so a line with many keys is parsed in linear time.
const SCAN_FIELDS: usize = 16;

/// Extracted pairs, held inline in the common case.
#[derive(Clone, Debug, Default)]
pub struct Fields<'a> {
    inline: [Option<Field<'a>>; INLINE_FIELDS],
    len: usize,
    spill: Vec<Field<'a>>,
    /// Positions of the keys, once there are more than [`SCAN_FIELDS`] pairs.
    index: KeySet,
}

impl<'a> Fields<'a> {
    /// Appends a pair; a repeated key keeps its first value.
    pub fn push(&mut self, key: &'a str, value: FieldValue<'a>) {
        if !self.claim(key) {
            return;
        }
        let f = Field { key, value };
        if self.len < INLINE_FIELDS {
            self.inline[self.len] = Some(f);
            self.len += 1;
        } else {
            self.spill.push(f);
        }
    }

    /// False when `key` is already there; else notes it in the index (building the
    /// index when the pair about to be added is one too many to scan).
    fn claim(&mut self, key: &'a str) -> bool {
        let at = self.count();
        if self.index.is_empty() {
            if self.iter().any(|f| f.key == key) {
                return false;
            }
            if at < SCAN_FIELDS {
                return true;
            }
        }
        let Fields { inline, spill, index, .. } = self;
        if index.is_empty() {
            for p in 0..at as u32 {
                let fresh = index.insert(key_of(inline, spill, p), p, |p| key_of(inline, spill, p));
                debug_assert!(fresh.is_ok());
            }
        }
        // Positions are u32: a record holds far fewer than 4 billion pairs.
        index.insert(key, at as u32, |p| key_of(inline, spill, p)).is_ok()
    }

    /// Number of pairs.
    fn count(&self) -> usize {
        self.len + self.spill.len()
    }

    /// All pairs in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = &Field<'a>> {
        self.inline[..self.len].iter().flatten().chain(self.spill.iter())
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Looks a key up.
    pub fn get(&self, key: &str) -> Option<FieldValue<'a>> {
        if self.index.is_empty() {
            return self.iter().find(|f| f.key == key).map(|f| f.value);
        }
        let at = self.index.get(key, |p| key_of(&self.inline, &self.spill, p))? as usize;
        let f = if at < INLINE_FIELDS { self.inline[at].as_ref() } else { self.spill.get(at - INLINE_FIELDS) };
        f.map(|f| f.value)
    }
}

/// The key of the pair at position `p` of a [`Fields`] (split into its parts so the
/// index can be borrowed mutably meanwhile).
fn key_of<'k>(inline: &'k [Option<Field<'_>>], spill: &'k [Field<'_>], p: u32) -> &'k str {
    let p = p as usize;
    let f = if p < INLINE_FIELDS { inline[p].as_ref() } else { spill.get(p - INLINE_FIELDS) };
    f.map_or("", |f| f.key)
}

/// The Ray ids a record is tagged with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ids {
    pub node_id: Option<Id>,
    pub job_id: Option<Id>,
    pub worker_id: Option<Id>,
    pub actor_id: Option<Id>,
    pub task_id: Option<Id>,
    /// The attempt of `task_id` that printed the record, where Ray's task events
    /// say which bytes each attempt wrote (see `crate::task_logs`).
    pub task_attempt: Option<u32>,
}

impl Ids {
    /// Fills each absent id from `other`.
    pub fn fill_from(&mut self, other: &Ids) {
        self.node_id = self.node_id.or(other.node_id);
        self.job_id = self.job_id.or(other.job_id);
        self.worker_id = self.worker_id.or(other.worker_id);
        self.actor_id = self.actor_id.or(other.actor_id);
        if self.task_id.is_none() {
            self.task_id = other.task_id;
            self.task_attempt = other.task_attempt;
        }
    }

    /// Fills what the id layout implies: a task's actor and job, an actor's job,
    /// a driver's job.
    pub fn derive(&mut self) {
        if let Some(t) = &self.task_id {
            if self.actor_id.is_none() {
                self.actor_id = t.actor_of_task();
            }
            if self.job_id.is_none() {
                self.job_id = t.job_of_actor_or_task();
            }
        }
        if self.job_id.is_none() {
            if let Some(a) = &self.actor_id {
                self.job_id = a.job_of_actor_or_task();
            } else if let Some(w) = &self.worker_id {
                self.job_id = w.job_of_driver_worker();
            }
        }
    }
}

/// The file's context where a record starts: what the marker lines before it set
/// (`:job_id:`, `:actor_name:`, `:task_name:`, `:task_attempt_start:`) and the time
/// of the last record before it that had one of its own. A reader that must resume
/// the file at this record (the agent, while the record waits in its hold) resumes
/// with this, so the records after it are read as they were the first time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtRecord<'a> {
    pub job_id: Option<&'a Id>,
    pub actor_name: Option<&'a str>,
    pub task_name: Option<&'a str>,
    pub task_id: Option<&'a Id>,
    pub last_timestamp: Option<Timestamp>,
    /// Where the file's last task marker before the record starts.
    pub task_marker_at: Option<u64>,
}

/// One parsed record. See docs/records.md ("Record schema") for the JSON form.
#[derive(Clone, Debug)]
pub struct Record<'a> {
    pub timestamp: Option<Timestamp>,
    /// True when the time is not written on the record: inherited from the previous
    /// record of the file that had one, estimated, or the file's mtime.
    pub timestamp_inferred: bool,
    /// True when the time was estimated from the file's first timed line or from the
    /// worker's core-worker log (see `parser`).
    pub timestamp_estimated: bool,
    pub level: Option<Level>,
    pub message: &'a str,
    /// Classification of the file the record came from (component, stream, path).
    pub file: &'a FileMeta,
    /// Byte offset of the record's first line in its file.
    pub offset: u64,
    /// Number of physical lines the record spans.
    pub lines: u32,
    pub ids: &'a Ids,
    pub pid: Option<u32>,
    pub task_name: Option<&'a str>,
    pub actor_name: Option<&'a str>,
    pub fields: &'a Fields<'a>,
    /// A line was longer than `max_line_bytes` and was cut.
    pub truncated: bool,
    /// A task worker's print that no task range covers yet, while Ray's task events
    /// have named ranges of its session: the event naming the attempt that printed
    /// it may still come (the agent holds it a while; see `crate::task_logs`).
    pub task_pending: bool,
    /// The file's context where the record starts (empty where not known: records
    /// rebuilt from a batch or a scan).
    pub at: AtRecord<'a>,
}

impl Record<'_> {
    /// The schema's `component` value.
    pub fn component(&self) -> &str {
        &self.file.component
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(f: &Fields<'_>) -> Vec<String> {
        f.iter().map(|f| f.key.to_string()).collect()
    }

    #[test]
    fn first_value_of_a_repeated_key_wins_at_every_size() {
        for n in [1, INLINE_FIELDS, SCAN_FIELDS, SCAN_FIELDS + 1, 1000] {
            let names: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            let mut f = Fields::default();
            for (i, k) in names.iter().enumerate() {
                f.push(k, FieldValue::Json(if i % 2 == 0 { "first" } else { "1st" }));
            }
            // Every key again, and some twice more, in another order.
            for k in names.iter().rev().chain(names.iter().step_by(3)) {
                f.push(k, FieldValue::Str("later"));
            }
            assert_eq!(keys(&f), names, "n = {n}: insertion order, no repeats");
            for (i, k) in names.iter().enumerate() {
                let want = FieldValue::Json(if i % 2 == 0 { "first" } else { "1st" });
                assert_eq!(f.get(k), Some(want), "n = {n}, {k}");
            }
            assert_eq!(f.get("absent"), None);
        }
    }

    #[test]
    fn eighty_thousand_distinct_keys_all_survive() {
        let names: Vec<String> = (0..80_000).map(|i| format!("key_{i}")).collect();
        let mut f = Fields::default();
        for k in &names {
            f.push(k, FieldValue::Str(k));
        }
        assert_eq!(f.iter().count(), names.len());
        assert!(f.iter().zip(&names).all(|(got, want)| got.key == want && got.value == FieldValue::Str(want)));
        assert_eq!(f.get("key_79999"), Some(FieldValue::Str("key_79999")));
        assert_eq!(f.get("key_80000"), None);
    }

    #[test]
    fn keys_that_are_prefixes_or_empty_stay_distinct() {
        let names = ["", "a", "ab", "abcdefgh", "abcdefghi", "abcdefgh\0"];
        let mut f = Fields::default();
        for _ in 0..3 {
            for (i, k) in names.iter().cycle().take(SCAN_FIELDS * 2).enumerate() {
                f.push(k, FieldValue::Json(["0", "1", "2"][i % 3]));
            }
        }
        assert_eq!(keys(&f), names);
    }
}
