//! The HTTP endpoint Ray's aggregator posts to: check the body, spool it, answer.
//!
//! Ray 2.60's dashboard agent POSTs a JSON array of `RayEvent` objects with
//! `Content-Type: application/json` to the one address in
//! `RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR`, and retries (forever, with
//! backoff up to 5 s) on anything but a 2xx. So the answer says what happened:
//! - 200 once the events are in the spool and fsynced;
//! - 400 with the reason for a body that is not a JSON array of Ray events (a
//!   retry cannot fix it; nothing of it is kept);
//! - 413 for a body over `events.max_body_bytes`, or holding an event whose spool
//!   line would be longer than `source.max_line_bytes` (the source would cut it:
//!   nothing of the post is kept, the answer names the element, its size and the
//!   limit, and Ray's retry is taken once the limit is raised);
//! - 415 for a declared content type that is not JSON;
//! - 503 while the spool is over `events.spool_max_bytes` (the sinks or the
//!   forward target are behind), with `Retry-After`;
//! - 500 when the spool cannot be written (a full or failing disk).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use super::counters::EventMetrics;
use super::spool::{Spool, SpoolError};

#[derive(Clone)]
struct Shared {
    spool: Arc<Mutex<Spool>>,
    metrics: Arc<EventMetrics>,
    /// Wakes the forwarder after an append.
    appended: Arc<tokio::sync::Notify>,
    /// `source.max_line_bytes`: the longest spool line the source reads whole.
    max_line: usize,
}

/// The routes: POST on `/` (what Ray uses) or any path.
pub fn router(
    spool: Arc<Mutex<Spool>>,
    metrics: Arc<EventMetrics>,
    appended: Arc<tokio::sync::Notify>,
    max_body: u64,
    max_line: usize,
) -> Router {
    Router::new()
        .route("/", post(receive))
        .route("/{*path}", post(receive))
        .layer(DefaultBodyLimit::max(max_body.min(usize::MAX as u64) as usize))
        .with_state(Shared { spool, metrics, appended, max_line })
}

fn m(s: &Shared) -> &EventMetrics {
    &s.metrics
}

async fn receive(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    m(&s).posts.fetch_add(1, Relaxed);
    if let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        if !ct.to_ascii_lowercase().contains("json") {
            return refuse(
                &s,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "malformed",
                format!("Content-Type {ct:?} is not JSON; post a JSON array of Ray events"),
            );
        }
    }
    let post = super::spool::post_id();
    let (lines, events) = match spool_lines(&body, &post, s.max_line) {
        Ok(Some(x)) => x,
        Ok(None) => return StatusCode::OK.into_response(),
        Err(Refusal::Malformed(why)) => return refuse(&s, StatusCode::BAD_REQUEST, "malformed", why),
        Err(e @ Refusal::TooLong { .. }) => {
            // Ray retries it until the limit is raised: say so once, loudly.
            if !m(&s).too_long_logged.swap(true, Relaxed) {
                tracing::warn!(error = %e, "refusing a post of Ray's events with 413 (Ray retries it)");
            }
            return refuse(&s, StatusCode::PAYLOAD_TOO_LARGE, "event_too_large", e.to_string());
        }
    };
    let spool = s.spool.clone();
    let appended =
        tokio::task::spawn_blocking(move || spool.lock().unwrap_or_else(|e| e.into_inner()).append(&lines)).await;
    match appended {
        Ok(Ok(())) => {
            m(&s).events_accepted.fetch_add(events, Relaxed);
            s.appended.notify_one();
            StatusCode::OK.into_response()
        }
        Ok(Err(e @ SpoolError::Full { .. })) => {
            let mut r = refuse(&s, StatusCode::SERVICE_UNAVAILABLE, "spool_full", e.to_string());
            r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            r
        }
        Ok(Err(e)) => {
            if !m(&s).io_error_logged.swap(true, Relaxed) {
                tracing::error!(error = %e, "cannot spool Ray's events; answering 500 (Ray retries)");
            }
            refuse(&s, StatusCode::INTERNAL_SERVER_ERROR, "io", e.to_string())
        }
        Err(e) => refuse(&s, StatusCode::INTERNAL_SERVER_ERROR, "io", format!("the spool writer failed: {e}")),
    }
}

fn refuse(s: &Shared, code: StatusCode, reason: &str, why: String) -> Response {
    m(s).count_refused(reason);
    tracing::debug!(status = code.as_u16(), %why, "refused a Ray event post");
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], why + "\n").into_response()
}

/// Why a body is refused before anything is spooled.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a JSON array of Ray events (400).
    #[error("{0}")]
    Malformed(String),
    /// An event the source would cut (413).
    #[error(
        "element {index} of the array is a Ray event of {event} bytes, a spool line of {line} bytes with \
         raylog's wrapper: over source.max_line_bytes ({max} bytes), past which it would be cut; nothing of \
         this post was kept. Raise source.max_line_bytes to at least {line} and restart raylog: Ray sends the \
         post again"
    )]
    TooLong { index: usize, event: usize, line: usize, max: usize },
}

/// The spool lines of a body (one wrapped event per line, none longer than
/// `max_line` bytes before its newline), and the number of events; `None` for an
/// empty array.
pub fn spool_lines(body: &[u8], post: &str, max_line: usize) -> Result<Option<(Vec<u8>, u64)>, Refusal> {
    let malformed = |why: String| Refusal::Malformed(why);
    let text = std::str::from_utf8(body)
        .map_err(|e| malformed(format!("the body is not UTF-8 (at byte {})", e.valid_up_to())))?;
    let mut events: Vec<&str> = vec![];
    raylog_parsers::json::elements(text, |e| events.push(e))
        .map_err(|_| malformed("the body is not a JSON array (Ray posts `[{\"eventType\": …}, …]`)".to_string()))?;
    if events.is_empty() {
        return Ok(None);
    }
    let n = events.len();
    let mut out = Vec::with_capacity(body.len() + n * (post.len() + 40));
    for (i, e) in events.iter().enumerate() {
        let mut has_type = false;
        let obj = raylog_parsers::json::members(e, |k, v| {
            has_type |= matches!(k, "eventType" | "event_type") && v.plain_str().is_some_and(|t| !t.is_empty());
        });
        if obj.is_err() {
            return Err(malformed(format!("element {i} of the array is not a JSON object")));
        }
        if !has_type {
            return Err(malformed(format!("element {i} of the array has no eventType: not a Ray event")));
        }
        let start = out.len();
        out.extend_from_slice(format!("{{\"post\":\"{post}\",\"i\":{i},\"n\":{n},\"event\":").as_bytes());
        // Valid JSON has raw line breaks only between tokens: spaces there mean the same.
        out.extend(e.bytes().map(|b| if b == b'\n' || b == b'\r' { b' ' } else { b }));
        out.extend_from_slice(b"}\n");
        // Measured on the bytes written, newline excluded, as the source counts.
        let line = out.len() - start - 1;
        if line > max_line {
            return Err(Refusal::TooLong { index: i, event: e.len(), line, max: max_line });
        }
    }
    Ok(Some((out, n as u64)))
}
