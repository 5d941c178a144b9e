//! Human-readable output (`--format pretty`): one aligned line per record.
//!
//! `2026-11-30T09:05:37.813Z WARNING core_worker   message  job=01000000 actor=750d0826…`
//! Continuation lines of a multi-line record are indented under the message. Ids are
//! shortened to 8 characters (enough to grep for); colours are used only when the
//! output is a terminal.

use raylog_parsers::{Id, Level, Record};

const RESET: &str = "\x1b[0m";

fn level_colour(l: Option<Level>) -> &'static str {
    match l {
        Some(Level::Fatal) => "\x1b[1;31m",
        Some(Level::Error) => "\x1b[31m",
        Some(Level::Warning) => "\x1b[33m",
        Some(Level::Debug | Level::Trace) => "\x1b[2m",
        _ => "",
    }
}

fn push_id(out: &mut String, name: &str, id: Option<Id>) {
    if let Some(id) = id {
        let s = id.as_str();
        out.push(' ');
        out.push_str(name);
        out.push('=');
        out.push_str(&s[..s.len().min(8)]);
    }
}

/// Appends the pretty form of `r` (with its newline) to `out`.
pub fn write_pretty(out: &mut String, r: &Record<'_>, colour: bool) {
    let (dim, cyan, reset) = if colour { ("\x1b[2m", "\x1b[36m", RESET) } else { ("", "", "") };
    let lvl_col = if colour { level_colour(r.level) } else { "" };
    let lvl_reset = if lvl_col.is_empty() { "" } else { reset };
    match r.timestamp {
        Some(t) => {
            // Milliseconds are enough to read; NDJSON keeps the full precision.
            let ts = t.to_rfc3339();
            out.push_str(dim);
            out.push_str(&ts[..ts.len().min(23)]);
            out.push('Z');
            out.push_str(if r.timestamp_inferred { "~" } else { " " });
            out.push_str(reset);
        }
        None => out.push_str(&format!("{:<25}", "-")),
    }
    let level = r.level.map_or("", |l| l.as_str());
    out.push_str(&format!(" {lvl_col}{level:<7}{lvl_reset} {cyan}{:<15}{reset} ", r.component()));
    let mut lines = r.message.split('\n');
    out.push_str(lvl_col);
    out.push_str(lines.next().unwrap_or(""));
    out.push_str(lvl_reset);
    let mut tags = String::new();
    push_id(&mut tags, "job", r.ids.job_id);
    push_id(&mut tags, "actor", r.ids.actor_id);
    push_id(&mut tags, "task", r.ids.task_id);
    push_id(&mut tags, "worker", r.ids.worker_id);
    push_id(&mut tags, "node", r.ids.node_id);
    if let Some(p) = r.pid {
        tags.push_str(&format!(" pid={p}"));
    }
    if !tags.is_empty() {
        out.push_str(dim);
        out.push(' ');
        out.push_str(&tags);
        out.push_str(reset);
    }
    out.push('\n');
    for l in lines {
        out.push_str(&" ".repeat(49));
        out.push_str(lvl_col);
        out.push_str(l);
        out.push_str(lvl_reset);
        out.push('\n');
    }
}
