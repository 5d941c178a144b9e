//! `raylog ship`: the agent. Tails Ray's log dirs and delivers every record to the
//! configured sinks (stdout when none), at least once, resuming from checkpoints.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::agent::config;

#[derive(Args, Debug)]
#[command(
    about = "Tail Ray log dirs and ship every record to Loki, Elasticsearch, an OpenTelemetry (OTLP) receiver, a file or stdout",
    long_about = "Tail Ray log dirs and ship every record to Loki, Elasticsearch, an OpenTelemetry (OTLP) receiver, a file or stdout.\n\n\
Follows every session under the configured paths (new sessions included) across rotation, \
parses each line into a record tagged with Ray ids, and delivers it at least once: \
checkpoints in source.state_dir advance only when every sink has acknowledged. \
Without --config it reads /tmp/ray and prints NDJSON to stdout.",
    after_help = "Examples:\n  \
raylog ship --config /etc/raylog/raylog.toml\n  \
raylog ship --once --config backfill.toml      # read everything, deliver, exit 0\n  \
raylog ship --path ./ray-logs --state-dir /tmp/raylog-state --once   # no config file: stdout\n  \
RAYLOG_LOG_FORMAT=json raylog ship --config raylog.toml   # raylog's own logs as JSON lines\n\n\
Signals: SIGTERM/SIGINT stop reading, deliver for up to retry.shutdown_grace (a second signal \
ends that at once), save checkpoints for what was delivered and log how many records read were not, \
then exit 0; with --once, interrupted before everything was read and delivered, exit 128 + the \
signal's number (143 for SIGTERM, 130 for Ctrl-C). The next run resumes from the checkpoints."
)]
pub struct ShipArgs {
    /// Config file (TOML). See examples/raylog.toml for every key.
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Read every discovered file to its end, wait for delivery, save checkpoints, exit.
    #[arg(long)]
    pub once: bool,
    /// Override source.paths (repeatable).
    #[arg(long = "path", value_name = "DIR")]
    pub paths: Vec<PathBuf>,
    /// Override source.state_dir.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Log level of raylog's own logs (error, warn, info, debug), or a RUST_LOG filter.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Form of raylog's own log lines on stderr: `text` for people (coloured only on
    /// a terminal, and not with NO_COLOR set), `json` (one object per line, with
    /// `timestamp`, `level`, `message` and the fields) for a log pipeline.
    #[arg(long, value_name = "FORMAT", env = "RAYLOG_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// How raylog writes its own log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Runs `raylog ship`.
pub fn run(a: ShipArgs) -> Result<u8> {
    init_logging(&a.log_level, a.log_format);
    let (_, mut cfg) = match &a.config {
        Some(path) => config::load(path)?,
        None => config::default_config(),
    };
    if !a.paths.is_empty() {
        cfg.source.paths = a.paths.clone();
    }
    if let Some(d) = &a.state_dir {
        cfg.source.state_dir = d.clone();
        // The spool lives in the state dir: it moves with it.
        if let Some(ev) = &mut cfg.events {
            ev.spool_dir = d.join("ray_events");
        }
    }
    let outcome = crate::agent::run::run(cfg, a.once)?;
    Ok(outcome.exit_code(a.once))
}

/// raylog's own logs go to stderr (stdout may carry records), filtered by `level`.
/// Escape codes only on a terminal: `kubectl logs` and Loki get plain text.
pub fn init_logging(level: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false);
    let _ = match format {
        LogFormat::Text => {
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            fmt.with_ansi(std::io::stderr().is_terminal() && !no_color).try_init()
        }
        LogFormat::Json => fmt.json().flatten_event(true).with_ansi(false).try_init(),
    };
}
