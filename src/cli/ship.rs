//! `raylog ship`: the agent. Tails Ray's log dirs and delivers every record to the
//! configured sinks (stdout when none), at least once, resuming from checkpoints.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::agent::config;

#[derive(Args, Debug)]
#[command(
    about = "Tail Ray log dirs and ship every record to Loki, Elasticsearch, a file or stdout",
    long_about = "Tail Ray log dirs and ship every record to Loki, Elasticsearch, a file or stdout.\n\n\
Follows every session under the configured paths (new sessions included) across rotation, \
parses each line into a record tagged with Ray ids, and delivers it at least once: \
checkpoints in source.state_dir advance only when every sink has acknowledged. \
Without --config it reads /tmp/ray and prints NDJSON to stdout.",
    after_help = "Examples:\n  \
raylog ship --config /etc/raylog/raylog.toml\n  \
raylog ship --once --config backfill.toml      # read everything, deliver, exit 0\n  \
raylog ship --path ./ray-logs --state-dir /tmp/raylog-state --once   # no config file: stdout\n\n\
Signals: SIGTERM/SIGINT stop reading, deliver within retry.shutdown_grace, save checkpoints, exit 0."
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
}

/// Runs `raylog ship`.
pub fn run(a: ShipArgs) -> Result<u8> {
    init_logging(&a.log_level);
    let (_, mut cfg) = match &a.config {
        Some(path) => config::load(path)?,
        None => config::default_config(),
    };
    if !a.paths.is_empty() {
        cfg.source.paths = a.paths.clone();
    }
    if let Some(d) = &a.state_dir {
        cfg.source.state_dir = d.clone();
    }
    crate::agent::run::run(cfg, a.once)?;
    Ok(0)
}

/// raylog's own logs go to stderr (stdout may carry records), filtered by `level`.
pub fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).try_init();
}
