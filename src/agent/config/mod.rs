//! The agent's configuration: TOML read into serde structs that refuse unknown keys,
//! then validated once into [`Config`], with every problem reported by its key.
//!
//! Nothing downstream re-checks a value: URLs are parsed, durations and sizes
//! converted, secrets resolved, label templates checked here. `raylog check-config`
//! prints the effective configuration (defaults filled in, secrets redacted:
//! [`effective_toml`]) or the full list of problems.
//!
//! This file holds the top-level tables and the sinks' dispatch; [`source`] and
//! [`events`] their sections, each sink its own in `sinks/<name>/config.rs`, and
//! [`values`] the value types and the problem list.

pub mod collector;
mod effective;
pub mod events;
pub mod source;
pub mod values;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::sinks::elasticsearch::config::{EsConfig, EsRaw};
use crate::agent::sinks::loki::config::{LokiConfig, LokiRaw};
use crate::agent::sinks::object_store::config::{Env, Node, ObjectStoreConfig, ObjectStoreRaw};
use crate::agent::sinks::otlp::config::{OtlpConfig, OtlpRaw};
pub use effective::effective_toml;
pub use events::{EventsConfig, EventsRaw};
use source::validate_source;
pub use source::{SourceConfig, SourceRaw, StartAt};
use values::{DurationValue, Problems, SizeValue, DAY, HOUR, MS, SEC};

/// The file as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub source: SourceRaw,
    #[serde(default)]
    pub node: NodeRaw,
    #[serde(default)]
    pub batch: BatchRaw,
    #[serde(default)]
    pub retry: RetryRaw,
    #[serde(default)]
    pub sinks: Vec<SinkRaw>,
    #[serde(default)]
    pub dead_letter: DeadLetterRaw,
    #[serde(default)]
    pub api: ApiRaw,
    #[serde(default)]
    pub events: EventsRaw,
}

/// `[dead_letter]`: the file of records the sinks refused for good.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterRaw {
    /// `dead-letter.ndjson` rotates to `.1` past this size. Default `"64MiB"`.
    pub max_bytes: Option<SizeValue>,
}

/// `[node]`: identity added to every record.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRaw {
    /// Default: `$NODE_NAME`, else the host name.
    pub name: Option<String>,
    /// Default: `$RAY_CLUSTER_NAME`, else none.
    pub cluster: Option<String>,
    /// Extra labels (e.g. pod labels) added to every record under `labels`.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// A Kubernetes downward-API labels file (`key="value"` per line) to read labels from.
    pub labels_file: Option<PathBuf>,
}

/// `[batch]`: how records are grouped for the sinks.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRaw {
    pub max_records: Option<usize>,
    pub max_bytes: Option<SizeValue>,
    pub max_wait: Option<DurationValue>,
    /// Upper bound on record bytes buffered between reading and delivery.
    pub max_buffer_bytes: Option<SizeValue>,
}

/// `[retry]`: how failed sends are retried.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRaw {
    pub initial_backoff: Option<DurationValue>,
    pub max_backoff: Option<DurationValue>,
    /// On SIGTERM, how long to keep delivering before saving checkpoints and exiting.
    pub shutdown_grace: Option<DurationValue>,
}

/// `[api]`: the agent's own HTTP endpoints.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiRaw {
    /// `host:port` for `/metrics`, `/healthz`, `/readyz`; `""` disables the server.
    pub address: Option<String>,
}

/// `[[sinks]]`: one destination.
#[derive(Debug, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkRaw {
    Loki(LokiRaw),
    Elasticsearch(EsRaw),
    Otlp(OtlpRaw),
    Stdout(StdoutRaw),
    File(FileRaw),
    /// Mirrors the logs dirs and the events to a bucket (not a record sink).
    #[serde(rename = "object_store")]
    ObjectStore(ObjectStoreRaw),
}

/// `type = "stdout"`: NDJSON on standard output.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutRaw {
    pub name: Option<String>,
}

/// `type = "file"`: NDJSON appended to a file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileRaw {
    pub name: Option<String>,
    pub path: Option<PathBuf>,
}

/// Validated `[node]`.
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    pub name: String,
    pub cluster: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Validated `[batch]`.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    pub max_records: usize,
    pub max_bytes: usize,
    pub max_wait: Duration,
    pub max_buffer_bytes: usize,
}

/// Validated `[retry]`.
#[derive(Clone, Debug)]
pub struct RetryConfig {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub shutdown_grace: Duration,
}

/// A validated sink.
#[derive(Clone, Debug)]
pub enum SinkConfig {
    Loki(Box<LokiConfig>),
    Elasticsearch(Box<EsConfig>),
    Otlp(Box<OtlpConfig>),
    Stdout { name: String },
    File { name: String, path: PathBuf },
}

impl SinkConfig {
    /// The sink's name in metrics and logs.
    pub fn name(&self) -> &str {
        match self {
            SinkConfig::Loki(c) => &c.name,
            SinkConfig::Elasticsearch(c) => &c.name,
            SinkConfig::Otlp(c) => &c.name,
            SinkConfig::Stdout { name } | SinkConfig::File { name, .. } => name,
        }
    }
}

/// The whole validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub source: SourceConfig,
    pub node: NodeConfig,
    pub batch: BatchConfig,
    pub retry: RetryConfig,
    /// The record sinks. With none configured, records go to stdout, unless an
    /// object store is configured: then there are none, and no records are read.
    pub sinks: Vec<SinkConfig>,
    /// `type = "object_store"` sinks, which mirror files instead of taking records.
    pub object_stores: Vec<ObjectStoreConfig>,
    /// `dead_letter.max_bytes`.
    pub dead_letter_max_bytes: u64,
    pub api_address: Option<std::net::SocketAddr>,
    /// The Ray event receiver, when `events.address` is set.
    pub events: Option<EventsConfig>,
}

impl Config {
    /// Whether no sink puts the records of two components in one stream: then the
    /// source orders its reading by time within each component only (see
    /// `source::read`), and a catch-up of a million worker files does not hold
    /// raylet's live lines back. Loki's streams are split by component when its
    /// labels use `{component}`; an OTLP backend's (Loki's `/otlp`) by resource,
    /// which a component is not part of. Elasticsearch, stdout and files keep no
    /// order at all.
    pub fn streams_split_by_component(&self) -> bool {
        self.sinks.iter().all(|s| match s {
            SinkConfig::Loki(l) => l.labels.values().any(|v| v.contains("{component}")),
            SinkConfig::Otlp(_) => false,
            _ => true,
        })
    }

    /// The tracer's bounds, when a sink sends traces.
    pub fn traces(&self) -> Option<crate::agent::traces::Settings> {
        self.sinks.iter().find_map(|s| match s {
            SinkConfig::Otlp(o) => o.traces.as_ref().map(|t| t.settings),
            _ => None,
        })
    }

    /// What the configured sinks read from each batch (see [`Needs`]).
    pub fn batch_needs(&self) -> crate::agent::batch::Needs {
        let mut needs = crate::agent::batch::Needs::NONE;
        for n in self.sinks.iter().map(SinkConfig::needs) {
            needs.json |= n.json;
            needs.fields |= n.fields;
            needs.extra |= n.extra;
        }
        needs
    }
}

impl SinkConfig {
    /// What this sink reads from a batch (see [`crate::agent::batch::Needs`]).
    pub fn needs(&self) -> crate::agent::batch::Needs {
        let mut needs = crate::agent::batch::Needs::NONE;
        match self {
            SinkConfig::Loki(c) => {
                needs.fields = true;
                needs.json = c.line_format == crate::agent::sinks::loki::config::LineContent::Json;
            }
            SinkConfig::Otlp(_) => (needs.fields, needs.extra) = (true, true),
            SinkConfig::Elasticsearch(_) | SinkConfig::Stdout { .. } | SinkConfig::File { .. } => needs.json = true,
        }
        needs
    }
}

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: not valid TOML for raylog: {message}\n  (see examples/raylog.toml for every key)")]
    Syntax { path: String, message: String },
    #[error("{path}: {} problem(s):\n{problems}", problems.0.len())]
    Invalid { path: String, problems: Problems },
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<(RawConfig, Config), ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: shown.clone(), source })?;
    parse(&text, &shown)
}

/// Parses and validates config text (`shown` names it in errors).
pub fn parse(text: &str, shown: &str) -> Result<(RawConfig, Config), ConfigError> {
    let mut raw: RawConfig =
        toml::from_str(text).map_err(|e| ConfigError::Syntax { path: shown.to_string(), message: e.to_string() })?;
    collector(&mut raw);
    let mut p = Problems::default();
    let cfg = validate(&raw, &mut p);
    if p.is_empty() {
        Ok((raw, cfg))
    } else {
        Err(ConfigError::Invalid { path: shown.to_string(), problems: p })
    }
}

/// The config used when no file is given: read `/tmp/ray`, print to stdout.
pub fn default_config() -> (RawConfig, Config) {
    let mut raw = RawConfig::default();
    collector(&mut raw);
    let mut p = Problems::default();
    let cfg = validate(&raw, &mut p);
    (raw, cfg)
}

/// The History Server collector's mode, when its environment is set (see [`collector`]).
fn collector(raw: &mut RawConfig) {
    if collector::as_collector(raw, &|k| std::env::var(k).ok()) {
        tracing::info!(
            "STORAGE_BACKEND and RAY_CLUSTER_NAME are set and the config names no sink: running as the KubeRay History Server's collector (an object_store sink from the environment, Ray's events on EVENTS_PORT, state in /tmp/ray/raylog)"
        );
    }
}

fn validate(raw: &RawConfig, p: &mut Problems) -> Config {
    let source = validate_source(&raw.source, p);
    let node = validate_node(&raw.node, p);
    let es = raw.sinks.iter().any(|s| matches!(s, SinkRaw::Elasticsearch(_)));
    let batch = validate_batch(&raw.batch, es, p);
    let retry = validate_retry(&raw.retry, p);
    let mut sinks: Vec<SinkConfig> = (raw.sinks.iter().enumerate())
        .filter(|(_, s)| !matches!(s, SinkRaw::ObjectStore(_)))
        .map(|(i, s)| validate_sink(s, &format!("sinks[{i}]"), p))
        .collect();
    let object_stores = validate_object_stores(raw, &node, p);
    if sinks.is_empty() && object_stores.is_empty() {
        sinks.push(SinkConfig::Stdout { name: "stdout".into() });
    }
    // One tracer builds the spans every traced sink sends: its bounds must be one.
    let traced: Vec<(usize, crate::agent::traces::Settings)> = (sinks.iter().enumerate())
        .filter_map(|(i, s)| match s {
            SinkConfig::Otlp(o) => o.traces.as_ref().map(|t| (i, t.settings)),
            _ => None,
        })
        .collect();
    for (i, _) in traced.iter().skip(1).filter(|(_, t)| *t != traced[0].1) {
        p.add(&format!("sinks[{i}].traces"), format!("its traces_* bounds differ from sinks[{}]'s: every sink sending traces sends the same spans, so give them the same bounds", traced[0].0));
    }
    let mut names = std::collections::HashSet::new();
    let all = sinks.iter().map(|s| s.name()).chain(object_stores.iter().map(|o| o.name.as_str()));
    for (i, name) in all.enumerate() {
        if !names.insert(name.to_string()) {
            p.add(&format!("sinks[{i}].name"), format!("{name:?} is used twice; give each sink its own name"));
        }
    }
    let api_address = match raw.api.address.as_deref().unwrap_or("127.0.0.1:9095") {
        "" => None,
        a => a.parse().map(Some).unwrap_or_else(|e| {
            p.add("api.address", format!("{a:?} is not host:port ({e}); e.g. \"0.0.0.0:9095\", or \"\" to disable"));
            None
        }),
    };
    // At least a few records; at most what a volume would plausibly hold.
    let dead_letter_max_bytes =
        raw.dead_letter.max_bytes.as_ref().map_or(64 << 20, |v| v.get("dead_letter.max_bytes", 4 << 10..=1 << 40, p));
    let events = events::validate_events(&raw.events, &source.state_dir, p);
    Config { source, node, batch, retry, sinks, object_stores, dead_letter_max_bytes, api_address, events }
}

/// The `object_store` sinks, each key falling back to the collector's environment.
fn validate_object_stores(raw: &RawConfig, node: &NodeConfig, p: &mut Problems) -> Vec<ObjectStoreConfig> {
    let var = |k: &str| std::env::var(k).ok();
    let stores: Vec<(usize, &ObjectStoreRaw)> = (raw.sinks.iter().enumerate())
        .filter_map(|(i, s)| match s {
            SinkRaw::ObjectStore(o) => Some((i, o)),
            _ => None,
        })
        .collect();
    if stores.is_empty() {
        return vec![];
    }
    let env = Env::new(&var, p);
    if stores.len() > 1 {
        p.add(&format!("sinks[{}]", stores[1].0), "only one object_store sink per agent: it mirrors the node, once");
    }
    let node = Node { cluster: node.cluster.as_deref(), labels: &node.labels };
    stores.iter().map(|(i, o)| o.validate(&format!("sinks[{i}]"), node, &env, p)).collect()
}

fn validate_node(n: &NodeRaw, p: &mut Problems) -> NodeConfig {
    let name = n
        .name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let mut labels = n.labels.clone();
    if let Some(f) = &n.labels_file {
        match std::fs::read_to_string(f) {
            Ok(text) => {
                for line in text.lines() {
                    if let Some((k, v)) = line.split_once('=') {
                        labels.entry(k.trim().to_string()).or_insert_with(|| v.trim().trim_matches('"').to_string());
                    }
                }
            }
            Err(e) => p.add("node.labels_file", format!("cannot read {}: {e}", f.display())),
        }
    }
    let cluster = n
        .cluster
        .clone()
        .or_else(|| std::env::var("RAY_CLUSTER_NAME").ok())
        .or_else(|| labels.get("ray.io/cluster").cloned());
    NodeConfig { name, cluster, labels }
}

/// `es`: a sink is Elasticsearch, whose bulk requests want to be larger.
fn validate_batch(b: &BatchRaw, es: bool, p: &mut Problems) -> BatchConfig {
    let max_records = b.max_records.unwrap_or(10_000);
    // 1 MiB batches (Promtail's size, and New Relic's request limit): the batches
    // alive at once are most of an agent's memory beside its file table, and a
    // catch-up of 100,000 files peaked at 42.8 MiB where 2 MiB batches took 50, for
    // the same CPU into Loki and OTLP. Elasticsearch asks for bulks of several MB.
    // A batch addresses its bytes with u32 offsets: far below 4GiB keeps them exact.
    let default_bytes = if es { 2 << 20 } else { 1 << 20 };
    let max_bytes =
        b.max_bytes.as_ref().map_or(default_bytes, |v| v.get("batch.max_bytes", 1 << 10..=1 << 30, p)) as usize;
    // One batch per sink queue slot (see `run::start`) whatever the batch size.
    let default_buffer = (8 * max_bytes as u64).clamp(2 << 10, 16 << 30);
    let max_buffer_bytes =
        b.max_buffer_bytes.as_ref().map_or(default_buffer, |v| v.get("batch.max_buffer_bytes", 2 << 10..=16 << 30, p))
            as usize;
    if !(1..=10_000_000).contains(&max_records) {
        p.add("batch.max_records", format!("{max_records} is out of range: 1 to 10000000"));
    }
    if max_buffer_bytes < 2 * max_bytes {
        p.add(
            "batch.max_buffer_bytes",
            format!(
                "must be at least twice batch.max_bytes ({max_bytes}) so one batch can be sent while the next fills"
            ),
        );
    }
    BatchConfig {
        max_records,
        max_bytes,
        max_wait: b.max_wait.as_ref().map_or(SEC, |v| v.get("batch.max_wait", MS..=HOUR, p)),
        max_buffer_bytes,
    }
}

fn validate_retry(r: &RetryRaw, p: &mut Problems) -> RetryConfig {
    RetryConfig {
        initial_backoff: r.initial_backoff.as_ref().map_or(200 * MS, |v| v.get("retry.initial_backoff", MS..=HOUR, p)),
        max_backoff: r.max_backoff.as_ref().map_or(30 * SEC, |v| v.get("retry.max_backoff", MS..=DAY, p)),
        shutdown_grace: r
            .shutdown_grace
            .as_ref()
            .map_or(10 * SEC, |v| v.get("retry.shutdown_grace", Duration::ZERO..=HOUR, p)),
    }
}

fn validate_sink(s: &SinkRaw, key: &str, p: &mut Problems) -> SinkConfig {
    match s {
        SinkRaw::Loki(l) => SinkConfig::Loki(Box::new(l.validate(key, p))),
        SinkRaw::Elasticsearch(e) => SinkConfig::Elasticsearch(Box::new(e.validate(key, p))),
        SinkRaw::Otlp(o) => SinkConfig::Otlp(Box::new(o.validate(key, p))),
        SinkRaw::Stdout(o) => SinkConfig::Stdout { name: o.name.clone().unwrap_or_else(|| "stdout".into()) },
        SinkRaw::File(f) => {
            let path = f.path.clone().unwrap_or_else(|| {
                p.add(&format!("{key}.path"), "is required for type = \"file\"");
                PathBuf::new()
            });
            SinkConfig::File { name: f.name.clone().unwrap_or_else(|| "file".into()), path }
        }
        SinkRaw::ObjectStore(_) => unreachable!("object_store sinks are validated apart"),
    }
}

#[cfg(test)]
mod tests;
