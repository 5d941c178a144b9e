//! Sends encoded batches to Loki's push API and works out, per entry, what Loki did.
//!
//! Loki is not all-or-nothing, and what it says is partial, so the outcome is settled
//! here entry by entry ([`Delivery`]):
//! - Entries Loki would refuse for their age (older than `reject_old_after`, further
//!   ahead than `reject_future_after`) are not sent: they go straight to the
//!   dead-letter file, with the Loki setting to raise.
//! - 2xx: every entry sent is stored.
//! - 400 from the ingester (`total ignored: N out of M for stream: {…}`, the out-of-
//!   order window): that stream's refused entries are known exactly (the ones listed,
//!   or, as each stream is sent in time order, its N oldest), its other entries are
//!   stored. Loki names only the last stream that lost entries, so the push's other
//!   streams are sent again: what Loki stored already is stored once (an entry with
//!   the same stream, time and line is a duplicate to Loki), what it refused is named
//!   by the next answer. Any other 400 (a distributor's validation error) is settled
//!   by halving the push until each refused entry stands alone.
//! - 429, 5xx, 408 and transport errors are retried (after `Retry-After` when given;
//!   a 429 also sets the pace of later pushes, see [`super::pace`]);
//!   bad credentials (401/403) and a URL with no push API (404/405) too, because they
//!   are the operator's to fix and no data is wrong.

use std::time::Duration;

use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use reqwest::StatusCode;

use super::config::LokiConfig;
use super::encode::LokiEncoder;
use super::pace::{Pacer, StreamPacer};
use super::refusal::{self, Ignored};
use crate::agent::batch::Batch;
use crate::agent::sinks::{
    retry_after, status_error_after, transport_error, DeadReason, Delivery, Progress, SendError,
};

const AGENT: &str = concat!("raylog/", env!("CARGO_PKG_VERSION"));

/// Requests one send may make to settle refused pushes, beyond the first; past it,
/// a part Loki refused without saying which entries is dead-lettered whole.
const SETTLE_BUDGET: usize = 64;

/// A Loki push client.
pub struct LokiSink {
    cfg: LokiConfig,
    /// Boxed: it holds the reusable buffers and keeps `SinkImpl` variants of similar size.
    encoder: Box<LokiEncoder>,
    pacer: Pacer,
    streams: StreamPacer,
}

/// How one push request went.
enum Pushed {
    Stored(usize),
    /// 400 (or 413): some entries, or all, were refused; the body says which, partly.
    Refused(String),
    /// Not sent: larger than Loki takes at once under its rate limit (see [`Pacer`]).
    TooBig,
}

impl LokiSink {
    pub fn new(cfg: LokiConfig) -> LokiSink {
        LokiSink {
            encoder: Box::new(LokiEncoder::new(&cfg)),
            pacer: Pacer::new(cfg.max_bytes_per_second),
            streams: StreamPacer::new(cfg.max_stream_bytes_per_second),
            cfg,
        }
    }

    /// Pushes the entries `only` selects (all when `None`). Returns the bytes sent.
    pub async fn send(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        self.send_reporting(batch, only, &mut Progress::none()).await
    }

    /// [`LokiSink::send`], telling `progress` after each push what is settled: the
    /// parts go in batch order, so every entry before the next part to push is
    /// stored (unless one was refused: those wait for the dead-letter file, and
    /// nothing more is reported until the caller wrote it).
    pub async fn send_reporting(
        &mut self,
        batch: &Batch,
        only: Option<&[u32]>,
        progress: &mut Progress<'_>,
    ) -> Result<(Delivery, usize), SendError> {
        let mut d = Delivery::default();
        let selected: Vec<u32> = match only {
            // In batch order: parts are cut from it in order, which is what makes
            // "every entry before the next part is settled" true (a retry list is
            // not in order: it ends with the parts still stacked).
            Some(o) => {
                let mut o = o.to_vec();
                o.sort_unstable();
                o.dedup();
                o
            }
            None => (0..batch.len() as u32).collect(),
        };
        let send = self.set_aside_by_age(batch, selected, &mut d);
        let (mut bytes, mut budget, mut requests) = (0, SETTLE_BUDGET, 0);
        // Popped from the end: the first part last.
        let mut todo = parts(batch, send, self.cfg.max_push_bytes);
        todo.reverse();
        while let Some(part) = todo.pop() {
            if part.is_empty() {
                continue;
            }
            requests += 1;
            match self.push(batch, &part).await {
                Ok(Pushed::Stored(n)) => {
                    bytes += n;
                    if d.rejected.is_empty() {
                        let next = todo.iter().filter_map(|p| p.first()).min();
                        progress.settled_below(next.map_or(batch.len() as u32, |&i| i));
                    }
                }
                Ok(Pushed::Refused(body)) => {
                    budget = budget.saturating_sub(1);
                    todo.extend(self.settle(&part, &body, budget, &mut d));
                }
                Ok(Pushed::TooBig) => {
                    requests -= 1;
                    let (a, b) = part.split_at(part.len() / 2);
                    todo.extend([b.to_vec(), a.to_vec()]);
                }
                Err(e) => {
                    if requests == 1 && d.rejected.is_empty() {
                        // The whole send failed as one: the caller retries it as such.
                        return Err(e);
                    }
                    let (why, wait) = match e {
                        SendError::Transient(w) => (w, None),
                        SendError::Throttled(w, t) => (w, Some(t)),
                        SendError::Permanent(w) => {
                            d.rejected.extend(part.iter().map(|&i| (i, DeadReason::Rejected, w.clone())));
                            continue;
                        }
                        gone @ SendError::Gone(_) => return Err(gone),
                    };
                    d.retry.extend_from_slice(&part);
                    d.retry.extend(todo.drain(..).flatten());
                    d.retry_why = Some((why, wait));
                }
            }
        }
        Ok((d, bytes))
    }

    /// Moves entries Loki would refuse for their age into `d.rejected`; returns the rest.
    fn set_aside_by_age(&self, batch: &Batch, selected: Vec<u32>, d: &mut Delivery) -> Vec<u32> {
        let now = now_ns();
        let oldest = now.saturating_sub(self.cfg.reject_old_after.as_nanos() as i64);
        let newest = now.saturating_add(self.cfg.reject_future_after.as_nanos() as i64);
        let mut keep = Vec::with_capacity(selected.len());
        for i in selected {
            let Some(e) = batch.entries.get(i as usize) else { continue };
            if e.timestamp_ns < oldest {
                d.rejected.push((i, DeadReason::TooOld, refusal::too_old(e.timestamp_ns, self.cfg.reject_old_after)));
            } else if e.timestamp_ns > newest {
                d.rejected.push((
                    i,
                    DeadReason::TooNew,
                    refusal::too_new(e.timestamp_ns, self.cfg.reject_future_after),
                ));
            } else {
                keep.push(i);
            }
        }
        keep
    }

    /// Works out what a 400 for `part` refused: records it in `d` and returns the
    /// parts still unsettled, to send again.
    fn settle(&self, part: &[u32], body: &str, budget: usize, d: &mut Delivery) -> Vec<Vec<u32>> {
        if let Some(ig) = refusal::parse_ignored(body) {
            if let Some(stream) = self.encoder.stream_entries(&ig.stream) {
                let refused = refused_entries(&stream, &ig, |i| self.encoder.sent_time(i));
                d.rejected.extend(refused.iter().map(|&i| (i, ig.kind, ig.reason.clone())));
                // The stream's other entries are stored; the other streams are unknown.
                let rest: Vec<u32> = part.iter().copied().filter(|i| !stream.contains(i)).collect();
                return vec![rest];
            }
        }
        let all = refusal::counts_all(body, part.len());
        if part.len() == 1 || all || budget == 0 {
            let why = refusal::describe(body);
            d.rejected.extend(part.iter().map(|&i| (i, DeadReason::Rejected, why.clone())));
            return vec![];
        }
        let (a, b) = part.split_at(part.len() / 2);
        // Popped last first: the older half goes first.
        vec![b.to_vec(), a.to_vec()]
    }

    /// One push request of `part`.
    async fn push(&mut self, batch: &Batch, part: &[u32]) -> Result<Pushed, SendError> {
        let push = self.encoder.encode(batch, Some(part)).map_err(SendError::Permanent)?;
        if push.entries == 0 {
            return Ok(Pushed::Stored(0));
        }
        let bytes = push.body.len();
        let widest = self.encoder.stream_sizes().map(|s| s.1).max().unwrap_or(0);
        if part.len() > 1 && (self.pacer.too_big(push.raw_bytes) || self.streams.too_big(widest)) {
            return Ok(Pushed::TooBig);
        }
        let wait = self.pacer.wait_for(push.raw_bytes).max(self.streams.wait_for(self.encoder.stream_sizes()));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut req = self
            .cfg
            .client
            .post(self.cfg.push_url.clone())
            .header(CONTENT_TYPE, push.content_type)
            .header(USER_AGENT, AGENT);
        if let Some(enc) = push.content_encoding {
            req = req.header(CONTENT_ENCODING, enc);
        }
        if let Some(tenant) = &self.cfg.tenant_id {
            req = req.header("X-Scope-OrgID", tenant);
        }
        if let Some((user, password)) = &self.cfg.basic_auth {
            req = req.basic_auth(user, Some(password));
        } else if let Some(token) = &self.cfg.bearer_token {
            req = req.bearer_auth(token);
        }
        let resp = req.body(push.body).send().await.map_err(|e| transport_error(&e))?;
        let status = resp.status();
        let wait = retry_after(resp.headers());
        // Read the body even on success, so the connection can be reused.
        let text = resp.text().await.unwrap_or_default();
        if status.is_success() {
            return Ok(Pushed::Stored(bytes));
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.pacer.learn(&text);
        }
        if status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE {
            return Ok(Pushed::Refused(format!("HTTP {status}: {}", text.trim())));
        }
        Err(loki_status_error(status, text.trim(), wait))
    }
}

/// `selected` cut, in order, into parts of about `max_bytes` each (a message and a
/// guess at its labels and metadata): estimated before encoding, so a large batch is
/// encoded once rather than halved until it fits.
fn parts(batch: &Batch, selected: Vec<u32>, max_bytes: usize) -> Vec<Vec<u32>> {
    /// A guess at what an entry carries beside its message (its time, metadata).
    const ENTRY_OVERHEAD: usize = 160;
    // The line is the message, or the record's JSON (`line_format = "json"`).
    let line = |e: &crate::agent::batch::BatchRecord| e.message.len().max(e.json.1 as usize);
    let size = |i: u32| batch.entries.get(i as usize).map_or(0, line) + ENTRY_OVERHEAD;
    if selected.iter().map(|&i| size(i)).sum::<usize>() <= max_bytes {
        return vec![selected];
    }
    let mut out = Vec::new();
    let (mut part, mut bytes) = (Vec::new(), 0);
    for i in selected {
        if bytes + size(i) > max_bytes && !part.is_empty() {
            out.push(std::mem::take(&mut part));
            bytes = 0;
        }
        bytes += size(i);
        part.push(i);
    }
    out.push(part);
    out
}

/// The entries of `stream` (in the order sent, oldest first) that Loki refused.
fn refused_entries(stream: &[u32], ig: &Ignored, sent_time: impl Fn(u32) -> Option<i64>) -> Vec<u32> {
    // Every refused entry listed: match them by time.
    if ig.listed.len() == ig.total {
        let found: Vec<u32> =
            stream.iter().copied().filter(|&i| sent_time(i).is_some_and(|t| ig.listed.contains(&t))).collect();
        if found.len() == ig.total {
            return found;
        }
    }
    // Loki refuses a stream's entries older than its cutoff; sent in time order,
    // those are the first ones.
    stream.iter().copied().take(ig.total).collect()
}

/// The error for a non-2xx, non-400 answer from Loki: its auth and URL mistakes
/// named, the rest as for any HTTP sink ([`status_error_after`]).
pub fn loki_status_error(status: StatusCode, body: &str, wait: Option<Duration>) -> SendError {
    match status.as_u16() {
        401 | 403 => SendError::Transient(format!(
            "HTTP {status}: Loki refused the credentials or tenant; check basic_auth, bearer_token and tenant_id (records are kept and retried): {body}"
        )),
        404 | 405 => SendError::Transient(format!(
            "HTTP {status}: no Loki push API at this URL; check endpoint (records are kept and retried): {body}"
        )),
        _ => status_error_after(status, body, wait),
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}
