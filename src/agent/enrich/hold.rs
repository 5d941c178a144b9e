//! Hold: an actor worker's output read before the actor's id is known, and a new
//! session's first records read before its raylet names the node.
//!
//! Live, a worker's stdout (`:actor_name:Counter` then prints) can be read before its
//! core-worker log says `Creating actor actor_id=…`. Such records are copied out of
//! the parser (the rare path, so owning them is fine) and held, bounded in count and
//! time, until the correlator knows the worker's actor; then they are released with
//! the actor id (and the job it implies). On timeout they go out as they are: late
//! correlation must never turn into data loss.
//!
//! A normal task's print waits the same way, within the same bounds, for the event
//! giving the byte range of the attempt that printed it (`Record::task_pending`,
//! `raylog_parsers::task_logs`); one whose event never comes goes out without a
//! `task_id` and is counted ([`Hold::untagged_tasks`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raylog_parsers::record::{FieldValue, Fields, Ids, Level};
use raylog_parsers::task_logs::Lookup;
use raylog_parsers::{Correlator, FileMeta, Id, Record, Timestamp};

use crate::agent::checkpoint::{FileKey, SavedContext};

/// How long a held record may wait, and for what.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    /// It goes out by then, whatever is still unknown.
    pub until: Instant,
    /// It waits for its logs dir's node id, until then at the latest.
    pub node_until: Option<Instant>,
}

/// What a held record says of its ids and names.
#[derive(Debug)]
struct Shared {
    ids: Ids,
    task_name: Option<Box<str>>,
    actor_name: Option<Box<str>>,
}

impl Shared {
    fn is(&self, r: &Record<'_>) -> bool {
        self.ids == *r.ids && self.task_name.as_deref() == r.task_name && self.actor_name.as_deref() == r.actor_name
    }
}

/// A record copied out of the parser.
#[derive(Debug)]
pub struct HeldRecord {
    pub key: FileKey,
    /// Its file's document-id seed when it was read: the file may be closed,
    /// renamed or forgotten before the record goes out, and its id must not change.
    pub seed: u128,
    pub meta: Arc<FileMeta>,
    pub wait: Wait,
    timestamp: Option<Timestamp>,
    timestamp_inferred: bool,
    timestamp_estimated: bool,
    level: Option<Level>,
    message: String,
    offset: u64,
    lines: u32,
    /// The ids and names, as a file's records have them alike: shared with the
    /// record held before when the same (290 of a held record's 512 bytes were its
    /// ids, and a catch-up of actor output fills the hold to its bound).
    shared: Arc<Shared>,
    pid: Option<u32>,
    /// `(key, value, is_raw_json)`.
    fields: Vec<(String, String, bool)>,
    truncated: bool,
    /// It waits for the event naming the task attempt that printed it
    /// (`Record::task_pending`).
    task_pending: bool,
    /// Where its file's last task marker before it starts (see
    /// `TaskRanges::lookup_in`).
    task_marker_at: Option<u64>,
    /// It waits for no actor: only, perhaps, for its node, else behind its
    /// file's earlier records (see [`Hold::release_oldest`]).
    rider: bool,
}

impl HeldRecord {
    /// When its wait ends, whatever else happens.
    fn due(&self) -> Option<Instant> {
        self.due_unless(false)
    }

    /// When its wait ends, `node_known` or not (a known node ends the node wait).
    fn due_unless(&self, node_known: bool) -> Option<Instant> {
        earliest(Some(self.wait.until), self.wait.node_until.filter(|_| !node_known))
    }

    /// `r`, its ids and names shared with `last`'s when the same.
    fn copy(
        r: &Record<'_>,
        key: FileKey,
        seed: u128,
        meta: Arc<FileMeta>,
        wait: Wait,
        last: Option<&Arc<Shared>>,
    ) -> HeldRecord {
        let shared = match last {
            Some(s) if s.is(r) => s.clone(),
            _ => Arc::new(Shared {
                ids: *r.ids,
                task_name: r.task_name.map(Box::from),
                actor_name: r.actor_name.map(Box::from),
            }),
        };
        HeldRecord {
            key,
            seed,
            meta,
            wait,
            timestamp: r.timestamp,
            timestamp_inferred: r.timestamp_inferred,
            timestamp_estimated: r.timestamp_estimated,
            level: r.level,
            message: r.message.to_string(),
            offset: r.offset,
            lines: r.lines,
            shared,
            pid: r.pid,
            fields: r
                .fields
                .iter()
                .map(|f| match f.value {
                    FieldValue::Str(s) => (f.key.to_string(), s.to_string(), false),
                    FieldValue::Json(j) => (f.key.to_string(), j.to_string(), true),
                })
                .collect(),
            truncated: r.truncated,
            task_pending: r.task_pending,
            task_marker_at: r.at.task_marker_at,
            rider: !awaits_actor(r.ids, r.actor_name.is_some(), r.file) && !r.task_pending,
        }
    }

    /// Offset of the record in its file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the record waits for its worker's actor (see [`Hold::awaits_actor`]).
    fn awaits_actor(&self) -> bool {
        awaits_actor(&self.shared.ids, self.shared.actor_name.is_some(), &self.meta)
    }

    /// The task attempt whose range holds the record, if it waits for one and
    /// the correlator knows it now; `Err(())` while it must still wait.
    fn task(&self, corr: &Correlator) -> Result<Option<(Id, u32)>, ()> {
        if !self.task_pending {
            return Ok(None);
        }
        match corr.task_at(&self.meta, self.offset, self.task_marker_at) {
            Some(Lookup::Task { task_id, attempt }) => Ok(Some((task_id, attempt))),
            // Its session's tasks turned out to run without ranges: no use waiting.
            Some(Lookup::NotYet) if corr.expects_tasks(&self.meta) => Err(()),
            _ => Ok(None),
        }
    }

    /// Hands the record to `out`, tagged with `actor`, `node` and `task` (an attempt) when known.
    pub fn emit(
        &self,
        actor: Option<Id>,
        node: Option<Id>,
        task: Option<(Id, u32)>,
        out: &mut dyn FnMut(&Record<'_>, FileKey, u128),
    ) {
        let mut ids = self.shared.ids;
        ids.node_id = ids.node_id.or(node);
        if let Some((t, attempt)) = task {
            ids.task_id = Some(t);
            ids.task_attempt = Some(attempt);
        }
        if let Some(a) = actor {
            ids.actor_id = Some(a);
            ids.derive();
        }
        let mut fields = Fields::default();
        for (k, v, raw) in &self.fields {
            fields.push(k, if *raw { FieldValue::Json(v) } else { FieldValue::Str(v) });
        }
        let rec = Record {
            timestamp: self.timestamp,
            timestamp_inferred: self.timestamp_inferred,
            timestamp_estimated: self.timestamp_estimated,
            level: self.level,
            message: &self.message,
            file: &self.meta,
            offset: self.offset,
            lines: self.lines,
            ids: &ids,
            pid: self.pid,
            task_name: self.shared.task_name.as_deref(),
            actor_name: self.shared.actor_name.as_deref(),
            fields: &fields,
            truncated: self.truncated,
            task_pending: false,
            at: Default::default(),
        };
        out(&rec, self.key, self.seed);
    }
}

/// Records waiting for their actor, oldest first.
///
/// A catch-up over a node's finished actor workers whose core-worker logs are gone
/// keeps the hold full for minutes, and the source asks it about every file it
/// reads or checkpoints: so each file's held offsets are indexed, and no question
/// costs a pass over the queue (that pass, repeated per file, made a 100,000-file
/// catch-up 18 times slower).
#[derive(Debug)]
pub struct Hold {
    queue: VecDeque<HeldRecord>,
    /// The offsets of each file's held records, in queue order (which is the
    /// order they were read in, and the order they go out in).
    offsets: HashMap<FileKey, FileHeld>,
    /// What the last full pass left settled, while nothing it depends on changed.
    settled: Option<Settled>,
    /// The least time between two full passes that only time asks for (see
    /// [`PASS_GAP`]); zero in tests that compare passes call by call.
    pass_gap: Duration,
    /// Prints that waited for their task attempt's event and went out without it.
    pub untagged_tasks: u64,
}

#[derive(Debug, Default)]
struct FileHeld {
    offsets: VecDeque<(u64, Resume)>,
    /// How many of them are riders (see [`HeldRecord::rider`]).
    riders: u32,
}

/// Where a file resumes at a held record: the marker context and the last own time
/// before it (see `raylog_parsers::record::AtRecord`). A checkpoint cannot pass a
/// held record, and resuming there with the context of where reading has got to
/// would give the records in between the markers and times that come after them.
#[derive(Clone, Debug, Default)]
pub struct Resume {
    pub context: Option<Arc<SavedContext>>,
    pub last_time_ns: Option<i64>,
}

impl Resume {
    /// `r`'s, sharing the context with `prev` (the file's last held record's) when alike.
    fn of(r: &Record<'_>, prev: Option<&Resume>) -> Resume {
        let at = &r.at;
        let context = match prev.and_then(|p| p.context.as_ref()) {
            Some(c) if c.is_at(at) => Some(c.clone()),
            _ => SavedContext::from_at(at),
        };
        Resume { context, last_time_ns: at.last_timestamp.map(|t| t.0) }
    }
}

/// After a full pass, nothing held can go out before one of these changes: the
/// correlator learns a link or a node is named (`news`), a wait ends (`due`), the
/// hold fills, or a file's first held record leaves while riders wait behind it.
/// Until then a call only gives up the oldest of a full hold, which keeps a full
/// hold's cost per record read O(1) instead of a pass over 5,000 records.
#[derive(Debug, Clone, Copy)]
struct Settled {
    news: u64,
    due: Option<Instant>,
    /// When the pass ran.
    at: Instant,
}

/// Waits end one after another while a node's actor output streams in (each record
/// is due `actor_hold` after it was read), so a pass whenever one had ended ran at
/// every read: a pass over a full hold per wake-up took most of a core at 3,000
/// lines a second. Passes that only time asks for (and those the bound asks for:
/// records behind one it gave up may be free) run at most this often, so a record
/// whose wait ended goes out up to this much later. A link learned or a node named
/// still asks for a pass at once.
pub const PASS_GAP: Duration = Duration::from_millis(100);

/// Bound on held records: past it, the oldest go out untagged. A held record owns
/// its strings (about half a KiB), so this bounds the hold to a few MiB even when a
/// backlog of actor output is read faster than the actors become known.
pub const MAX_HELD: usize = 5_000;

impl Default for Hold {
    fn default() -> Hold {
        Hold { queue: VecDeque::new(), offsets: HashMap::new(), settled: None, pass_gap: PASS_GAP, untagged_tasks: 0 }
    }
}

impl Hold {
    /// Whether `r` should wait: an actor worker's record (its file carried
    /// `:actor_name:`) that the parser could not tag with an actor id yet (it
    /// consults the correlator, so a missing id means the actor is unknown), or a
    /// task worker's print whose task attempt's range has not come yet.
    pub fn awaits(r: &Record<'_>) -> bool {
        r.task_pending || awaits_actor(r.ids, r.actor_name.is_some(), r.file)
    }

    /// Whether anything of file `key` is held (then later records of that file must
    /// wait too, to keep the file's order).
    pub fn holds_file(&self, key: &FileKey) -> bool {
        self.offsets.contains_key(key)
    }

    pub fn push(&mut self, r: &Record<'_>, key: FileKey, seed: u128, meta: Arc<FileMeta>, wait: Wait) {
        let h = HeldRecord::copy(r, key, seed, meta, wait, self.queue.back().map(|h| &h.shared));
        let len = self.queue.len();
        if len == self.queue.capacity() && (1024..=MAX_HELD).contains(&len) {
            // Up to the bound, not the next power of two past it that doubling
            // would give (a held record is half a KiB): the hold fills in every
            // catch-up of actor output whose actors are gone. A live node's few
            // held prints keep a small queue.
            self.queue.reserve_exact(MAX_HELD + 1 - len);
        }
        let file = self.offsets.entry(key).or_default();
        let resume = Resume::of(r, file.offsets.back().map(|(_, c)| c));
        file.offsets.push_back((r.offset, resume));
        file.riders += h.rider as u32;
        if let Some(s) = &mut self.settled {
            s.due = earliest(s.due, h.due());
        }
        self.queue.push_back(h);
    }

    /// Sets the least time between passes that only time asks for ([`PASS_GAP`]).
    #[cfg(test)]
    pub fn set_pass_gap(&mut self, gap: Duration) {
        self.pass_gap = gap;
    }

    /// Something `release` depends on changed outside the correlator (a logs dir's
    /// node was named): the next call looks at every record.
    pub fn unsettle(&mut self) {
        self.settled = None;
    }

    /// The files that have records held.
    pub fn files(&self) -> Vec<FileKey> {
        let mut keys: Vec<FileKey> = self.offsets.keys().copied().collect();
        keys.sort_unstable();
        keys
    }

    fn forget(&mut self, h: &HeldRecord) -> (bool, bool) {
        forget(&mut self.offsets, h)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the hold has reached [`MAX_HELD`] and its oldest records must go.
    pub fn is_full(&self) -> bool {
        self.queue.len() >= MAX_HELD
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops the held records of file `key` from `offset` on: a copy of the file
    /// (logrotate's copy-truncate) is read from there instead, so its records go
    /// out, and are checkpointed, as the copy's. Returns how many were dropped.
    pub fn drop_from(&mut self, key: &FileKey, offset: u64) -> usize {
        let before = self.queue.len();
        self.queue.retain(|h| h.key != *key || h.offset < offset);
        let dropped = before - self.queue.len();
        if dropped > 0 {
            if let Some(file) = self.offsets.get_mut(key) {
                file.offsets.retain(|(o, _)| *o < offset);
                file.riders = self.queue.iter().filter(|h| h.key == *key && h.rider).count() as u32;
                if file.offsets.is_empty() {
                    self.offsets.remove(key);
                }
            }
            self.settled = None;
        }
        dropped
    }

    /// The smallest held offset of file `key` (a checkpoint must not pass it).
    pub fn min_offset(&self, key: &FileKey) -> Option<u64> {
        self.resume_point(key).map(|(o, _)| o)
    }

    /// The smallest held offset of file `key` and where the file resumes there.
    pub fn resume_point(&self, key: &FileKey) -> Option<(u64, &Resume)> {
        // Usually the first; not when the file was read again from its start
        // (truncated) while older records of it were still held.
        self.offsets.get(key)?.offsets.iter().min_by_key(|(o, _)| *o).map(|(o, r)| (*o, r))
    }

    /// Releases, in order, every record whose worker's actor and node (`node_of` its
    /// file's logs dir) are now known or no longer awaited, whose wait is over (seen
    /// within [`PASS_GAP`] of its end), or all of them when `force`; stops at the
    /// first record of a file that must keep waiting so each file's order is kept.
    /// At most `budget` records go out per call, so the caller can cut its batch in
    /// between; returns true when it stopped there. `now` is the time the waits are
    /// measured against (the caller's clock, so tests can step it).
    pub fn release(
        &mut self,
        now: Instant,
        corr: &Correlator,
        node_of: &dyn Fn(&FileKey) -> Option<Id>,
        force: bool,
        budget: usize,
        out: &mut dyn FnMut(&Record<'_>, FileKey, u128),
    ) -> bool {
        let news = corr.learned();
        let gap = self.pass_gap;
        let unchanged = |s: Settled| s.news == news && (s.due.is_none_or(|d| now < d) || now < s.at + gap);
        if !force && self.settled.is_some_and(unchanged) {
            return self.release_oldest(now, corr, node_of, budget, out);
        }
        self.settled = None;
        let mut due = None;
        let mut blocked: HashSet<FileKey> = HashSet::new();
        let (total, mut sent, mut stopped) = (self.queue.len(), 0, false);
        let offsets = &mut self.offsets;
        let untagged = &mut self.untagged_tasks;
        // In place (a second queue for the records kept would double the hold's
        // largest allocation, a few MiB, at every pass).
        self.queue.retain(|h| {
            if stopped || sent == budget {
                stopped = true;
                return true;
            }
            if blocked.contains(&h.key) {
                // Behind a record of its file that stays, it cannot go before that
                // one, which leaves in a pass (its wait ends: it is in `due`; a link
                // is learned) or to the bound (which makes a pass due when this one
                // may be free): its own wait adds nothing to `due`.
                return true;
            }
            let actor = h.shared.ids.worker_id.and_then(|w| corr.actor_of(&w));
            let node = h.shared.ids.node_id.or_else(|| node_of(&h.key));
            let node_ok = node.is_some() || h.wait.node_until.is_none_or(|u| now >= u);
            let task = h.task(corr);
            let ready = (actor.is_some() || !h.awaits_actor()) && node_ok && task.is_ok();
            // Counting `h`: a full hold gives up its oldest until it is no longer full.
            let expired = now >= h.wait.until || total - sent >= MAX_HELD;
            if ready || expired || force {
                let _ = forget(offsets, h);
                *untagged += task.is_err() as u64;
                h.emit(actor, node, task.unwrap_or(None), out);
                sent += 1;
                false
            } else {
                blocked.insert(h.key);
                due = earliest(due, h.due_unless(node.is_some()));
                true
            }
        });
        if stopped {
            return true;
        }
        if self.queue.is_empty() {
            // Its room goes back too: a node holds nothing most of the time. A hold
            // that grew large (a catch-up of actor output) empties after the reader
            // caught up and gave its memory back (`Source::settle`): this is the
            // last of the catch-up's memory, so it goes back to the system too.
            let was_large = self.queue.capacity() >= 1024;
            self.queue = VecDeque::new();
            if was_large {
                crate::agent::trim_heap();
            }
        }
        self.settled = Some(Settled { news, due, at: now });
        false
    }

    /// [`Hold::release`] when nothing changed since the last full pass: only the
    /// bound frees records, the oldest first (never blocked: nothing of their
    /// file is ahead of them). The records behind one of them in its file may be
    /// free then: riders (they wait for no actor), or all of them if the file's
    /// actor is known (its records share a worker): then a pass is due, as when a
    /// wait ends (so a full hold whose files have riders makes a pass per gap, not
    /// per record read). Otherwise the rest of the file still waits for its actor.
    fn release_oldest(
        &mut self,
        now: Instant,
        corr: &Correlator,
        node_of: &dyn Fn(&FileKey) -> Option<Id>,
        budget: usize,
        out: &mut dyn FnMut(&Record<'_>, FileKey, u128),
    ) -> bool {
        let mut sent = 0;
        while self.queue.len() >= MAX_HELD {
            if sent == budget {
                return true;
            }
            let Some(h) = self.queue.pop_front() else { break };
            let actor = h.shared.ids.worker_id.and_then(|w| corr.actor_of(&w));
            let node = h.shared.ids.node_id.or_else(|| node_of(&h.key));
            let (left, riders) = self.forget(&h);
            if let Some(s) = self.settled.as_mut().filter(|_| left && (riders || actor.is_some())) {
                s.due = Some(now);
            }
            let task = h.task(corr);
            self.untagged_tasks += task.is_err() as u64;
            h.emit(actor, node, task.unwrap_or(None), out);
            sent += 1;
        }
        false
    }
}

/// Takes `h`, about to go out, off its file's offsets: it is its file's oldest
/// held record, since a file's records leave in the order they came.
/// Returns `(records of its file left, riders among them)`.
fn forget(offsets: &mut HashMap<FileKey, FileHeld>, h: &HeldRecord) -> (bool, bool) {
    let Some(file) = offsets.get_mut(&h.key) else { return (false, false) };
    debug_assert_eq!(file.offsets.front().map(|o| o.0), Some(h.offset));
    file.offsets.pop_front();
    file.riders -= h.rider as u32;
    if file.offsets.is_empty() {
        offsets.remove(&h.key);
        return (false, false);
    }
    (true, file.riders > 0)
}

/// The earlier of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// An actor worker's record (its file carried `:actor_name:`) without its actor id.
fn awaits_actor(ids: &Ids, has_actor_name: bool, file: &FileMeta) -> bool {
    ids.actor_id.is_none() && has_actor_name && file.component == "worker"
}

#[cfg(test)]
#[path = "hold_tests.rs"]
mod tests;
