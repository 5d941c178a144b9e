//! Wiring and lifecycle of `raylog ship`: start every stage, stop them in order.
//!
//! Shutdown (SIGTERM/SIGINT, a sink with nobody left to deliver to, or the end of
//! `--once`) flows downstream: the reader
//! stops, cuts its last batch and drops its [`Dispatcher`], which closes the sink
//! channels; sinks drain what they hold and drop their ack senders; the ack tracker
//! then saves the final checkpoints. On a signal, sinks get `retry.shutdown_grace` to
//! finish; whatever is still undelivered keeps its checkpoint back and is re-read at
//! the next start (at-least-once, never lost).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::{mpsc, watch};

use crate::agent::api::{self, Health};
use crate::agent::batch::Recycler;
use crate::agent::checkpoint::CheckpointStore;
use crate::agent::config::Config;
use crate::agent::metrics::Metrics;
use crate::agent::pipeline::{track_acks, Dispatcher};
use crate::agent::sinks::{run_sink, DeadLetter, SinkImpl, SinkTask};
use crate::agent::source::{Source, Wake};

/// Runs the agent until a signal (or, with `once`, until everything is delivered).
pub fn run(cfg: Config, once: bool) -> Result<()> {
    crate::agent::limit_arenas();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(cfg, once))
}

async fn run_async(mut cfg: Config, once: bool) -> Result<()> {
    let (mut store, resume) = CheckpointStore::open(&cfg.source.state_dir, cfg.source.forget_after.as_secs())?;
    tracing::info!(state_dir = %cfg.source.state_dir.display(), files = resume.len(), "loaded checkpoints");
    let max_open = max_open_files(cfg.source.max_open_files);
    let names: Vec<&str> = cfg.sinks.iter().map(|s| s.name()).collect();
    let metrics = Arc::new(Metrics::new(&names));
    let health = Arc::new(Health::default());
    if let Some(addr) = cfg.api_address {
        let bound = api::serve(addr, metrics.clone(), health.clone()).await?;
        tracing::info!(%bound, "serving /metrics, /healthz, /readyz");
    }
    let events = match &cfg.events {
        Some(ec) => {
            let ev =
                crate::agent::events::start(ec, &cfg.retry, &resume, metrics.clone(), cfg.source.parse.max_line_bytes)
                    .await?;
            tracing::info!(bound = %ev.bound, spool = %ec.spool_dir.display(), forward_to = ?ec.forward_to.as_ref().map(|u| u.as_str()), "receiving Ray's events");
            store.observe(ev.delivered.clone());
            // The spool is read like a logs dir.
            cfg.source.paths.push(ec.spool_dir.clone());
            Some(ev)
        }
        None => None,
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let (give_up_tx, give_up) = watch::channel(false);
    // About eight batches exist at once per sink queue slot (being filled, queued,
    // being encoded, the encoded body, the request in flight...), so the queue holds
    // max_buffer_bytes / (8 × max_bytes) batches: 1 with the defaults.
    let per_sink = (cfg.batch.max_buffer_bytes / cfg.batch.max_bytes.max(1) / 8).max(1);
    let (ack_tx, ack_rx) = mpsc::channel(1024);
    let dead = DeadLetter::new(&cfg.source.state_dir, cfg.dead_letter_max_bytes);
    // A batch is cut soon after reaching max_bytes, but its arenas grow by doubling,
    // so a normal batch may have reserved twice that; one that overshot far is freed.
    let recycler = Recycler::new(4 * cfg.batch.max_bytes);
    let mut sink_txs = vec![];
    let mut sink_tasks = vec![];
    let stop = Arc::new(tokio::sync::Notify::new());
    for (index, sc) in cfg.sinks.iter().enumerate() {
        let sink = SinkImpl::new(sc).with_context(|| format!("sink {:?}", sc.name()))?;
        let (tx, rx) = mpsc::channel(per_sink);
        sink_txs.push(tx);
        sink_tasks.push(tokio::spawn(run_sink(SinkTask {
            index,
            name: sc.name().to_string(),
            sink,
            batches: rx,
            acks: ack_tx.clone(),
            dead: dead.clone(),
            retry: cfg.retry.clone(),
            metrics: metrics.clone(),
            give_up: give_up.clone(),
            recycler: recycler.clone(),
            dead_logged: Default::default(),
            stop: stop.clone(),
        })));
    }
    drop(ack_tx);
    // Batches in flight are few (bounded sink queues), so is what waits for their acks.
    let (pending_tx, pending_rx) = mpsc::channel(4096);
    let out = Dispatcher { sinks: sink_txs, pending: pending_tx };
    let tracker = tokio::spawn(track_acks(pending_rx, ack_rx, cfg.sinks.len(), store, metrics.clone()));

    let wake = Arc::new(Wake::default());
    let watcher = if cfg.source.watch { watch_paths(&cfg, wake.clone()) } else { None };
    let watched = watcher.is_some();
    let source =
        Source::new(cfg.clone(), resume, out, recycler, metrics.clone(), shutdown.clone(), once, max_open, watched);
    let reader = tokio::task::spawn_blocking(move || source.run(wake));
    health.ready.store(true, Relaxed);

    let signalled = tokio::select! {
        r = reader => { r.context("the reader thread panicked")?; false }
        _ = shutdown_signal() => true,
        _ = stop.notified() => true,
    };
    if signalled {
        tracing::info!(grace = ?cfg.retry.shutdown_grace, "stopping: no more reading; delivering what was read");
        health.ready.store(false, Relaxed);
        shutdown.store(true, Relaxed);
        let grace = cfg.retry.shutdown_grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let _ = give_up_tx.send(true);
        });
    }
    for t in sink_tasks {
        let _ = t.await;
    }
    let store = tracker.await.context("the checkpoint task panicked")?;
    if let Some(ev) = &events {
        ev.stop();
    }
    drop(watcher);
    tracing::info!(entries = store.approx_len(), "checkpoints saved; bye");
    report_dead_letters(&metrics, &dead);
    Ok(())
}

/// Says, at the end of a run, how many records went to the dead-letter file and why:
/// a backfill's operator must not miss that part of it was not shipped.
fn report_dead_letters(metrics: &Metrics, dead: &DeadLetter) {
    use crate::agent::sinks::DeadReason;
    for m in &metrics.sinks {
        let counts: Vec<(u64, DeadReason)> =
            DeadReason::ALL.into_iter().map(|r| (m.dead_letter_count(r), r)).filter(|c| c.0 > 0).collect();
        if counts.is_empty() {
            continue;
        }
        let total: u64 = counts.iter().map(|c| c.0).sum();
        let by_reason: Vec<String> = counts.iter().map(|(n, r)| format!("{n} {}", r.as_str())).collect();
        // Through the log, not eprintln!, so that `--log-format json` stays parseable.
        tracing::warn!(
            sink = %m.name,
            path = %dead.path().display(),
            "{total} record(s) were not shipped to sink {:?} and are in {} instead ({}); each line there gives the reason and the setting to change",
            m.name,
            dead.path().display(),
            by_reason.join(", ")
        );
    }
}

/// Tells the reader which paths changed (inotify), so new lines are read at once
/// and only the files that changed are looked at. Without it (unavailable, or
/// `watch = false`) the stat poll and dir listings run every `poll_interval`.
fn watch_paths(cfg: &Config, wake: Arc<Wake>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
        Ok(e) if e.need_rescan() => wake.everything(),
        // inotify also reports opens, reads and closes, among them the agent's own
        // (a listing opens the dir, which would ask for another listing): only
        // writes, creations, renames and deletions say something changed.
        Ok(e) if e.kind.is_access() => {}
        Ok(e) => wake.paths(e.paths),
        Err(_) => wake.everything(),
    })
    .map_err(|e| tracing::warn!(error = %e, "file events unavailable; polling only"))
    .ok()?;
    let mut any = false;
    for p in &cfg.source.paths {
        match w.watch(p, notify::RecursiveMode::Recursive) {
            Ok(()) => any = true,
            Err(e) => tracing::warn!(path = %p.display(), error = %e, "cannot watch; polling it instead"),
        }
    }
    any.then_some(w)
}

/// Descriptors for log files: `max_open_files`, within the process's open-files
/// limit (raised to its hard limit first) less what sockets, checkpoints, the
/// dead-letter file and inotify need.
fn max_open_files(wanted: usize) -> usize {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return wanted;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
    let room = (lim.rlim_cur as u64).saturating_sub(crate::agent::source::RESERVED_FDS).max(8) as usize;
    if wanted > room {
        tracing::warn!(
            max_open_files = wanted,
            open_files_limit = lim.rlim_cur,
            using = room,
            "source.max_open_files is over the process's open-files limit; using less"
        );
    }
    wanted.min(room)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
