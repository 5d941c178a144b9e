//! The effective configuration as `raylog check-config` prints it: every key with
//! its value after validation (defaults filled in, durations and sizes in one
//! spelling, the labels file merged), secrets redacted.

use serde::Serialize;

use super::values;
use super::{Config, RawConfig, SinkRaw, StartAt};

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
