//! Command line: `raylog parse`, and the arguments its siblings share.
//!
//! Each subcommand lives in its own module; this one holds the clap definitions and
//! the translation of flags into typed values (filters, options), so every error
//! message names the flag that caused it.

pub mod check_config;
pub mod completions;
pub mod drain;
pub mod health;
pub mod parse;
pub mod remote;
pub mod ship;
pub mod trace;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use raylog_parsers::{Options, Zone};

use crate::filter::{parse_grep, parse_level, parse_time, Filter, IdFilter};

/// raylog's version and the commit it was built from (see `build.rs`).
pub const VERSION: &str = env!("RAYLOG_VERSION");

/// Turn Ray's log files into structured records tagged with Ray ids.
#[derive(Parser, Debug)]
#[command(name = "raylog", version = VERSION, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    Parse(parse::ParseArgs),
    Trace(trace::TraceArgs),
    Health(health::HealthArgs),
    Ship(ship::ShipArgs),
    CheckConfig(check_config::CheckConfigArgs),
    Drain(drain::DrainArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
}

/// Output formats of `parse`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON object per line (the record schema in docs/records.md).
    Ndjson,
    /// Aligned text for people; coloured when stdout is a terminal.
    Pretty,
}

/// Inputs and parsing options shared by `parse` and `trace`.
#[derive(Args, Debug)]
#[command(next_help_heading = "Input")]
pub struct InputArgs {
    /// Ray temp roots (/tmp/ray), session dirs, logs dirs, files, .gz files,
    /// .tar/.tar.gz/.tgz archives, `-` for stdin, or a bucket in the KubeRay History
    /// Server's layout: s3://bucket/[root/]cluster-history/… (also gs://, az://).
    #[arg(value_name = "PATH", default_value = "/tmp/ray")]
    pub paths: Vec<PathBuf>,

    /// Zone that Ray's naive timestamps were written in (IANA name or +HH:MM).
    #[arg(long, value_name = "TZ", default_value = "UTC")]
    pub timezone: String,

    /// Lines longer than this are cut and their record flagged "truncated": true.
    #[arg(long, value_name = "BYTES", default_value_t = raylog_parsers::parser::DEFAULT_MAX_LINE_BYTES,
          value_parser = clap::value_parser!(usize))]
    pub max_line_bytes: usize,

    /// Parse stdin as if it were a file with this name, e.g. `raylet.out` or
    /// `worker-<id>-01000000-42.err`, so the right format applies.
    #[arg(long, value_name = "NAME")]
    pub stdin_name: Option<String>,

    /// Threads that parse (default: one per core). The output is the same for any
    /// number; 1 reads and parses on one thread.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

impl InputArgs {
    /// What the scan is told: the parser options, `--stdin-name`, `--threads`.
    pub fn scan_config(&self) -> Result<crate::scan::ScanConfig> {
        Ok(crate::scan::ScanConfig {
            opts: self.options()?,
            stdin_name: self.stdin_name.clone(),
            fixed_mtime: None,
            threads: self.threads.map_or_else(crate::scan::parallel::default_threads, usize::from),
        })
    }

    /// Validates into parser options.
    pub fn options(&self) -> Result<Options> {
        let zone = Zone::parse(&self.timezone).map_err(|e| anyhow::anyhow!("--timezone: {e}"))?;
        anyhow::ensure!(
            self.max_line_bytes >= 16,
            "--max-line-bytes {}: must be at least 16 bytes",
            self.max_line_bytes
        );
        Ok(Options { zone, max_line_bytes: self.max_line_bytes })
    }
}

/// The Ray id flags, shared by `parse` (filters: all must match) and `trace` (the
/// one thing to trace), so both spell and explain them the same way.
#[derive(Args, Debug, Default)]
pub struct IdArgs {
    /// An actor: full id (32 hex characters) or a prefix of 4+ hex characters.
    #[arg(long, value_name = "ID")]
    pub actor_id: Option<String>,
    /// A task: full id (48 hex characters) or a prefix; with `trace`, its attempts,
    /// their workers and the exception.
    #[arg(long, value_name = "ID")]
    pub task_id: Option<String>,
    /// A job, e.g. 01000000 (8 hex characters); with `trace`, its drivers, workers
    /// and actors.
    #[arg(long, value_name = "ID")]
    pub job_id: Option<String>,
    /// A worker process: full id (56 hex characters) or a prefix.
    #[arg(long, value_name = "ID")]
    pub worker_id: Option<String>,
}

/// Record filters (all must match).
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Filters (all must match)")]
pub struct FilterArgs {
    #[command(flatten)]
    pub ids: IdArgs,
    /// Only records of this node (full id or prefix).
    #[arg(long, value_name = "ID")]
    pub node_id: Option<String>,
    /// Only these components (repeat or comma-separate: raylet,gcs_server,worker...).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub component: Vec<String>,
    /// Minimum level: TRACE, DEBUG, INFO, WARNING, ERROR, FATAL. Records without a
    /// level (plain prints) are left out.
    #[arg(long, value_name = "LEVEL")]
    pub level: Option<String>,
    /// Only records at or after this time (RFC 3339, `YYYY-MM-DD HH:MM:SS`, or a date).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only records at or before this time.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only records whose message matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub grep: Option<String>,
}

impl FilterArgs {
    /// Validates every flag into a [`Filter`].
    pub fn build(&self, zone: &Zone) -> Result<Filter> {
        let id = |flag, v: &Option<String>, max| v.as_deref().map(|v| IdFilter::parse(flag, v, max)).transpose();
        Ok(Filter {
            actor: id("--actor-id", &self.ids.actor_id, 32)?,
            task: id("--task-id", &self.ids.task_id, 48)?,
            job: id("--job-id", &self.ids.job_id, 8)?,
            worker: id("--worker-id", &self.ids.worker_id, 56)?,
            node: id("--node-id", &self.node_id, 56)?,
            components: self.component.iter().map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect(),
            min_level: self.level.as_deref().map(parse_level).transpose()?,
            since: self.since.as_deref().map(|v| parse_time("--since", v, zone)).transpose()?,
            until: self.until.as_deref().map(|v| parse_time("--until", v, zone)).transpose()?,
            grep: self.grep.as_deref().map(parse_grep).transpose()?,
        })
    }
}

/// The whole program: parses `argv` (its first item is the program's name), runs
/// it, and returns the exit code. clap's own messages (`--help`, `--version`, a bad
/// flag) are printed as clap prints them, with clap's codes (0, 2).
pub fn main<I, T>(argv: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            // A closed pipe (`raylog --help | head -1`) is not worth a word.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("raylog: error: {e:#}");
            2
        }
    }
}

/// Runs the command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Parse(mut a) => {
            let _fetched = remote::localize(&mut a.input.paths)?;
            parse::run(a)
        }
        Command::Trace(mut a) => {
            let _fetched = remote::localize(&mut a.input.paths)?;
            trace::run(a)
        }
        Command::Health(mut a) => {
            let _fetched = remote::localize(&mut a.input.paths)?;
            health::run(a)
        }
        Command::Ship(a) => ship::run(a),
        Command::CheckConfig(a) => check_config::run(a),
        Command::Drain(a) => drain::run(a),
        Command::Completions(a) => completions::completions(a),
        Command::Man(a) => completions::man(a),
    }
}
