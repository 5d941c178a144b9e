//! Tasks as OpenTelemetry traces: Ray's task events, as this node's agent reads them
//! from its spool, become spans that the OTLP sink sends to `/v1/traces`.
//!
//! - Each agent builds spans from what its own node saw; no span needs another
//!   node's events. An attempt gives up to two: `schedule` (the owner's pending
//!   states) and `run` (the executing worker's `RUNNING` to the end), see
//!   [`attempt`].
//! - Ids are derived, not allocated ([`span`]): the trace id from the job id, a span
//!   id from (task, attempt, kind). Every node, and a log record carrying a task
//!   attempt, compute them alone; a span sent again is the same span.
//! - Both spans of an attempt are children of the `run` span of its parent task's
//!   attempt 0 (the child does not know which attempt of its parent submitted it).
//!   A retry links to the previous attempt's `run` span.
//! - Bounds: attempts under way past `traces_max_open_spans` are counted, not
//!   tracked; spans past `traces_max_spans_per_job` in one job are counted, not sent;
//!   an attempt not ended after `traces_span_timeout` (its node died unseen) is
//!   closed then, and a node's `DEAD` event closes the runs on it. The last
//!   [`KEEP_SENT`] attempts whose spans all went are kept to send them again when
//!   their events come again (Ray sends at least once; a restart reads again what
//!   was not acknowledged).
//! - State survives a restart in `state_dir/traces.journal` ([`journal`]), written
//!   before the batch carrying the events goes out.

pub mod attempt;
pub mod journal;
pub mod piece;
pub mod span;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::time::Duration;

use raylog_parsers::Record;

use attempt::{Attempt, ClosedBy};
use journal::{Found, LineRef, TracesLog};
use piece::Piece;
use span::{driver_task, TaskSpan};

/// Attempts whose spans all went, kept to send them again unchanged (FIFO).
pub const KEEP_SENT: usize = 10_000;

/// The open attempts are looked through for timeouts and grace at most this often.
const SWEEP_NS: i64 = 1_000_000_000;

/// The bounds, from the OTLP sink with `traces = true`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub max_spans_per_job: u64,
    pub span_timeout: Duration,
    pub max_open_spans: usize,
}

/// What the tracer counted (see `raylog_trace_*` in the metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Spans built and put in a batch.
    pub built: u64,
    /// Spans put in a batch again, unchanged, because their events came again.
    pub resent: u64,
    /// Spans not sent: their job had `max_spans_per_job`.
    pub over_job_limit: u64,
    /// Attempts not tracked: `max_open_spans` were open.
    pub over_open_limit: u64,
    /// Spans closed by `span_timeout`.
    pub timed_out: u64,
    /// Task events whose payload did not read.
    pub unreadable: u64,
}

type Key = (String, u32);

/// Builds spans from task events; one per agent, in the reader.
pub struct Tracer {
    settings: Settings,
    attempts: HashMap<Key, Attempt>,
    /// Attempts whose spans all went, oldest first.
    sent: VecDeque<Key>,
    per_job: BTreeMap<String, u64>,
    changed: HashSet<Key>,
    forgotten: Vec<Key>,
    jobs_changed: bool,
    out: Vec<TaskSpan>,
    pub counts: Counts,
    next_sweep: i64,
    log: Option<TracesLog>,
    /// Writing the journal failed (logged once until it works again).
    failing: bool,
}

impl Tracer {
    /// A tracer, with the state the journal in `state_dir` kept (when it opens: a
    /// journal that cannot is logged, and tracing goes on without one).
    pub fn open(settings: Settings, state_dir: &Path) -> Tracer {
        let (log, found) = match TracesLog::open(state_dir) {
            Ok((log, found)) => (Some(log), found),
            Err(e) => {
                tracing::error!(error = %e, "cannot open the journal of open spans; spans under way at a restart will not be sent: check state_dir");
                (None, Found::default())
            }
        };
        let mut t = Tracer::new(settings);
        t.log = log;
        t.per_job = found.jobs;
        for a in found.attempts {
            let key = (a.task.clone(), a.attempt);
            if a.settled() {
                t.sent.push_back(key.clone());
            }
            t.attempts.insert(key, a);
        }
        t
    }

    /// A tracer without a journal (tests).
    pub fn new(settings: Settings) -> Tracer {
        Tracer {
            settings,
            attempts: HashMap::new(),
            sent: VecDeque::new(),
            per_job: BTreeMap::new(),
            changed: HashSet::new(),
            forgotten: Vec::new(),
            jobs_changed: false,
            out: Vec::new(),
            counts: Counts::default(),
            next_sweep: 0,
            log: None,
            failing: false,
        }
    }

    /// Attempts under way.
    pub fn open_attempts(&self) -> usize {
        self.attempts.len() - self.sent.len()
    }

    /// Takes in a `ray_event` record read at `now_ns` (wall clock).
    pub fn observe(&mut self, r: &Record<'_>, now_ns: i64) {
        match piece::parse(r) {
            Ok(Some(p)) => self.apply(p, now_ns),
            Ok(None) => {}
            Err(e) => {
                if self.counts.unreadable == 0 {
                    tracing::warn!(file = r.file.path.as_deref().unwrap_or(""), offset = r.offset, error = %e, "a task event does not read; it gives no span (counted in raylog_trace_events_unreadable_total)");
                }
                self.counts.unreadable += 1;
            }
        }
    }

    /// Takes in one piece.
    pub fn apply(&mut self, p: Piece, now_ns: i64) {
        match p {
            Piece::Definition { key, job, def } => {
                self.with(key, now_ns, &[], |a| a.define(job, def));
            }
            Piece::Lifecycle { key, job, life } => {
                let by = life.node.clone();
                let times: Vec<i64> = life.states.iter().map(|s| s.1).collect();
                self.with(key, now_ns, &times, |a| a.live(job, life, by.as_deref()));
            }
            Piece::Executed { key, job, name, end_ns, worker } => {
                self.with(key, now_ns, &[end_ns], |a| a.executed(job, name, end_ns, worker));
            }
            Piece::JobEnded { job, at_ns } => {
                let key = (driver_task(&job), 0);
                if self.attempts.contains_key(&key) {
                    self.with(key, now_ns, &[at_ns], |a| {
                        let new = a.job_end_ns != Some(at_ns);
                        a.job_end_ns = Some(at_ns);
                        new
                    });
                }
            }
            Piece::NodeDead { node, at_ns } => {
                let on: Vec<Key> = self
                    .attempts
                    .iter()
                    .filter(|(_, a)| !a.run_done && a.run_node.as_deref() == Some(node.as_str()))
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in on {
                    self.close(key, now_ns, Some((at_ns, ClosedBy::NodeDeath)));
                }
            }
        }
    }

    /// Applies `f` to attempt `key` (made if new and within bounds), then sends what
    /// is complete. A piece that brings nothing new but repeats the end of a span
    /// sent (`ends`: the times it states) sends that span again, unchanged: Ray
    /// sends at least once, and a restart reads again the events of a batch a crash
    /// lost, spans included.
    fn with(&mut self, key: Key, now_ns: i64, ends: &[i64], f: impl FnOnce(&mut Attempt) -> bool) {
        if !self.attempts.contains_key(&key) && self.open_attempts() >= self.settings.max_open_spans {
            self.counts.over_open_limit += 1;
            return;
        }
        let a = self.attempts.entry(key.clone()).or_insert_with(|| Attempt::new(&key.0, key.1, now_ns));
        if a.settled() || !f(a) {
            let before = self.out.len();
            self.out.extend(a.resend(ends));
            self.counts.resent += (self.out.len() - before) as u64;
            return;
        }
        a.note_could_end(now_ns);
        self.changed.insert(key.clone());
        self.close(key, now_ns, None);
    }

    /// Sends the spans of attempt `key` that are complete (or forced to end by
    /// `closing`), within the per-job bound.
    fn close(&mut self, key: Key, now_ns: i64, closing: Option<(i64, ClosedBy)>) {
        let Some(a) = self.attempts.get_mut(&key) else { return };
        let spans = a.finish(now_ns, closing);
        if closing.is_some() {
            a.schedule_done = true;
            a.run_done = true;
        }
        let settled = a.settled();
        if !spans.is_empty() || closing.is_some() {
            self.changed.insert(key.clone());
        }
        for s in spans {
            let job = span::hex(&s.trace_id);
            let n = self.per_job.entry(job).or_insert(0);
            if *n >= self.settings.max_spans_per_job {
                self.counts.over_job_limit += 1;
                continue;
            }
            *n += 1;
            self.jobs_changed = true;
            self.counts.built += 1;
            self.counts.timed_out += (closing.map(|c| c.1) == Some(ClosedBy::Timeout)) as u64;
            self.out.push(s);
        }
        if settled {
            self.sent.push_back(key);
            while self.sent.len() > KEEP_SENT {
                if let Some(old) = self.sent.pop_front() {
                    self.attempts.remove(&old);
                    self.changed.remove(&old);
                    self.forgotten.push(old);
                }
            }
        }
    }

    /// Ends what waited long enough: a definition that did not come, a verdict that
    /// comes from another node, an attempt past `span_timeout`. At most once a second.
    pub fn sweep(&mut self, now_ns: i64) {
        if now_ns < self.next_sweep {
            return;
        }
        self.next_sweep = now_ns + SWEEP_NS;
        let timeout = self.settings.span_timeout.as_nanos() as i64;
        let due: Vec<(Key, bool)> = self
            .attempts
            .iter()
            .filter(|(_, a)| !a.settled())
            .filter_map(|(k, a)| {
                let late = now_ns - a.seen_ns >= timeout;
                let waited = a.could_end_ns.is_some_and(|c| now_ns - c >= attempt::GRACE_NS);
                (late || waited).then(|| (k.clone(), late))
            })
            .collect();
        for (key, late) in due {
            self.close(key, now_ns, late.then_some((now_ns, ClosedBy::Timeout)));
        }
    }

    /// The spans built since the last call, for the batch being cut.
    pub fn take_spans(&mut self) -> Vec<TaskSpan> {
        std::mem::take(&mut self.out)
    }

    /// Writes what changed since the last call, and fsyncs it, before the batch that
    /// carries the events goes out. A disk that fails is logged and the batch goes
    /// anyway: only spans under way at a restart are at stake.
    pub fn write_journal(&mut self, state_dir: &Path) {
        let Some(log) = self.log.as_mut() else { return };
        // Writing to a Vec cannot fail.
        let mut lines = Vec::new();
        for (t, n) in self.forgotten.drain(..) {
            let _ = LineRef::Forget(&t, n).write(&mut lines);
        }
        for key in self.changed.drain() {
            if let Some(a) = self.attempts.get(&key) {
                let _ = LineRef::Attempt(a).write(&mut lines);
            }
        }
        if std::mem::take(&mut self.jobs_changed) {
            let _ = LineRef::Jobs(&self.per_job).write(&mut lines);
        }
        let (attempts, jobs) = (&self.attempts, &self.per_job);
        let all = |out: &mut dyn std::io::Write| journal::write_all(attempts.values(), jobs, out);
        match log.append(&lines, all) {
            Ok(()) if !lines.is_empty() && std::mem::take(&mut self.failing) => {
                tracing::info!("open spans journal written again")
            }
            Ok(()) => {}
            Err(e) if !std::mem::replace(&mut self.failing, true) => {
                let dir = state_dir.display();
                tracing::error!(state_dir = %dir, error = %e, "cannot write the journal of open spans; sending anyway (after a restart, spans under way now may not be sent): check state_dir's disk");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
