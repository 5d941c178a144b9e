//! Sends `_bulk` requests to Elasticsearch and maps the answer back to entries.
//!
//! Whole-request answers: connection errors, 408, 429 and 5xx are transient; so are
//! 401/403 (wrong credentials) and 404/407 (wrong endpoint or proxy), because those
//! are the operator's to fix and dead-lettering the data for them would lose it. A
//! 413 splits the selection in halves until it fits (a single document too large is
//! rejected). Other 4xx reject the request for good, with Elasticsearch's reason.
//!
//! A 200 is read item by item, whatever its top-level `errors` says: 200/201
//! delivered, 409 (`create` of an `_id` that exists: a replay) delivered too,
//! 429/5xx (and 401/403/408) retried alone, any other status (0 or none included)
//! rejected with `type: reason`. A 200 whose body is not a bulk answer (or has
//! another number of items than documents sent) is transient: a sink answering
//! garbage must never lose data.

use std::borrow::Cow;

use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use reqwest::StatusCode;
use serde::Deserialize;

use super::config::{EsConfig, Gzip};
use super::encode::BulkEncoder;
use crate::agent::batch::Batch;
use crate::agent::sinks::{transport_error, DeadReason, Delivery, SendError};

/// Asks for only what is read back: `errors` and each item's status and error, not
/// `_index`, `_shards`, `_seq_no`… (five times less answer to parse, as Logstash does).
const FILTER_PATH: &str = "errors,items.*.status,items.*.error";

/// How the requests authenticate.
enum Auth {
    None,
    Header(HeaderValue),
    Basic(String, String),
    /// The configured credential cannot be sent (e.g. a control character in it).
    Invalid(String),
}

/// An Elasticsearch bulk client.
pub struct EsSink {
    /// Boxed: the config is large and [`SinkImpl`](crate::agent::sinks::SinkImpl)
    /// variants should stay of similar size.
    cfg: Box<EsConfig>,
    url: reqwest::Url,
    auth: Auth,
    enc: BulkEncoder,
    /// The entries being sent, reused between sends.
    sel: Vec<u32>,
    /// A garbage answer was logged; cleared by the next good one.
    garbage_logged: bool,
}

/// What one request came back with.
enum Answer {
    /// Per-selection outcome (indexes are entry indexes).
    Items(Delivery),
    /// 413: the body was larger than `http.max_content_length`.
    TooLarge,
}

impl EsSink {
    pub fn new(cfg: EsConfig) -> EsSink {
        let mut url = cfg.bulk_url.clone();
        url.query_pairs_mut().append_pair("filter_path", FILTER_PATH);
        let auth = match (&cfg.api_key, &cfg.basic_auth) {
            (Some(key), _) => match HeaderValue::from_str(&format!("ApiKey {key}")) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    Auth::Header(v)
                }
                Err(_) => Auth::Invalid("api_key contains characters not allowed in an HTTP header".into()),
            },
            (None, Some((user, pass))) => Auth::Basic(user.clone(), pass.clone()),
            (None, None) => Auth::None,
        };
        let enc = BulkEncoder::new(cfg.target.clone());
        EsSink { cfg: Box::new(cfg), url, auth, enc, sel: Vec::new(), garbage_logged: false }
    }

    /// Sends the entries `only` selects (all when `None`); returns bytes sent too.
    pub async fn send(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        let mut sel = std::mem::take(&mut self.sel);
        sel.clear();
        match only {
            // An index outside the batch would shift every later item's answer.
            Some(o) => sel.extend(o.iter().copied().filter(|&i| (i as usize) < batch.len())),
            None => sel.extend(0..batch.len() as u32),
        }
        let r = if sel.is_empty() { Ok((Delivery::default(), 0)) } else { self.send_selection(batch, &sel).await };
        self.sel = sel;
        r
    }

    /// Sends `sel` as one request, or in halves (recursively) while the answer is 413.
    async fn send_selection(&mut self, batch: &Batch, sel: &[u32]) -> Result<(Delivery, usize), SendError> {
        let mut out = Delivery::default();
        let mut bytes = 0;
        // Ranges of `sel` still to send, last = next; halves are pushed in reverse
        // so documents go out in their original order.
        let mut todo = vec![(0, sel.len())];
        while let Some((a, b)) = todo.pop() {
            let part = &sel[a..b];
            let (answer, n) = match self.post(batch, part).await {
                Ok(x) => x,
                // The first request failed as a whole: report it as such.
                Err(e) if a == 0 && b == sel.len() => return Err(e),
                Err(SendError::Transient(reason) | SendError::Throttled(reason, _)) => {
                    tracing::warn!(sink = %self.cfg.name, %reason, "part of a split bulk request failed; retrying the rest");
                    out.retry.extend_from_slice(part);
                    for (a, b) in todo.drain(..).rev() {
                        out.retry.extend_from_slice(&sel[a..b]);
                    }
                    break;
                }
                Err(SendError::Permanent(reason)) => {
                    out.rejected.extend(part.iter().map(|&i| (i, DeadReason::Rejected, reason.clone())));
                    continue;
                }
                Err(gone @ SendError::Gone(_)) => return Err(gone),
            };
            bytes += n;
            match answer {
                Answer::Items(d) => {
                    out.retry.extend(d.retry);
                    out.rejected.extend(d.rejected);
                    out.duplicates += d.duplicates;
                }
                Answer::TooLarge if part.len() == 1 => {
                    let reason = format!("HTTP 413: the document alone ({n} bytes as sent) is larger than the cluster's http.max_content_length");
                    out.rejected.push((part[0], DeadReason::Rejected, reason));
                }
                Answer::TooLarge => {
                    let mid = a + (b - a) / 2;
                    todo.push((mid, b));
                    todo.push((a, mid));
                }
            }
        }
        Ok((out, bytes))
    }

    /// One `_bulk` request for `part`; returns the answer and the bytes sent.
    async fn post(&mut self, batch: &Batch, part: &[u32]) -> Result<(Answer, usize), SendError> {
        let payload = self
            .enc
            .encode(batch, part, self.cfg.gzip)
            .map_err(|e| SendError::Transient(format!("cannot compress the bulk body: {e}")))?;
        let n = payload.len();
        let mut req = self
            .cfg
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/x-ndjson")
            .header(USER_AGENT, concat!("raylog/", env!("CARGO_PKG_VERSION")));
        if self.cfg.gzip != Gzip::None {
            req = req.header(CONTENT_ENCODING, "gzip");
        }
        req = match &self.auth {
            Auth::None => req,
            Auth::Header(v) => req.header(AUTHORIZATION, v.clone()),
            Auth::Basic(user, pass) => req.basic_auth(user, Some(pass)),
            Auth::Invalid(why) => return Err(SendError::Transient(format!("cannot authenticate: {why}"))),
        };
        let resp = req.body(payload).send().await.map_err(|e| transport_error(&e))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| transport_error(&e))?;
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Ok((Answer::TooLarge, n));
        }
        if !status.is_success() {
            return Err(request_error(status, &body));
        }
        match read_items(&body, part) {
            Ok(d) => {
                self.garbage_logged = false;
                Ok((Answer::Items(d), n))
            }
            Err(why) => Err(self.garbage(status, &why, &body)),
        }
    }

    /// A success status with a body that is not a bulk answer: retry, log once.
    fn garbage(&mut self, status: StatusCode, why: &str, body: &[u8]) -> SendError {
        let preview: String = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        let msg = format!("HTTP {status} with a body that is not a bulk answer ({why}): {preview:?}");
        if !self.garbage_logged {
            tracing::warn!(sink = %self.cfg.name, "{msg}; records are kept and retried");
            self.garbage_logged = true;
        }
        SendError::Transient(msg)
    }
}

/// Classifies a whole-request failure (not 413, not 2xx).
fn request_error(status: StatusCode, body: &[u8]) -> SendError {
    let why = es_error(body).unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(300).collect());
    match status.as_u16() {
        401 | 403 => SendError::Transient(format!(
            "Elasticsearch refused the credentials (HTTP {status}: {why}); fix api_key or basic_auth — records are kept and retried"
        )),
        404 | 407 => SendError::Transient(format!(
            "HTTP {status} from the bulk endpoint ({why}); check endpoint and proxy — records are kept and retried"
        )),
        408 | 429 | 500..=599 => SendError::Transient(format!("HTTP {status}: {why}")),
        400..=499 => SendError::Permanent(format!("HTTP {status}: {why}")),
        _ => SendError::Transient(format!("unexpected HTTP {status}: {why}")),
    }
}

/// `type: reason` of a top-level Elasticsearch error body, if it is one.
fn es_error(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        error: ErrorOrText<'a>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ErrorOrText<'a> {
        #[serde(borrow)]
        Error(EsError<'a>),
        Text(String),
    }
    match serde_json::from_slice::<Top<'_>>(body).ok()?.error {
        ErrorOrText::Error(e) => Some(e.to_string()),
        ErrorOrText::Text(t) => Some(t),
    }
}

/// An Elasticsearch error object (top-level or per item).
#[derive(Deserialize)]
struct EsError<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    caused_by: Option<Box<EsError<'a>>>,
}

impl std::fmt::Display for EsError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.kind)?;
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        if let Some(c) = &self.caused_by {
            write!(f, " (caused by {c})")?;
        }
        Ok(())
    }
}

/// A bulk answer. Its top-level `errors` is not read: it is only a summary, and a
/// proxy or a broken node may say `false` over items that were not stored.
#[derive(Deserialize)]
struct BulkAnswer<'a> {
    #[serde(borrow)]
    items: Vec<Item<'a>>,
}

/// `{"create": {...}}`, or whichever action the item was.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default)]
    create: Option<ItemResult<'a>>,
    #[serde(borrow, default, alias = "update", alias = "delete")]
    index: Option<ItemResult<'a>>,
}

#[derive(Deserialize)]
struct ItemResult<'a> {
    /// Missing in a mangled answer: then nothing says the document was stored.
    #[serde(default)]
    status: Option<u64>,
    #[serde(borrow, default)]
    error: Option<EsError<'a>>,
}

/// Maps a 200 body's items onto the entries of `part`: an item counts as stored
/// only with status 200 or 201, or 409 for a `create` (stored by an earlier
/// attempt); 429, 5xx (and 401/403/408) are retried; anything else, status 0 and
/// no status at all included, is rejected with its reason.
fn read_items(body: &[u8], part: &[u32]) -> Result<Delivery, String> {
    if all_created(body) == Some(part.len()) {
        return Ok(Delivery::default());
    }
    let answer: BulkAnswer<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if answer.items.len() != part.len() {
        return Err(format!("{} items for {} documents", answer.items.len(), part.len()));
    }
    let mut d = Delivery::default();
    for (item, &entry) in answer.items.iter().zip(part) {
        let (create, r) = match (&item.create, &item.index) {
            (Some(r), _) => (true, Some(r)),
            (None, r) => (false, r.as_ref()),
        };
        match r.and_then(|r| r.status) {
            Some(200 | 201) => {}
            // `create` of an `_id` already indexed: this record was delivered before.
            Some(409) if create => d.duplicates += 1,
            // Overload, and credentials or privileges the operator must fix: never
            // dead-letter data for those.
            Some(401 | 403 | 408 | 429 | 500..=599) => d.retry.push(entry),
            status => {
                let reason = item_refusal(status, r.and_then(|r| r.error.as_ref()));
                d.rejected.push((entry, DeadReason::Rejected, reason.chars().take(1000).collect()));
            }
        }
    }
    Ok(d)
}

/// The number of items of an answer that says every document was created, as
/// Elasticsearch writes it with the `filter_path` raylog asks for (or with `took`
/// and each item's `result` too); `None` for any other answer, read item by item.
/// (Parsing a million `{"status":201}` items was a tenth of the sink's CPU.)
fn all_created(body: &[u8]) -> Option<usize> {
    const CREATED: [&[u8]; 2] =
        [b"{\"create\":{\"status\":201}}", b"{\"create\":{\"status\":201,\"result\":\"created\"}}"];
    let mut rest = body.strip_prefix(b"{")?;
    if let Some(took) = rest.strip_prefix(b"\"took\":") {
        let digits = took.iter().take_while(|b| b.is_ascii_digit()).count();
        rest = took[digits..].strip_prefix(b",")?;
    }
    let items = rest.strip_prefix(b"\"errors\":false,\"items\":[")?.strip_suffix(b"]}")?;
    let item = CREATED.into_iter().find(|i| items.starts_with(i))?;
    let n = (items.len() + 1) / (item.len() + 1);
    // `item`, then `,item` n - 1 times.
    let whole = items.len() + 1 == n * (item.len() + 1)
        && items
            .chunks(item.len() + 1)
            .all(|c| c[..item.len()] == *item && c.get(item.len()).is_none_or(|&b| b == b','));
    whole.then_some(n)
}

/// The dead-letter reason of an item with another status.
fn item_refusal(status: Option<u64>, error: Option<&EsError<'_>>) -> String {
    const NOT_ES: &str = "not stored: Elasticsearch answers every item with an HTTP status; check for a proxy between raylog and Elasticsearch that rewrites bulk answers";
    match (status, error) {
        (None, _) => format!("item without a status; {NOT_ES}"),
        (Some(s), _) if !(100..=599).contains(&s) => format!("item status {s}; {NOT_ES}"),
        (Some(s), Some(e)) => format!("{s} {e}"),
        (Some(s), None) => format!("{s} (no error given)"),
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn answer(items: &[&str], errors: bool) -> Vec<u8> {
        format!("{{\"errors\":{errors},\"items\":[{}]}}", items.join(",")).into_bytes()
    }

    #[test]
    fn an_answer_of_created_items_is_counted_else_read_item_by_item() {
        const OK: &str = r#"{"create":{"status":201}}"#;
        assert_eq!(all_created(&answer(&[OK; 3], false)), Some(3));
        assert_eq!(all_created(&answer(&[OK], false)), Some(1));
        let long = r#"{"create":{"status":201,"result":"created"}}"#;
        let took = format!("{{\"took\":12,\"errors\":false,\"items\":[{long},{long}]}}");
        assert_eq!(all_created(took.as_bytes()), Some(2));
        for body in [
            answer(&[], false),
            answer(&[OK, r#"{"create":{"status":409}}"#], false),
            answer(&[OK, OK], true),
            answer(&[OK, r#"{"create":{"status":201},"x":1}"#], false),
            answer(&[OK, r#"{"create":{"status":201,"result":"created"}}"#], false),
            answer(&[r#"{"create":{"status":201,"result":"created"}}"#, OK], false),
            b"{\"errors\":false,\"items\":[{\"create\":{\"status\":201}}".to_vec(),
        ] {
            assert_eq!(all_created(&body), None, "{}", String::from_utf8_lossy(&body));
        }
        // The count must match the request: else the answer is not for it.
        assert!(
            read_items(&answer(&[OK; 3], false), &[1, 2, 3]).is_ok_and(|d| d.retry.is_empty() && d.rejected.is_empty())
        );
        assert!(read_items(&answer(&[OK; 2], false), &[1, 2, 3]).is_err());
        let d = read_items(&answer(&[OK, r#"{"create":{"status":429}}"#], true), &[7, 8]).unwrap();
        assert_eq!(d.retry, [8]);
    }
}
