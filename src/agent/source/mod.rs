//! Source: discover → tail → parse → enrich → batch, on one thread.
//!
//! Reading and parsing are synchronous CPU work, so they run on a dedicated thread
//! that owns every file, the parsers and the correlator (no locks on the hot path).
//! Batches go straight into the sinks' bounded channels with `blocking_send`: when
//! the sinks are slow, reading simply stops (backpressure). Delivered batches come
//! back through the [`Recycler`] and are refilled.
//!
//! Work follows change, because a long-lived node holds 100,000 finished files. The
//! pipeline, file by file:
//! - [`wake`] coalesces inotify's events: the paths that changed since the last
//!   round, as one bounded set (past its bound, "look at everything").
//! - [`files`] discovers: dir listings (every 2 minutes while inotify watches, by
//!   inode, without a stat per known file), the paths [`wake`] names, and a stat
//!   poll that sweeps the table a slice at a time (all of it per 5 minutes) in case
//!   an event was missed. A new file gets its resume point and a prescan.
//! - [`backlog`] holds what a listing of many new files found, tracked a chunk per
//!   round, so a first listing of a million files does not stop reading for a minute.
//! - [`table`] tracks every file, few bytes each, and a descriptor for at most
//!   `source.max_open_files`. Files idle for `source.close_inactive` are closed, and
//!   the least recently active sooner when the cap is reached; a closed file is
//!   reopened when it changes, resuming where it stopped, once its inode and
//!   fingerprint show the path still names it.
//! - [`gone`] decides when a file missing from its path may be forgotten: only on
//!   proof that it left (deleted, or in no complete listing), since rotation renames
//!   files all the time and inotify splits a rename's events.
//! - [`tail`] reads one open file as it grows, across rename rotation and
//!   copy-truncate, into its parser.
//! - [`read`] drives the rounds: each reads the files that changed, interleaved in
//!   time order. The files of a node share a few Loki streams, and Loki refuses an
//!   entry more than an hour older than the newest of its stream; reading one file
//!   to its end before the next (a catch-up, a backfill) would send hours-old entries
//!   after newer ones. So a round reads the files whose next record is oldest, up to
//!   [`MERGE_SLACK`] past the oldest: a file stops in front of a later record (the
//!   parser's time limit) until the others get there, and is read again once the
//!   limit is half that slack past it (minutes of its records a read, not the
//!   seconds the oldest file's budget moves the limit by). A file not opened yet is
//!   placed by its prescan (its first timed line, or the time its prints will get),
//!   so a catch-up does not wait for every file to be opened once. When no sink puts
//!   two components in one stream, workers' output, core-worker logs and the rest
//!   are ordered each on their own, and the files inotify names are read in the
//!   next round whatever the backlog: raylet's live lines are not held behind a
//!   million old worker files.
//! - Every parsed record goes to the enrich stage ([`Enrich`], owned here), in one
//!   place (`Source::parse_open`): actor output waits for its actor id, a new
//!   session's first records for their node id, and the rest enters the batch,
//!   which this module cuts and sends with the checkpoints it advances.

mod backlog;
mod contexts;
mod copies;
#[cfg(test)]
mod copies_tests;
mod entry;
mod files;
mod gone;
mod homes;
mod incarnation;
mod index;
#[cfg(test)]
mod model_tests;
mod names;
mod quiet;
mod read;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod reuse_tests;
mod scan;
mod table;
pub mod tail;
#[cfg(test)]
mod tests;
mod wake;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raylog_parsers::{Correlator, Id};

use crate::agent::batch::{doc_id_from, Batch, NodeIdentity, Recycler};
use crate::agent::checkpoint::tasks::TasksLog;
use crate::agent::checkpoint::times::TimesLog;
use crate::agent::checkpoint::{unix_now, FileCheckpoint, FileKey, Resume, SavedContext};
use crate::agent::config::Config;
use crate::agent::enrich::route::now_ns;
use crate::agent::enrich::times::Times;
use crate::agent::enrich::Enrich;
use crate::agent::metrics::Metrics;
use crate::agent::pipeline::{Cut, Dispatcher, Mark};
use crate::agent::ray_metrics::RayCounter;
use crate::agent::traces::Tracer;
use table::Table;
pub use wake::{Changes, Wake};

/// Bytes read from one file per round before moving to the next.
const READ_BUDGET: u64 = 256 << 10;
/// What a stop reads at most of each file already deleted (see `Source::stop`).
const STOP_READ_MAX: u64 = 64 << 20;
/// The most one read asks for: a round's budget takes several, with a [`Mark`]
/// possible between two. Parsing a chunk writes its records into the batch, and a
/// chunk that stays in the core's L2 while that happens is parsed for less (64 KiB
/// took 0.937x the CPU of 256 KiB into Loki, 6 December). 16 KiB lets a file read
/// in one round be checkpointed every ~40 lines rather than ~150: a SIGKILL while
/// Loki pushed back resent 0.3-1.2 % of lines (8 runs of `ship_bench.py pushback`)
/// where 64 KiB resent 0.4-3.6 % (13 runs), for the same CPU (`ship --once` to Loki
/// 0.95x, to OTLP 1.02x, with `max_push_bytes` and the ack tracker's save gap; 7
/// December). Longer lines are held across chunks by the parser.
const READ_CHUNK: usize = 16 << 10;
/// Held records released into the batch between checks for a full batch.
const RELEASE_BUDGET: usize = 1000;
/// A batch's bytes between two [`Mark`]s: one read chunk's worth, well under the
/// 128 KiB a Loki push carries (`max_push_bytes`), so each push passes marks.
const MARK_BYTES: usize = 16 << 10;
/// The most a round that caught up waits before the next (see [`Source::linger`]).
const LINGER: Duration = Duration::from_millis(25);
/// How far past the oldest pending record (of its merge group) a file read in one
/// round may go: the most a stream's entries go back in time between pushes, well
/// inside Loki's hour. As far as that allows, so that a live file (a worker started
/// during a catch-up of a million old ones) is not held back for the catch-up's
/// length while the backlog is minutes old.
pub const MERGE_SLACK: Duration = Duration::from_secs(600);
/// While inotify watches: how long the stat poll takes to sweep every file, and how
/// often the dirs are listed again. Both only catch what inotify missed (it reports
/// an overflow, which makes the agent look at everything at once), so they run
/// rarely: with 100,000 files, each costs about 0.3 % of a core at these periods.
const SWEEP_WATCHED: Duration = Duration::from_secs(300);
const RESCAN_WATCHED: Duration = Duration::from_secs(120);

/// The listing's period while inotify watches `files` files: [`RESCAN_WATCHED`] up
/// to 100,000, then longer in proportion, so that the safety net costs the same
/// share of a core at a million files (a listing of a million takes seconds).
fn rescan_period(files: usize) -> Duration {
    RESCAN_WATCHED * (files / 100_000).max(1) as u32
}
/// Descriptors kept for everything but log files: the sinks' connections, the API,
/// checkpoints, the dead-letter file, inotify, listing a dir, a prescan.
pub const RESERVED_FDS: u64 = 64;

/// A logs dir being followed.
struct Dir {
    root: PathBuf,
    session: Option<String>,
    /// Device of the dir: with a listed inode, the key of a file in it.
    dev: u64,
    node: Option<Id>,
    /// Until when records of this dir without a node id wait for it (see
    /// `Source::waits_for_node`).
    node_wait: Option<Instant>,
    /// It appeared after the first listing: a session starting now. (A file
    /// appearing in a dir listed at start, a rotation, starts nothing.)
    live: bool,
}

/// The reader's state.
pub struct Source {
    cfg: Config,
    out: Dispatcher,
    recycler: Recycler,
    metrics: Arc<Metrics>,
    shutdown: Arc<AtomicBool>,
    once: bool,
    corr: Correlator,
    table: Table,
    dirs: Vec<Dir>,
    /// Where a file found is resumed from: checkpoints loaded at start and not yet
    /// matched with a file, and the positions of files forgotten since (see [`gone`]).
    resume: Resume,
    /// The enrich stage: the batch being filled, the hold, the Ray counters.
    enrich: Enrich,
    batch_started: Instant,
    /// Files whose checkpoint moved since the last cut (or mark).
    dirty: HashSet<FileKey>,
    /// Where files stood at points of the batch being filled (see [`Mark`]).
    marks: Vec<Mark>,
    /// The batch's bytes at the last mark.
    marked_bytes: usize,
    /// Where the times of untimed records are written before their batch is sent.
    times_log: TimesLog,
    /// Writing `times_log` failed (logged once until it works again).
    times_failing: bool,
    /// Where the task ranges learned are written before their batch is sent
    /// (`None` when the journal could not be opened: logged, tagging goes on).
    tasks_log: Option<TasksLog>,
    /// Writing `tasks_log` failed (logged once until it works again).
    tasks_failing: bool,
    /// Sessions whose tasks run without ranges, already warned about.
    warned_without: usize,
    seq: u64,
    first_scan: bool,
    /// No checkpoint existed at start (`start_at` applies to the files then present).
    first_start: bool,
    buf: Vec<u8>,
    failed_paths: HashSet<PathBuf>,
    /// Final checkpoints of files forgotten since the last cut.
    closed: Vec<FileCheckpoint>,
    /// Descriptors allowed for log files (`max_open_files`, within the process limit).
    max_open: usize,
    next_rescan: Instant,
    next_sweep: Instant,
    /// When the positions of files gone past `forget_after` are next dropped (see
    /// [`Source::expire_departed`]).
    next_expire: Instant,
    next_gauges: Instant,
    /// When the table is next looked through for workers to forget (see [`quiet`]).
    next_forget: Instant,
    /// Whether inotify watches the paths (else the poll and rescans run every
    /// `poll_interval`).
    watched: bool,
    /// Rounds that made progress since the reader last caught up (see `settle`).
    busy_rounds: u64,
    /// Number of the current dir listing (see `rescan`).
    listing: u16,
    /// Running out of descriptors was logged (once).
    emfile_logged: bool,
    /// Checkpoints of files not found by the first complete listing were marked gone.
    absent_marked: bool,
    /// Files tracked from their checkpoint by a listing, not stat'ed yet (see
    /// `Source::stat_unstated`), by inode, highest first.
    unstated: Vec<FileKey>,
    /// Until the watches are set up (see `Source::await_watch`).
    watch_setup: Option<Arc<Wake>>,
    /// Files listed, not tracked yet (see [`backlog`]).
    backlog: backlog::Backlog,
    /// Whether files are read in time order within each merge group rather than
    /// all together (see `Config::streams_split_by_component`).
    split_merge: bool,
    /// Files inotify named since the last round: read in it whatever the backlog
    /// (see `Source::read_round`). Bounded by what one wake batch names.
    hot: Vec<FileKey>,
    /// Files a listing found that were gone before their stat, with their dir and
    /// path: reported lost by the next complete listing unless it finds them renamed.
    vanished: Vec<(FileKey, u32, PathBuf)>,
    /// Files truncated in place lately, as they stood before (see [`copies`]).
    truncations: Vec<copies::Truncated>,
    /// Tests: a dir whose listing fails, as when out of descriptors.
    #[cfg(test)]
    pub(super) list_fault: Option<PathBuf>,
}

impl Source {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: Config,
        resume: Resume,
        out: Dispatcher,
        recycler: Recycler,
        metrics: Arc<Metrics>,
        shutdown: Arc<AtomicBool>,
        once: bool,
        max_open: usize,
        watched: bool,
        mut times_log: TimesLog,
    ) -> Source {
        let node =
            Arc::new(NodeIdentity::new(cfg.node.name.clone(), cfg.node.cluster.clone(), cfg.node.labels.clone()));
        let now = Instant::now();
        let first_start = resume.is_empty();
        let ray = RayCounter::new(metrics.clone(), &cfg.node.name);
        let mut corr = Correlator::with_zone(cfg.source.parse.zone.clone());
        let tasks_log = open_tasks_log(&cfg.source.state_dir, &mut corr);
        let tracer = cfg.traces().map(|s| Tracer::open(s, &cfg.source.state_dir));
        // Ray's task events come to this agent: a task's print waits for its range.
        corr.await_tasks(cfg.events.is_some());
        Source {
            enrich: Enrich::new(
                Batch::new(0, node).needing(cfg.batch_needs()),
                ray,
                cfg.source.actor_hold,
                Times::restoring(times_log.take_found()),
            )
            .tracing(tracer),
            corr,
            split_merge: cfg.streams_split_by_component(),
            cfg,
            out,
            recycler,
            metrics,
            shutdown,
            once,
            table: Table::default(),
            dirs: Vec::new(),
            resume,
            batch_started: now,
            dirty: HashSet::new(),
            marks: Vec::new(),
            marked_bytes: 0,
            times_log,
            times_failing: false,
            tasks_log,
            tasks_failing: false,
            warned_without: 0,
            seq: 0,
            first_scan: true,
            first_start,
            buf: vec![0u8; READ_CHUNK],
            failed_paths: HashSet::new(),
            closed: Vec::new(),
            max_open: max_open.max(1),
            next_rescan: now,
            next_sweep: now,
            next_expire: now,
            next_gauges: now,
            next_forget: now,
            watched,
            listing: 0,
            busy_rounds: 0,
            emfile_logged: false,
            absent_marked: false,
            unstated: Vec::new(),
            watch_setup: None,
            backlog: backlog::Backlog::default(),
            hot: Vec::new(),
            vanished: Vec::new(),
            truncations: Vec::new(),
            #[cfg(test)]
            list_fault: None,
        }
    }

    /// Runs until shutdown (or, with `once`, until every file is read to its end).
    pub fn run(mut self, wake: Arc<Wake>) {
        self.watch_setup = Some(wake.clone());
        let mut changes = Some(wake.take());
        loop {
            if self.shutdown.load(Relaxed) {
                self.stop();
                return;
            }
            let found = self.look(changes.take().unwrap_or_else(|| wake.take()));
            if self.shutdown.load(Relaxed) {
                // Discovery may have stopped halfway (files not prescanned): read no more.
                continue;
            }
            let progress = self.read_round();
            self.flush_idle();
            self.close_inactive();
            self.release_held(false);
            self.update_gauges();
            let idle = !progress
                && found == 0
                && self.table.ready_len() == 0
                && self.unstated.is_empty()
                && self.backlog.is_empty();
            if self.once && idle && !self.first_scan {
                self.finish_all();
                self.cut(true);
                return;
            }
            self.first_scan = false;
            self.cut(false);
            if progress {
                self.busy_rounds += 1;
            } else if self.busy_rounds > 0 && self.table.ready_len() == 0 {
                self.settle();
            }
            if !progress {
                self.forget_quiet_workers(Instant::now(), quiet::QUIET);
            }
            // Files a restart has not stat'ed yet, or a listing has not tracked yet:
            // the next round takes more at once.
            if !progress && self.unstated.is_empty() && self.backlog.is_empty() {
                let wait = self.cfg.batch.max_wait.min(Duration::from_secs(1)) / 2;
                changes = Some(wake.wait(wait.max(Duration::from_millis(10))));
            } else if let Some(d) = self.linger(progress) {
                changes = Some(wake.linger(d));
            }
        }
    }

    /// How long to let writes gather before the next round, after a round that read
    /// what there was and left nothing known to read: a node's files written line by
    /// line (Ray's workers flush each print) each wake the reader, and a round per
    /// wake-up took over a quarter of a core at 3,000 lines a second, most of it in rounds
    /// that read a line or two. Waiting [`LINGER`] (or a fortieth of
    /// `batch.max_wait`, if less: a batch waits that long anyway) reads tens of
    /// milliseconds of writes in one round. A catch-up (a file still has work: its
    /// read budget, the time limit or a descriptor stopped it) and `--once` go on at
    /// once.
    fn linger(&self, progress: bool) -> Option<Duration> {
        if !progress || self.once || !self.unstated.is_empty() || !self.backlog.is_empty() {
            return None;
        }
        if self.table.ready().any(|t| t.has_work()) {
            return None;
        }
        Some((self.cfg.batch.max_wait / 40).min(LINGER))
    }

    /// Takes in what changed: inotify's paths, a rescan when due, a slice of the
    /// stat poll. Returns how many files were found.
    fn look(&mut self, changes: Changes) -> usize {
        let now = Instant::now();
        let mut found = 0;
        let due = changes.everything || now >= self.next_rescan;
        // Set first: a listing that finds a file missing asks for the next one soon.
        let every = if self.watched && !self.once {
            rescan_period(self.table.len() + self.backlog.len())
        } else {
            self.cfg.source.poll_interval
        };
        if due && self.backlog.is_empty() {
            self.next_rescan = now + every;
            self.backlog.relist = false;
            found += self.rescan();
        } else {
            // The last listing's files first (a new listing would find them again);
            // after lost events (`everything`) the next listing comes right after.
            self.backlog.relist |= changes.everything;
            if self.backlog.relist {
                self.next_rescan = now;
            } else if due {
                self.next_rescan = now + every;
            }
            found += self.track_backlog();
        }
        if changes.everything {
            // Events were lost: every file may have changed.
            self.stat_all();
        }
        found += self.on_paths(changes.paths);
        self.stat_unstated();
        if now >= self.next_sweep {
            self.sweep();
            self.next_sweep = now + Duration::from_secs(1);
        }
        if now >= self.next_expire {
            // Not only at listings: at a million files they are 20 minutes apart, and
            // 100,000 files deleted at once held 20 MiB of positions that long.
            self.expire_departed();
            self.next_expire =
                now + (self.cfg.source.forget_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        }
        found
    }

    /// Caught up after a busy spell (a catch-up of 100,000 files, a backlog): give
    /// back what it grew, so the agent's resident memory follows the files it
    /// tracks, not the peak of the last catch-up.
    fn settle(&mut self) {
        let big = self.busy_rounds > 100;
        self.busy_rounds = 0;
        self.maintain();
        if big {
            self.recycler.clear();
            if self.enrich.batch.is_empty() {
                self.enrich.batch =
                    Batch::new(self.seq, self.enrich.batch.node.clone()).needing(self.cfg.batch_needs());
            }
            crate::agent::trim_heap();
        }
    }

    /// Gives memory back (see `Table::maintain`), but not while the backlog holds
    /// names of files not tracked yet: a rewrite of the name arena would lose them.
    fn maintain(&mut self) {
        if self.backlog.is_empty() {
            self.table.maintain();
        }
    }

    /// Until when records of file `key` without a node id should wait for it, if
    /// they should: live only, in a logs dir that appeared after the agent started
    /// (a new session) with a GCS or raylet log, during the first `actor_hold` after
    /// that log was found (a head node's GCS writes before its raylet names the node).
    /// Dirs present at start were read whole by the first scan: waiting adds nothing.
    fn waits_for_node(&self, key: FileKey) -> Option<Instant> {
        let t = self.table.get(&key)?;
        let d = &self.dirs[t.dir() as usize];
        let until = d.node_wait?;
        (!self.once && d.node.is_none() && Instant::now() < until).then_some(until)
    }

    /// At shutdown: what is left of files already deleted is read and their last
    /// records emitted, and the records still held go out, without the id they
    /// waited for (a deleted file cannot be read again after the restart), then the
    /// last batch, delivered within `shutdown_grace` or parked for the next start.
    pub(super) fn stop(&mut self) {
        for key in self.table.open_keys() {
            if self.table.open_of(&key).is_some_and(|o| o.deleted()) {
                self.drain_deleted(key);
            }
        }
        self.release_held(true);
        self.cut(true);
    }

    /// Moves held records whose actor is now known (or that waited long enough)
    /// into the batch, cutting it as it fills: a long wait (a sink outage, a backlog
    /// read at full speed) can release thousands at once.
    fn release_held(&mut self, force: bool) {
        if self.enrich.hold.is_empty() {
            return;
        }
        let ts = now_ns();
        loop {
            let (batch, times) = (&mut self.enrich.batch, &mut self.enrich.times);
            let (dirty, dirs, table) = (&mut self.dirty, &self.dirs, &self.table);
            let node_of = |key: &FileKey| table.get(key).and_then(|t| dirs[t.dir() as usize].node);
            let more = self.enrich.hold.release(
                Instant::now(),
                &self.corr,
                &node_of,
                force,
                RELEASE_BUDGET,
                &mut |r, key, seed| {
                    batch.push(r, ts, doc_id_from(seed, r.offset, r.message));
                    times.note(key, seed, r, r.timestamp.map_or(ts, |t| t.0));
                    dirty.insert(key);
                },
            );
            if !more {
                return;
            }
            self.cut(false);
        }
    }

    fn update_gauges(&mut self) {
        let now = Instant::now();
        if now < self.next_gauges {
            return;
        }
        self.next_gauges = now + Duration::from_millis(200);
        let m = &self.metrics;
        m.files_watched.store(self.table.len() as i64, Relaxed);
        m.files_open.store(self.table.open_count() as i64, Relaxed);
        // Only files that changed can be behind: the open ones and those waiting.
        let mut behind: u64 = 0;
        for key in self.table.open_keys() {
            behind += self.table.view(&key).map_or(0, |t| t.behind());
        }
        behind += self.table.ready().filter(|t| !t.is_open()).map(|t| t.behind()).sum::<u64>();
        m.bytes_behind.store(behind as i64, Relaxed);
        m.records_held.store(self.enrich.hold.len() as i64, Relaxed);
        m.task_prints_untagged.store(self.enrich.hold.untagged_tasks, Relaxed);
        m.task_ranges_files.store(self.corr.tasks().files() as i64, Relaxed);
        if let Some(t) = &self.enrich.tracer {
            *m.traces.lock().unwrap_or_else(|e| e.into_inner()) = t.counts;
            m.trace_open_attempts.store(t.open_attempts() as i64, Relaxed);
        }
        m.workers_known.store(self.corr.workers() as i64, Relaxed);
        self.warn_without_ranges();
    }

    /// Sends the batch when it is full or old enough (or `force`), with the
    /// checkpoints of the files it advanced; else marks where the files stand if
    /// the batch grew enough since the last mark.
    fn cut(&mut self, force: bool) {
        let full = self.enrich.batch.len() >= self.cfg.batch.max_records
            || self.enrich.batch.bytes() >= self.cfg.batch.max_bytes;
        let due = self.batch_started.elapsed() >= self.cfg.batch.max_wait;
        let has_positions = !self.dirty.is_empty() || !self.closed.is_empty();
        // Spans ride in the batch being filled (they do not wait in the tracer);
        // the timeouts are looked at once a second at most.
        self.take_spans();
        let has_spans = !self.enrich.batch.spans.is_empty();
        if !(full || ((due || force) && (!self.enrich.batch.is_empty() || has_positions || has_spans))) {
            if self.enrich.batch.bytes() >= self.marked_bytes + MARK_BYTES {
                self.mark();
            }
            return;
        }
        let positions = self.positions();
        let marks = std::mem::take(&mut self.marks);
        self.marked_bytes = 0;
        self.seq += 1;
        tracing::debug!(
            seq = self.seq,
            records = self.enrich.batch.len(),
            bytes = self.enrich.batch.bytes(),
            held = self.enrich.hold.len(),
            "batch cut"
        );
        let next = match self.recycler.take() {
            Some(b) => b.reuse(self.seq),
            None => Batch::sized_like(self.seq, &self.enrich.batch),
        };
        let batch = std::mem::replace(&mut self.enrich.batch, next);
        self.batch_started = Instant::now();
        self.write_times(batch.seq);
        self.write_tasks();
        if let Some(t) = self.enrich.tracer.as_mut() {
            t.write_journal(&self.cfg.source.state_dir);
        }
        let cut = Cut { batch: Arc::new(batch), marks, positions, made: Instant::now() };
        if !self.out.send(cut) {
            // The pipeline is gone (shutting down): nothing more to do.
            self.shutdown.store(true, Relaxed);
        }
    }

    /// Moves the spans finished (or ended by a timeout now) into the batch.
    fn take_spans(&mut self) {
        let Some(t) = self.enrich.tracer.as_mut() else { return };
        t.sweep(crate::agent::enrich::route::now_ns());
        self.enrich.batch.spans.append(&mut t.take_spans());
    }

    /// Writes the times the untimed records of batch `seq` got, and fsyncs them,
    /// before the batch goes out (see [`crate::agent::checkpoint::times`]). A disk
    /// that fails is logged and the batch goes anyway: a restart would then send its
    /// prints again under other times, which is less harm than not sending them.
    fn write_times(&mut self, seq: u64) {
        self.times_log.prune_saved();
        let mut runs = self.enrich.times.take();
        for r in &mut runs {
            // The file's incarnation, so the next start tells its runs from those
            // of another file on the same inode (see `TimesLog::for_resume`).
            r.born = self.table.get(&r.key).map_or(crate::agent::checkpoint::born::UNKNOWN, |t| t.born());
        }
        let times = &self.enrich.times;
        match self.times_log.append_carrying(seq, &runs, || times.still_restored()) {
            Ok(()) if std::mem::take(&mut self.times_failing) => tracing::info!("times journal written again"),
            Ok(()) => {}
            Err(e) if !std::mem::replace(&mut self.times_failing, true) => {
                let dir = self.cfg.source.state_dir.display();
                tracing::error!(state_dir = %dir, error = %e, "cannot write the journal of inferred times; sending anyway (after a restart, prints sent meanwhile may be stored twice): check state_dir's disk");
            }
            Err(_) => {}
        }
    }

    /// Writes the task ranges learned since the last batch, and fsyncs them, before
    /// the batch carrying their events goes out (see
    /// [`crate::agent::checkpoint::tasks`]). A disk that fails is logged and the
    /// batch goes anyway: only the tags of prints read after a restart are at stake.
    fn write_tasks(&mut self) {
        let Some(log) = self.tasks_log.as_mut() else { return };
        let changed = self.corr.tasks_mut().take_changed();
        let tasks = self.corr.tasks();
        match log.append(&changed, || tasks.saved()) {
            Ok(()) if !changed.is_empty() && std::mem::take(&mut self.tasks_failing) => {
                tracing::info!("task ranges journal written again")
            }
            Ok(()) => {}
            Err(e) if !std::mem::replace(&mut self.tasks_failing, true) => {
                let dir = self.cfg.source.state_dir.display();
                tracing::error!(state_dir = %dir, error = %e, "cannot write the journal of task ranges; sending anyway (after a restart, prints may go out without their task_id): check state_dir's disk");
            }
            Err(_) => {}
        }
    }

    /// Warns once per session whose task events come without byte ranges: its
    /// prints go out without `task_id`, and the likely cause is Ray's own rotation.
    fn warn_without_ranges(&mut self) {
        let tasks = self.corr.tasks();
        let n = tasks.sessions_without().count();
        if n > self.warned_without {
            let sessions: Vec<&str> = tasks.sessions_without().collect();
            tracing::warn!(?sessions, "Ray's task events of these sessions give no taskLogInfo, so their prints go out without task_id; Ray 2.60 gives none while it rotates worker files itself: unset RAY_ROTATION_MAX_BYTES to have them");
            self.warned_without = n;
        }
    }

    /// Notes where the files that moved since the last mark stand, after every
    /// entry the batch holds now (see [`Mark`]).
    fn mark(&mut self) {
        self.marked_bytes = self.enrich.batch.bytes();
        let positions = self.positions();
        if !positions.is_empty() {
            self.marks.push(Mark { end: self.enrich.batch.len() as u32, positions });
        }
    }

    /// The checkpoints of the files that moved since the last cut or mark.
    fn positions(&mut self) -> Vec<FileCheckpoint> {
        let mut positions = std::mem::take(&mut self.closed);
        for key in std::mem::take(&mut self.dirty) {
            if let Some(cp) = self.position(key) {
                positions.push(cp);
            }
        }
        positions
    }

    /// The checkpoint of file `key` right now: where it is read to (or resumes),
    /// but not past a record still held.
    fn position(&self, key: FileKey) -> Option<FileCheckpoint> {
        let t = self.table.view(&key)?;
        let (mut offset, context, last, fingerprint) = match t.open {
            Some(o) => (
                o.parser.unemitted_offset(),
                SavedContext::from_parser(o.parser.context()),
                o.parser.context().last_timestamp.map(|t| t.0),
                o.fingerprint,
            ),
            None => (t.resume(), self.table.context_of(&t).cloned(), t.last_time(), t.fingerprint()),
        };
        let (mut context, mut last) = (context, last);
        if let Some((h, at)) = self.enrich.hold.resume_point(&key).filter(|(h, _)| *h < offset) {
            // Resumed at a held record: with the context there, not where reading got to.
            (offset, context, last) = (h, at.context.clone(), at.last_time_ns);
        }
        if let Some(meta) = t.open.map(|o| &o.meta) {
            // The ids a restart might not learn again (see `SavedContext::actor_id`).
            let actor = meta.worker_id.and_then(|w| self.corr.actor_of(&w));
            let node = (meta.component == "raylet").then(|| self.dirs[t.dir() as usize].node).flatten();
            context =
                SavedContext::with_ids(context, actor.as_ref().map(|a| a.as_str()), node.as_ref().map(|n| n.as_str()));
        }
        Some(FileCheckpoint {
            key,
            fingerprint,
            offset,
            context,
            last_time_ns: last,
            updated: unix_now(),
            born: t.born(),
            gone_since: 0,
        })
    }
}

/// The task ranges journal of `state_dir`, its ranges given to `corr` (which then
/// keeps track of what changes, for the journal). A journal that cannot be opened
/// is logged and tagging goes on without one.
fn open_tasks_log(state_dir: &std::path::Path, corr: &mut Correlator) -> Option<TasksLog> {
    match TasksLog::open(state_dir) {
        Ok((log, found)) => {
            let tasks = corr.tasks_mut();
            for r in &found {
                tasks.restore(r);
            }
            tasks.track_changes();
            Some(log)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot open the journal of task ranges; prints read after a restart may go out without their task_id: check state_dir");
            None
        }
    }
}
