//! Posts OTLP/HTTP requests and settles, per record, what the receiver did.
//!
//! - 2xx: stored. An empty body is a full success; a body that cannot be read to
//!   its end, or does not decode as the `ExportLogsServiceResponse` its Content-Type
//!   announces, is retried (it may have been a partial success). A
//!   `partial_success` with `rejected_log_records = K` (0 < K < N) refused K of the
//!   request's N records without naming them (OTLP has no way to):
//!   all N go to the dead-letter file with kind `partial`, the receiver's
//!   `error_message` and the count, K are counted as dead letters and N − K as sent.
//!   They are not sent again: the receiver stored the others, and OTLP says a
//!   partial success must not be retried.
//! - 400 and 413: the receiver refused the request as a whole (OTLP's rule), or Loki
//!   refused some entries of it and stored the rest. The request is halved until
//!   each refused record stands alone; those go to the dead-letter file. Halves that
//!   are resent hold nothing stored twice by a conforming receiver (it stored
//!   nothing), and Loki stores an identical entry once.
//! - 429, 408, 5xx and transport errors are retried with backoff, not before the
//!   answer's `Retry-After`; a 429 with Loki's rate limit in it also paces later
//!   requests ([`Pacer`]). Bad credentials (401/403) and a URL with no OTLP logs
//!   receiver (404/405) are retried too, with what to fix: no record is wrong.
//! - Any other 4xx: the records go to the dead-letter file.

use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use reqwest::StatusCode;

use super::config::OtlpConfig;
use super::encode::OtlpEncoder;
use super::response::{self, Partial};
use super::traces;
use crate::agent::batch::Batch;
use crate::agent::sinks::loki::pace::Pacer;
use crate::agent::sinks::{
    retry_after, status_error_after, transport_error, DeadReason, Delivery, Progress, SendError,
};

const AGENT: &str = concat!("raylog/", env!("CARGO_PKG_VERSION"));

/// Requests one send may make to isolate refused records, beyond the first; past
/// it, a part refused as a whole is dead-lettered whole.
const SETTLE_BUDGET: usize = 64;

/// An OTLP/HTTP logs client.
pub struct OtlpSink {
    cfg: OtlpConfig,
    encoder: Box<OtlpEncoder>,
    pacer: Pacer,
}

/// How one request went.
enum Posted {
    /// Stored, but for what a partial success refused.
    Stored { bytes: usize, partial: Option<Partial> },
    /// 400 or 413: refused, perhaps only in part; the reason.
    Refused(String),
}

impl OtlpSink {
    pub fn new(cfg: OtlpConfig) -> OtlpSink {
        OtlpSink { encoder: Box::new(OtlpEncoder::new(&cfg)), pacer: Pacer::new(cfg.max_bytes_per_second), cfg }
    }

    /// Whether `traces = true`.
    pub fn sends_spans(&self) -> bool {
        self.cfg.traces.is_some()
    }

    /// Sends the entries `only` selects (all when `None`). Returns the bytes sent.
    pub async fn send(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        self.send_reporting(batch, only, &mut Progress::none()).await
    }

    /// [`OtlpSink::send`], telling `progress` after each request what is settled:
    /// requests take the entries in batch order, so every entry before the next
    /// part is stored (unless one was refused: nothing more is reported until the
    /// caller wrote the dead letters).
    pub async fn send_reporting(
        &mut self,
        batch: &Batch,
        only: Option<&[u32]>,
        progress: &mut Progress<'_>,
    ) -> Result<(Delivery, usize), SendError> {
        let mut d = Delivery::default();
        if only.is_none() && self.cfg.traces.is_some() && !batch.spans.is_empty() {
            // Before the logs: a failure here retries the batch whole, spans and logs
            // (a span sent twice is the same span).
            (d.spans_sent, d.spans_refused) = self.send_spans(batch).await?;
        }
        let all: Vec<u32> = match only {
            // In batch order (a retry list ends with the parts still stacked).
            Some(o) => {
                let mut o = o.to_vec();
                o.sort_unstable();
                o.dedup();
                o
            }
            None => (0..batch.len() as u32).collect(),
        };
        let (mut bytes, mut budget, mut requests) = (0, SETTLE_BUDGET, 0);
        // Parts are popped from the end: the first records go first. A request
        // takes what fits in `max_request_bytes` and leaves the rest as the next part.
        let mut todo: Vec<Vec<u32>> = vec![all];
        while let Some(mut part) = todo.pop() {
            if part.is_empty() {
                continue;
            }
            requests += 1;
            match self.post(batch, &mut part, &mut todo).await {
                Ok(Posted::Stored { bytes: n, partial }) => {
                    bytes += n;
                    if let Some(p) = partial {
                        settle_partial(&part, &p, &mut d);
                    }
                    if d.rejected.is_empty() {
                        let next = todo.iter().filter_map(|p| p.first()).min();
                        progress.settled_below(next.map_or(batch.len() as u32, |&i| i));
                    }
                }
                Ok(Posted::Refused(why)) if part.len() == 1 || budget == 0 => {
                    d.rejected.extend(part.iter().map(|&i| (i, DeadReason::Rejected, why.clone())));
                }
                Ok(Posted::Refused(_)) => {
                    budget = budget.saturating_sub(1);
                    let (a, b) = part.split_at(part.len() / 2);
                    // Popped last first: the first half goes first.
                    todo.extend([b.to_vec(), a.to_vec()]);
                }
                Err(e) => {
                    // Nothing sent yet: the caller retries the whole send as such. A
                    // refusal for good of the first of several requests says nothing
                    // of the others, so it is settled here.
                    if requests == 1 && (todo.is_empty() || !matches!(e, SendError::Permanent(_))) {
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

    /// One request of the first records of `part` that fit in `max_request_bytes`
    /// (and in a second's worth at the pace a 429 set): the others go back to `todo`
    /// as the next part, and `part` keeps those sent.
    async fn post(
        &mut self,
        batch: &Batch,
        part: &mut Vec<u32>,
        todo: &mut Vec<Vec<u32>>,
    ) -> Result<Posted, SendError> {
        let limit = self.cfg.max_request_bytes.min(self.pacer.max_bytes().unwrap_or(usize::MAX));
        let req = self
            .encoder
            .encode(batch, part, limit)
            .map_err(|e| SendError::Transient(format!("cannot compress the request: {e}")))?;
        if req.records < part.len() {
            todo.push(part.split_off(req.records));
        }
        let wait = self.pacer.wait_for(req.raw_bytes);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let n = req.body.len();
        let mut http = self
            .cfg
            .client
            .post(self.cfg.url.clone())
            .headers(self.cfg.headers.clone())
            .header(CONTENT_TYPE, self.cfg.encoding.content_type())
            .header(USER_AGENT, AGENT);
        if self.cfg.gzip {
            http = http.header(CONTENT_ENCODING, "gzip");
        }
        let resp = http.body(req.body).send().await.map_err(|e| transport_error(&e))?;
        let status = resp.status();
        let wait = retry_after(resp.headers());
        let json = resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("json"));
        // Read the body even on success, so the connection can be reused.
        let body = match resp.bytes().await {
            Ok(body) => body,
            Err(e) if status.is_success() => return Err(self.unread(status, &e)),
            // The status alone says what to do; the reason is lost with the body.
            Err(_) => bytes::Bytes::new(),
        };
        if status.is_success() {
            let partial = response::partial_success(&body, json).map_err(|why| self.garbage(status, &why, &body))?;
            return Ok(Posted::Stored { bytes: n, partial });
        }
        let why = response::error_message(&body);
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.pacer.learn(&why);
        }
        if status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE {
            return Ok(Posted::Refused(format!("HTTP {status}: {why}")));
        }
        Err(otlp_status_error(status, &why, wait))
    }

    /// Posts the batch's spans to the traces URL. Returns the spans stored and those
    /// refused for good (400/413, or a partial success: logged, not retried).
    async fn send_spans(&mut self, batch: &Batch) -> Result<(u64, u64), SendError> {
        let Some(t) = &self.cfg.traces else { return Ok((0, 0)) };
        let resource = self.encoder.resource(&batch.node);
        let requests = traces::encode(&resource, &batch.spans, self.cfg.max_request_bytes);
        let n = batch.spans.len() as u64;
        let mut refused = 0;
        for raw in requests {
            let body = if self.cfg.gzip {
                traces::gzip(&raw).map_err(|e| SendError::Transient(format!("cannot compress the spans: {e}")))?
            } else {
                raw
            };
            let mut http = (self.cfg.client.post(t.url.clone()).headers(self.cfg.headers.clone()))
                .header(CONTENT_TYPE, "application/x-protobuf")
                .header(USER_AGENT, AGENT);
            if self.cfg.gzip {
                http = http.header(CONTENT_ENCODING, "gzip");
            }
            let resp = http.body(body).send().await.map_err(|e| transport_error(&e))?;
            let (status, wait) = (resp.status(), retry_after(resp.headers()));
            let json =
                resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("json"));
            let body = resp.bytes().await.unwrap_or_default();
            if status.is_success() {
                let partial = response::partial_success(&body, json).ok().flatten();
                if let Some(p) = partial.filter(|p| p.rejected > 0) {
                    tracing::warn!(sink = %self.cfg.name, rejected = p.rejected, message = %p.message, "the trace backend refused some spans (OTLP partial success); they are not sent again");
                    refused += p.rejected as u64;
                }
                continue;
            }
            let why = response::error_message(&body);
            match status.as_u16() {
                400 | 413 => {
                    tracing::warn!(sink = %self.cfg.name, %status, %why, url = %t.url, "the trace backend refused a request of spans; they are not sent again");
                    refused += 1;
                }
                404 | 405 => {
                    return Err(SendError::Transient(format!(
                        "HTTP {status} from {}: no OTLP traces receiver at this URL; set traces_endpoint (records and spans are kept and retried): {why}",
                        t.url
                    )))
                }
                _ => return Err(otlp_status_error(status, &why, wait)),
            }
        }
        Ok((n.saturating_sub(refused), refused))
    }

    /// A 2xx whose body could not be read (the connection dropped mid-body): it may
    /// have held a partial success, so "all stored" cannot be assumed. The records are
    /// sent again, as OTLP says of a server that disconnects without a response. The
    /// trade-off: OTLP has no deduplication, so a receiver that had stored them stores
    /// them twice (OTLP's own choice for telemetry, "Duplicate Data" in its spec),
    /// where taking the answer as a full success would lose, without a trace, the
    /// records a partial success refused.
    fn unread(&self, status: StatusCode, e: &reqwest::Error) -> SendError {
        tracing::warn!(sink = %self.cfg.name, error = %e, "HTTP {status} whose body could not be read; records are kept and retried");
        SendError::Transient(format!(
            "HTTP {status}, but its body could not be read, so what was stored is unknown: {e}"
        ))
    }

    /// A 2xx whose body is not an OTLP answer: nothing says what was stored, so the
    /// records are retried (a receiver that stored them gets them twice, which is
    /// better than losing them to a proxy's error page).
    fn garbage(&self, status: StatusCode, why: &str, body: &[u8]) -> SendError {
        let preview: String = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        tracing::warn!(sink = %self.cfg.name, %why, "HTTP {status} with a body that is not an OTLP logs answer: {preview:?}; records are kept and retried");
        SendError::Transient(format!("HTTP {status} with a body that is not an OTLP answer ({why})"))
    }
}

/// Records what a partial success refused: the whole request to the dead-letter
/// file, flagged, with only the refused count counted as dead letters.
fn settle_partial(part: &[u32], p: &Partial, d: &mut Delivery) {
    if p.rejected <= 0 {
        if !p.message.is_empty() {
            tracing::warn!(message = %p.message, "the OTLP receiver stored every record but warned");
        }
        return;
    }
    let n = part.len() as u64;
    let k = (p.rejected as u64).min(n);
    if k == n {
        let why = format!("refused by the receiver (partial success, all {n}): {}", p.message);
        d.rejected.extend(part.iter().map(|&i| (i, DeadReason::Rejected, why.clone())));
        return;
    }
    let why = format!(
        "the receiver refused {k} of the {n} records sent with this one without naming them (OTLP partial success); the other {} are stored: {}",
        n - k,
        p.message
    );
    d.rejected.extend(part.iter().map(|&i| (i, DeadReason::Partial, why.clone())));
    d.stored_anyway += n - k;
}

/// The error for a non-2xx answer other than 400/413.
pub fn otlp_status_error(status: StatusCode, why: &str, wait: Option<std::time::Duration>) -> SendError {
    match status.as_u16() {
        401 | 403 => SendError::Transient(format!(
            "HTTP {status}: the receiver refused the credentials; check headers, basic_auth and bearer_token (records are kept and retried): {why}"
        )),
        404 | 405 => SendError::Transient(format!(
            "HTTP {status}: no OTLP logs receiver at this URL; check endpoint, to which /v1/logs is appended (records are kept and retried): {why}"
        )),
        _ => status_error_after(status, why, wait),
    }
}
