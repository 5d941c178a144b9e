//! Text output: a summary header, then one line per record in time order.
//!
//! `10:21:13.048  WARNING gcs_server         b41b4d0f  Worker 78858d8b… exits, type=SYSTEM_ERROR`
//!
//! Times are UTC with milliseconds; the date is printed once in the header when every
//! record shares it. A `~` after the time marks a line that had no time of its own;
//! a `-` in the gutter marks a `--context` line. Colours (errors red, context dim)
//! only when stdout is a terminal.

use std::fmt::Write as _;

use raylog_parsers::{Level, Timestamp};

use super::entry::Entry;
use super::facts::short;
use super::life::Life;
use super::summary::{ActorSummary, Detail, JobSummary, Summary, WorkerSummary};
use super::task::TaskSummary;

const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// How times are shown: `HH:MM:SS.mmm` when all share one date, else the full date.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    date: Option<[u8; 10]>,
}

impl Clock {
    /// The clock for records with these times (in any order).
    pub fn for_times(times: impl Iterator<Item = Timestamp>) -> Clock {
        let mut dates = times.map(date_of);
        let first = dates.next();
        let date = first.filter(|d| dates.all(|x| x == *d));
        Clock { date }
    }

    pub fn fmt(&self, t: Option<Timestamp>) -> String {
        let Some(t) = t else { return "-".into() };
        let s = t.to_rfc3339();
        let ms = &s[..s.len().min(23)];
        match self.date {
            Some(_) => ms.get(11..).unwrap_or(ms).to_string(),
            None => ms.replacen('T', " ", 1),
        }
    }
}

fn date_of(t: Timestamp) -> [u8; 10] {
    let s = t.to_rfc3339();
    let mut d = [b'-'; 10];
    d.copy_from_slice(&s.as_bytes()[..10]);
    d
}

fn short_id(id: Option<raylog_parsers::Id>) -> String {
    id.map_or("-".into(), |i| i.as_str()[..i.len().min(8)].to_string())
}

/// Removes terminal colour codes (`ESC [ … m`) that Ray puts in error messages, so
/// the header shows text rather than escape sequences.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("\x1b[") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        match after.find(|c: char| c.is_ascii_alphabetic()) {
            Some(end) => rest = &after[end + 1..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

fn span(c: &Clock, start: Option<Timestamp>, end: Option<Timestamp>) -> String {
    format!("{} → {}", c.fmt(start), c.fmt(end))
}

/// `worker 78858d8b  node b41b4d0f  pid 4329  10:21:12.480 → 10:21:13.048`, then how it exited.
fn life_line(out: &mut String, c: &Clock, l: &Life, pad: &str) {
    let pid = l.pid.map_or("-".into(), |p| p.to_string());
    let _ = write!(
        out,
        "worker {}  node {}  pid {pid}  {}",
        short_id(l.worker_id),
        short_id(l.node_id),
        span(c, l.start, l.end)
    );
    let mut how = vec![];
    if let Some(t) = &l.exit_type {
        how.push(format!("exit {t}"));
    }
    if let Some(s) = &l.signal {
        how.push(format!("crashed with {s}"));
    }
    if let Some(d) = &l.death_context {
        how.push(format!("GCS: {d}"));
    }
    if !how.is_empty() {
        let _ = write!(out, "  {}", how.join(", "));
    }
    out.push('\n');
    if let Some(d) = &l.exit_detail {
        let _ = writeln!(out, "{pad}{}", short(d, 110));
    }
}

fn actor_header(out: &mut String, c: &Clock, a: &ActorSummary) {
    let _ = write!(out, "actor {}", a.actor_id);
    for (k, v) in [("class", &a.class), ("name", &a.name)] {
        if let Some(v) = v {
            let _ = write!(out, "  {k} {v}");
        }
    }
    let _ = writeln!(out, "  job {}", short_id(a.job_id));
    let restarts = if a.restarts == 1 { "1 restart".to_string() } else { format!("{} restarts", a.restarts) };
    let _ = writeln!(out, "state {}, {restarts}", a.state.as_deref().unwrap_or("unknown"));
    if let Some(d) = &a.death_cause {
        let reason = a.death_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
        let _ = writeln!(out, "death cause{reason}: {}", short(d, 160));
    }
    let _ = writeln!(out, "incarnations:");
    for (i, l) in a.incarnations.iter().enumerate() {
        let _ = write!(out, "  {}. ", i + 1);
        life_line(out, c, l, "     ");
    }
}

fn task_header(out: &mut String, c: &Clock, t: &TaskSummary) {
    let _ = write!(out, "task {}", t.task_id);
    if let Some(n) = &t.name {
        let _ = write!(out, "  name {n}");
    }
    let _ = write!(out, "  job {}", short_id(t.job_id));
    if t.actor_id.is_some() {
        let _ = write!(out, "  actor {}", short_id(t.actor_id));
    }
    let _ = write!(out, "\nattempts: {}", t.attempt_count);
    if t.resubmissions > 0 {
        let _ = write!(out, " (the driver resubmitted it {} time(s))", t.resubmissions);
    }
    out.push('\n');
    for (i, a) in t.attempts.iter().enumerate() {
        let _ = write!(out, "  {}. ", a.number.map_or(i + 1, |n| n as usize + 1));
        life_line(out, c, &a.life, "     ");
        if let Some(m) = &a.error_message {
            // A Python error's last line names the exception and its message.
            let last = m.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            let _ = writeln!(out, "     error {}: {}", a.error_type.as_deref().unwrap_or("-"), strip_ansi(last));
        }
    }
    let Some(x) = t.main_exception.and_then(|i| t.exceptions.get(i)) else { return };
    let more = match t.exceptions.len() {
        1 => String::new(),
        n => format!(" (1 of {n} in the timeline)"),
    };
    let what = x.error_type.as_deref().map(|t| format!(" {t}")).unwrap_or_default();
    let _ = writeln!(out, "exception{what} at {} in {} worker {}{more}:", c.fmt(x.time), x.file, short_id(x.worker_id));
    for line in strip_ansi(&x.message).lines() {
        let _ = writeln!(out, "  | {line}");
    }
}

fn job_header(out: &mut String, c: &Clock, j: &JobSummary) {
    let _ = writeln!(out, "job {}", j.job_id);
    for d in &j.drivers {
        let sub = d.submission_id.as_deref().map(|s| format!("  submission {s}")).unwrap_or_default();
        let pid = d.pid.map_or("-".into(), |p| p.to_string());
        let files: Vec<&str> = d.files.iter().map(String::as_str).collect();
        let _ = writeln!(out, "driver pid {pid}  node {}{sub}  ({})", short_id(d.node_id), files.join(", "));
    }
    let _ = writeln!(out, "workers: {}  actors: {}  tasks: {}", j.workers.len(), j.actors.len(), j.tasks);
    for l in &j.workers {
        let actor = l.actor_id.map(|a| format!("  actor {}", &a.as_str()[..8])).unwrap_or_default();
        let exit = l.exit_type.as_deref().map(|t| format!("  exit {t}")).unwrap_or_default();
        let pid = l.pid.map_or("-".into(), |p| p.to_string());
        let _ = writeln!(
            out,
            "  worker {}  node {}  pid {pid}{actor}{exit}  {} records  {}",
            short_id(l.worker_id),
            short_id(l.node_id),
            l.records,
            span(c, l.start, l.end)
        );
    }
    for a in &j.actors {
        let class = a.class.as_deref().unwrap_or("?");
        let _ = writeln!(
            out,
            "  actor {} {class}  {} worker(s)  {} records",
            short_id(a.actor_id),
            a.workers.len(),
            a.records
        );
    }
}

fn worker_header(out: &mut String, c: &Clock, w: &WorkerSummary) {
    let l = &w.life;
    let _ = write!(
        out,
        "{} {}",
        if l.driver { "driver" } else { "worker" },
        l.worker_id.map_or("-".into(), |i| i.as_str().to_string())
    );
    let _ = writeln!(out, "  job {}", short_id(l.job_id));
    if let Some(a) = l.actor_id {
        let _ = writeln!(out, "hosts actor {} {}", a, l.actor_class.as_deref().unwrap_or(""));
    }
    life_line(out, c, l, "");
    if !w.tasks.is_empty() {
        let tasks: Vec<String> = w.tasks.iter().map(|(n, k)| format!("{n} ×{k}")).collect();
        let _ = writeln!(out, "tasks: {}", tasks.join(", "));
    }
}

/// The summary header, ending with a blank line.
pub fn write_header(out: &mut String, s: &Summary, c: &Clock, colour: bool) {
    let (bold, reset) = if colour { (BOLD, RESET) } else { ("", "") };
    out.push_str(bold);
    let mut body = String::new();
    match &s.detail {
        Detail::Actor(a) => actor_header(&mut body, c, a),
        Detail::Task(t) => task_header(&mut body, c, t),
        Detail::Job(j) => job_header(&mut body, c, j),
        Detail::Worker(w) => worker_header(&mut body, c, w),
    }
    out.push_str(&body);
    out.push_str(reset);
    let m = &s.common;
    let nodes: Vec<String> = m.nodes.iter().map(|n| short_id(Some(*n))).collect();
    let _ = write!(out, "{} records ({} ERROR/FATAL", m.records, m.errors);
    if m.context_records > 0 {
        let _ = write!(out, ", {} context", m.context_records);
    }
    let _ = writeln!(out, ") on node(s) {}, {}", nodes.join(" "), span(c, m.first, m.last));
    if let Some(d) = c.date {
        let _ = writeln!(
            out,
            "times are UTC on {}; ~ = line had no time of its own; - = context line",
            String::from_utf8_lossy(&d)
        );
    } else {
        let _ = writeln!(out, "times are UTC; ~ = line had no time of its own; - = context line");
    }
    out.push('\n');
}

fn level_colour(l: Option<Level>) -> &'static str {
    match l {
        Some(Level::Fatal) => "\x1b[1;31m",
        Some(Level::Error) => "\x1b[31m",
        Some(Level::Warning) => "\x1b[33m",
        _ => "",
    }
}

/// One timeline line (and its continuation lines) for `e`, written in place: a
/// large trace has tens of thousands, and a string per column cost more than the
/// text itself.
pub fn write_line(out: &mut String, e: &Entry, c: &Clock, colour: bool) {
    let colour_of = if !colour {
        ""
    } else if e.context {
        DIM
    } else {
        level_colour(e.level)
    };
    let reset = if colour_of.is_empty() { "" } else { RESET };
    out.push_str(colour_of);
    let start = out.len();
    out.push(if e.context { '-' } else { ' ' });
    out.push(' ');
    padded(out, 12, |o| o.push_str(&c.fmt(e.timestamp)));
    out.push(if e.inferred || e.estimated { '~' } else { ' ' });
    out.push(' ');
    padded(out, 7, |o| o.push_str(e.level.map_or("", |l| l.as_str())));
    out.push(' ');
    padded(out, 20, |o| {
        o.push_str(e.component());
        if let Some(p) = e.pid.filter(|_| e.file_worker) {
            let _ = write!(o, "[{p}]");
        }
    });
    out.push(' ');
    let node = e.ids.node_id;
    padded(out, 8, |o| o.push_str(node.as_ref().map_or("-", |i| &i.as_str()[..i.len().min(8)])));
    out.push_str("  ");
    let width = out[start..].chars().count();
    for (i, l) in e.message.split('\n').enumerate() {
        let line = if i == 0 { start } else { out.len() };
        if i > 0 {
            out.extend(std::iter::repeat_n(' ', width));
        }
        out.push_str(l);
        // No trailing blanks for empty lines (an empty print, a gap in a state dump).
        let kept = out[line..].trim_end_matches(' ').len();
        out.truncate(line + kept);
        out.push('\n');
    }
    out.push_str(reset);
}

/// What `write` appends, padded with spaces to `width` characters (as `{:<width}`).
fn padded(out: &mut String, width: usize, write: impl FnOnce(&mut String)) {
    let from = out.len();
    write(out);
    let n = out[from..].chars().count();
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(n)));
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use raylog_parsers::Options;

    use super::*;
    use crate::discover::discover;
    use crate::scan::ScanConfig;
    use crate::trace::{collect, Kind, Target};

    /// `write_line` as it was first written, a string per column: the reference.
    fn reference(e: &Entry, c: &Clock, colour: bool) -> String {
        let mut out = String::new();
        let colour_of = if !colour {
            ""
        } else if e.context {
            DIM
        } else {
            level_colour(e.level)
        };
        let reset = if colour_of.is_empty() { "" } else { RESET };
        let who = match e.pid.filter(|_| e.file_worker) {
            Some(p) => format!("{}[{p}]", e.component()),
            None => e.component().to_string(),
        };
        let mark = if e.inferred || e.estimated { '~' } else { ' ' };
        let prefix = format!(
            "{} {:<12}{mark} {:<7} {:<20} {:<8}  ",
            if e.context { '-' } else { ' ' },
            c.fmt(e.timestamp),
            e.level.map_or("", |l| l.as_str()),
            who,
            short_id(e.ids.node_id),
        );
        out.push_str(colour_of);
        let indent = " ".repeat(prefix.chars().count());
        for (i, l) in e.message.split('\n').enumerate() {
            let line = format!("{}{l}", if i == 0 { prefix.as_str() } else { indent.as_str() });
            out.push_str(line.trim_end_matches(' '));
            out.push('\n');
        }
        out.push_str(reset);
        out
    }

    #[test]
    fn lines_written_in_place_are_the_reference_lines() {
        let cfg = ScanConfig { opts: Options::default(), stdin_name: None, fixed_mtime: None, threads: 1 };
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut lines = 0;
        for (dir, job) in
            [("ray-2.60-text", "01000000"), ("ray-2.60-health", "01000000"), ("ray-2.9-plain", "01000000")]
        {
            let disc = discover(&[root.join(dir)]);
            let target = Target::parse(Kind::Job, job).expect("a job id");
            // With context: context records (dimmed) and errors (coloured) too.
            let got = collect(&disc, &cfg, &target, 3, false, &mut |_| {});
            let clock = Clock::for_times(got.times());
            for e in got.sorted() {
                for colour in [false, true] {
                    let mut out = String::from("before ");
                    write_line(&mut out, e, &clock, colour);
                    assert_eq!(out, format!("before {}", reference(e, &clock, colour)), "{dir} {}", e.message);
                    lines += 1;
                }
            }
        }
        assert!(lines > 1000, "{lines} lines compared");
    }
}
