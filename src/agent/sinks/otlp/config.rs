//! `type = "otlp"`: keys, defaults and validation.
//!
//! The sink posts OTLP/HTTP `ExportLogsServiceRequest`s to `<endpoint>/v1/logs`, the
//! path every OTLP receiver serves (the Collector's `otlp` receiver on :4318, Loki's
//! `/otlp`, Elasticsearch's `/_otlp`, the vendors' gateways). Vendors authenticate
//! with a header of their own (`DD-API-KEY`, `x-honeycomb-team`, `api-key`…), so
//! `headers` takes secrets like the other credentials do.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::agent::config::values::{DurationValue, Problems, Secret, SizeValue};
use crate::agent::sinks::http::{BasicAuthRaw, HttpRaw, TlsRaw};

/// The sink as written.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OtlpRaw {
    pub name: Option<String>,
    /// Base URL of the receiver, e.g. `http://otel-collector:4318` (`/v1/logs` is
    /// appended unless the URL already ends in it).
    pub endpoint: Option<String>,
    /// `"protobuf"` (default) or `"json"` (OTLP/JSON).
    pub encoding: Option<String>,
    /// `"gzip"` (default) or `"none"`.
    pub compression: Option<String>,
    /// zlib's gzip level, 1 (fastest) to 9 (smallest). Unset (default): raylog's own
    /// gzip, which compresses only the attributes a record repeats from the one
    /// before: about a third of the CPU of level 1, for a body about twice its size.
    pub compression_level: Option<u32>,
    /// Extra HTTP headers, e.g. a vendor's API key: name → value (a secret).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Secret>,
    /// Resource `service.name`. Default `"ray"`.
    pub service_name: Option<String>,
    /// Resource `service.namespace`, when set.
    pub service_namespace: Option<String>,
    /// Extra constant resource attributes (`deployment.environment.name`…).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_attributes: BTreeMap<String, String>,
    pub basic_auth: Option<BasicAuthRaw>,
    pub bearer_token: Option<Secret>,
    #[serde(default)]
    pub tls: TlsRaw,
    pub timeout: Option<DurationValue>,
    /// Largest request body before compression; a batch is sent in as many requests
    /// as it takes. Default `"3MiB"`: under Loki's 4 MiB gRPC message limit behind
    /// `/otlp` and the receivers' usual bounds.
    pub max_request_bytes: Option<SizeValue>,
    /// Pace requests at this rate (bytes before compression); `0` (default): unpaced
    /// until a 429 states a rate limit (Loki's does).
    pub max_bytes_per_second: Option<SizeValue>,
    /// Send Ray's tasks as spans (`ExportTraceServiceRequest`, protobuf) too. Default false.
    pub traces: Option<bool>,
    /// Where spans go; default: `endpoint` with `/v1/traces` for `/v1/logs`.
    pub traces_endpoint: Option<String>,
    /// Spans sent per job (one trace) at most; past it they are counted. Default 10000.
    pub traces_max_spans_per_job: Option<u64>,
    /// A task attempt not ended after this is closed. Default `"1h"`.
    pub traces_span_timeout: Option<DurationValue>,
    /// Task attempts under way tracked at most; past it they are counted. Default 100000.
    pub traces_max_open_spans: Option<u64>,
}

/// The traces output of the sink.
#[derive(Clone, Debug)]
pub struct TracesConfig {
    /// Full URL (`…/v1/traces`).
    pub url: reqwest::Url,
    pub settings: crate::agent::traces::Settings,
}

/// Wire encoding of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpEncoding {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`, OTLP/JSON.
    Json,
}

impl OtlpEncoding {
    pub fn content_type(self) -> &'static str {
        match self {
            OtlpEncoding::Protobuf => "application/x-protobuf",
            OtlpEncoding::Json => "application/json",
        }
    }
}

/// The validated sink.
#[derive(Clone, Debug)]
pub struct OtlpConfig {
    pub name: String,
    /// Full URL (`…/v1/logs`).
    pub url: reqwest::Url,
    pub encoding: OtlpEncoding,
    pub gzip: bool,
    /// `compression_level`: zlib's level, or `None` for raylog's own gzip.
    pub compression_level: Option<u32>,
    /// `headers`, resolved and checked, with the credentials.
    pub headers: HeaderMap,
    pub service_name: String,
    pub service_namespace: Option<String>,
    pub resource_attributes: BTreeMap<String, String>,
    pub client: reqwest::Client,
    pub max_request_bytes: usize,
    pub max_bytes_per_second: Option<u64>,
    /// `traces = true`: where spans go, and the tracer's bounds.
    pub traces: Option<TracesConfig>,
}

/// Headers the sink sets itself: a configured one would contradict the body.
const OWN_HEADERS: [&str; 3] = ["content-type", "content-encoding", "content-length"];

impl OtlpRaw {
    /// Validates into an [`OtlpConfig`]; problems are keyed under `key`.
    pub fn validate(&self, key: &str, p: &mut Problems) -> OtlpConfig {
        let http = HttpRaw {
            endpoint: self.endpoint.as_deref(),
            example: "http://otel-collector:4318",
            api_path: "/v1/logs",
            basic_auth: self.basic_auth.as_ref(),
            token: ("bearer_token", self.bearer_token.as_ref()),
            tls: &self.tls,
            timeout: &self.timeout,
        }
        .validate(key, p);
        let encoding = match self.encoding.as_deref().unwrap_or("protobuf") {
            "protobuf" => OtlpEncoding::Protobuf,
            "json" => OtlpEncoding::Json,
            other => {
                p.add(&format!("{key}.encoding"), format!("{other:?} is not \"protobuf\" or \"json\""));
                OtlpEncoding::Protobuf
            }
        };
        let gzip = match self.compression.as_deref().unwrap_or("gzip") {
            "gzip" => true,
            "none" => false,
            other => {
                p.add(&format!("{key}.compression"), format!("{other:?} is not \"gzip\" or \"none\""));
                true
            }
        };
        let compression_level = self.compression_level.filter(|l| {
            let ok = (1..=9).contains(l);
            if !ok {
                p.add(&format!("{key}.compression_level"), format!("{l} is not a gzip level from 1 (fastest) to 9 (smallest); leave it unset for raylog's own fast gzip"));
            } else if !gzip {
                p.add(&format!("{key}.compression_level"), "is set but compression is \"none\": remove one of them");
            }
            ok
        });
        let mut headers = self.headers(key, p);
        let auth = match (&http.basic_auth, &http.token) {
            (Some((user, pass)), _) => {
                use std::io::Write;
                let mut enc = Vec::new();
                let _ = write!(enc, "{user}:{pass}");
                Some(format!("Basic {}", base64(&enc)))
            }
            (None, Some(token)) => Some(format!("Bearer {token}")),
            (None, None) => None,
        };
        if let Some(v) = auth {
            if headers.contains_key(reqwest::header::AUTHORIZATION) {
                p.add(key, "set basic_auth, bearer_token or an Authorization header, not two of them");
            }
            match HeaderValue::from_str(&v) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    headers.insert(reqwest::header::AUTHORIZATION, v);
                }
                Err(_) => p.add(key, "the credentials hold characters an HTTP header cannot carry"),
            }
        }
        let service_name = self.service_name.clone().unwrap_or_else(|| "ray".into());
        if service_name.is_empty() {
            p.add(&format!("{key}.service_name"), "must not be empty (backends index logs by it)");
        }
        for k in self.resource_attributes.keys().filter(|k| k.is_empty()) {
            p.add(&format!("{key}.resource_attributes"), format!("{k:?}: an attribute name must not be empty"));
        }
        let max_request_bytes = self
            .max_request_bytes
            .as_ref()
            .map_or(3 << 20, |v| v.get(&format!("{key}.max_request_bytes"), 64 << 10..=1 << 30, p));
        let pace = self
            .max_bytes_per_second
            .as_ref()
            .map_or(0, |v| v.get(&format!("{key}.max_bytes_per_second"), 0..=1 << 40, p));
        if (1..1024).contains(&pace) {
            p.add(&format!("{key}.max_bytes_per_second"), "must be 0 (unpaced) or at least 1KiB");
        }
        let traces = self.traces_config(key, &http.url, p);
        OtlpConfig {
            traces,
            max_request_bytes: max_request_bytes as usize,
            max_bytes_per_second: (pace > 0).then_some(pace),
            name: self.name.clone().unwrap_or_else(|| "otlp".into()),
            url: http.url,
            encoding,
            gzip,
            compression_level,
            headers,
            service_name,
            service_namespace: self.service_namespace.clone().filter(|s| !s.is_empty()),
            resource_attributes: self.resource_attributes.clone(),
            client: http.client,
        }
    }

    /// The traces output, when `traces = true`; the `traces_*` keys are problems
    /// without it.
    fn traces_config(&self, key: &str, logs: &reqwest::Url, p: &mut Problems) -> Option<TracesConfig> {
        if self.traces != Some(true) {
            let set = [
                ("traces_endpoint", self.traces_endpoint.is_some()),
                ("traces_max_spans_per_job", self.traces_max_spans_per_job.is_some()),
                ("traces_span_timeout", self.traces_span_timeout.is_some()),
                ("traces_max_open_spans", self.traces_max_open_spans.is_some()),
            ];
            for (k, _) in set.iter().filter(|(_, set)| *set) {
                p.add(&format!("{key}.{k}"), "is set but traces is not true: add `traces = true` or remove it");
            }
            return None;
        }
        let url = match &self.traces_endpoint {
            Some(e) => {
                let http = HttpRaw {
                    endpoint: Some(e),
                    example: "http://tempo:4318",
                    api_path: "/v1/traces",
                    basic_auth: None,
                    token: ("bearer_token", None),
                    tls: &self.tls,
                    timeout: &self.timeout,
                };
                let mut q = Problems::default();
                let v = http.validate(key, &mut q);
                let (from, to) = (format!("{key}.endpoint"), format!("{key}.traces_endpoint"));
                p.0.extend(q.0.into_iter().map(|m| m.replacen(&from, &to, 1)));
                v.url
            }
            None => {
                let path = logs.path().strip_suffix("/v1/logs").unwrap_or(logs.path());
                if path.ends_with("/otlp") {
                    p.add(&format!("{key}.traces"), format!("{path:?} looks like Loki's OTLP endpoint, which takes logs only, no traces: set traces_endpoint to a trace backend (Tempo, Jaeger, an OpenTelemetry Collector: e.g. \"http://tempo:4318\")"));
                }
                let mut url = logs.clone();
                url.set_path(&format!("{path}/v1/traces"));
                url
            }
        };
        let per_job = self.traces_max_spans_per_job.unwrap_or(10_000);
        if per_job == 0 {
            p.add(&format!("{key}.traces_max_spans_per_job"), "must be at least 1");
        }
        let open = self.traces_max_open_spans.unwrap_or(100_000);
        if !(1..=10_000_000).contains(&open) {
            p.add(&format!("{key}.traces_max_open_spans"), "must be from 1 to 10000000");
        }
        use crate::agent::config::values::{DAY, HOUR, SEC};
        let timeout = (self.traces_span_timeout.as_ref())
            .map_or(HOUR, |d| d.get(&format!("{key}.traces_span_timeout"), SEC..=7 * DAY, p));
        let settings = crate::agent::traces::Settings {
            max_spans_per_job: per_job,
            span_timeout: timeout,
            max_open_spans: open as usize,
        };
        Some(TracesConfig { url, settings })
    }

    /// `headers`, resolved; each bad name or value is a problem under its key.
    fn headers(&self, key: &str, p: &mut Problems) -> HeaderMap {
        let mut out = HeaderMap::new();
        for (name, secret) in &self.headers {
            let k = format!("{key}.headers.{name}");
            let value = secret.resolve(&k, p);
            let Ok(hname) = HeaderName::from_bytes(name.as_bytes()) else {
                p.add(&k, "is not a valid HTTP header name (letters, digits and -_. only)");
                continue;
            };
            if OWN_HEADERS.contains(&hname.as_str()) {
                p.add(&k, "is set by the sink from encoding and compression; remove it");
                continue;
            }
            match HeaderValue::from_str(&value) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    out.insert(hname, v);
                }
                Err(_) => p.add(&k, "the value holds characters an HTTP header cannot carry (a newline?)"),
            }
        }
        out
    }

    /// The same sink with secrets hidden, for `check-config`.
    pub fn redacted(&self) -> OtlpRaw {
        let mut r = self.clone();
        r.bearer_token = r.bearer_token.map(|s| s.redacted());
        if let Some(b) = &mut r.basic_auth {
            b.password = b.password.redacted();
        }
        for v in r.headers.values_mut() {
            *v = v.redacted();
        }
        r
    }
}

/// Standard base64 with padding (basic auth).
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: OtlpRaw) -> (OtlpConfig, Problems) {
        let mut p = Problems::default();
        let c = raw.validate("sinks[0]", &mut p);
        (c, p)
    }

    #[test]
    fn defaults_and_the_path() {
        let (c, p) = check(OtlpRaw { endpoint: Some("http://collector:4318".into()), ..Default::default() });
        assert!(p.is_empty(), "{p}");
        assert_eq!(c.url.as_str(), "http://collector:4318/v1/logs");
        assert_eq!(
            (c.encoding, c.gzip, c.name.as_str(), c.service_name.as_str()),
            (OtlpEncoding::Protobuf, true, "otlp", "ray")
        );
        let (c, _) = check(OtlpRaw { endpoint: Some("http://loki:3100/otlp".into()), ..Default::default() });
        assert_eq!(c.url.as_str(), "http://loki:3100/otlp/v1/logs");
        let (c, _) = check(OtlpRaw { endpoint: Some("https://es:9200/_otlp/v1/logs".into()), ..Default::default() });
        assert_eq!(c.url.as_str(), "https://es:9200/_otlp/v1/logs", "not appended twice");
    }

    #[test]
    fn headers_and_credentials() {
        let raw: OtlpRaw = toml::from_str(
            r#"endpoint = "http://c:4318"
               headers = { "DD-API-KEY" = "k1", "bad name" = "x", "Content-Type" = "text/plain", "x-nl" = "a\nb" }
               basic_auth = { username = "u", password = "p" }"#,
        )
        .unwrap();
        let (c, p) = check(raw);
        let text = p.to_string();
        assert!(text.contains("sinks[0].headers.bad name: is not a valid HTTP header name"), "{text}");
        assert!(text.contains("sinks[0].headers.Content-Type: is set by the sink"), "{text}");
        assert!(text.contains("sinks[0].headers.x-nl: the value holds characters"), "{text}");
        assert_eq!(c.headers["dd-api-key"], "k1");
        assert_eq!(c.headers["authorization"], "Basic dTpw");
        let raw: OtlpRaw =
            toml::from_str("endpoint = \"http://c:4318\"\nbearer_token = \"t\"\nheaders = { Authorization = \"x\" }")
                .unwrap();
        assert!(check(raw).1.to_string().contains("not two of them"));
        let bad: Result<OtlpRaw, _> = toml::from_str("endpoint = \"http://c\"\nheader = {}");
        assert!(bad.unwrap_err().to_string().contains("unknown field `header`"));
    }

    #[test]
    fn bad_values_named() {
        let raw = OtlpRaw {
            endpoint: Some("ftp://x".into()),
            encoding: Some("grpc".into()),
            compression: Some("zstd".into()),
            service_name: Some(String::new()),
            ..Default::default()
        };
        let text = check(raw).1.to_string();
        for want in [
            "sinks[0].endpoint: scheme \"ftp\"",
            "sinks[0].encoding: \"grpc\" is not",
            "sinks[0].compression: \"zstd\" is not",
            "sinks[0].service_name: must not be empty",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }

    #[test]
    fn compression_level_is_zlibs_or_unset() {
        let level = |toml: &str| {
            let (c, p) = check(toml::from_str(&format!("endpoint = \"http://c:4318\"\n{toml}")).unwrap());
            (c.compression_level, p.to_string())
        };
        assert_eq!(level(""), (None, String::new()), "raylog's own gzip by default");
        assert_eq!(level("compression_level = 9"), (Some(9), String::new()));
        let (l, text) = level("compression_level = 0");
        assert_eq!(l, None);
        assert!(text.contains("sinks[0].compression_level: 0 is not a gzip level from 1"), "{text}");
        let text = level("compression = \"none\"\ncompression_level = 3").1;
        assert!(text.contains("sinks[0].compression_level: is set but compression is \"none\""), "{text}");
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b"u:p"), "dTpw");
        assert_eq!(base64(b"user:pw"), "dXNlcjpwdw==");
        assert_eq!(base64(b"ab"), "YWI=");
    }
}
