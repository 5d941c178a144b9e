//! Sends encoded batches to Loki's push API and classifies the answer.
//!
//! Loki accepts or refuses a push as a whole, so the outcome is for every entry sent:
//! 2xx delivers all of them; 429, 5xx, 408 and transport errors are retried; bad
//! credentials (401/403) and a URL with no push API behind it (404/405) are retried
//! too, because they are the operator's to fix and no data is wrong; any other 4xx
//! (a line too long, an entry too old, invalid labels) rejects them for good, with
//! Loki's reason.

use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, USER_AGENT};
use reqwest::StatusCode;

use super::config::LokiConfig;
use super::encode::LokiEncoder;
use crate::agent::batch::Batch;
use crate::agent::sinks::{status_error, transport_error, Delivery, SendError};

const AGENT: &str = concat!("raylog/", env!("CARGO_PKG_VERSION"));

/// A Loki push client.
pub struct LokiSink {
    cfg: LokiConfig,
    /// Boxed: it holds the reusable buffers and keeps `SinkImpl` variants of similar size.
    encoder: Box<LokiEncoder>,
}

impl LokiSink {
    pub fn new(cfg: LokiConfig) -> LokiSink {
        LokiSink { encoder: Box::new(LokiEncoder::new(&cfg)), cfg }
    }

    /// Pushes the entries `only` selects (all when `None`). Returns the body size.
    pub async fn send(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        let push = self.encoder.encode(batch, only).map_err(SendError::Permanent)?;
        if push.entries == 0 {
            return Ok((Delivery::default(), 0));
        }
        let bytes = push.body.len();
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
        // Read the body even on success, so the connection can be reused.
        let text = resp.text().await.unwrap_or_default();
        if status.is_success() {
            return Ok((Delivery::default(), bytes));
        }
        Err(classify(status, text.trim()))
    }
}

/// The error for a non-2xx answer.
pub fn classify(status: StatusCode, body: &str) -> SendError {
    match status.as_u16() {
        401 | 403 => SendError::Transient(format!(
            "HTTP {status}: Loki refused the credentials or tenant; check basic_auth, bearer_token and tenant_id (records are kept and retried): {body}"
        )),
        404 | 405 => SendError::Transient(format!(
            "HTTP {status}: no Loki push API at this URL; check endpoint (records are kept and retried): {body}"
        )),
        _ => status_error(status, body),
    }
}
