//! Source: discover → tail → parse → enrich → batch, on one thread.
//!
//! Reading and parsing are synchronous CPU work, so they run on a dedicated thread
//! that owns every open file, the parsers and the correlator (no locks on the hot
//! path). Each round it rediscovers files (cheap directory walks, woken early by
//! inotify), reads what is new with a per-file budget so one busy file cannot starve
//! the others, flushes idle files, releases held actor output, and cuts batches by
//! records, bytes or age. Batches go straight into the sinks' bounded channels with
//! `blocking_send`: when the sinks are slow, reading simply stops (backpressure).
//! Delivered batches come back through the [`Recycler`] and are refilled.
//!
//! Files are read interleaved in time order. The files of a node share a few Loki
//! streams, and Loki refuses an entry more than an hour older than the newest of
//! its stream; reading one file to its end before the next (a catch-up, a backfill)
//! would send hours-old entries after newer ones. So each round reads the files
//! whose next record is oldest, up to [`MERGE_SLACK`] past the oldest: a file stops
//! in front of a later record (the parser's time limit) until the others get there.

pub mod hold;
mod route;
pub mod tail;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raylog_parsers::correlate::node_id_from_raylet;
use raylog_parsers::{classify, Correlator, Id};

use crate::agent::batch::{doc_id_from, doc_id_seed, Batch, NodeIdentity, Recycler};
use crate::agent::checkpoint::{unix_now, CheckpointStore, FileCheckpoint, FileKey, Fingerprint, SavedContext};
use crate::agent::config::{Config, StartAt};
use crate::agent::metrics::Metrics;
use crate::agent::pipeline::Dispatcher;
use crate::discover::discover;
use hold::Hold;
use route::{file_identity, now_ns, Router};
use tail::Tailed;

/// Bytes read from one file per round before moving to the next.
const READ_BUDGET: u64 = 256 << 10;
/// Held records released into the batch between checks for a full batch.
const RELEASE_BUDGET: usize = 1000;
/// How far into a raylet log its node id is looked for.
const RAYLET_NODE_SCAN: u64 = 1 << 20;
/// How far past the oldest pending record the files read in one round may go: the
/// most a stream's entries go back in time between pushes, far inside Loki's hour.
pub const MERGE_SLACK: Duration = Duration::from_secs(120);

/// A cut batch with the checkpoints it completes.
pub struct Cut {
    pub batch: Arc<Batch>,
    pub positions: Vec<FileCheckpoint>,
    pub made: Instant,
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
    files: HashMap<FileKey, Tailed>,
    /// Node id of each logs dir label.
    nodes: HashMap<String, Option<Id>>,
    /// Until when records of a logs dir with a GCS or raylet log wait for its node id
    /// (see `waits_for_node`).
    node_wait: HashMap<String, Instant>,
    /// Checkpoints as loaded at start (resume offsets).
    resume: CheckpointStore,
    hold: Hold,
    batch: Batch,
    batch_started: Instant,
    dirty: HashSet<FileKey>,
    seq: u64,
    first_scan: bool,
    buf: Vec<u8>,
    failed_paths: HashSet<PathBuf>,
    /// Final checkpoints of files closed since the last cut.
    closed: Vec<FileCheckpoint>,
}

impl Source {
    pub fn new(
        cfg: Config,
        resume: CheckpointStore,
        out: Dispatcher,
        recycler: Recycler,
        metrics: Arc<Metrics>,
        shutdown: Arc<AtomicBool>,
        once: bool,
    ) -> Source {
        let node =
            Arc::new(NodeIdentity::new(cfg.node.name.clone(), cfg.node.cluster.clone(), cfg.node.labels.clone()));
        Source {
            batch: Batch::new(0, node).needing(cfg.batch_needs()),
            corr: Correlator::with_zone(cfg.source.parse.zone.clone()),
            cfg,
            out,
            recycler,
            metrics,
            shutdown,
            once,
            files: HashMap::new(),
            nodes: HashMap::new(),
            node_wait: HashMap::new(),
            resume,
            hold: Hold::default(),
            batch_started: Instant::now(),
            dirty: HashSet::new(),
            seq: 0,
            first_scan: true,
            buf: vec![0u8; 256 * 1024],
            failed_paths: HashSet::new(),
            closed: Vec::new(),
        }
    }

    /// Runs until shutdown (or, with `once`, until every file is read to its end).
    pub fn run(mut self, wake: std::sync::mpsc::Receiver<()>) {
        let mut next_scan = Instant::now();
        loop {
            if self.shutdown.load(Relaxed) {
                self.cut(true);
                return;
            }
            let now = Instant::now();
            let mut new_files = 0;
            if now >= next_scan {
                new_files = self.scan();
                next_scan = now + self.cfg.source.poll_interval;
            }
            let progress = self.read_round();
            self.flush_idle();
            self.release_held(false);
            self.update_gauges();
            if self.once && !progress && new_files == 0 && !self.first_scan {
                self.finish_all();
                self.cut(true);
                return;
            }
            self.first_scan = false;
            self.cut(false);
            if !progress {
                let wait = next_scan.saturating_duration_since(Instant::now()).min(self.cfg.batch.max_wait / 2);
                let _ = wake.recv_timeout(wait.max(Duration::from_millis(10)));
                while wake.try_recv().is_ok() {}
                if self.once {
                    next_scan = Instant::now();
                }
            }
        }
    }

    /// Finds new files and notices vanished ones. Returns how many were opened.
    fn scan(&mut self) -> usize {
        let disc = discover(&self.cfg.source.paths);
        let mut seen: HashSet<FileKey> = HashSet::new();
        let mut opened = 0;
        for f in &disc.files {
            let crate::discover::Source::File(path) = &f.source else { continue };
            if self.cfg.source.exclude.iter().any(|g| g.matches(&f.rel)) {
                continue;
            }
            let Ok(md) = std::fs::metadata(path) else { continue };
            let key = FileKey::of(&md);
            seen.insert(key);
            if let Some(t) = self.files.get_mut(&key) {
                t.path = path.clone();
                continue;
            }
            let dir = &disc.dirs[f.dir];
            if self.open(path, &f.rel, &dir.clone(), &md) {
                opened += 1;
            }
        }
        for t in self.files.values_mut() {
            t.gone = !seen.contains(&t.key);
        }
        for (path, why) in &disc.failures {
            if self.failed_paths.insert(PathBuf::from(path)) {
                tracing::warn!(%path, %why, "cannot read; will keep looking");
            }
        }
        opened
    }

    /// Opens a newly found file at its resume offset. False when skipped.
    fn open(&mut self, path: &PathBuf, rel: &str, dir: &crate::discover::LogsDir, md: &std::fs::Metadata) -> bool {
        if let Some(max) = self.cfg.source.ignore_older {
            let old = md.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age > max);
            if old && self.resume.get(&FileKey::of(md)).is_none() {
                return false;
            }
        }
        let (offset, ctx) = self.resume_point(path, md);
        let meta = classify(rel, dir.session.as_deref());
        let node = self.node_of(&dir.label);
        if !self.first_scan && matches!(meta.component.as_str(), "gcs_server" | "raylet") {
            // A node is starting here (a head node's GCS comes before its raylet):
            // its node id will be announced soon.
            let hold_for = self.cfg.source.actor_hold;
            self.node_wait.entry(dir.label.clone()).or_insert_with(|| Instant::now() + hold_for);
        }
        let mut t = match Tailed::open(path.clone(), meta, dir.label.clone(), node, offset, ctx.to_parser()) {
            Ok(t) => t,
            Err(e) => {
                if self.failed_paths.insert(path.clone()) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot open; will retry");
                }
                self.metrics.read_errors.fetch_add(1, Relaxed);
                return false;
            }
        };
        self.prescan(&mut t);
        if t.meta.component == "raylet" && node.is_none() {
            self.learn_node(&dir.label, path);
        }
        t.set_node(self.node_of(&dir.label));
        self.dirty.insert(t.key);
        self.files.insert(t.key, t);
        true
    }

    /// Where to start in a newly found file: its checkpoint if the fingerprint still
    /// matches, the end for pre-existing files with `start_at = "end"`, else 0.
    fn resume_point(&mut self, path: &PathBuf, md: &std::fs::Metadata) -> (u64, SavedContext) {
        let key = FileKey::of(md);
        if let Some(cp) = self.resume.get(&key).cloned() {
            let same = std::fs::File::open(path)
                .and_then(|mut f| Fingerprint::read(&mut f, cp.fingerprint.len))
                .is_ok_and(|fp| fp == cp.fingerprint);
            if same && cp.offset <= md.len() {
                return (cp.offset, cp.context);
            }
            tracing::info!(path = %path.display(), "file replaced since the checkpoint (inode reused); reading it from the start");
            self.resume.remove(&key);
            return (0, SavedContext::default());
        }
        if self.first_scan && self.cfg.source.start_at == StartAt::End && self.resume.is_empty() {
            return (md.len(), SavedContext::default());
        }
        (0, SavedContext::default())
    }

    /// Learns correlation (actor of a worker, job of a worker) from what a file holds
    /// when it is found, before any file is parsed: the bytes before a resume offset
    /// will not be parsed again, and a worker's stdout may be read before the
    /// core-worker log that names its actor. Same pass as `raylog parse` makes, so
    /// the agent and the CLI tag the same records.
    fn prescan(&mut self, t: &mut Tailed) {
        if !crate::scan::wanted_by_prescan(&t.meta) {
            return;
        }
        use std::io::Read;
        let limit = t.size.min(crate::scan::prescan_limit(&t.meta));
        if let Ok(f) = std::fs::File::open(&t.path) {
            let mut found = crate::scan::Prescanned::default();
            let _ = crate::scan::for_each_line_chunk(f.take(limit), |c| {
                crate::scan::prescan_bytes(&t.meta, c, &mut self.corr, &mut found)
            });
            t.parser.set_time_hint(found.time_hint);
        }
    }

    /// Until when records of file `key` without a node id should wait for it, if
    /// they should: live only, in a logs dir that appeared after the agent started
    /// (a new session) with a GCS or raylet log, during the first `actor_hold` after
    /// that log was found (a head node's GCS writes before its raylet names the node).
    /// Dirs present at start were read whole by the first scan: waiting adds nothing.
    fn waits_for_node(&self, key: FileKey) -> Option<Instant> {
        let t = self.files.get(&key)?;
        let until = *self.node_wait.get(&t.dir)?;
        (!self.once && t.node_unknown() && Instant::now() < until).then_some(until)
    }

    fn node_of(&self, dir: &str) -> Option<Id> {
        self.nodes.get(dir).copied().flatten()
    }

    fn learn_node(&mut self, dir: &str, raylet: &PathBuf) {
        use std::io::Read;
        let mut head = Vec::new();
        if let Ok(f) = std::fs::File::open(raylet) {
            let _ = f.take(RAYLET_NODE_SCAN).read_to_end(&mut head);
        }
        if let Some(n) = node_id_from_raylet(&head) {
            self.nodes.insert(dir.to_string(), Some(n));
            for t in self.files.values_mut().filter(|t| t.dir == dir && t.node_unknown()) {
                t.set_node(Some(n));
            }
        }
    }

    /// Reads the files with something to read, oldest next record first, up to
    /// [`MERGE_SLACK`] past the oldest (see the module docs). True when it made
    /// progress: bytes read, or a file learned when its next record is.
    fn read_round(&mut self) -> bool {
        let mut order: Vec<(i64, FileKey)> = Vec::new();
        let mut failed = Vec::new();
        for (key, t) in self.files.iter_mut() {
            match t.stat() {
                Ok(()) if t.has_work() || t.size < t.parser.offset() => order.push((t.head(), *key)),
                Ok(()) => {}
                Err(_) => failed.push(*key),
            }
        }
        for key in failed {
            self.read_file(key, None); // reports the error and closes the file
        }
        order.sort_unstable();
        let limit = self.merge_limit(order.first().map(|o| o.0));
        let (mut total, mut learned) = (0, false);
        for (head, key) in order {
            if limit.is_some_and(|l| head > l.0) {
                break;
            }
            let (bytes, blocked_at) = self.read_file(key, limit);
            total += bytes;
            learned |= blocked_at.is_some_and(|b| b.0 != head);
            // Cut as soon as the batch is full, not at the end of the round: one
            // round can read megabytes, and batches must stay within max_bytes.
            self.cut(false);
            // Likewise the hold: a backlog read at full speed fills it fast.
            if self.hold.is_full() {
                self.release_held(false);
            }
        }
        self.metrics.bytes_read.fetch_add(total, Relaxed);
        total > 0 || learned
    }

    /// The time limit of a round whose oldest pending record is at `oldest`.
    fn merge_limit(&self, oldest: Option<i64>) -> Option<raylog_parsers::Timestamp> {
        let oldest = oldest?;
        Some(raylog_parsers::Timestamp(oldest.saturating_add(MERGE_SLACK.as_nanos() as i64)))
    }

    /// Reads one file under `limit`. Returns the bytes read and, when the limit
    /// stopped it, the time of the record it stopped at.
    fn read_file(
        &mut self,
        key: FileKey,
        limit: Option<raylog_parsers::Timestamp>,
    ) -> (u64, Option<raylog_parsers::Timestamp>) {
        let wait_node = self.waits_for_node(key);
        let Some(t) = self.files.get_mut(&key) else { return (0, None) };
        let before = *t.parser.stats();
        let mut router = Router::new(&mut self.batch, &mut self.hold, t, wait_node, self.cfg.source.actor_hold);
        let res =
            t.read(&mut self.buf, READ_BUDGET, limit, &mut self.corr, &self.cfg.source.parse, &mut |r| router.route(r));
        let after = *t.parser.stats();
        self.metrics.lines_read.fetch_add(after.lines.saturating_sub(before.lines), Relaxed);
        self.metrics.records_read.fetch_add(after.records.saturating_sub(before.records), Relaxed);
        self.metrics.invalid_utf8.fetch_add(after.invalid_utf8.saturating_sub(before.invalid_utf8), Relaxed);
        self.metrics.truncated_lines.fetch_add(after.truncated_lines.saturating_sub(before.truncated_lines), Relaxed);
        match res {
            Ok(r) => {
                if r.bytes > 0 || r.truncated {
                    self.dirty.insert(key);
                }
                if r.truncated {
                    tracing::info!(path = %t.path.display(), "file was truncated in place (copy-truncate); reading it from the start");
                }
                let raylet_unknown = t.meta.component == "raylet" && t.node_unknown() && r.bytes > 0;
                if raylet_unknown && t.parser.offset().saturating_sub(r.bytes) < RAYLET_NODE_SCAN {
                    // A new session's raylet has started writing: look for its node id.
                    let (dir, path) = (t.dir.clone(), t.path.clone());
                    self.learn_node(&dir, &path);
                }
                let Some(t) = self.files.get(&key) else { return (r.bytes, None) };
                let blocked = t.parser.blocked();
                if r.at_eof && t.gone && blocked.is_none() {
                    self.close(key);
                }
                (r.bytes, blocked)
            }
            Err(e) => {
                tracing::warn!(path = %t.path.display(), offset = t.parser.offset(), error = %e, "read failed; closing the file");
                self.metrics.read_errors.fetch_add(1, Relaxed);
                self.close(key);
                (0, None)
            }
        }
    }

    /// A vanished file read to its end: emit what it held and stop following it.
    fn close(&mut self, key: FileKey) {
        let wait_node = self.waits_for_node(key);
        let Some(mut t) = self.files.remove(&key) else { return };
        let mut router = Router::new(&mut self.batch, &mut self.hold, &mut t, wait_node, self.cfg.source.actor_hold);
        t.parser.finish(&mut self.corr, &self.cfg.source.parse, &mut |r| router.route(r));
        self.closed.push(position(&t, &self.hold));
    }

    /// Emits the open record of every file quiet for `idle_flush` (unless it is
    /// dated past what the files still being read have reached), and partial last
    /// lines quiet for `partial_line_timeout`.
    fn flush_idle(&mut self) {
        let now = Instant::now();
        let (idle, partial) = (self.cfg.source.idle_flush, self.cfg.source.partial_line_timeout);
        let oldest = self.files.values().filter(|t| t.has_work()).map(|t| t.head()).min();
        let limit = self.merge_limit(oldest);
        let keys: Vec<FileKey> = self.files.keys().copied().collect();
        for key in keys {
            let wait_node = self.waits_for_node(key);
            let Some(t) = self.files.get_mut(&key) else { continue };
            let before = t.parser.unemitted_offset();
            let mut router = Router::new(&mut self.batch, &mut self.hold, t, wait_node, self.cfg.source.actor_hold);
            let opts = &self.cfg.source.parse;
            t.flush_if_idle(now, idle, partial, limit, &mut self.corr, opts, &mut |r| router.route(r));
            if t.parser.unemitted_offset() != before {
                self.dirty.insert(key);
            }
        }
    }

    /// Moves held records whose actor is now known (or that waited long enough)
    /// into the batch, cutting it as it fills: a long wait (a sink outage, a backlog
    /// read at full speed) can release thousands at once.
    fn release_held(&mut self, force: bool) {
        if self.hold.is_empty() {
            return;
        }
        let ts = now_ns();
        // Each file's id seed once per call, as the router does per read.
        let seeds: HashMap<FileKey, u128> =
            self.files.iter_mut().map(|(k, t)| (*k, doc_id_seed(&file_identity(t)))).collect();
        loop {
            let (batch, dirty, nodes) = (&mut self.batch, &mut self.dirty, &self.nodes);
            let node_of = |dir: &str| nodes.get(dir).copied().flatten();
            let more = self.hold.release(&self.corr, &node_of, force, RELEASE_BUDGET, &mut |r, key| {
                let seed = seeds.get(&key).copied().unwrap_or_else(|| doc_id_seed(&key.label()));
                batch.push(r, ts, doc_id_from(seed, r.offset, r.message));
                dirty.insert(key);
            });
            if !more {
                return;
            }
            self.cut(false);
        }
    }

    fn update_gauges(&self) {
        self.metrics.files_watched.store(self.files.len() as i64, Relaxed);
        self.metrics.bytes_behind.store(self.files.values().map(|t| t.behind() as i64).sum(), Relaxed);
        self.metrics.records_held.store(self.hold.len() as i64, Relaxed);
    }

    /// `--once`: every file is complete; emit the last lines and held records.
    fn finish_all(&mut self) {
        let keys: Vec<FileKey> = self.files.keys().copied().collect();
        for key in keys {
            let Some(t) = self.files.get_mut(&key) else { continue };
            let mut router = Router::new(&mut self.batch, &mut self.hold, t, None, self.cfg.source.actor_hold);
            t.parser.finish(&mut self.corr, &self.cfg.source.parse, &mut |r| router.route(r));
            self.dirty.insert(key);
        }
        self.release_held(true);
    }

    /// Sends the batch when it is full or old enough (or `force`), with the
    /// checkpoints of the files it advanced.
    fn cut(&mut self, force: bool) {
        let full = self.batch.len() >= self.cfg.batch.max_records || self.batch.bytes() >= self.cfg.batch.max_bytes;
        let due = self.batch_started.elapsed() >= self.cfg.batch.max_wait;
        let has_positions = !self.dirty.is_empty() || !self.closed.is_empty();
        if !(full || ((due || force) && (!self.batch.is_empty() || has_positions))) {
            return;
        }
        let mut positions = std::mem::take(&mut self.closed);
        for key in self.dirty.drain() {
            if let Some(t) = self.files.get(&key) {
                positions.push(position(t, &self.hold));
            }
        }
        self.seq += 1;
        tracing::debug!(
            seq = self.seq,
            records = self.batch.len(),
            bytes = self.batch.bytes(),
            held = self.hold.len(),
            "batch cut"
        );
        let next = match self.recycler.take() {
            Some(b) => b.reuse(self.seq),
            None => Batch::sized_like(self.seq, &self.batch),
        };
        let batch = std::mem::replace(&mut self.batch, next);
        self.batch_started = Instant::now();
        let cut = Cut { batch: Arc::new(batch), positions, made: Instant::now() };
        if !self.out.send(cut) {
            // The pipeline is gone (shutting down): nothing more to do.
            self.shutdown.store(true, Relaxed);
        }
    }
}

/// The checkpoint of a file right now.
fn position(t: &Tailed, hold: &Hold) -> FileCheckpoint {
    let mut offset = t.parser.unemitted_offset();
    if let Some(h) = hold.min_offset(&t.key) {
        offset = offset.min(h);
    }
    FileCheckpoint {
        key: t.key,
        fingerprint: t.fingerprint,
        offset,
        path: t.path.display().to_string(),
        context: SavedContext::from_parser(t.parser.context()),
        updated: unix_now(),
    }
}
