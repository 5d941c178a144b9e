//! Wiring and lifecycle of `raylog ship`: start every stage, stop them in order.
//!
//! Shutdown (SIGTERM/SIGINT, a sink with nobody left to deliver to, or the end of
//! `--once`) flows downstream: the reader
//! stops, cuts its last batch and drops its [`Dispatcher`], which closes the sink
//! channels; sinks drain what they hold and drop their ack senders; the ack tracker
//! then saves the final checkpoints. On a signal, sinks get `retry.shutdown_grace` to
//! finish (a second signal ends it at once); whatever is still undelivered keeps its
//! checkpoint back, is counted on stderr and re-read at the next start
//! (at-least-once, never lost). Signals are heard until the very end: with `--once`,
//! after the reader finished, the wait for the sinks is what a signal cuts short.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::agent::api::{self, Health};
use crate::agent::batch::Recycler;
use crate::agent::checkpoint::times::TimesLog;
use crate::agent::checkpoint::{CheckpointStore, Resume};
use crate::agent::config::Config;
use crate::agent::events::EventMetrics;
use crate::agent::events::SpoolReaders;
use crate::agent::metrics::Metrics;
use crate::agent::pipeline::{track_acks, Dispatcher, Undelivered};
use crate::agent::ray_latency::RayLatency;
use crate::agent::ray_metrics::RayMetrics;
use crate::agent::sinks::object_store::config::ObjectStoreConfig;
use crate::agent::sinks::object_store::service::Store as ObjectStoreClient;
use crate::agent::sinks::object_store::{Mirror, ObjectStoreMetrics};
use crate::agent::sinks::parked::Parking;
use crate::agent::sinks::{run_sink, DeadLetter, SinkImpl, SinkTask};
use crate::agent::source::{Source, Wake};
use crate::agent::watch::Watches;

/// A signal that stops the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Term,
    Int,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Int => "SIGINT",
        }
    }

    /// 128 + the signal's number: what a shell reports for a process the signal
    /// killed, so scripts and job runners see the run was interrupted.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Term => 128 + 15,
            Signal::Int => 128 + 2,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The signal that stopped it, if one did.
    pub signal: Option<Signal>,
    /// The reader finished on its own (`--once`: every file read to its end) before
    /// anything asked it to stop.
    pub read_everything: bool,
    /// Records read and not delivered by every sink (parked ones included).
    pub undelivered: u64,
}

impl Outcome {
    /// The exit code of `raylog ship`: a `--once` run a signal interrupted before it
    /// read and delivered everything exits 128 + the signal's number; every other
    /// run 0 (the agent stopped by its service manager ends normally).
    pub fn exit_code(&self, once: bool) -> u8 {
        match self.signal {
            Some(s) if once && !(self.read_everything && self.undelivered == 0) => s.exit_code(),
            _ => 0,
        }
    }
}

/// Runs the agent until a signal (or, with `once`, until everything is delivered).
pub fn run(cfg: Config, once: bool) -> Result<Outcome> {
    crate::agent::limit_arenas();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = rt.block_on(run_async(cfg, once));
    // Everything that matters is saved by now. A blocking task may still be stuck
    // (a dead-letter write on a hung disk, given up on after the grace period):
    // do not wait for it forever, as dropping the runtime would.
    rt.shutdown_timeout(Duration::from_secs(1));
    outcome
}

/// The running stages.
struct Stages {
    reader: JoinHandle<()>,
    tracker: JoinHandle<(CheckpointStore, Undelivered)>,
    /// Set when the reader must stop.
    shutdown: Arc<AtomicBool>,
    /// Tells the sinks to stop retrying (the grace period is over).
    give_up: watch::Sender<bool>,
    /// A sink asks the agent to stop (nobody left to deliver to).
    stop: Arc<tokio::sync::Notify>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    dead: DeadLetter,
    /// The inotify watches on the source paths (if any); dropping them stops them.
    watcher: Option<Watches>,
}

async fn run_async(mut cfg: Config, once: bool) -> Result<Outcome> {
    // Listening from the start: a signal at any point is heard.
    let signals = listen_for_signals()?;
    let cpu0 = thread_cpu();
    let (mut store, resume) = CheckpointStore::open(&cfg.source.state_dir, cfg.source.forget_after.as_secs())?;
    let load_cpu = thread_cpu().saturating_sub(cpu0);
    tracing::info!(state_dir = %cfg.source.state_dir.display(), files = resume.len(), cpu = ?load_cpu, "loaded checkpoints");
    let names: Vec<&str> = cfg.sinks.iter().map(|s| s.name()).collect();
    let metrics = Arc::new(Metrics::new(&names));
    metrics.checkpoints_load_cpu_ms.store(load_cpu.as_millis() as i64, Relaxed);
    // The stages' own counters, asked for here so that `/metrics` lists them in this
    // order whichever stage starts first.
    metrics.stage::<RayMetrics>();
    metrics.stage::<RayLatency>();
    metrics.stage::<EventMetrics>();
    let health = Arc::new(Health::default());
    if let Some(addr) = cfg.api_address {
        let bound = api::serve(addr, metrics.clone(), health.clone()).await?;
        tracing::info!(%bound, "serving /metrics, /healthz, /readyz");
    }
    let records = !cfg.sinks.is_empty();
    let bucket = cfg.object_stores.first();
    let events = match &cfg.events {
        Some(ec) => {
            let uploaded = bucket.map(|b| Mirror::events_cursor(&cfg.source.state_dir, &b.name));
            let readers = SpoolReaders { uploaded, records };
            let ev = crate::agent::events::start(
                ec,
                &cfg.retry,
                &resume,
                metrics.clone(),
                cfg.source.parse.max_line_bytes,
                readers,
            )
            .await?;
            tracing::info!(bound = %ev.bound, spool = %ec.spool_dir.display(), forward_to = ?ec.forward_to.as_ref().map(|u| u.as_str()), "receiving Ray's events");
            store.observe(ev.delivered.clone());
            // The spool is read like a logs dir.
            cfg.source.paths.push(ec.spool_dir.clone());
            Some(ev)
        }
        None => None,
    };
    let mirror = match bucket {
        Some(b) => Some(start_mirror(&cfg, b, events.as_ref(), &metrics, &health, once)?),
        None => None,
    };
    if !records {
        return run_mirror_only(mirror, signals, events, health, once).await;
    }
    let stages = start(&cfg, once, store, resume, metrics, health)?;
    let (dead, metrics) = (stages.dead.clone(), stages.metrics.clone());
    let end = wait(stages, signals, cfg.retry.shutdown_grace).await?;
    if let Some((stop, task)) = mirror {
        let _ = stop.send(true);
        mirror_outcome(task.await.ok().flatten(), once)?;
    }
    if let Some(ev) = &events {
        ev.stop();
    }
    tracing::info!(entries = end.store.approx_len(), "checkpoints saved; bye");
    report_dead_letters(&metrics, &dead);
    let parked = parked(&metrics, &cfg.source.state_dir);
    report_undelivered(&end, &names, once, cfg.retry.shutdown_grace, &parked);
    let signal = match end.why {
        Stopped::Signal(s) => Some(s),
        _ => None,
    };
    // Parked records are not delivered either: `ship --once` did not finish its job.
    let undelivered = end.undelivered.records + parked.0;
    Ok(Outcome { signal, read_everything: end.read_everything, undelivered })
}

type MirrorTask = (watch::Sender<bool>, JoinHandle<Option<u64>>);

/// Starts the object-store sink's rounds (see `sinks::object_store`).
fn start_mirror(
    cfg: &Config,
    b: &ObjectStoreConfig,
    events: Option<&crate::agent::events::Events>,
    metrics: &Arc<Metrics>,
    health: &Health,
    once: bool,
) -> Result<MirrorTask> {
    let store = ObjectStoreClient::build(b)
        .with_context(|| format!("sink {:?}: cannot set up the object store client", b.name))?;
    let spool = events.map(|e| e.spool.clone());
    let mut paths = cfg.source.paths.clone();
    if let Some(ec) = &cfg.events {
        paths.retain(|p| p != &ec.spool_dir);
    }
    let m = Mirror::new(b.clone(), store, paths, &cfg.source.state_dir, spool, metrics.stage::<ObjectStoreMetrics>());
    let (stop, stopped) = watch::channel(false);
    let (drain_tx, drains) = mpsc::channel(4);
    *health.drain.lock().unwrap_or_else(|e| e.into_inner()) = Some(drain_tx);
    tracing::info!(sink = %b.name, bucket = %b.bucket, prefix = %b.layout.prefix(), "mirroring the logs dirs to the object store");
    Ok((stop, tokio::spawn(m.run(stopped, drains, once, cfg.retry.shutdown_grace))))
}

/// No record sinks: only the events receiver and the object store run, until a
/// signal (or, with `once`, the one round).
async fn run_mirror_only(
    mirror: Option<MirrorTask>,
    mut signals: mpsc::Receiver<Signal>,
    events: Option<crate::agent::events::Events>,
    health: Arc<Health>,
    once: bool,
) -> Result<Outcome> {
    let Some((stop, mut task)) = mirror else {
        return Ok(Outcome { signal: None, read_everything: true, undelivered: 0 });
    };
    health.ready.store(true, Relaxed);
    let mut signal = None;
    let mut last = None;
    tokio::select! {
        r = &mut task, if once => last = Some(r.ok().flatten()),
        s = signals.recv() => signal = s,
    };
    if last.is_none() {
        tracing::info!("stopping: the object store's last round runs");
        let _ = stop.send(true);
        tokio::select! {
            r = &mut task => last = Some(r.ok().flatten()),
            s = signals.recv() => tracing::warn!(signal = ?s.map(|s| s.name()), "second signal: not waiting for the last round"),
        }
    }
    if let Some(ev) = &events {
        ev.stop();
    }
    mirror_outcome(last.flatten(), once)?;
    Ok(Outcome { signal, read_everything: signal.is_none(), undelivered: 0 })
}

/// With `--once`, a last round that left writes undone is an error (the exit code
/// says the bucket is not complete); a service's stop only logs it.
fn mirror_outcome(failures: Option<u64>, once: bool) -> Result<()> {
    match failures {
        Some(n) if n > 0 && once => {
            anyhow::bail!(
                "{n} write(s) to the object store failed (the first is logged above); run again to upload the rest"
            )
        }
        None if once => anyhow::bail!("the object store's round did not finish"),
        _ => Ok(()),
    }
}

/// Starts the sinks, the ack tracker and the reader (with its file watch).
fn start(
    cfg: &Config,
    once: bool,
    store: CheckpointStore,
    resume: Resume,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<Stages> {
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
    let stop = Arc::new(tokio::sync::Notify::new());
    for (index, sc) in cfg.sinks.iter().enumerate() {
        let sink = SinkImpl::new(sc).with_context(|| format!("sink {:?}", sc.name()))?;
        let (tx, rx) = mpsc::channel(per_sink);
        sink_txs.push(tx);
        // Not joined: the tracker ends after every sink dropped its ack sender.
        tokio::spawn(run_sink(SinkTask {
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
            parking: parks(sc).then(|| Parking::new(&cfg.source.state_dir, sc.name())),
            needs: sc.needs(),
        }));
    }
    drop(ack_tx);
    let parking_sinks = cfg.sinks.iter().filter(|sc| parks(sc)).map(|sc| sc.name());
    for (dir, batches) in crate::agent::sinks::parked::orphans(&cfg.source.state_dir, parking_sinks) {
        tracing::warn!(
            dir = %dir.display(),
            batches,
            "parked batches of a sink no longer in the config are not sent: add the sink back under the same name to send them, or delete the directory"
        );
    }
    // Batches in flight are few (bounded sink queues), so is what waits for their acks.
    let (pending_tx, pending_rx) = mpsc::channel(4096);
    let out = Dispatcher { sinks: sink_txs, pending: pending_tx };
    let times = TimesLog::for_resume(&cfg.source.state_dir, &resume)?.watching(store.saved_batch());
    let tracker = tokio::spawn(track_acks(pending_rx, ack_rx, cfg.sinks.len(), store, metrics.clone()));
    let shutdown = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(Wake::default());
    // Set up while the reader lists (it stats nothing before they are, see
    // `Source::await_watch`).
    let watcher = cfg.source.watch.then(|| Watches::start(cfg, wake.clone()));
    let max_open = max_open_files(cfg.source.max_open_files);
    let watched = cfg.source.watch;
    let source = Source::new(
        cfg.clone(),
        resume,
        out,
        recycler,
        metrics.clone(),
        shutdown.clone(),
        once,
        max_open,
        watched,
        times,
    );
    let reader = tokio::task::spawn_blocking(move || source.run(wake));
    health.ready.store(true, Relaxed);
    Ok(Stages { reader, tracker, shutdown, give_up: give_up_tx, stop, metrics, health, dead, watcher })
}

/// Whether a sink keeps what it could not deliver at a stop (see
/// [`crate::agent::sinks::parked`]): not stdout and files, which never wait.
fn parks(sc: &crate::agent::config::SinkConfig) -> bool {
    use crate::agent::config::SinkConfig;
    !matches!(sc, SinkConfig::Stdout { .. } | SinkConfig::File { .. })
}

/// Why the agent stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stopped {
    /// `--once`: nothing asked it to stop; the sinks delivered everything read.
    Finished,
    Signal(Signal),
    /// A sink had nobody left to deliver to.
    Gone,
}

/// How the stages ended.
struct End {
    why: Stopped,
    /// The reader finished before anything asked it to stop.
    read_everything: bool,
    store: CheckpointStore,
    undelivered: Undelivered,
}

/// Waits until the ack tracker is done, which is after the reader and every sink
/// stopped. The first signal (or a sink with nobody left to deliver to) stops the
/// reader and starts the grace period; its end, or a second signal, tells the sinks
/// to give up.
async fn wait(mut s: Stages, mut signals: mpsc::Receiver<Signal>, grace: Duration) -> Result<End> {
    let mut why: Option<Stopped> = None;
    let (mut reader_done, mut read_everything) = (false, false);
    let mut deadline: Option<tokio::time::Instant> = None;
    let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    loop {
        let stop_now = tokio::select! {
            r = &mut s.reader, if !reader_done => {
                r.context("the reader thread panicked")?;
                reader_done = true;
                read_everything = why.is_none();
                None
            }
            Some(sig) = signals.recv() => match why {
                Some(_) => {
                    tracing::warn!(signal = sig.name(), "second signal: giving up delivery now");
                    let _ = s.give_up.send(true);
                    None
                }
                None => Some(Stopped::Signal(sig)),
            },
            _ = s.stop.notified(), if why.is_none() => Some(Stopped::Gone),
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(far)), if deadline.is_some() => {
                deadline = None;
                let _ = s.give_up.send(true);
                None
            }
            t = &mut s.tracker => {
                let (store, undelivered) = t.context("the checkpoint task panicked")?;
                drop(s.watcher);
                let why = why.unwrap_or(Stopped::Finished);
                return Ok(End { why, read_everything, store, undelivered });
            }
        };
        if let Some(stopped) = stop_now {
            if let Stopped::Signal(sig) = stopped {
                tracing::info!(signal = sig.name(), ?grace, "stopping: no more reading; delivering what was read");
            }
            s.health.ready.store(false, Relaxed);
            s.shutdown.store(true, Relaxed);
            deadline = Some(tokio::time::Instant::now() + grace);
            why = Some(stopped);
        }
    }
}

/// Hears SIGTERM and SIGINT for the whole run, each one sent on the channel.
fn listen_for_signals() -> Result<mpsc::Receiver<Signal>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let s = tokio::select! {
                _ = term.recv() => Signal::Term,
                _ = int.recv() => Signal::Int,
            };
            if tx.send(s).await.is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// What a stop parked (see [`crate::agent::sinks::parked`]): how many records,
/// and a phrase saying per sink how many and where.
fn parked(metrics: &Metrics, state_dir: &std::path::Path) -> (u64, String) {
    let counts: Vec<(&String, u64)> =
        metrics.sinks.iter().map(|m| (&m.name, m.parked.load(Relaxed))).filter(|(_, n)| *n > 0).collect();
    let per_sink: Vec<String> = counts.iter().map(|(name, n)| format!("sink {name:?}: {n}")).collect();
    let total = counts.iter().map(|c| c.1).sum();
    let dir = state_dir.join("parked");
    (
        total,
        format!(
            "{total} of them ({}) are kept in {} and sent first at the next start",
            per_sink.join(", "),
            dir.display()
        ),
    )
}

/// Says what a stop left undelivered: an operator must know that records read were
/// not shipped, and that the next start (or `--once` run) ships them. A warning,
/// unless nothing is missing or stdout's reader went away (`ship --once | head`:
/// the user stopped reading). `parked` were acknowledged by being kept on disk.
fn report_undelivered(end: &End, names: &[&str], once: bool, grace: Duration, parked: &(u64, String)) {
    let u = &end.undelivered;
    let records = u.records + parked.0;
    let how = match end.why {
        Stopped::Signal(s) => format!("stopped by {}", s.name()),
        Stopped::Gone => "stopped (a sink had nobody left to deliver to)".into(),
        Stopped::Finished if records == 0 => return,
        Stopped::Finished => "stopped".into(),
    };
    let unfinished = match end.why {
        Stopped::Signal(_) if once && !end.read_everything => {
            "; `ship --once` stopped before reading everything: run it again to resume"
        }
        Stopped::Signal(_) if once && records > 0 => "; run `ship --once` again to deliver them",
        _ => "",
    };
    let msg = if records == 0 {
        format!("{how}: every record read was delivered{unfinished}")
    } else {
        let mut per_sink: Vec<String> = names
            .iter()
            .zip(&u.per_sink)
            .filter(|(_, &n)| n > 0)
            .map(|(name, n)| format!("sink {name:?}: {n}"))
            .collect();
        let mut then = vec![];
        if u.records > 0 {
            then.push(format!(
                "{} of them ({}) kept their checkpoints behind them, so the next start reads them again",
                u.records,
                per_sink.join(", ")
            ));
            per_sink.clear();
        }
        if parked.0 > 0 {
            then.push(parked.1.clone());
        }
        format!(
            "{how}: {records} record(s) read were not delivered when delivery was given up (retry.shutdown_grace = {grace:?}, or a second signal): {}{unfinished}",
            then.join("; ")
        )
    };
    if end.why != Stopped::Gone && (records > 0 || !unfinished.is_empty()) {
        tracing::warn!(undelivered = records, parked = parked.0, "{msg}");
    } else {
        tracing::info!(undelivered = records, parked = parked.0, "{msg}");
    }
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

/// CPU time of the calling thread so far (what loading the checkpoints costs, which
/// runs on it from start to end).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    } else {
        Duration::ZERO
    }
}
