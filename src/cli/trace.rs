//! `raylog trace`: the story of one actor, task, job or worker across components.
//!
//! Same inputs as `raylog parse`. Output: a summary of the lifecycle, then every
//! record about the target in time order (text), or both as one JSON document.
//! Exit codes as in `parse`: 0 records found, 1 nothing matched, 2 an input could
//! not be read (the rest is still used) or the id was ambiguous.

use std::io::{self, IsTerminal, Write};

use anyhow::Result;
use clap::{ArgGroup, Args, ValueEnum};

use super::{IdArgs, InputArgs};
use crate::discover::discover;
use crate::trace::collect::passes;
use crate::trace::entry::Entry;
use crate::trace::text::{write_header, write_line, Clock};
use crate::trace::view::{document_head, document_tail, write_record};
use crate::trace::{collect, summarize, Collected, Kind, Target};

/// Output formats of `trace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// A summary header and one line per record (coloured on a terminal).
    Text,
    /// One JSON document: {"summary": {...}, "records": [...]}.
    Json,
}

#[derive(Args, Debug)]
#[command(
    about = "Show the life of one actor, task, job or worker across every component, in time order",
    long_about = "Show the life of one actor, task, job or worker across every component, in time order.\n\n\
Reads the same inputs as `raylog parse` (several nodes' logs dirs or archives at once). \
Prints a summary (for an actor: class, job, each incarnation with node, worker, pid, start \
and end, how it died, restarts; for a task: attempts and the exception) and then every \
record about it from every file, sorted by time.",
    after_help = "Examples:\n  \
raylog trace --actor-id ceeabe45 /tmp/ray\n  \
raylog trace --task-id f4402ec7 node1.tar.gz node2.tar.gz --context 3\n  \
raylog trace --job-id 01000000 session_latest/logs --format json\n  \
raylog trace --task-id e0dc174c --printed /tmp/ray /var/lib/raylog/ray_events\n\n\
Exit status: 0 records found, 1 nothing matched, 2 an input could not be read or the id is ambiguous.",
    group(ArgGroup::new("target").required(true).multiple(false).args(["actor_id", "task_id", "job_id", "worker_id"]))
)]
pub struct TraceArgs {
    /// What to trace: exactly one id.
    #[command(flatten, next_help_heading = "What to trace (exactly one)")]
    pub ids: IdArgs,
    /// Also show the N records before each ERROR/FATAL record from the same file,
    /// even when they are not about the target (marked as context).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub context: usize,
    /// With --task-id: only the lines the task printed (its worker's stdout and
    /// stderr inside each attempt's byte range, as Ray's task events give them: put
    /// raylog's event spool, state_dir/ray_events, among the paths), each attempt
    /// apart.
    #[arg(long, requires = "task_id")]
    pub printed: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TraceFormat::Text)]
    pub format: TraceFormat,
    /// Do not print warnings on stderr (failures are still printed).
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub input: InputArgs,
}

impl TraceArgs {
    /// The one id flag given (clap's group guarantees exactly one).
    fn target(&self) -> Result<Target> {
        let given = [
            (Kind::Actor, &self.ids.actor_id),
            (Kind::Task, &self.ids.task_id),
            (Kind::Job, &self.ids.job_id),
            (Kind::Worker, &self.ids.worker_id),
        ];
        match given.into_iter().find_map(|(k, v)| v.as_deref().map(|v| (k, v))) {
            Some((kind, value)) => Target::parse(kind, value),
            None => anyhow::bail!("give one of --actor-id, --task-id, --job-id or --worker-id"),
        }
    }
}

/// Runs `raylog trace`.
pub fn run(a: TraceArgs) -> Result<u8> {
    let stdout = io::stdout();
    let colour = a.format == TraceFormat::Text && stdout.is_terminal();
    run_to(a, colour, &mut stdout.lock(), &mut io::stderr())
}

/// [`run`], writing the trace to `out` and the messages to `err` (the Python API
/// keeps both in memory).
pub fn run_to(a: TraceArgs, colour: bool, out: &mut dyn Write, err: &mut dyn Write) -> Result<u8> {
    let cfg = a.input.scan_config()?;
    let target = a.target()?;
    let disc = discover(&a.input.paths);
    let bar = crate::progress::bar(disc.total_bytes() * passes(&disc, &target));
    let mut progress = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    };
    let got = collect(&disc, &cfg, &target, a.context, a.format == TraceFormat::Json, &mut progress);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    report_problems(&got, a.quiet, err);
    let code = super::parse::exit_code(&got.report, got.records as u64, false);
    let full_id = match got.knowledge.matched.len() {
        0 => {
            let _ = writeln!(
                err,
                "raylog: no records about {} {} in the given paths",
                target.kind.noun(),
                target.id.as_str()
            );
            return Ok(code);
        }
        1 => got.knowledge.matched.iter().next().cloned().unwrap_or_default(),
        _ => anyhow::bail!(ambiguous(&target, &got)),
    };
    let mut entries = got.sorted();
    if a.printed {
        entries = printed(entries, &full_id);
        if entries.is_empty() {
            let _ = writeln!(err, "raylog: task {full_id} has no printed lines with a known attempt; give the event spool (state_dir/ray_events) with the logs");
            return Ok(1);
        }
    }
    let clock = Clock::for_times(got.times());
    let one = |out: &mut String, i: usize, e: &Entry| match a.format {
        TraceFormat::Json => write_record(out, i, e),
        TraceFormat::Text => {
            let attempt = e.ids.task_attempt;
            if a.printed && (i == 0 || entries.get(i - 1).map(|p| p.ids.task_attempt) != Some(attempt)) {
                attempt_header(out, attempt);
            }
            write_line(out, e, &clock, colour)
        }
    };
    // The summary and the records' lines depend on the entries alone: on many
    // threads they are made side by side.
    let (summary, records) =
        render_beside(&entries, cfg.threads, &one, || summarize(target.kind, &full_id, &entries, &got.knowledge));
    let (head, tail) = match a.format {
        TraceFormat::Json => (document_head(&summary), document_tail(entries.is_empty())),
        TraceFormat::Text => {
            let mut head = String::new();
            write_header(&mut head, &summary, &clock, colour);
            (head, "")
        }
    };
    // A closed pipe (`| head`) is not an error worth reporting. The parts are
    // written as they are: joining them would copy the whole output once more.
    let _ = std::iter::once(head.as_str())
        .chain(records.iter().map(String::as_str))
        .chain([tail])
        .try_for_each(|part| out.write_all(part.as_bytes()))
        .and_then(|_| out.flush());
    // The process ends after this: freeing a large trace's entries one by one (eight
    // strings each) took a twentieth of its run.
    std::mem::forget(summary);
    std::mem::forget(got);
    Ok(code)
}

/// The entries `task` printed (worker stdout and stderr records tagged with the
/// task and an attempt), by attempt, then in time order within each.
fn printed<'a>(entries: Vec<&'a Entry>, task: &str) -> Vec<&'a Entry> {
    let mut out: Vec<&Entry> = entries
        .into_iter()
        .filter(|e| e.file_worker && e.ids.task_attempt.is_some() && e.ids.task_id.is_some_and(|t| t.as_str() == task))
        .collect();
    // Stable: time order stays within an attempt.
    out.sort_by_key(|e| e.ids.task_attempt);
    out
}

fn attempt_header(out: &mut String, attempt: Option<u32>) {
    use std::fmt::Write;
    let _ = writeln!(out, "── attempt {} ──", attempt.unwrap_or_default());
}

/// Below this many entries a trace's output is made on one thread.
const PARALLEL_RENDER: usize = 4096;

/// Each entry as `one` writes it (given its index), in order, and what `beside`
/// returns: with many threads and entries, the entries in `threads` chunks written
/// side by side while the calling thread runs `beside`.
fn render_beside<T>(
    entries: &[&Entry],
    threads: usize,
    one: &(dyn Fn(&mut String, usize, &Entry) + Sync),
    beside: impl FnOnce() -> T,
) -> (T, Vec<String>) {
    let write = |from: usize, chunk: &[&Entry]| {
        let mut out = String::with_capacity(chunk.len() * 160);
        for (i, e) in chunk.iter().enumerate() {
            one(&mut out, from + i, e);
        }
        out
    };
    if threads <= 1 || entries.len() < PARALLEL_RENDER {
        return (beside(), vec![write(0, entries)]);
    }
    let size = entries.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> =
            entries.chunks(size).enumerate().map(|(k, chunk)| s.spawn(move || write(k * size, chunk))).collect();
        let t = beside();
        (t, handles.into_iter().map(|h| h.join().expect("a trace's render thread does not panic")).collect())
    })
}

fn ambiguous(target: &Target, got: &Collected) -> String {
    let ids: Vec<&str> = got.knowledge.matched.iter().map(String::as_str).take(10).collect();
    format!(
        "{} {}: matches {} different {}s ({}); give more characters of the id",
        target.kind.flag(),
        target.id.as_str(),
        got.knowledge.matched.len(),
        target.kind.noun(),
        ids.join(", ")
    )
}

fn report_problems(got: &Collected, quiet: bool, err: &mut dyn Write) {
    for (path, why) in &got.report.failures {
        let _ = writeln!(err, "raylog: error: {path}: {why}");
    }
    if !quiet {
        for w in &got.report.warnings {
            let _ = writeln!(err, "raylog: warning: {w}");
        }
    }
}
