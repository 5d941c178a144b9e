//! `type = "elasticsearch"`: keys, defaults and validation.
//!
//! Records are written with `_bulk` `create` actions either into a data stream
//! (default `logs-ray-default`, which needs a matching index template; see
//! `examples/elasticsearch/`) or into a date-patterned index (`index =
//! "ray-logs-%Y.%m.%d"`). Each document's `_id` is derived from the file identity
//! and offset, so a replay after a crash is answered 409 and creates no duplicate.

use serde::{Deserialize, Serialize};

use crate::agent::config::values::{DurationValue, Problems, Secret};
use crate::agent::sinks::http::{BasicAuthRaw, HttpRaw, TlsRaw};

/// The sink as written.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EsRaw {
    pub name: Option<String>,
    /// Base URL, e.g. `https://es:9200` (`/_bulk` is appended).
    pub endpoint: Option<String>,
    /// Data stream to write to. Default `logs-ray-default` (unless `index` is set).
    pub data_stream: Option<String>,
    /// Index name with strftime-style date parts from the record's time:
    /// `%Y`, `%m`, `%d` (e.g. `"ray-logs-%Y.%m.%d"`). Excludes `data_stream`.
    pub index: Option<String>,
    /// `"gzip"` (default) or `"none"`.
    pub compression: Option<String>,
    /// Ingest pipeline to run (`?pipeline=`).
    pub pipeline: Option<String>,
    pub api_key: Option<Secret>,
    pub basic_auth: Option<BasicAuthRaw>,
    #[serde(default)]
    pub tls: TlsRaw,
    pub timeout: Option<DurationValue>,
}

/// Where documents go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EsTarget {
    DataStream(String),
    /// A pattern with `%Y` `%m` `%d`.
    Index(String),
}

/// The validated sink.
#[derive(Clone, Debug)]
pub struct EsConfig {
    pub name: String,
    /// Full `_bulk` URL (with `?pipeline=` when set).
    pub bulk_url: reqwest::Url,
    pub target: EsTarget,
    pub gzip: bool,
    /// Encoded `ApiKey` credential.
    pub api_key: Option<String>,
    pub basic_auth: Option<(String, String)>,
    pub client: reqwest::Client,
}

impl EsRaw {
    /// Validates into an [`EsConfig`]; problems are keyed under `key`.
    pub fn validate(&self, key: &str, p: &mut Problems) -> EsConfig {
        let http = HttpRaw {
            endpoint: self.endpoint.as_deref(),
            example: "https://elasticsearch:9200",
            api_path: "/_bulk",
            basic_auth: self.basic_auth.as_ref(),
            token: ("api_key", self.api_key.as_ref()),
            tls: &self.tls,
            timeout: &self.timeout,
        }
        .validate(key, p);
        let mut bulk_url = http.url;
        if let Some(pl) = &self.pipeline {
            bulk_url.query_pairs_mut().append_pair("pipeline", pl);
        }
        let target = match (&self.data_stream, &self.index) {
            (Some(_), Some(_)) => {
                p.add(key, "set data_stream or index, not both");
                EsTarget::DataStream("logs-ray-default".into())
            }
            (Some(ds), None) => EsTarget::DataStream(ds.clone()),
            (None, Some(ix)) => EsTarget::Index(ix.clone()),
            (None, None) => EsTarget::DataStream("logs-ray-default".into()),
        };
        let name_ok =
            |s: &str| !s.is_empty() && s.chars().all(|c| !c.is_ascii_uppercase() && !" \"*\\<|,>/?#:".contains(c));
        match &target {
            EsTarget::DataStream(ds) if !name_ok(ds) => p.add(
                &format!("{key}.data_stream"),
                format!("{ds:?} is not a valid name (lowercase, no spaces or \\/*?\"<>|,#:)"),
            ),
            EsTarget::Index(ix) if !name_ok(&ix.replace("%Y", "").replace("%m", "").replace("%d", "")) => p.add(
                &format!("{key}.index"),
                format!("{ix:?} is not a valid index pattern (lowercase; date parts %Y %m %d)"),
            ),
            _ => {}
        }
        let gzip = match self.compression.as_deref().unwrap_or("gzip") {
            "gzip" => true,
            "none" => false,
            other => {
                p.add(&format!("{key}.compression"), format!("{other:?} is not \"gzip\" or \"none\""));
                true
            }
        };
        EsConfig {
            name: self.name.clone().unwrap_or_else(|| "elasticsearch".into()),
            bulk_url,
            target,
            gzip,
            api_key: http.token,
            basic_auth: http.basic_auth,
            client: http.client,
        }
    }

    /// The same sink with secrets hidden, for `check-config`.
    pub fn redacted(&self) -> EsRaw {
        let mut r = self.clone();
        r.api_key = r.api_key.map(|s| s.redacted());
        if let Some(b) = &mut r.basic_auth {
            b.password = b.password.redacted();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_conflicts() {
        let mut p = Problems::default();
        let c = EsRaw { endpoint: Some("http://es:9200".into()), ..Default::default() }.validate("sinks[1]", &mut p);
        assert!(p.is_empty(), "{p}");
        assert_eq!(c.bulk_url.as_str(), "http://es:9200/_bulk");
        assert_eq!(c.target, EsTarget::DataStream("logs-ray-default".into()));
        assert!(c.gzip);
        let mut p = Problems::default();
        EsRaw {
            endpoint: Some("http://es:9200".into()),
            data_stream: Some("a".into()),
            index: Some("B".into()),
            ..Default::default()
        }
        .validate("sinks[1]", &mut p);
        assert!(p.to_string().contains("not both"), "{p}");
        let mut p = Problems::default();
        let c = EsRaw {
            endpoint: Some("http://es:9200".into()),
            index: Some("ray-logs-%Y.%m.%d".into()),
            ..Default::default()
        }
        .validate("sinks[1]", &mut p);
        assert!(p.is_empty(), "{p}");
        assert_eq!(c.target, EsTarget::Index("ray-logs-%Y.%m.%d".into()));
    }
}
