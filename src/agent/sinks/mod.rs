//! Sinks: where batches go, dispatched by an enum, each driven by one task that
//! retries transient failures forever and sets permanent rejections aside.
//!
//! A sink's `send` reports per record: delivered, to retry (connection errors,
//! timeouts, 429, 5xx, or per-item failures of an ES bulk request), or rejected for
//! good (other 4xx). The driver ([`run_sink`]) resends only what must be retried,
//! with exponential backoff and jitter, writes rejected records to the dead-letter
//! file once (fsynced before anything is acknowledged), and acknowledges the batch
//! when nothing is left to retry, which is what lets checkpoints advance. When the
//! shutdown grace period ends it stops at once, even mid-request: what it did not
//! acknowledge is sent again after the restart.

pub mod crc;
pub mod dead_letter;
pub mod elasticsearch;
pub mod gzip;
pub mod http;
pub mod loki;
pub mod ndjson;
pub mod object_store;
pub mod otlp;
pub mod parked;
pub mod pb;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::agent::batch::Batch;
use crate::agent::config::{RetryConfig, SinkConfig};
pub use crate::agent::metrics::DeadReason;
pub use dead_letter::DeadLetter;

/// Why a send did not go through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Try the same records again later.
    Transient(String),
    /// Try again, not before the server said (`Retry-After`).
    Throttled(String, Duration),
    /// The sink refused the whole request for good.
    Permanent(String),
    /// Nobody is left to deliver to (stdout's reader went away): the agent stops the
    /// way it does on SIGTERM, and what was not delivered keeps its checkpoint back.
    Gone(String),
}

/// Per-record outcome of a send that got an answer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Indexes into `batch.entries` to send again.
    pub retry: Vec<u32>,
    /// Why the records in `retry` must go again, and not before when.
    pub retry_why: Option<(String, Option<Duration>)>,
    /// Indexes rejected for good, with the reason.
    pub rejected: Vec<(u32, DeadReason, String)>,
    /// Records the sink already had (Elasticsearch 409 on `create`): delivered by an
    /// earlier attempt, e.g. one that timed out on our side or was replayed after a
    /// restart. Counted as sent too.
    pub duplicates: u64,
    /// How many of the [`DeadReason::Partial`] records in `rejected` the receiver
    /// stored after all: counted as sent, not as dead letters.
    pub stored_anyway: u64,
    /// Task spans the trace backend stored, and those it refused for good.
    pub spans_sent: u64,
    pub spans_refused: u64,
}

impl Delivery {
    /// Names each record once, whatever the sink reported: `retry` in batch order
    /// without repeats; `rejected` without repeats nor the records also in `retry`
    /// (sent again rather than dead-lettered: a retry loses nothing, and a record
    /// refused for good is refused again); `stored_anyway` no more than the partial
    /// ones left. Then returns how many of the `asked` records were sent: the others
    /// less those to retry and those refused, plus those stored anyway. Saturating: a
    /// sink naming records it was not asked for must not wrap it.
    fn settle(&mut self, asked: u64) -> u64 {
        self.retry.sort_unstable();
        self.retry.dedup();
        let (retry, mut seen) = (&self.retry, std::collections::HashSet::new());
        self.rejected.retain(|r| retry.binary_search(&r.0).is_err() && seen.insert(r.0));
        let partial = self.rejected.iter().filter(|r| r.1 == DeadReason::Partial).count() as u64;
        self.stored_anyway = self.stored_anyway.min(partial);
        asked.saturating_sub((self.retry.len() + self.rejected.len()) as u64) + self.stored_anyway
    }
}

/// Classifies an HTTP answer: 429 and 5xx are transient, other 4xx permanent.
pub fn status_error(status: reqwest::StatusCode, body: &str) -> SendError {
    status_error_after(status, body, None)
}

/// [`status_error`] with the answer's `Retry-After`, which a transient error honours.
pub fn status_error_after(status: reqwest::StatusCode, body: &str, retry_after: Option<Duration>) -> SendError {
    let body: String = body.chars().take(500).collect();
    let msg = format!("HTTP {status}: {body}");
    if status.as_u16() == 429 || status.is_server_error() || status.as_u16() == 408 {
        match retry_after {
            Some(d) => SendError::Throttled(msg, d),
            None => SendError::Transient(msg),
        }
    } else {
        SendError::Permanent(msg)
    }
}

/// The `Retry-After` of an answer: seconds, or an HTTP date.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(3600)));
    }
    let when = jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    let wait = when.as_second() - jiff::Timestamp::now().as_second();
    Some(Duration::from_secs(wait.clamp(0, 3600) as u64))
}

/// Classifies a transport error (connect refused, timeout, reset): always transient.
pub fn transport_error(e: &reqwest::Error) -> SendError {
    SendError::Transient(format!("request failed: {e}"))
}

/// One configured sink.
pub enum SinkImpl {
    Ndjson(ndjson::NdjsonSink),
    Loki(loki::service::LokiSink),
    Elasticsearch(elasticsearch::service::EsSink),
    Otlp(otlp::service::OtlpSink),
    /// A sink whose answers a test scripts (the driver's tests). Its type stays in
    /// the tests module, private: nothing outside the tests can name it.
    #[cfg(test)]
    #[allow(private_interfaces)]
    Scripted(tests::Scripted),
}

impl SinkImpl {
    pub fn new(cfg: &SinkConfig) -> std::io::Result<SinkImpl> {
        Ok(match cfg {
            SinkConfig::Stdout { .. } => SinkImpl::Ndjson(ndjson::NdjsonSink::stdout()),
            SinkConfig::File { path, .. } => SinkImpl::Ndjson(ndjson::NdjsonSink::file(path)?),
            SinkConfig::Loki(c) => SinkImpl::Loki(loki::service::LokiSink::new((**c).clone())),
            SinkConfig::Elasticsearch(c) => SinkImpl::Elasticsearch(elasticsearch::service::EsSink::new((**c).clone())),
            SinkConfig::Otlp(c) => SinkImpl::Otlp(otlp::service::OtlpSink::new((**c).clone())),
        })
    }

    /// Whether it sends the spans of a batch (an OTLP sink with `traces = true`).
    pub fn sends_spans(&self) -> bool {
        matches!(self, SinkImpl::Otlp(s) if s.sends_spans())
    }

    /// Sends the entries `only` selects (all when `None`), reporting settled
    /// prefixes to `progress` on the way. Returns bytes sent too.
    pub async fn send(
        &mut self,
        batch: &Batch,
        only: Option<&[u32]>,
        progress: &mut Progress<'_>,
    ) -> Result<(Delivery, usize), SendError> {
        match self {
            SinkImpl::Ndjson(s) => s.send(batch, only),
            SinkImpl::Loki(s) => s.send_reporting(batch, only, progress).await,
            SinkImpl::Elasticsearch(s) => s.send(batch, only).await,
            SinkImpl::Otlp(s) => s.send_reporting(batch, only, progress).await,
            #[cfg(test)]
            SinkImpl::Scripted(s) => s.send(only),
        }
    }
}

/// Acknowledgement of one batch by one sink.
#[derive(Debug, Clone, Copy)]
pub struct Ack {
    pub seq: u64,
    pub sink: usize,
    /// `None`: the whole batch is done. `Some(n)`: progress, every entry before `n`
    /// is settled (stored, or dead-lettered durably) while the rest is still going.
    pub upto: Option<u32>,
}

/// How a sink says, while it is still sending a batch, that every entry before an
/// index is settled: stored, or set aside in the dead-letter file (already
/// fsynced). The ack tracker then applies the batch's marks up to there (see
/// [`crate::agent::pipeline::Mark`]), so a restart while the rest waits for a 429
/// to pass does not send the settled part again. Only ever forward; best effort (a
/// full ack channel drops a report: the next one, or the batch's ack, covers it).
pub struct Progress<'a> {
    to: Option<(&'a mpsc::Sender<Ack>, u64, usize)>,
    reported: u32,
}

impl<'a> Progress<'a> {
    /// Reports batch `seq`'s progress at sink `sink` on `acks`.
    pub fn to(acks: &'a mpsc::Sender<Ack>, seq: u64, sink: usize) -> Progress<'a> {
        Progress { to: Some((acks, seq, sink)), reported: 0 }
    }

    /// Reports to nobody (tests, and sends whose progress does not matter).
    pub fn none() -> Progress<'static> {
        Progress { to: None, reported: 0 }
    }

    /// Every entry before `n` is settled.
    pub fn settled_below(&mut self, n: u32) {
        if n <= self.reported {
            return;
        }
        self.reported = n;
        if let Some((acks, seq, sink)) = self.to {
            let _ = acks.try_send(Ack { seq, sink, upto: Some(n) });
        }
    }
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
    /// When dead letters of each [`DeadReason`] were last logged, and how many since.
    pub dead_logged: [(Option<Instant>, u64); DeadReason::ALL.len()],
    /// Asks the agent to stop, as a signal would (see [`SendError::Gone`]).
    pub stop: Arc<tokio::sync::Notify>,
    /// Where what is undelivered when the grace ends is kept for the next start
    /// (`None` for stdout and files: nothing to wait for there).
    pub parking: Option<parked::Parking>,
    /// What this sink reads from a batch: a parked batch must still hold it.
    pub needs: crate::agent::batch::Needs,
}

/// Dead letters of one reason are logged at most this often (the counter and the
/// file have them all): a backfill of old logs can refuse millions.
const DEAD_LOG_EVERY: Duration = Duration::from_secs(60);

/// Drives one sink until its batch channel closes (or the grace period ends):
/// first the batches parked at the last stop, then what the reader sends.
pub async fn run_sink(mut t: SinkTask) {
    if !parked::replay(&mut t).await {
        return; // given up before the parked batches went: they stay parked
    }
    while let Some((batch, made)) = t.batches.recv().await {
        // A batch can carry only checkpoint progress (marker lines, held records).
        if !batch.is_empty() || (!batch.spans.is_empty() && t.sink.sends_spans()) {
            let (acks, index) = (t.acks.clone(), t.index);
            if let Err(left) = deliver(&mut t, &batch, Progress::to(&acks, batch.seq, index)).await {
                // Shutting down with this batch undelivered: park it and what is
                // queued behind it, or leave their checkpoints where they are.
                if let Some(left) = left {
                    parked::park_rest(&mut t, batch, left).await;
                }
                return;
            }
        }
        let m = &t.metrics.sinks[t.index];
        m.batches_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        m.observe_latency(made.elapsed().as_secs_f64());
        let seq = batch.seq;
        t.recycler.put(batch);
        if t.acks.send(Ack { seq, sink: t.index, upto: None }).await.is_err() {
            return;
        }
    }
}

/// Sends one batch until nothing is left to retry. When shutdown cuts it short,
/// says which entries are not settled yet (`None` when nobody is left to deliver
/// to: then nothing is kept).
async fn deliver(t: &mut SinkTask, batch: &Batch, mut progress: Progress<'_>) -> Result<(), Option<Vec<u32>>> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut only: Option<Vec<u32>> = None;
    let mut attempt = 0u32;
    let mut logged = false;
    let left = |only: &Option<Vec<u32>>, progress: &Progress<'_>| {
        Some(only.clone().unwrap_or_else(|| (progress.reported..batch.len() as u32).collect()))
    };
    loop {
        if *t.give_up.borrow() {
            return Err(left(&only, &progress));
        }
        let pending = only.as_ref().map_or(batch.len(), |o| o.len()) as u64;
        let mut not_before = None;
        // A request may hang up to the sink's `timeout`, longer than the grace.
        let sent = tokio::select! {
            r = t.sink.send(batch, only.as_deref(), &mut progress) => r,
            _ = given_up(&mut t.give_up) => return Err(left(&only, &progress)),
        };
        let m = &t.metrics.sinks[t.index];
        match sent {
            Ok((mut d, bytes)) => {
                m.bytes_sent.fetch_add(bytes as u64, Relaxed);
                m.records_sent.fetch_add(d.settle(pending), Relaxed);
                m.duplicates.fetch_add(d.duplicates, Relaxed);
                m.spans_sent.fetch_add(d.spans_sent, Relaxed);
                m.spans_refused.fetch_add(d.spans_refused, Relaxed);
                if !d.rejected.is_empty() && !dead_letter(t, batch, &d.rejected, d.stored_anyway).await {
                    // The rejected ones were not written down: they go again.
                    return Err(left(&only, &progress));
                }
                if d.retry.is_empty() {
                    if logged {
                        tracing::info!(sink = %t.name, "delivering again");
                    }
                    return Ok(());
                }
                if let Some((why, wait)) = &d.retry_why {
                    log_retry(t, why, &mut logged);
                    not_before = *wait;
                }
                // Everything before the first entry to retry is stored or, by now,
                // in the dead-letter file: its marks may hold while the rest waits.
                if let Some(&first) = d.retry.iter().min() {
                    progress.settled_below(first);
                }
                only = Some(d.retry);
            }
            Err(SendError::Permanent(reason)) => {
                let all: Vec<(u32, DeadReason, String)> = match &only {
                    Some(o) => o.iter().map(|&i| (i, DeadReason::Rejected, reason.clone())).collect(),
                    None => (0..batch.len() as u32).map(|i| (i, DeadReason::Rejected, reason.clone())).collect(),
                };
                if dead_letter(t, batch, &all, 0).await {
                    return Ok(());
                }
                return Err(left(&only, &progress));
            }
            Err(SendError::Gone(reason)) => {
                tracing::info!(sink = %t.name, %reason, "nothing left to deliver to; stopping");
                t.stop.notify_one();
                return Err(None);
            }
            Err(SendError::Transient(reason)) => log_retry(t, &reason, &mut logged),
            Err(SendError::Throttled(reason, wait)) => {
                log_retry(t, &reason, &mut logged);
                not_before = Some(wait);
            }
        }
        attempt += 1;
        t.metrics.sinks[t.index].retries.fetch_add(1, Relaxed);
        let wait = backoff(&t.retry, attempt).max(not_before.unwrap_or_default());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = t.give_up.changed() => {}
        }
    }
}

/// Logs refused records, once per reason per [`DEAD_LOG_EVERY`].
fn log_dead(t: &mut SinkTask, rejected: &[(u32, DeadReason, String)]) {
    for kind in DeadReason::ALL {
        let Some((_, _, reason)) = rejected.iter().find(|r| r.1 == kind) else { continue };
        let (last, since) = &mut t.dead_logged[kind as usize];
        *since += rejected.iter().filter(|r| r.1 == kind).count() as u64;
        if last.is_some_and(|l| l.elapsed() < DEAD_LOG_EVERY) {
            continue;
        }
        tracing::warn!(sink = %t.name, count = *since, kind = kind.as_str(), %reason, path = %t.dead.path().display(), "records refused for good; written to the dead-letter file (logged at most once a minute per kind)");
        (*last, *since) = (Some(Instant::now()), 0);
    }
}

fn log_retry(t: &SinkTask, reason: &str, logged: &mut bool) {
    if !std::mem::replace(logged, true) {
        tracing::warn!(sink = %t.name, %reason, "send failed; retrying with backoff until it succeeds");
    }
}

/// Resolves once the grace period is over (never if nobody can say so any more).
async fn given_up(give_up: &mut watch::Receiver<bool>) {
    if give_up.wait_for(|g| *g).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Writes rejected records to the dead-letter file and fsyncs it, on a blocking
/// thread, retrying a failed write with backoff: they are acknowledged only once
/// durable. `stored_anyway` of the [`DeadReason::Partial`] ones are not counted as
/// dead letters (see [`Delivery::stored_anyway`]). False if shutdown cut it short.
async fn dead_letter(
    t: &mut SinkTask,
    batch: &Batch,
    rejected: &[(u32, DeadReason, String)],
    stored_anyway: u64,
) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    log_dead(t, rejected);
    let mut lines = DeadLetter::encode(&t.name, batch, rejected);
    let mut attempt = 0;
    loop {
        let dead = t.dead.clone();
        let write = tokio::task::spawn_blocking(move || {
            let r = dead.append(&lines);
            (lines, r)
        });
        let res = tokio::select! {
            j = write => j,
            // A disk that hangs must not hold the exit; the records stay unacknowledged
            // (should the write end after all, the next start dead-letters them again:
            // a line twice, never a record lost).
            _ = given_up(&mut t.give_up) => return false,
        };
        let e = match res {
            Ok((_, Ok(()))) => break,
            Ok((back, Err(e))) => {
                lines = back;
                e.to_string()
            }
            // The writer thread panicked, taking the lines with it: make them again.
            Err(e) => {
                lines = DeadLetter::encode(&t.name, batch, rejected);
                format!("the writer failed: {e}")
            }
        };
        if attempt == 0 {
            tracing::error!(path = %t.dead.path().display(), error = %e, "cannot write the dead-letter file; the records are kept and the write retried (check state_dir's disk)");
        }
        attempt += 1;
        tokio::select! {
            _ = tokio::time::sleep(backoff(&t.retry, attempt)) => {}
            _ = t.give_up.changed() => {}
        }
        if *t.give_up.borrow() {
            return false;
        }
    }
    let m = &t.metrics.sinks[t.index];
    let mut counts = [0u64; DeadReason::ALL.len()];
    for (_, kind, _) in rejected {
        counts[*kind as usize] += 1;
    }
    let partial = &mut counts[DeadReason::Partial as usize];
    *partial = partial.saturating_sub(stored_anyway);
    for (counter, n) in m.dead_letters.iter().zip(counts) {
        counter.fetch_add(n, Relaxed);
    }
    true
}

#[cfg(test)]
mod tests;
