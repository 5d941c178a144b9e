//! What the Loki and Elasticsearch sinks share as HTTP clients: the endpoint, basic
//! auth or a token, TLS with a custom CA and the timeout, validated once by
//! [`HttpRaw::validate`] into an [`Http`] (a built client, the URL to post to and
//! the resolved credentials).
//!
//! The keys stay in each sink's own raw struct (serde's `flatten` cannot be combined
//! with `deny_unknown_fields`, and a misspelt key must be refused): [`HttpRaw`]
//! borrows them from there.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::config::values::{DurationValue, Problems, Secret};

/// `tls = { ca_file = "...", insecure_skip_verify = false }`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsRaw {
    /// PEM file with the CA certificate(s) that signed the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (testing only).
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// `basic_auth = { username = "...", password = "..." | { env = "..." } }`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthRaw {
    pub username: String,
    pub password: Secret,
}

/// The connection keys of one HTTP sink, borrowed from its raw config.
pub struct HttpRaw<'a> {
    pub endpoint: Option<&'a str>,
    /// An endpoint to show when none is given, e.g. `http://loki:3100`.
    pub example: &'static str,
    /// The path the sink posts to, appended to the endpoint unless already there.
    pub api_path: &'static str,
    pub basic_auth: Option<&'a BasicAuthRaw>,
    /// The sink's other credential (`bearer_token`, `api_key`): its key and value.
    pub token: (&'static str, Option<&'a Secret>),
    pub tls: &'a TlsRaw,
    pub timeout: &'a Option<DurationValue>,
}

/// The validated connection of one HTTP sink.
pub struct Http {
    /// The endpoint with the API path.
    pub url: reqwest::Url,
    pub basic_auth: Option<(String, String)>,
    pub token: Option<String>,
    pub client: reqwest::Client,
}

impl HttpRaw<'_> {
    /// Validates the connection keys; problems are keyed under `key`.
    pub fn validate(&self, key: &str, p: &mut Problems) -> Http {
        let mut base = parse_endpoint(self.endpoint, key, self.example, p);
        let url = if base.path().ends_with(self.api_path) {
            base
        } else {
            // A path prefix (a reverse proxy's, Loki's `/otlp`) is kept: `join` would
            // replace its last segment.
            if !base.path().ends_with('/') {
                let path = format!("{}/", base.path());
                base.set_path(&path);
            }
            base.join(self.api_path.trim_start_matches('/')).unwrap_or(base)
        };
        let basic_auth =
            self.basic_auth.map(|b| (b.username.clone(), b.password.resolve(&format!("{key}.basic_auth.password"), p)));
        let (token_key, token) = self.token;
        let token = token.map(|t| t.resolve(&format!("{key}.{token_key}"), p));
        if basic_auth.is_some() && token.is_some() {
            p.add(key, format!("set basic_auth or {token_key}, not both"));
        }
        let client = build_client(self.tls, timeout(self.timeout, key, p), key, p).unwrap_or_default();
        Http { url, basic_auth, token, client }
    }
}

/// Builds an HTTP client with the TLS and timeout settings; problems go to `p` under `key`.
pub fn build_client(tls: &TlsRaw, timeout: Duration, key: &str, p: &mut Problems) -> Option<reqwest::Client> {
    let mut b = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout.min(Duration::from_secs(10)));
    if let Some(ca) = &tls.ca_file {
        match std::fs::read(ca) {
            Ok(pem) => match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(certs) => {
                    for c in certs {
                        b = b.add_root_certificate(c);
                    }
                }
                Err(e) => {
                    p.add(&format!("{key}.tls.ca_file"), format!("{} is not a PEM certificate: {e}", ca.display()))
                }
            },
            Err(e) => p.add(&format!("{key}.tls.ca_file"), format!("cannot read {}: {e}", ca.display())),
        }
    }
    if tls.insecure_skip_verify {
        b = b.danger_accept_invalid_certs(true);
    }
    match b.build() {
        Ok(c) => Some(c),
        Err(e) => {
            p.add(key, format!("cannot build an HTTP client: {e}"));
            None
        }
    }
}

/// Parses an endpoint URL, requiring http or https.
pub fn parse_endpoint(s: Option<&str>, key: &str, example: &str, p: &mut Problems) -> reqwest::Url {
    let fallback = || reqwest::Url::parse("http://127.0.0.1/").expect("static URL");
    let Some(s) = s else {
        p.add(&format!("{key}.endpoint"), format!("is required, e.g. endpoint = \"{example}\""));
        return fallback();
    };
    match reqwest::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        Ok(u) => {
            p.add(
                &format!("{key}.endpoint"),
                format!("scheme {:?} is not http or https; write the whole URL, e.g. \"{example}\"", u.scheme()),
            );
            fallback()
        }
        Err(e) => {
            p.add(&format!("{key}.endpoint"), format!("{s:?} is not a URL ({e}); e.g. \"{example}\""));
            fallback()
        }
    }
}

/// A timeout value with its default.
pub fn timeout(v: &Option<DurationValue>, key: &str, p: &mut Problems) -> Duration {
    v.as_ref().map_or(Duration::from_secs(10), |v| {
        v.get(&format!("{key}.timeout"), Duration::from_millis(1)..=Duration::from_secs(3600), p)
    })
}
