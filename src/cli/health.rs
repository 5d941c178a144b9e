//! `raylog health`: what went wrong, grouped and counted, from the same inputs as
//! `raylog parse`.
//!
//! Every record goes through [`crate::health::Collector`]; `--since`/`--until`
//! narrow the records first (a record without a time passes, as in `parse`).
//! Exit codes: 0 the report was printed, 2 an input could not be read (the report
//! covers the rest) or a flag is invalid.

use std::io::{self, Write};

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::InputArgs;
use crate::discover::discover;
use crate::filter::{parse_time, Filter};
use crate::health::sieve::needed;
use crate::health::template::template_into;
use crate::health::Collector;
use crate::scan::{scan_noted, Kept, Note, Seen};
use raylog_parsers::{Level, Record};

/// Output formats of `health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HealthFormat {
    /// Sections for people: worker deaths, OOM kills, actors, nodes, GCS, tasks, errors.
    Text,
    /// One JSON document with the keys worker_deaths, oom_kills, actor_failures,
    /// node_deaths, gcs_health, task_failures, top_errors (and driver_failures,
    /// object_spilling, error_records).
    Json,
}

#[derive(Args, Debug)]
#[command(
    about = "Summarise what went wrong: worker deaths, OOM kills, actor failures, node deaths, GCS health, failed tasks, top errors",
    long_about = "Summarise what went wrong in Ray's logs, grouped and counted: the first command to run on a node's archive.\n\n\
Reads the same inputs as `raylog parse` (Ray temp roots, session dirs, logs dirs, files, .gz, \
.tar/.tar.gz/.tgz, several nodes at once). Reports:\n  \
- worker deaths by exit type (SYSTEM_ERROR, USER_ERROR, NODE_OUT_OF_MEMORY...), with worker, pid, node and time\n  \
- OOM kills by the raylet's memory monitor\n  \
- actor failures and restarts, per actor (id, class, name)\n  \
- node deaths (reason; planned removals such as `ray stop` are marked expected)\n  \
- GCS health: failed health checks, nodes declared dead, GCS unreachable\n  \
- failed tasks by exception type (Python exceptions need Ray 2.60's export events)\n  \
- the most frequent ERROR messages, with ids, numbers and paths replaced, counted per component\n\n\
Each finding comes from Ray's own messages (GCS, raylet, core-worker logs and events), \
so a death GCS and the raylet both report counts once.",
    after_help = "Examples:\n  \
raylog health /tmp/ray\n  \
raylog health head.tar.gz worker1.tar.gz worker2.tar.gz --since '2026-11-30 10:00'\n  \
raylog health session_latest/logs --format json | jq '.actor_failures.actors[] | {actor_id, class, restarts}'\n  \
raylog trace --actor-id <id from the report> /tmp/ray      # then tell one actor's story\n\n\
Exit status: 0 report printed, 2 an input could not be read (the report covers the rest)."
)]
pub struct HealthArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Only records at or after this time (RFC 3339, `YYYY-MM-DD HH:MM:SS`, or a date).
    #[arg(long, value_name = "TIME", help_heading = "Filters (all must match)")]
    pub since: Option<String>,
    /// Only records at or before this time.
    #[arg(long, value_name = "TIME", help_heading = "Filters (all must match)")]
    pub until: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = HealthFormat::Text)]
    pub format: HealthFormat,
    /// Do not print warnings on stderr (failures are still printed).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `raylog health`.
pub fn run(a: HealthArgs) -> Result<u8> {
    run_to(a, &mut io::stdout().lock(), &mut io::stderr())
}

/// [`run`], writing the report to `out` and the messages to `err` (the Python API
/// keeps both in memory).
pub fn run_to(a: HealthArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<u8> {
    let cfg = a.input.scan_config()?;
    let zone = &cfg.opts.zone;
    let filter = Filter {
        since: a.since.as_deref().map(|v| parse_time("--since", v, zone)).transpose()?,
        until: a.until.as_deref().map(|v| parse_time("--until", v, zone)).transpose()?,
        ..Filter::default()
    };
    let disc = discover(&a.input.paths);
    let bar = crate::progress::bar(disc.total_bytes());
    let mut progress = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    };
    let all = filter.is_empty();
    let mut collector = Collector::default();
    // An error's template is the costliest part of taking a record in: on many
    // threads the workers make it.
    let note: Note = &|r, out| {
        let error = r.level >= Some(Level::Error);
        if error {
            template_into(r.message, out);
        }
        error
    };
    // On many threads only what can change the report is handed over.
    let keep = |r: &Record<'_>, seen: &mut Seen| if all || filter.matches(r) { needed(r, seen) } else { Kept::No };
    let report = scan_noted(&disc, &cfg, &keep, Some(note), &mut progress, &mut |r, template, kept| match kept {
        _ if !all && !filter.matches(r) => {}
        Kept::Facts => collector.learn(r),
        _ => collector.observe_noted(r, template),
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    for (path, why) in &report.failures {
        let _ = writeln!(err, "raylog: error: {path}: {why}");
    }
    if !a.quiet {
        for w in &report.warnings {
            let _ = writeln!(err, "raylog: warning: {w}");
        }
    }
    if report.files == 0 && report.failures.is_empty() {
        let _ = writeln!(err, "raylog: warning: no log files found in the given paths; give a Ray temp root (/tmp/ray), a session dir, a logs dir or an archive");
    }
    let health = collector.finish();
    let text = match a.format {
        HealthFormat::Json => serde_json::to_string_pretty(&health)? + "\n",
        HealthFormat::Text => crate::health::text::render(&health),
    };
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    Ok(if report.failures.is_empty() { 0 } else { 2 })
}
