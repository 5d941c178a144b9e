//! `type = "object_store"`: the node's logs and Ray's events in a bucket, in the
//! layout KubeRay's History Server reads, so they outlive the pod.
//!
//! This sink does not take records: it mirrors files. Each round (every
//! `upload_interval`, at most every 10 s) it lists the `session_*/logs` dirs under
//! `source.paths`, plans what changed ([`mirror`]), copies and uploads it
//! ([`service`]), writes the events the spool gathered since the last round
//! ([`events`]) and, on the head, the session's marker; then saves what the bucket
//! holds ([`state`]). A last round runs at shutdown (within `retry.shutdown_grace`)
//! and is the only one with `ship --once`.
//!
//! A session's objects need its node id, which raylet announces in its first lines;
//! until it has, the session waits.

pub mod config;
pub mod encode;
pub mod events;
pub mod mirror;
pub mod service;
pub mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::agent::events::Spool;
use crate::agent::metrics::{single, Counters};
use config::ObjectStoreConfig;
use mirror::{Action, Knobs, Memo};
use service::{lock, Store, WriteError, CONCURRENCY};
use state::State;

/// The sink's counters (`/metrics`).
#[derive(Debug, Default)]
pub struct ObjectStoreMetrics {
    pub enabled: AtomicBool,
    pub uploads: AtomicU64,
    pub upload_bytes: AtomicU64,
    pub copies: AtomicU64,
    pub failures: AtomicU64,
    pub deferred: AtomicI64,
    pub events: AtomicU64,
    pub event_duplicates: AtomicU64,
    pub events_unplaceable: AtomicU64,
    pub rounds: AtomicU64,
}

impl Counters for ObjectStoreMetrics {
    fn render(&self, s: &mut String) {
        if !self.enabled.load(Relaxed) {
            return;
        }
        let mut counter = |name: &str, help: &str, v: &AtomicU64| single(s, "counter", name, help, v.load(Relaxed));
        counter("raylog_object_store_uploads_total", "Files uploaded (whole, as they stood).", &self.uploads);
        counter("raylog_object_store_upload_bytes_total", "Bytes of files uploaded.", &self.upload_bytes);
        counter(
            "raylog_object_store_copies_total",
            "Objects copied server-side after a rename rotation.",
            &self.copies,
        );
        counter("raylog_object_store_failures_total", "Writes that failed (retried next round).", &self.failures);
        counter("raylog_object_store_events_total", "Ray events written to event objects.", &self.events);
        counter(
            "raylog_object_store_event_duplicates_total",
            "Events Ray posted again within an hour, dropped.",
            &self.event_duplicates,
        );
        counter(
            "raylog_object_store_events_unplaceable_total",
            "Events with no sessionName or timestamp, not written.",
            &self.events_unplaceable,
        );
        counter("raylog_object_store_rounds_total", "Rounds of uploads run.", &self.rounds);
        let v = self.deferred.load(Relaxed) as u64;
        single(
            s,
            "gauge",
            "raylog_object_store_deferred_files",
            "Active files past max_active_upload_bytes, left for rotation or shutdown.",
            v,
        );
    }
}

/// Drain requests (`POST /drain`): each gets the summary of a last-style round.
pub type Drains = tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<String>>;

/// One object-store sink at work.
pub struct Mirror {
    cfg: ObjectStoreConfig,
    paths: Vec<PathBuf>,
    store: Store,
    state: Arc<Mutex<State>>,
    memo: Memo,
    /// Session → node id (hex).
    nodes: HashMap<String, String>,
    spool: Option<Arc<Mutex<Spool>>>,
    seen: events::Seen,
    metrics: Arc<ObjectStoreMetrics>,
    round: u64,
    logged_wait: bool,
    /// Logs dirs whose node id is unknown: since when, and whether that was logged.
    unnamed: HashMap<PathBuf, (Instant, bool)>,
}

/// What a round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    pub uploads: u64,
    pub copies: u64,
    pub failures: u64,
    pub events: u64,
}

impl Mirror {
    /// `paths`: the source's paths; `state_dir`: where its state is kept.
    pub fn new(
        cfg: ObjectStoreConfig,
        store: Store,
        paths: Vec<PathBuf>,
        state_dir: &std::path::Path,
        spool: Option<Arc<Mutex<Spool>>>,
        metrics: Arc<ObjectStoreMetrics>,
    ) -> Mirror {
        metrics.enabled.store(true, Relaxed);
        let state = State::load(state_dir, &cfg.name);
        let nodes = state.nodes.clone().into_iter().collect();
        let state = Arc::new(Mutex::new(state));
        Mirror {
            cfg,
            paths,
            store,
            state,
            memo: Memo::default(),
            nodes,
            spool,
            seen: Default::default(),
            metrics,
            round: 0,
            logged_wait: false,
            unnamed: Default::default(),
        }
    }

    /// The events cursor to open the spool with (saved by the last run).
    pub fn events_cursor(state_dir: &std::path::Path, name: &str) -> crate::agent::events::Cursor {
        State::load(state_dir, name).events_cursor()
    }

    /// Runs rounds until `stop`, then a last one within `grace`; with `once`, only
    /// the last one, for as long as it takes. Returns the writes that failed in the
    /// last round (`None`: it did not finish in time).
    pub async fn run(
        mut self,
        mut stop: tokio::sync::watch::Receiver<bool>,
        mut drain: Drains,
        once: bool,
        grace: Duration,
    ) -> Option<u64> {
        self.store.abort_left(&self.state).await;
        let tick = self.cfg.upload_interval.min(Duration::from_secs(10));
        while !once && !*stop.borrow() {
            self.round(false).await;
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = stop.changed() => {}
                Some(reply) = drain.recv() => self.drained(reply).await,
            }
        }
        let limit = if once { Duration::from_secs(86_400 * 365) } else { grace.max(Duration::from_secs(1)) };
        match tokio::time::timeout(limit, self.round(true)).await {
            Ok(r) => {
                tracing::info!(sink = %self.cfg.name, uploads = r.uploads, copies = r.copies, failures = r.failures, events = r.events, "object store: last round done");
                Some(r.failures)
            }
            Err(_) => {
                tracing::warn!(sink = %self.cfg.name, "object store: the last round did not finish within retry.shutdown_grace; the next start uploads the rest");
                None
            }
        }
    }

    /// A pod's preStop (`POST /drain`): everything now, whatever its size; the
    /// answer is the round's summary.
    async fn drained(&mut self, reply: tokio::sync::oneshot::Sender<String>) {
        let r = self.round(true).await;
        tracing::info!(sink = %self.cfg.name, uploads = r.uploads, copies = r.copies, failures = r.failures, events = r.events, "object store: drained");
        let (u, c, e, f) = (r.uploads, r.copies, r.events, r.failures);
        let _ = reply.send(format!("{{\"uploads\":{u},\"copies\":{c},\"events\":{e},\"failures\":{f}}}\n"));
    }

    /// One round: logs, events, marker, then the state saved.
    pub async fn round(&mut self, last: bool) -> Round {
        self.round += 1;
        self.metrics.rounds.fetch_add(1, Relaxed);
        let mut r = Round::default();
        let found = self.list().await;
        let plan = {
            let k = Knobs {
                upload_interval: self.cfg.upload_interval,
                max_active_upload_bytes: self.cfg.max_active_upload_bytes,
                last,
            };
            let state = lock(&self.state);
            self.memo.plan(&found, &state, Instant::now(), k, self.round)
        };
        self.metrics.deferred.store(plan.deferred as i64, Relaxed);
        self.apply(plan.actions, &mut r).await;
        self.markers(&found, &mut r).await;
        self.events(&mut r).await;
        if r.failures > 1 {
            tracing::warn!(sink = %self.cfg.name, failures = r.failures, "object store: writes failed this round (the first is logged above); retried next round");
        }
        let mut s = lock(&self.state);
        s.nodes = self.nodes.clone().into_iter().collect();
        if let Err(e) = s.save() {
            tracing::warn!(path = %s.path().display(), error = %e, "cannot save the object store's state; a restart uploads again what this run did");
        }
        r
    }

    /// Every file of every session whose node is known, with its key.
    async fn list(&mut self) -> Vec<(String, mirror::Found)> {
        let paths = self.paths.clone();
        let known: HashMap<String, String> = self.nodes.clone();
        let fixed = self.cfg.node_id.clone();
        let (found, nodes, waiting) = tokio::task::spawn_blocking(move || {
            let (mut nodes, mut found, mut waiting) = (known, vec![], vec![]);
            for dir in mirror::logs_dirs(&paths) {
                if !nodes.contains_key(&dir.session) {
                    match fixed.clone().or_else(|| mirror::node_of(&dir.path)) {
                        Some(n) => {
                            nodes.insert(dir.session.clone(), n);
                        }
                        None => {
                            waiting.push(dir.path.clone());
                            continue;
                        }
                    }
                }
                mirror::walk(&dir, &mut found);
            }
            (found, nodes, waiting)
        })
        .await
        .unwrap_or_default();
        // A session just started waits a moment for raylet's first lines: only a
        // wait past a minute is worth a warning (once).
        for w in waiting {
            let since = *self.unnamed.entry(w.clone()).or_insert((Instant::now(), false));
            if since.0.elapsed() > Duration::from_secs(60) && !since.1 {
                self.unnamed.insert(w.clone(), (since.0, true));
                tracing::warn!(logs = %w.display(), "object store: this session's raylet.out has not announced its node id for a minute (\"Setting node ID\"); its logs wait for it (or set node_id)");
            }
        }
        if nodes.len() != self.nodes.len() {
            for (s, n) in nodes.iter().filter(|(s, _)| !self.nodes.contains_key(*s)) {
                tracing::info!(session = %s, node = %n, "object store: mirroring a session's logs");
            }
        }
        self.nodes = nodes;
        let layout = &self.cfg.layout;
        found.into_iter().filter_map(|f| Some((mirror::key_of(layout, self.nodes.get(&f.session)?, &f), f))).collect()
    }

    async fn apply(&mut self, actions: Vec<Action>, r: &mut Round) {
        // Copies in their order, one at a time (each may read what the one before wrote to).
        let (copies, uploads): (Vec<Action>, Vec<Action>) =
            actions.into_iter().partition(|a| matches!(a, Action::Copy { .. }));
        for a in copies {
            let Action::Copy { from, to, held } = a else { continue };
            match self.store.copy(&from, &to).await {
                Ok(()) => {
                    lock(&self.state).objects.insert(to, held);
                    r.copies += 1;
                    self.metrics.copies.fetch_add(1, Relaxed);
                }
                Err(e) => self.failed(&e, r),
            }
        }
        let (store, state) = (&self.store, &self.state);
        let mut running = futures_util::stream::iter(uploads.into_iter().filter_map(|a| match a {
            Action::Upload { path, key, held } => Some(async move {
                let out = store.upload_file(&path, &key, held, state).await;
                (key, held, out)
            }),
            Action::Copy { .. } => None,
        }))
        .buffer_unordered(CONCURRENCY);
        let mut done = vec![];
        while let Some(d) = running.next().await {
            done.push(d);
        }
        drop(running);
        for (key, held, out) in done {
            match out {
                Ok(bytes) => {
                    lock(&self.state).objects.insert(key, held);
                    r.uploads += 1;
                    self.metrics.uploads.fetch_add(1, Relaxed);
                    self.metrics.upload_bytes.fetch_add(bytes, Relaxed);
                }
                Err(WriteError::Moved { path }) => tracing::debug!(%path, "rotated before its upload"),
                Err(e) => self.failed(&e, r),
            }
        }
        // Objects of files gone from the node stay in the bucket; what they hold
        // needs no tracking once no file is theirs.
        let live: std::collections::HashSet<(u64, u64, u32)> = self.memo.files();
        lock(&self.state).objects.retain(|_, h| live.contains(&(h.dev, h.ino, h.born)));
    }

    /// Counts a failed write; logs the round's first (a store that is down fails
    /// every write: one line says it, the round's summary counts the rest).
    fn failed(&self, e: &WriteError, r: &mut Round) {
        r.failures += 1;
        self.metrics.failures.fetch_add(1, Relaxed);
        if r.failures == 1 {
            tracing::warn!(sink = %self.cfg.name, error = %e, "object store: a write failed; retried next round");
        }
    }

    /// The head writes each session's marker once.
    async fn markers(&mut self, found: &[(String, mirror::Found)], r: &mut Round) {
        if !self.cfg.head {
            return;
        }
        let mut sessions: Vec<&str> = found.iter().map(|(_, f)| f.session.as_str()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        for s in sessions {
            if lock(&self.state).markers.contains(s) {
                continue;
            }
            match self.store.put(&self.cfg.layout.marker(s), vec![]).await {
                Ok(()) => {
                    lock(&self.state).markers.insert(s.to_string());
                }
                Err(e) => self.failed(&e, r),
            }
        }
    }

    /// Writes the events the spool holds past the cursor.
    async fn events(&mut self, r: &mut Round) {
        let Some(spool) = self.spool.clone() else { return };
        loop {
            let from = lock(&self.state).events_cursor();
            let nodes = self.nodes.clone();
            let layout = self.cfg.layout.clone();
            let mut seen = std::mem::take(&mut self.seen);
            let sp = spool.clone();
            let (read, seen) = tokio::task::spawn_blocking(move || {
                let node = |s: &str| nodes.get(s).cloned();
                let read = events::read(&sp, from, &layout, &node, &mut seen);
                (read, seen)
            })
            .await
            .unwrap_or_default();
            self.seen = seen;
            self.metrics.event_duplicates.fetch_add(read.duplicates, Relaxed);
            self.metrics.events_unplaceable.fetch_add(read.unplaceable, Relaxed);
            if let Some(s) = &read.waiting {
                if !std::mem::replace(&mut self.logged_wait, true) {
                    tracing::info!(session = %s, "object store: events of a session whose node id is not known yet (raylet has not announced it) wait");
                }
            }
            let mut ok = true;
            for g in read.groups {
                match self.store.put(&g.key, g.body).await {
                    Ok(()) => {
                        r.events += g.events;
                        self.metrics.events.fetch_add(g.events, Relaxed);
                    }
                    Err(e) => {
                        self.failed(&e, r);
                        ok = false;
                    }
                }
            }
            let Some(next) = read.next.filter(|n| ok && *n != from) else { return };
            lock(&self.state).events = Some((next.seq, next.offset));
            spool.lock().unwrap_or_else(|e| e.into_inner()).uploaded(next);
            if read.waiting.is_some() {
                return;
            }
        }
    }
}
