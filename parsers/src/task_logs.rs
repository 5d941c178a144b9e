//! Which task attempt wrote which bytes of a worker's stdout and stderr (issue #58).
//!
//! Ray 2.60's `TASK_LIFECYCLE_EVENT` carries a `taskLogInfo` for a normal task:
//! `{"stdoutFile":"/tmp/ray/session_…/logs/worker-<w>-<job>-<pid>.out","stderrFile":…,
//! "stdoutStart":"142","stdoutEnd":"164","stderrStart":"1141","stderrEnd":"1141"}`
//! (int64s as JSON strings, as proto3 JSON writes them; numbers are read too). The
//! start comes in an event sent while the task runs, the end in a later one, and
//! either may come more than once: events are delivered at least once and in pieces.
//! Actor method calls come without a range.
//!
//! [`TaskLogInfo::parse`] reads one spool line or bare event; [`TaskRanges`] keeps,
//! per file, the attempts' ranges and answers, for a record's offset, which attempt
//! wrote it ([`Lookup`]). Files are keyed by session and file name, not by path:
//! the paths are those inside Ray's container, and the agent sees the same files
//! mounted elsewhere.

use std::collections::HashMap;

use crate::id::{id_from_base64, Id};
use crate::json::{members, Value};

/// What one event says about the bytes a task attempt wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskLogInfo<'a> {
    pub task_id: Id,
    pub attempt: u32,
    /// `sessionName` of the event, when it says.
    pub session: Option<&'a str>,
    /// The stdout file's range, then the stderr file's.
    pub ranges: Vec<FileRange<'a>>,
    /// Ends given without their file (stdout's, stderr's): Ray 2.60 sends an
    /// attempt's end that way when the start came in an earlier event (seen live).
    pub ends: [Option<u64>; 2],
}

/// A byte range of one file: `[start, end)`, `end` unknown while the task runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRange<'a> {
    /// The file's name (what follows the last `/` of the path Ray gave).
    pub file: &'a str,
    pub start: u64,
    pub end: Option<u64>,
}

/// What a task lifecycle event says about the attempt's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskLog<'a> {
    /// Its byte ranges.
    Ranges(TaskLogInfo<'a>),
    /// A normal task attempt of `session` began `RUNNING` and the event gave no
    /// range: Ray 2.60 does that for every task while it rotates worker files
    /// itself (`RAY_ROTATION_MAX_BYTES`), so none of the session's prints will get one.
    RunningWithout { session: Option<&'a str> },
}

impl<'a> TaskLog<'a> {
    /// What a spool line (`{"event":{…}}`) or a bare event says; `None` when it is
    /// not a task lifecycle event (or not JSON), or says neither.
    pub fn parse(text: &'a str) -> Option<TaskLog<'a>> {
        let mut event = None;
        members(text, |k, v| {
            if k == "event" && v.raw().starts_with('{') {
                event = Some(v.raw());
            }
        })
        .ok()?;
        let (mut session, mut payload) = (None, None);
        members(event.unwrap_or(text), |k, v| match k {
            "sessionName" | "session_name" => session = v.plain_str(),
            "taskLifecycleEvent" | "task_lifecycle_event" if v.raw().starts_with('{') => payload = Some(v.raw()),
            _ => {}
        })
        .ok()?;
        let (mut task_id, mut attempt, mut info, mut running) = (None, 0, None, false);
        members(payload?, |k, v| match k {
            "taskId" | "task_id" => task_id = v.plain_str().and_then(|s| id_from_base64(s.as_bytes())),
            "taskAttempt" | "task_attempt" => attempt = number(v).unwrap_or(0) as u32,
            "taskLogInfo" | "task_log_info" if v.raw().starts_with('{') => info = Some(v.raw()),
            "stateTransitions" | "state_transitions" => running = v.raw().contains("\"RUNNING\""),
            _ => {}
        })
        .ok()?;
        let task_id = task_id?;
        match info {
            Some(info) => {
                let (ranges, ends) = file_ranges(info)?;
                Some(TaskLog::Ranges(TaskLogInfo { task_id, attempt, session, ranges, ends }))
            }
            // A normal task's: an actor's calls never come with ranges, nor the driver's.
            None if running && task_id.actor_of_task().is_none() && !task_id.as_str().starts_with(DRIVER_TASK) => {
                Some(TaskLog::RunningWithout { session })
            }
            None => None,
        }
    }
}

/// How a driver's task id starts (its unique part is all `f`).
const DRIVER_TASK: &str = "ffffffffffffffff";

impl<'a> TaskLogInfo<'a> {
    /// The `taskLogInfo` of a spool line (`{"event":{…}}`) or a bare event; `None`
    /// when it is not a task lifecycle event with one (or not JSON).
    pub fn parse(text: &'a str) -> Option<TaskLogInfo<'a>> {
        match TaskLog::parse(text)? {
            TaskLog::Ranges(info) => Some(info),
            TaskLog::RunningWithout { .. } => None,
        }
    }
}

/// The stdout and stderr ranges of a `taskLogInfo` object, and the ends it gives
/// without a file.
fn file_ranges(info: &str) -> Option<(Vec<FileRange<'_>>, [Option<u64>; 2])> {
    let mut f: [(Option<&str>, Option<u64>, Option<u64>); 2] = [(None, None, None); 2];
    members(info, |k, v| {
        let (i, what) = match k {
            "stdoutFile" | "stdout_file" => (0, 'f'),
            "stdoutStart" | "stdout_start" => (0, 's'),
            "stdoutEnd" | "stdout_end" => (0, 'e'),
            "stderrFile" | "stderr_file" => (1, 'f'),
            "stderrStart" | "stderr_start" => (1, 's'),
            "stderrEnd" | "stderr_end" => (1, 'e'),
            _ => return,
        };
        match what {
            'f' => f[i].0 = v.plain_str().map(|p| p.rsplit('/').next().unwrap_or(p)),
            's' => f[i].1 = number(v),
            _ => f[i].2 = number(v),
        }
    })
    .ok()?;
    let ranges: Vec<FileRange<'_>> = f
        .iter()
        .filter_map(|&(file, start, end)| {
            let (file, start) = (file.filter(|n| !n.is_empty())?, start?);
            Some(FileRange { file, start, end: end.filter(|&e| e >= start) })
        })
        .collect();
    let ends = f.map(|(file, _, end)| end.filter(|_| file.is_none_or(str::is_empty)));
    (!ranges.is_empty() || ends.iter().any(Option::is_some)).then_some((ranges, ends))
}

/// An int64 as proto3 JSON writes it (a string) or as a number.
fn number(v: Value<'_>) -> Option<u64> {
    match v {
        Value::Str(..) => v.plain_str()?.parse().ok(),
        Value::Raw(r) => r.parse().ok(),
        Value::Bare(_) => None,
    }
}

/// Which attempt wrote a record at some offset of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Inside an attempt's range (or after the start of one not yet ended).
    Task { task_id: Id, attempt: u32 },
    /// No range covers it yet, and one may still come: the file has no range past
    /// the offset. The agent holds such a record a while; offline it goes untagged.
    NotYet,
    /// Between two known ranges: no task wrote it (a worker's own output).
    None,
}

/// One attempt's range in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: Option<u64>,
    task_id: Id,
    attempt: u32,
}

/// The ranges of every file events named, per (session, file name).
#[derive(Clone, Debug, Default)]
pub struct TaskRanges {
    /// Session → file name → ranges by start. Nested so a lookup borrows its keys.
    files: HashMap<Box<str>, HashMap<Box<str>, Vec<Range>>>,
    /// Files in the order their first range came, to forget the oldest past [`MAX_FILES`].
    order: std::collections::VecDeque<(Box<str>, Box<str>)>,
    /// Ranges added or changed since [`TaskRanges::take_changed`], when tracked
    /// (the agent writes them ahead of the batch that carries their event).
    changed: Option<Vec<SavedRange>>,
    /// Sessions whose normal tasks run without ranges (see [`TaskLog::RunningWithout`]).
    without: std::collections::HashSet<Box<str>>,
    /// The file of each (attempt, stream) range not ended yet, for an end that comes
    /// without its file ([`TaskLogInfo::ends`]). Bounded: cleared past [`MAX_OPEN`].
    open: HashMap<OpenKey, (Box<str>, Box<str>)>,
}

/// An attempt's range in one stream (0 stdout, 1 stderr).
type OpenKey = (Id, u32, usize);

/// Ranges not ended yet whose file is kept for an end that names none: past it
/// they are all forgotten (such ends then go unlearned; the next task's marker still
/// closes a range for the prints after it).
pub const MAX_OPEN: usize = 65_536;

/// Files whose ranges are kept: past it the oldest file's go. A file's ranges
/// matter while it is read, and a node has a few thousand worker files at most.
pub const MAX_FILES: usize = 65_536;

/// Ranges kept per file: past it the earliest go (a worker running millions of
/// short tasks; its early output was read long ago).
pub const MAX_RANGES_PER_FILE: usize = 4_096;

/// One attempt's range in one file, owned: what the agent journals and restores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedRange {
    pub session: Box<str>,
    pub file: Box<str>,
    pub task_id: Id,
    pub attempt: u32,
    pub start: u64,
    pub end: Option<u64>,
}

impl TaskRanges {
    pub fn new() -> TaskRanges {
        TaskRanges::default()
    }

    /// Whether no range is known.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Files with at least one range.
    pub fn files(&self) -> usize {
        self.files.values().map(HashMap::len).sum()
    }

    /// Takes in what an event says. `session` stands in when the event names none
    /// (the spool of one session). Events come at least once and in pieces: the same
    /// attempt's range is merged (an end learned later completes it). Returns
    /// whether anything changed.
    pub fn add(&mut self, info: &TaskLogInfo<'_>, session: &str) -> bool {
        let session = info.session.unwrap_or(session);
        let mut changed = false;
        for r in &info.ranges {
            let saved = SavedRange {
                session: session.into(),
                file: r.file.into(),
                task_id: info.task_id,
                attempt: info.attempt,
                start: r.start,
                end: r.end,
            };
            changed |= self.restore(&saved);
        }
        for (stream, end) in info.ends.iter().enumerate() {
            let Some(end) = *end else { continue };
            let Some((session, file)) = self.open.remove(&(info.task_id, info.attempt, stream)) else { continue };
            changed |= self.end_of(session, file, info.task_id, info.attempt, end);
        }
        changed
    }

    /// Ends the range of `attempt` of `task_id` in `file` at `end`, if it began before it.
    fn end_of(&mut self, session: Box<str>, file: Box<str>, task_id: Id, attempt: u32, end: u64) -> bool {
        let ranges = self.files.get(&session).and_then(|f| f.get(&file));
        let Some(r) = ranges.and_then(|rs| rs.iter().find(|r| r.task_id == task_id && r.attempt == attempt)) else {
            return false;
        };
        let start = r.start;
        (end >= start) && self.restore(&SavedRange { session, file, task_id, attempt, start, end: Some(end) })
    }

    /// Takes in one range (as [`TaskRanges::add`] does one of an event's); returns
    /// whether anything changed.
    pub fn restore(&mut self, s: &SavedRange) -> bool {
        let key = (s.task_id, s.attempt, s.file.ends_with(".err") as usize);
        if s.end.is_none() {
            if self.open.len() >= MAX_OPEN {
                self.open.clear();
            }
            self.open.insert(key, (s.session.clone(), s.file.clone()));
        } else {
            self.open.remove(&key);
        }
        let by_file = self.files.entry(s.session.clone()).or_default();
        if !by_file.contains_key(&s.file) {
            self.order.push_back((s.session.clone(), s.file.clone()));
        }
        let ranges = by_file.entry(s.file.clone()).or_default();
        let new = Range { start: s.start, end: s.end, task_id: s.task_id, attempt: s.attempt };
        let merged = match ranges.iter_mut().find(|x| x.task_id == s.task_id && x.attempt == s.attempt) {
            Some(x) if x.start <= new.start && x.end >= new.end => return false,
            Some(x) => {
                x.start = x.start.min(new.start);
                x.end = x.end.max(new.end);
                *x
            }
            None => {
                let at = ranges.partition_point(|x| x.start <= new.start);
                ranges.insert(at, new);
                if ranges.len() > MAX_RANGES_PER_FILE {
                    ranges.remove(0);
                }
                new
            }
        };
        if merged.start != new.start && ranges.windows(2).any(|w| w[0].start > w[1].start) {
            ranges.sort_by_key(|r| r.start);
        }
        if let Some(c) = &mut self.changed {
            c.push(SavedRange { start: merged.start, end: merged.end, ..s.clone() });
        }
        while self.order.len() > MAX_FILES {
            let Some((session, file)) = self.order.pop_front() else { break };
            if let Some(f) = self.files.get_mut(&session) {
                f.remove(&file);
                if f.is_empty() {
                    self.files.remove(&session);
                }
            }
        }
        true
    }

    /// Starts keeping what changes, for [`TaskRanges::take_changed`].
    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(Vec::new);
    }

    /// The ranges added or changed since the last call (as they stand now).
    pub fn take_changed(&mut self) -> Vec<SavedRange> {
        self.changed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every range kept, in the order their files came.
    pub fn saved(&self) -> Vec<SavedRange> {
        let mut out = Vec::new();
        for (session, file) in &self.order {
            let Some(ranges) = self.files.get(session).and_then(|f| f.get(file)) else { continue };
            out.extend(ranges.iter().map(|r| SavedRange {
                session: session.clone(),
                file: file.clone(),
                task_id: r.task_id,
                attempt: r.attempt,
                start: r.start,
                end: r.end,
            }));
        }
        out
    }

    /// Notes that `session`'s tasks run without ranges; true when this is news.
    pub fn note_without(&mut self, session: &str) -> bool {
        !self.without.contains(session) && self.without.insert(session.into())
    }

    /// Whether `session`'s tasks were seen running without ranges, and none of its
    /// ranges is known (a range that comes later says otherwise).
    pub fn without_ranges(&self, session: Option<&str>) -> bool {
        let s = session.unwrap_or("");
        (self.without.contains(s) || self.without.contains("")) && !self.expects(session)
    }

    /// The sessions seen running tasks without ranges.
    pub fn sessions_without(&self) -> impl Iterator<Item = &str> {
        self.without.iter().map(|s| &**s)
    }

    /// Whether any range of `session` is known (of any session when `None`): only
    /// then can a print wait for one (a cluster that does not export task events
    /// never sends any).
    pub fn expects(&self, session: Option<&str>) -> bool {
        match session {
            Some(s) => self.files.contains_key(s) || self.files.contains_key(""),
            None => !self.files.is_empty(),
        }
    }

    /// [`TaskRanges::lookup`] where the session may be unknown (a logs dir not
    /// under its `session_*` dir, as an archive may hold it): then the file name
    /// alone, which holds the worker's id, finds it in any session. Ranges learned
    /// from a spool without session names (`""`) answer for any session.
    ///
    /// `marker_at` is where the file's last task marker before the record starts.
    /// Ray writes one (`:task_name:`) as each task starts, and an attempt's end
    /// comes in a later event than its start: a marker after the start of a range
    /// not yet ended means the next task started there, whose range is not known
    /// yet ([`Lookup::NotYet`]), not that the open one goes on.
    pub fn lookup_in(&self, session: Option<&str>, file: &str, offset: u64, marker_at: Option<u64>) -> Lookup {
        let found = match session {
            Some(s) => self.files.get(s).and_then(|f| f.get(file)),
            None => None,
        };
        match found.or_else(|| {
            let mut any = self.files.iter().filter(|(s, _)| session.is_none() || s.is_empty());
            any.find_map(|(_, f)| f.get(file))
        }) {
            Some(ranges) => lookup_ranges(ranges, offset, marker_at),
            None => Lookup::NotYet,
        }
    }

    /// Which attempt wrote the record at `offset` of `file` in `session`.
    pub fn lookup(&self, session: &str, file: &str, offset: u64) -> Lookup {
        match self.files.get(session).and_then(|f| f.get(file)) {
            Some(ranges) => lookup_ranges(ranges, offset, None),
            None => Lookup::NotYet,
        }
    }
}

/// Which of a file's ranges (sorted by start) holds `offset`.
/// `marker_at`: see [`TaskRanges::lookup_in`].
fn lookup_ranges(ranges: &[Range], offset: u64, marker_at: Option<u64>) -> Lookup {
    // The last range starting at or before the offset.
    let at = ranges.partition_point(|r| r.start <= offset);
    let Some(r) = at.checked_sub(1).map(|i| ranges[i]) else { return Lookup::None };
    let next_start = ranges.get(at).map(|n| n.start);
    match r.end {
        Some(end) if offset < end => Lookup::Task { task_id: r.task_id, attempt: r.attempt },
        // Ended before the offset: a later task's range may still come.
        Some(_) if next_start.is_none() => Lookup::NotYet,
        Some(_) => Lookup::None,
        // Running, but a later task's marker came: that task's range is to come.
        None if marker_at.is_some_and(|m| m > r.start && m <= offset) => Lookup::NotYet,
        // Running: what follows its start is its output until the next one starts.
        None => Lookup::Task { task_id: r.task_id, attempt: r.attempt },
    }
}

#[cfg(test)]
mod tests;
