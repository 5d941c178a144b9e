//! Sinks: where batches go, dispatched by an enum, each driven by one task that
//! retries transient failures forever and sets permanent rejections aside.
//!
//! A sink's `send` reports per record: delivered, to retry (connection errors,
//! timeouts, 429, 5xx, or per-item failures of an ES bulk request), or rejected for
//! good (other 4xx). The driver ([`run_sink`]) resends only what must be retried,
//! with exponential backoff and jitter, writes rejected records to the dead-letter
//! file once, and acknowledges the batch when nothing is left to retry, which is
//! what lets checkpoints advance.

pub mod elasticsearch;
pub mod loki;
pub mod stdout;
pub mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::agent::batch::Batch;
use crate::agent::config::{RetryConfig, SinkConfig};

/// Why a send did not go through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Try the same records again later.
    Transient(String),
    /// The sink refused the whole request for good.
    Permanent(String),
}

/// Per-record outcome of a send that got an answer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Indexes into `batch.entries` to send again.
    pub retry: Vec<u32>,
    /// Indexes rejected for good, with the reason.
    pub rejected: Vec<(u32, String)>,
    /// Records the sink already had (Elasticsearch 409 on `create`): delivered by an
    /// earlier attempt, e.g. one that timed out on our side or was replayed after a
    /// restart. Counted as sent too.
    pub duplicates: u64,
}

/// Classifies an HTTP answer: 429 and 5xx are transient, other 4xx permanent.
pub fn status_error(status: reqwest::StatusCode, body: &str) -> SendError {
    let body: String = body.chars().take(500).collect();
    let msg = format!("HTTP {status}: {body}");
    if status.as_u16() == 429 || status.is_server_error() || status.as_u16() == 408 {
        SendError::Transient(msg)
    } else {
        SendError::Permanent(msg)
    }
}

/// Classifies a transport error (connect refused, timeout, reset): always transient.
pub fn transport_error(e: &reqwest::Error) -> SendError {
    SendError::Transient(format!("request failed: {e}"))
}

/// One configured sink.
pub enum SinkImpl {
    Stdout(stdout::StdoutSink),
    Loki(loki::service::LokiSink),
    Elasticsearch(elasticsearch::service::EsSink),
}

impl SinkImpl {
    pub fn new(cfg: &SinkConfig) -> std::io::Result<SinkImpl> {
        Ok(match cfg {
            SinkConfig::Stdout { .. } => SinkImpl::Stdout(stdout::StdoutSink::stdout()),
            SinkConfig::File { path, .. } => SinkImpl::Stdout(stdout::StdoutSink::file(path)?),
            SinkConfig::Loki(c) => SinkImpl::Loki(loki::service::LokiSink::new((**c).clone())),
            SinkConfig::Elasticsearch(c) => SinkImpl::Elasticsearch(elasticsearch::service::EsSink::new((**c).clone())),
        })
    }

    /// Sends the entries `only` selects (all when `None`). Returns bytes sent too.
    pub async fn send(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        match self {
            SinkImpl::Stdout(s) => s.send(batch, only),
            SinkImpl::Loki(s) => s.send(batch, only).await,
            SinkImpl::Elasticsearch(s) => s.send(batch, only).await,
        }
    }
}

/// The dead-letter file: one JSON object per rejected record, shared by all sinks.
#[derive(Clone)]
pub struct DeadLetter {
    path: PathBuf,
    file: Arc<Mutex<Option<std::fs::File>>>,
}

impl DeadLetter {
    pub fn new(state_dir: &Path) -> DeadLetter {
        DeadLetter { path: state_dir.join("dead-letter.ndjson"), file: Arc::new(Mutex::new(None)) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the rejected records of `batch`.
    pub fn write(&self, sink: &str, batch: &Batch, rejected: &[(u32, String)]) {
        use std::io::Write;
        let mut guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            match std::fs::OpenOptions::new().create(true).append(true).open(&self.path) {
                Ok(f) => *guard = Some(f),
                Err(e) => {
                    tracing::error!(path = %self.path.display(), error = %e, "cannot open the dead-letter file; rejected records are only counted");
                    return;
                }
            }
        }
        let mut out = Vec::new();
        for (i, reason) in rejected {
            let Some(e) = batch.entries.get(*i as usize) else { continue };
            out.extend_from_slice(b"{\"sink\":");
            raylog_parsers::ndjson::write_str(&mut out, sink);
            out.extend_from_slice(b",\"reason\":");
            raylog_parsers::ndjson::write_str(&mut out, reason);
            out.extend_from_slice(b",\"record\":");
            if batch.needs.json {
                out.extend_from_slice(batch.json_of(e).as_bytes());
            } else {
                batch.write_fields_json(e, &mut out);
            }
            out.extend_from_slice(b"}\n");
        }
        if let Some(f) = guard.as_mut() {
            if let Err(e) = f.write_all(&out).and_then(|_| f.flush()) {
                tracing::error!(path = %self.path.display(), error = %e, "cannot write the dead-letter file");
            }
        }
    }
}

/// Acknowledgement of one batch by one sink.
#[derive(Debug, Clone, Copy)]
pub struct Ack {
    pub seq: u64,
    pub sink: usize,
}

/// Backoff before retry number `attempt` (1-based): exponential, capped, with jitter.
pub fn backoff(cfg: &RetryConfig, attempt: u32) -> Duration {
    let base = cfg.initial_backoff.as_secs_f64() * 2f64.powi(attempt.saturating_sub(1).min(20) as i32);
    let capped = base.min(cfg.max_backoff.as_secs_f64());
    // Up to ±20% jitter from the clock's low bits: enough to spread agents apart.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let jitter = 0.8 + 0.4 * (nanos % 1000) as f64 / 1000.0;
    Duration::from_secs_f64(capped * jitter)
}

/// Everything a sink task needs.
pub struct SinkTask {
    pub index: usize,
    pub name: String,
    pub sink: SinkImpl,
    pub batches: mpsc::Receiver<(Arc<Batch>, Instant)>,
    pub acks: mpsc::Sender<Ack>,
    pub dead: DeadLetter,
    pub retry: RetryConfig,
    pub metrics: Arc<crate::agent::metrics::Metrics>,
    /// Becomes true when the shutdown grace period is over: stop retrying.
    pub give_up: watch::Receiver<bool>,
    /// Where delivered batches go back to the reader.
    pub recycler: crate::agent::batch::Recycler,
}

/// Drives one sink until its batch channel closes (or the grace period ends).
pub async fn run_sink(mut t: SinkTask) {
    while let Some((batch, made)) = t.batches.recv().await {
        // A batch can carry only checkpoint progress (marker lines, held records).
        if !batch.is_empty() && !deliver(&mut t, &batch).await {
            return; // shutting down with this batch undelivered: its checkpoint stays put
        }
        let m = &t.metrics.sinks[t.index];
        m.batches_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        m.observe_latency(made.elapsed().as_secs_f64());
        let seq = batch.seq;
        t.recycler.put(batch);
        if t.acks.send(Ack { seq, sink: t.index }).await.is_err() {
            return;
        }
    }
}

/// Sends one batch until nothing is left to retry. False if shutdown cut it short.
async fn deliver(t: &mut SinkTask, batch: &Batch) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &t.metrics.sinks[t.index];
    let mut only: Option<Vec<u32>> = None;
    let mut attempt = 0u32;
    let mut logged = false;
    loop {
        if *t.give_up.borrow() {
            return false;
        }
        let pending = only.as_ref().map_or(batch.len(), |o| o.len()) as u64;
        match t.sink.send(batch, only.as_deref()).await {
            Ok((d, bytes)) => {
                m.bytes_sent.fetch_add(bytes as u64, Relaxed);
                let done = pending - d.retry.len() as u64 - d.rejected.len() as u64;
                m.records_sent.fetch_add(done, Relaxed);
                m.duplicates.fetch_add(d.duplicates, Relaxed);
                if !d.rejected.is_empty() {
                    tracing::warn!(sink = %t.name, count = d.rejected.len(), first_reason = %d.rejected[0].1, path = %t.dead.path().display(), "records rejected for good; written to the dead-letter file");
                    m.dead_letters.fetch_add(d.rejected.len() as u64, Relaxed);
                    t.dead.write(&t.name, batch, &d.rejected);
                }
                if d.retry.is_empty() {
                    if logged {
                        tracing::info!(sink = %t.name, "delivering again");
                    }
                    return true;
                }
                only = Some(d.retry);
            }
            Err(SendError::Permanent(reason)) => {
                let all: Vec<(u32, String)> = match &only {
                    Some(o) => o.iter().map(|&i| (i, reason.clone())).collect(),
                    None => (0..batch.len() as u32).map(|i| (i, reason.clone())).collect(),
                };
                tracing::warn!(sink = %t.name, count = all.len(), %reason, path = %t.dead.path().display(), "request rejected for good; records written to the dead-letter file");
                m.dead_letters.fetch_add(all.len() as u64, Relaxed);
                t.dead.write(&t.name, batch, &all);
                return true;
            }
            Err(SendError::Transient(reason)) => {
                if !logged {
                    tracing::warn!(sink = %t.name, %reason, "send failed; retrying with backoff until it succeeds");
                    logged = true;
                }
            }
        }
        attempt += 1;
        m.retries.fetch_add(1, Relaxed);
        let wait = backoff(&t.retry, attempt);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = t.give_up.changed() => {}
        }
    }
}
