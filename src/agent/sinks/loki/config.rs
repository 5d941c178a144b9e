//! `type = "loki"`: keys, defaults and validation.
//!
//! Loki indexes only labels, and every distinct label set is a stream, so labels are
//! kept few and low-cardinality: `service_name`, `cluster`, `node`, `component`,
//! `level` by default. Per-record ids (`actor_id`, `task_id`…) go to structured
//! metadata instead; using them as labels is refused unless
//! `allow_high_cardinality_labels = true`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::config::values::{DurationValue, Problems, Secret, SizeValue};
use crate::agent::sinks::http::{BasicAuthRaw, HttpRaw, TlsRaw};

/// Record fields a label template may use: `{component}`, `{level}`, `{node}`…
pub const TEMPLATE_FIELDS: [&str; 9] =
    ["component", "level", "node", "cluster", "stream", "session", "job_id", "file", "service_name"];

/// Template fields that change per worker, actor or task: one stream each.
pub const HIGH_CARDINALITY: [&str; 3] = ["job_id", "file", "session"];

/// Record fields that may be sent as structured metadata.
pub const METADATA_FIELDS: [&str; 15] = [
    "node_id",
    "job_id",
    "worker_id",
    "actor_id",
    "task_id",
    "task_attempt",
    "trace_id",
    "span_id",
    "file",
    "pid",
    "session",
    "task_name",
    "actor_name",
    "stream",
    "submission_id",
];

/// The sink as written.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LokiRaw {
    pub name: Option<String>,
    /// Base URL of Loki, e.g. `http://loki:3100` (`/loki/api/v1/push` is appended).
    pub endpoint: Option<String>,
    /// `"protobuf"` (snappy-compressed, the default) or `"json"`.
    pub encoding: Option<String>,
    /// For `encoding = "json"`: `"gzip"` (default) or `"none"`.
    pub compression: Option<String>,
    /// Label name → template. Default: service_name="ray", cluster="{cluster}",
    /// node="{node}", component="{component}", level="{level}".
    pub labels: Option<BTreeMap<String, String>>,
    /// Permit labels that change per job/file/session (one Loki stream each).
    #[serde(default)]
    pub allow_high_cardinality_labels: bool,
    /// Record fields sent as structured metadata. Default: the ids, file, pid,
    /// session, task_name, actor_name.
    pub structured_metadata: Option<Vec<String>>,
    /// `"message"` (default) or `"json"` (the whole record, for Loki 2.x without
    /// structured metadata).
    pub line_format: Option<String>,
    /// Sent as `X-Scope-OrgID` (multi-tenant Loki).
    pub tenant_id: Option<String>,
    pub basic_auth: Option<BasicAuthRaw>,
    pub bearer_token: Option<Secret>,
    #[serde(default)]
    pub tls: TlsRaw,
    pub timeout: Option<DurationValue>,
    /// Longer lines are cut and flagged `truncated`. Default 256KiB, Loki's
    /// `max_line_size`.
    pub max_line_bytes: Option<SizeValue>,
    /// Entries older than this go to the dead-letter file instead of Loki. Default
    /// `"7d"`, Loki's `reject_old_samples_max_age`.
    pub reject_old_after: Option<DurationValue>,
    /// Entries this far in the future likewise. Default `"10m"`, Loki's
    /// `creation_grace_period`.
    pub reject_future_after: Option<DurationValue>,
    /// Pace pushes at this rate (bytes before compression). Default `"3MiB"`, under a
    /// stock Loki's `ingestion_rate_mb` (4 MB/s); `0`: unpaced until a 429 says how.
    pub max_bytes_per_second: Option<SizeValue>,
    /// Pace each stream at this rate (bytes before compression). Default `"1MiB"`,
    /// under a stock Loki's `shard_streams.desired_rate` (1536KB): a stream Loki
    /// shards spreads a resent entry over another shard, stored twice. `0`: unpaced.
    pub max_stream_bytes_per_second: Option<SizeValue>,
    /// Most bytes (before compression) one push carries; a batch is sent in parts
    /// of this size. Default `"128KiB"`: what a SIGKILL finds in flight is sent
    /// again, so smaller pushes resend less.
    pub max_push_bytes: Option<SizeValue>,
}

/// Wire encoding of a push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LokiEncoding {
    /// `application/x-protobuf`, snappy block compression.
    Protobuf,
    /// `application/json`, optionally gzip.
    Json { gzip: bool },
}

/// What each log line holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineContent {
    Message,
    Json,
}

/// The validated sink.
#[derive(Clone, Debug)]
pub struct LokiConfig {
    pub name: String,
    /// Full push URL (`…/loki/api/v1/push`).
    pub push_url: reqwest::Url,
    pub encoding: LokiEncoding,
    /// Label name → template (e.g. `"{component}"` or a constant).
    pub labels: BTreeMap<String, String>,
    pub structured_metadata: Vec<String>,
    pub line_format: LineContent,
    pub tenant_id: Option<String>,
    /// `(user, password)`.
    pub basic_auth: Option<(String, String)>,
    pub bearer_token: Option<String>,
    pub client: reqwest::Client,
    pub max_line_bytes: usize,
    pub reject_old_after: std::time::Duration,
    pub reject_future_after: std::time::Duration,
    pub max_bytes_per_second: Option<u64>,
    pub max_stream_bytes_per_second: Option<u64>,
    pub max_push_bytes: usize,
}

/// `max_push_bytes` by default. The entries of a push in flight when the agent is
/// SIGKILLed are sent again by the next start (Loki may have stored them), so a
/// 1 MiB batch pushed whole resends up to 1 MiB. 128 KiB is what the stream pacing
/// already put in most pushes, and costs no CPU measurably (`ship --once` of 64 MiB:
/// 0.95x); 64 KiB cost 1.2x, 32 KiB 1.7x (the requests themselves).
pub const DEFAULT_PUSH_BYTES: u64 = 128 << 10;

/// Loki's default `max_line_size`.
pub const LOKI_MAX_LINE: u64 = 256 << 10;
/// Loki refuses more labels than this per stream (`max_label_names_per_series`).
pub const LOKI_MAX_LABELS: usize = 15;

fn default_labels() -> BTreeMap<String, String> {
    [
        ("service_name", "ray"),
        ("cluster", "{cluster}"),
        ("node", "{node}"),
        ("component", "{component}"),
        ("level", "{level}"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl LokiRaw {
    /// Validates into a [`LokiConfig`]; problems are keyed under `key`.
    pub fn validate(&self, key: &str, p: &mut Problems) -> LokiConfig {
        let http = HttpRaw {
            endpoint: self.endpoint.as_deref(),
            example: "http://loki:3100",
            api_path: "/loki/api/v1/push",
            basic_auth: self.basic_auth.as_ref(),
            token: ("bearer_token", self.bearer_token.as_ref()),
            tls: &self.tls,
            timeout: &self.timeout,
        }
        .validate(key, p);
        let encoding = match (self.encoding.as_deref().unwrap_or("protobuf"), self.compression.as_deref()) {
            ("protobuf", None | Some("snappy")) => LokiEncoding::Protobuf,
            ("json", None | Some("gzip")) => LokiEncoding::Json { gzip: true },
            ("json", Some("none")) => LokiEncoding::Json { gzip: false },
            (e @ ("protobuf" | "json"), Some(c)) => {
                p.add(&format!("{key}.compression"), format!("{c:?} does not go with encoding {e:?}; protobuf is always snappy, json takes \"gzip\" or \"none\""));
                LokiEncoding::Protobuf
            }
            (e, _) => {
                p.add(&format!("{key}.encoding"), format!("{e:?} is not \"protobuf\" or \"json\""));
                LokiEncoding::Protobuf
            }
        };
        let labels = self.labels.clone().unwrap_or_else(default_labels);
        self.check_labels(&labels, key, p);
        let structured_metadata = self
            .structured_metadata
            .clone()
            .unwrap_or_else(|| METADATA_FIELDS.iter().filter(|f| **f != "stream").map(|s| s.to_string()).collect());
        for f in &structured_metadata {
            if !METADATA_FIELDS.contains(&f.as_str()) {
                p.add(
                    &format!("{key}.structured_metadata"),
                    format!("{f:?} is not a record field; use any of {METADATA_FIELDS:?}"),
                );
            }
        }
        let line_format = match self.line_format.as_deref().unwrap_or("message") {
            "message" => LineContent::Message,
            "json" => LineContent::Json,
            other => {
                p.add(&format!("{key}.line_format"), format!("{other:?} is not \"message\" or \"json\""));
                LineContent::Message
            }
        };
        let max_line_bytes = self
            .max_line_bytes
            .as_ref()
            .map_or(LOKI_MAX_LINE, |v| v.get(&format!("{key}.max_line_bytes"), 0..=u64::MAX, p));
        if !(1024..=LOKI_MAX_LINE * 64).contains(&max_line_bytes) {
            p.add(
                &format!("{key}.max_line_bytes"),
                format!(
                    "{max_line_bytes} is out of range: 1KiB to 16MiB (keep it at Loki's limits_config.max_line_size)"
                ),
            );
        }
        let day = std::time::Duration::from_secs(86_400);
        let reject_old_after = self
            .reject_old_after
            .as_ref()
            .map_or(7 * day, |v| v.get(&format!("{key}.reject_old_after"), Duration::ZERO..=Duration::MAX, p));
        if reject_old_after < std::time::Duration::from_secs(3600) || reject_old_after > 3650 * day {
            p.add(
                &format!("{key}.reject_old_after"),
                "must be between 1h and 3650d (match Loki's limits_config.reject_old_samples_max_age)",
            );
        }
        let reject_future_after = self.reject_future_after.as_ref().map_or(std::time::Duration::from_secs(600), |v| {
            v.get(&format!("{key}.reject_future_after"), Duration::ZERO..=Duration::MAX, p)
        });
        if reject_future_after > day {
            p.add(
                &format!("{key}.reject_future_after"),
                "must be at most 1d (match Loki's limits_config.creation_grace_period)",
            );
        }
        let pace = self
            .max_bytes_per_second
            .as_ref()
            .map_or(3 << 20, |v| v.get(&format!("{key}.max_bytes_per_second"), 0..=1 << 40, p));
        if (1..1024).contains(&pace) {
            p.add(&format!("{key}.max_bytes_per_second"), "must be 0 (unpaced) or at least 1KiB");
        }
        let max_bytes_per_second = (pace > 0).then_some(pace);
        let stream_key = format!("{key}.max_stream_bytes_per_second");
        let stream_pace =
            self.max_stream_bytes_per_second.as_ref().map_or(1 << 20, |v| v.get(&stream_key, 0..=1 << 40, p));
        if (1..8192).contains(&stream_pace) {
            p.add(&stream_key, "must be 0 (unpaced) or at least 8KiB");
        }
        let max_push_bytes = self
            .max_push_bytes
            .as_ref()
            .map_or(DEFAULT_PUSH_BYTES, |v| v.get(&format!("{key}.max_push_bytes"), 4 << 10..=1 << 30, p));
        LokiConfig {
            name: self.name.clone().unwrap_or_else(|| "loki".into()),
            push_url: http.url,
            encoding,
            labels,
            structured_metadata,
            line_format,
            tenant_id: self.tenant_id.clone(),
            basic_auth: http.basic_auth,
            bearer_token: http.token,
            client: http.client,
            max_line_bytes: max_line_bytes as usize,
            reject_old_after,
            reject_future_after,
            max_bytes_per_second,
            max_stream_bytes_per_second: (stream_pace > 0).then_some(stream_pace),
            max_push_bytes: max_push_bytes as usize,
        }
    }

    fn check_labels(&self, labels: &BTreeMap<String, String>, key: &str, p: &mut Problems) {
        if labels.len() > LOKI_MAX_LABELS {
            p.add(
                &format!("{key}.labels"),
                format!(
                    "{} labels; Loki takes at most {LOKI_MAX_LABELS} per stream (max_label_names_per_series)",
                    labels.len()
                ),
            );
        }
        for (name, template) in labels {
            let k = format!("{key}.labels.{name}");
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                p.add(&k, "label names are letters, digits and _ and do not start with a digit");
            }
            for field in template_fields(template) {
                if ["actor_id", "task_id", "task_attempt", "trace_id", "span_id", "worker_id", "node_id", "pid"]
                    .contains(&field)
                {
                    p.add(&k, format!("{{{field}}} would make one Loki stream per {field}; send it as structured metadata (the default) instead"));
                } else if !TEMPLATE_FIELDS.contains(&field) {
                    p.add(&k, format!("{{{field}}} is not a known field; use any of {TEMPLATE_FIELDS:?}"));
                } else if HIGH_CARDINALITY.contains(&field) && !self.allow_high_cardinality_labels {
                    p.add(
                        &k,
                        format!(
                            "{{{field}}} makes many streams; set allow_high_cardinality_labels = true if you mean it"
                        ),
                    );
                }
            }
        }
    }

    /// The same sink with secrets hidden, for `check-config`.
    pub fn redacted(&self) -> LokiRaw {
        let mut r = self.clone();
        r.bearer_token = r.bearer_token.map(|s| s.redacted());
        if let Some(b) = &mut r.basic_auth {
            b.password = b.password.redacted();
        }
        r
    }
}

/// The `{field}` names a label template uses.
pub fn template_fields(t: &str) -> Vec<&str> {
    let mut out = vec![];
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        out.push(&rest[open + 1..open + close]);
        rest = &rest[open + close + 1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: LokiRaw) -> (LokiConfig, Problems) {
        let mut p = Problems::default();
        let c = raw.validate("sinks[0]", &mut p);
        (c, p)
    }

    #[test]
    fn defaults() {
        let (c, p) = check(LokiRaw { endpoint: Some("http://loki:3100".into()), ..Default::default() });
        assert!(p.is_empty(), "{p}");
        assert_eq!(c.push_url.as_str(), "http://loki:3100/loki/api/v1/push");
        assert_eq!(c.encoding, LokiEncoding::Protobuf);
        assert_eq!(c.labels.len(), 5);
        assert!(c.structured_metadata.contains(&"actor_id".to_string()));
    }

    #[test]
    fn per_id_labels_are_refused() {
        let labels = BTreeMap::from([("actor".to_string(), "{actor_id}".to_string())]);
        let (_, p) =
            check(LokiRaw { endpoint: Some("http://l:3100".into()), labels: Some(labels), ..Default::default() });
        assert!(p.to_string().contains("sinks[0].labels.actor"), "{p}");
        let labels = BTreeMap::from([("job".to_string(), "{job_id}".to_string())]);
        let (_, p) = check(LokiRaw {
            endpoint: Some("http://l:3100".into()),
            labels: Some(labels.clone()),
            ..Default::default()
        });
        assert!(p.to_string().contains("allow_high_cardinality_labels"), "{p}");
        let (_, p) = check(LokiRaw {
            endpoint: Some("http://l:3100".into()),
            labels: Some(labels),
            allow_high_cardinality_labels: true,
            ..Default::default()
        });
        assert!(p.is_empty(), "{p}");
    }

    #[test]
    fn bad_values_named() {
        let (_, p) =
            check(LokiRaw { endpoint: Some("ftp://x".into()), encoding: Some("xml".into()), ..Default::default() });
        let s = p.to_string();
        assert!(s.contains("sinks[0].endpoint") && s.contains("sinks[0].encoding"), "{s}");
    }
}
