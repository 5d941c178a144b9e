//! The agent's configuration: TOML read into serde structs that refuse unknown keys,
//! then validated once into [`Config`], with every problem reported by its key.
//!
//! Nothing downstream re-checks a value: URLs are parsed, durations and sizes
//! converted, secrets resolved, label templates checked here. `raylog check-config`
//! prints the effective configuration (defaults filled in, secrets redacted) or the
//! full list of problems.

pub mod events;
pub mod source;
pub mod values;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::sinks::elasticsearch::config::{EsConfig, EsRaw};
use crate::agent::sinks::loki::config::{LokiConfig, LokiRaw};
use crate::agent::sinks::otlp::config::{OtlpConfig, OtlpRaw};
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
    /// Never empty: with no sink configured, records go to stdout.
    pub sinks: Vec<SinkConfig>,
    /// `dead_letter.max_bytes`.
    pub dead_letter_max_bytes: u64,
    pub api_address: Option<std::net::SocketAddr>,
    /// The Ray event receiver, when `events.address` is set.
    pub events: Option<EventsConfig>,
}

impl Config {
    /// What the configured sinks read from each batch (see [`Needs`]).
    pub fn batch_needs(&self) -> crate::agent::batch::Needs {
        let mut needs = crate::agent::batch::Needs::NONE;
        for s in &self.sinks {
            match s {
                SinkConfig::Loki(c) => {
                    needs.fields = true;
                    needs.json |= c.line_format == crate::agent::sinks::loki::config::LineContent::Json;
                }
                SinkConfig::Otlp(_) => (needs.fields, needs.extra) = (true, true),
                SinkConfig::Elasticsearch(_) | SinkConfig::Stdout { .. } | SinkConfig::File { .. } => needs.json = true,
            }
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
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| ConfigError::Syntax { path: shown.to_string(), message: e.to_string() })?;
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
    let raw = RawConfig::default();
    let mut p = Problems::default();
    let cfg = validate(&raw, &mut p);
    (raw, cfg)
}

fn validate(raw: &RawConfig, p: &mut Problems) -> Config {
    let source = validate_source(&raw.source, p);
    let node = validate_node(&raw.node, p);
    let batch = validate_batch(&raw.batch, p);
    let retry = validate_retry(&raw.retry, p);
    let mut sinks: Vec<SinkConfig> =
        raw.sinks.iter().enumerate().map(|(i, s)| validate_sink(s, &format!("sinks[{i}]"), p)).collect();
    if sinks.is_empty() {
        sinks.push(SinkConfig::Stdout { name: "stdout".into() });
    }
    let mut names = std::collections::HashSet::new();
    for (i, s) in sinks.iter().enumerate() {
        if !names.insert(s.name().to_string()) {
            p.add(&format!("sinks[{i}].name"), format!("{:?} is used twice; give each sink its own name", s.name()));
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
    Config { source, node, batch, retry, sinks, dead_letter_max_bytes, api_address, events }
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

fn validate_batch(b: &BatchRaw, p: &mut Problems) -> BatchConfig {
    let max_records = b.max_records.unwrap_or(10_000);
    // A batch addresses its bytes with u32 offsets: far below 4GiB keeps them exact.
    let max_bytes = b.max_bytes.as_ref().map_or(2 << 20, |v| v.get("batch.max_bytes", 1 << 10..=1 << 30, p)) as usize;
    let max_buffer_bytes =
        b.max_buffer_bytes.as_ref().map_or(16 << 20, |v| v.get("batch.max_buffer_bytes", 2 << 10..=16 << 30, p))
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
    }
}

/// The effective configuration as TOML, for `check-config` (secrets redacted).
pub fn effective_toml(raw: &RawConfig, cfg: &Config) -> String {
    use values::format_duration as d;
    let s = &cfg.source;
    let mut out = String::new();
    out.push_str("[source]\n");
    out.push_str(&format!("paths = {:?}\n", s.paths));
    out.push_str(&format!("state_dir = {:?}\n", s.state_dir));
    out.push_str(&format!("start_at = \"{}\"\n", if s.start_at == StartAt::End { "end" } else { "beginning" }));
    if let Some(io) = s.ignore_older {
        out.push_str(&format!("ignore_older = \"{}\"\n", d(io)));
    }
    out.push_str(&format!("poll_interval = \"{}\"\n", d(s.poll_interval)));
    out.push_str(&format!("idle_flush = \"{}\"\n", d(s.idle_flush)));
    out.push_str(&format!("partial_line_timeout = \"{}\"\n", d(s.partial_line_timeout)));
    out.push_str(&format!("actor_hold = \"{}\"\n", d(s.actor_hold)));
    out.push_str(&format!("max_line_bytes = {}\n", s.parse.max_line_bytes));
    // Validated already; the zone keeps no spelling of its own.
    out.push_str(&format!("timezone = {}\n", toml::Value::from(raw.source.timezone.as_deref().unwrap_or("UTC"))));
    out.push_str(&format!("watch = {}\n", s.watch));
    let globs: Vec<&str> = s.exclude.iter().map(|g| g.as_str()).collect();
    out.push_str(&format!("exclude = {globs:?}\n"));
    out.push_str(&format!("max_open_files = {}\n", s.max_open_files));
    out.push_str(&format!("close_inactive = \"{}\"\n", d(s.close_inactive)));
    out.push_str(&format!("forget_after = \"{}\"\n", d(s.forget_after)));
    out.push_str(&format!("\n[node]\nname = {:?}\n", cfg.node.name));
    if let Some(c) = &cfg.node.cluster {
        out.push_str(&format!("cluster = {c:?}\n"));
    }
    // The labels as every record gets them: the table merged with the labels file.
    if !cfg.node.labels.is_empty() {
        let pairs: Vec<String> = cfg
            .node
            .labels
            .iter()
            .map(|(k, v)| format!("{} = {}", toml::Value::from(k.as_str()), toml::Value::from(v.as_str())))
            .collect();
        out.push_str(&format!("labels = {{ {} }}\n", pairs.join(", ")));
    }
    let b = &cfg.batch;
    out.push_str(&format!(
        "\n[batch]\nmax_records = {}\nmax_bytes = {}\nmax_wait = \"{}\"\nmax_buffer_bytes = {}\n",
        b.max_records,
        b.max_bytes,
        d(b.max_wait),
        b.max_buffer_bytes
    ));
    let r = &cfg.retry;
    out.push_str(&format!(
        "\n[retry]\ninitial_backoff = \"{}\"\nmax_backoff = \"{}\"\nshutdown_grace = \"{}\"\n",
        d(r.initial_backoff),
        d(r.max_backoff),
        d(r.shutdown_grace)
    ));
    if !raw.sinks.is_empty() {
        // Serialized under a `sinks` array so nested tables render as [sinks.labels].
        let sinks: Vec<toml::Value> =
            raw.sinks.iter().filter_map(|s| toml::Value::try_from(RedactedSink(s)).ok()).collect();
        let mut doc = toml::Table::new();
        doc.insert("sinks".into(), toml::Value::Array(sinks));
        out.push('\n');
        out.push_str(&toml::to_string(&doc).unwrap_or_default());
    }
    if raw.sinks.is_empty() {
        out.push_str("\n# no [[sinks]]: records go to stdout as NDJSON\n");
    }
    out.push_str(&format!("\n[dead_letter]\nmax_bytes = {}\n", cfg.dead_letter_max_bytes));
    out.push_str(&format!("\n[api]\naddress = \"{}\"\n", cfg.api_address.map(|a| a.to_string()).unwrap_or_default()));
    out
}

/// Serializes a sink with its secrets redacted.
struct RedactedSink<'a>(&'a SinkRaw);

impl Serialize for RedactedSink<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            SinkRaw::Loki(l) => SinkRaw::Loki(l.redacted()).serialize(ser),
            SinkRaw::Elasticsearch(e) => SinkRaw::Elasticsearch(e.redacted()).serialize(ser),
            SinkRaw::Otlp(o) => SinkRaw::Otlp(o.redacted()).serialize(ser),
            other => other.serialize(ser),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_config_from_the_issue() {
        let text = r#"
            [source]
            paths = ["/tmp/ray"]
            state_dir = "/var/lib/raylog"
            start_at = "beginning"
            [[sinks]]
            type = "loki"
            endpoint = "http://127.0.0.1:3100"
            [api]
            address = "127.0.0.1:9095"
        "#;
        let (_, cfg) = parse(text, "t.toml").unwrap();
        assert_eq!(cfg.sinks.len(), 1);
        assert_eq!(cfg.sinks[0].name(), "loki");
        assert_eq!(cfg.api_address.unwrap().port(), 9095);
    }

    #[test]
    fn batches_build_what_the_sinks_read() {
        use crate::agent::batch::Needs;
        let needs = |sinks: &str| {
            parse(&format!("[source]\npaths = [\"/tmp/ray\"]\n{sinks}"), "t.toml").unwrap().1.batch_needs()
        };
        let loki = "[[sinks]]\ntype = \"loki\"\nendpoint = \"http://l:3100\"\n";
        let es = "[[sinks]]\ntype = \"elasticsearch\"\nendpoint = \"http://e:9200\"\n";
        assert_eq!(needs(loki), Needs { json: false, fields: true, extra: false });
        let otlp = "[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://c:4318\"\n";
        let json_loki = Needs { json: true, fields: true, extra: false };
        assert_eq!(needs(&format!("{loki}line_format = \"json\"\n")), json_loki);
        assert_eq!(needs(es), Needs { json: true, fields: false, extra: false });
        assert_eq!(needs(&format!("{loki}{es}")), json_loki);
        assert_eq!(needs(otlp), Needs { json: false, fields: true, extra: true });
        assert_eq!(needs(&format!("{otlp}{es}")), Needs::ALL);
        assert_eq!(needs(""), Needs { json: true, fields: false, extra: false }, "stdout when no sink is configured");
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let text = r#"
            [source]
            start_at = "middle"
            poll_interval = "soon"
            [batch]
            max_records = 0
            [api]
            address = "nowhere"
        "#;
        let err = parse(text, "t.toml").unwrap_err().to_string();
        for key in ["source.start_at", "source.poll_interval", "batch.max_records", "api.address"] {
            assert!(err.contains(key), "{key} missing from:\n{err}");
        }
    }

    #[test]
    fn values_beyond_their_range_are_refused_with_the_range() {
        let text = r#"
            [source]
            max_line_bytes = "2GiB"
            forget_after = "99999999999999999999d"
            close_inactive = 0
            [batch]
            max_bytes = "8GiB"
            max_buffer_bytes = "99999999999999GiB"
            [retry]
            max_backoff = 18446744073709551615
            [dead_letter]
            max_bytes = 100
        "#;
        let err = parse(text, "t.toml").unwrap_err().to_string();
        for want in [
            "source.max_line_bytes: 2GiB is out of range: 16B to 1GiB",
            "source.forget_after: \"99999999999999999999d\" is too long a duration",
            "source.close_inactive: 0s is out of range: 100ms to 30d",
            "batch.max_bytes: 8GiB is out of range: 1KiB to 1GiB",
            "batch.max_buffer_bytes: \"99999999999999GiB\" is too large",
            "retry.max_backoff: 18446744073709551615s is out of range: 1ms to 1d",
            "dead_letter.max_bytes: 100B is out of range: 4KiB to 1TiB",
        ] {
            assert!(err.contains(want), "{want:?} missing from:\n{err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = parse("[source]\npathz = []\n", "t.toml").unwrap_err().to_string();
        assert!(err.contains("pathz"), "{err}");
        let err = parse("[[sinks]]\ntype = \"kafka\"\n", "t.toml").unwrap_err().to_string();
        assert!(err.contains("kafka"), "{err}");
    }

    #[test]
    fn effective_config_round_trips() {
        let text = "[[sinks]]\ntype = \"loki\"\nendpoint = \"http://l:3100\"\nbearer_token = \"s3cret\"\n[[sinks]]\ntype = \"elasticsearch\"\nendpoint = \"http://es:9200\"\n";
        let (raw, cfg) = parse(text, "t.toml").unwrap();
        let eff = effective_toml(&raw, &cfg);
        assert!(!eff.contains("s3cret"), "{eff}");
        let (_, again) = parse(&eff, "effective").unwrap_or_else(|e| panic!("{e}\n{eff}"));
        assert_eq!(again.sinks.len(), 2);
    }

    #[test]
    fn pod_labels_file_gives_labels_and_cluster() {
        // What the kubelet writes for a downwardAPI `metadata.labels` item.
        let f = std::env::temp_dir().join(format!("raylog-labels-{}", std::process::id()));
        std::fs::write(&f, "ray.io/cluster=\"rc-1\"\nray.io/node-type=\"head\"\nteam=\"from-file\"\n").unwrap();
        let text = format!("[node]\nlabels = {{ team = \"ml\" }}\nlabels_file = {:?}\n", f.display().to_string());
        let (raw, cfg) = parse(&text, "t.toml").unwrap();
        std::fs::remove_file(&f).unwrap();
        if std::env::var_os("RAY_CLUSTER_NAME").is_none() {
            assert_eq!(cfg.node.cluster.as_deref(), Some("rc-1"));
        }
        assert_eq!(cfg.node.labels["ray.io/node-type"], "head");
        assert_eq!(cfg.node.labels["team"], "ml", "the config's table wins over the file");
        // check-config shows the merged labels, and its output reads back the same.
        let eff = effective_toml(&raw, &cfg);
        assert!(eff.contains(r#""ray.io/node-type" = "head""#), "{eff}");
        let (_, again) = parse(&eff, "effective").unwrap_or_else(|e| panic!("{e}\n{eff}"));
        assert_eq!(again.node.labels, cfg.node.labels);
        let err = parse("[node]\nlabels_file = \"/nonexistent/labels\"\n", "t.toml").unwrap_err().to_string();
        assert!(err.contains("node.labels_file"), "{err}");
    }

    #[test]
    fn no_sink_means_stdout() {
        let (_, cfg) = parse("", "t.toml").unwrap();
        assert!(matches!(cfg.sinks[..], [SinkConfig::Stdout { .. }]));
    }
}
