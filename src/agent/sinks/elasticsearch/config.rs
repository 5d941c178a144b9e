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
    /// zlib's gzip level (1–9) instead of raylog's own gzip, which compresses only
    /// what a document repeats of the one before: about a third of zlib's CPU at
    /// level 1, for a body about 3 times its size.
    pub compression_level: Option<u32>,
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

/// How a body is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gzip {
    None,
    /// raylog's own ([`super::runs`]); `compression_level` unset.
    Runs,
    /// zlib at this level.
    Zlib(u32),
}

/// The validated sink.
#[derive(Clone, Debug)]
pub struct EsConfig {
    pub name: String,
    /// Full `_bulk` URL (with `?pipeline=` when set).
    pub bulk_url: reqwest::Url,
    pub target: EsTarget,
    pub gzip: Gzip,
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
        let gzip = match (gzip, self.compression_level) {
            (_, Some(l)) if !(1..=9).contains(&l) => {
                p.add(&format!("{key}.compression_level"), format!("{l} is not a gzip level from 1 (fastest) to 9 (smallest); leave it unset for raylog's own fast gzip"));
                Gzip::Runs
            }
            (false, Some(_)) => {
                p.add(&format!("{key}.compression_level"), "is set but compression is \"none\": remove one of them");
                Gzip::None
            }
            (false, None) => Gzip::None,
            (true, Some(l)) => Gzip::Zlib(l),
            (true, None) => Gzip::Runs,
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
        assert_eq!(c.gzip, Gzip::Runs);
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

    #[test]
    fn compression_level_picks_zlib_and_is_checked() {
        let es = |compression: Option<&str>, level: Option<u32>| {
            let mut p = Problems::default();
            let raw = EsRaw {
                endpoint: Some("http://es:9200".into()),
                compression: compression.map(Into::into),
                compression_level: level,
                ..Default::default()
            };
            let c = raw.validate("sinks[0]", &mut p);
            (c.gzip, p.to_string())
        };
        assert_eq!(es(None, None), (Gzip::Runs, String::new()));
        assert_eq!(es(Some("gzip"), Some(6)), (Gzip::Zlib(6), String::new()));
        assert_eq!(es(Some("none"), None), (Gzip::None, String::new()));
        let (_, why) = es(None, Some(0));
        assert!(why.contains("sinks[0].compression_level") && why.contains("0 is not a gzip level"), "{why}");
        let (_, why) = es(Some("none"), Some(1));
        assert!(why.contains("sinks[0].compression_level") && why.contains("remove one of them"), "{why}");
    }
}
