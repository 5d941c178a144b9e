//! Ray's `Event stats:` blocks: the per-handler timings every io_context of GCS,
//! the raylet and each core worker prints (every `event_stats_print_interval_ms`,
//! 60 s by default), read into numbers.
//!
//! ```text
//! Main service Event stats:
//!
//! Global stats: 17 total (3 active)
//! Queueing time: mean = 1.48ms, max = 19.24ms, min = 0.00ms, total = 25.08ms
//! Execution time:  mean = 2.30ms, total = 39.03ms
//! Event stats:
//!     GcsInMemoryStore.Put - 3 total (0 active), Execution time: mean = 6.49ms, total = 19.46ms, Queueing time: mean = 6.51ms, max = 19.24ms, min = 0.01ms, total = 19.52ms
//! ```
//!
//! (each handler line starts with a tab). The forms seen in real runs: Ray 2.60 writes `1.48ms` (two decimals, no space),
//! Ray 2.9 and 2.40 write `14.638 ms`, `2.843 us`, `934.000 ns`, `0.000 s`. The
//! raylet's block sits in its state dump with every line prefixed `[state-dump] `.
//! A core worker's record holds two: its main io_context and, after `Task Event
//! stats:`, the task-event buffer's. Ray writes "no sample yet" as
//! `min = 9223372036854.78ms` (or `9223372036.855 s`), `max = -0.00ms` and
//! `mean = -nanms`: those values are left out, never turned into numbers.
//!
//! Totals are cumulative since the process started. Times are in seconds.

use std::fmt::Write;

/// The io_context of a block Ray prints without a name (core worker, raylet).
pub const MAIN: &str = "Main service";
/// The core worker's task-event buffer's own io_context (`Task Event stats:`).
pub const TASK_EVENTS: &str = "Task events";

/// Times at or above this many seconds are Ray's "no sample" sentinel
/// (`INT64_MAX` nanoseconds, printed as 9223372036.855 s).
const SENTINEL_S: f64 = 9.0e9;

/// Queueing and execution times, in seconds; `None` when Ray printed a sentinel.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Times {
    pub execution_mean: Option<f64>,
    pub execution_total: Option<f64>,
    pub queueing_mean: Option<f64>,
    pub queueing_max: Option<f64>,
    pub queueing_min: Option<f64>,
    pub queueing_total: Option<f64>,
}

/// One handler line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Handler<'a> {
    pub name: &'a str,
    pub total: u64,
    pub active: u64,
    pub running: u64,
    pub times: Times,
}

/// A handler's cumulative figures in one block, or what one block adds to the last.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub calls: u64,
    pub execution_s: f64,
    pub queueing_s: f64,
}

/// The handler that measures its loop's lag: its queueing time is the lag.
pub const LAG_PROBE: &str = "event_loop_lag_probe";

impl Handler<'_> {
    /// Its totals in this block (a sentinel counts as 0).
    pub fn totals(&self) -> Totals {
        Totals {
            calls: self.total,
            execution_s: self.times.execution_total.unwrap_or(0.0),
            queueing_s: self.times.queueing_total.unwrap_or(0.0),
        }
    }

    /// What this block adds to `last`, the same process's previous block of this
    /// handler: everything for a first block, or when the totals went down (a
    /// restart under the same pid), so a sum of these never goes backwards.
    pub fn since(&self, last: Option<Totals>) -> Totals {
        self.totals().since(last)
    }

    /// For [`LAG_PROBE`]: the loop's lag over the interval since `last` (the mean
    /// queueing of the probes run since; `None` when none ran), or for a first
    /// block the mean Ray printed. Ray's own mean is since the process started, and
    /// hides a loop that has just become slow.
    pub fn interval_lag(&self, last: Option<Totals>) -> Option<f64> {
        self.totals().interval_lag(self.times.queueing_mean, last)
    }
}

impl Totals {
    /// What these totals add to `last` (see [`Handler::since`]).
    pub fn since(self, last: Option<Totals>) -> Totals {
        let base = last.filter(|l| l.calls <= self.calls).unwrap_or_default();
        Totals {
            calls: self.calls - base.calls,
            execution_s: (self.execution_s - base.execution_s).max(0.0),
            queueing_s: (self.queueing_s - base.queueing_s).max(0.0),
        }
    }

    /// A lag probe's lag since `last` (see [`Handler::interval_lag`]); `printed`
    /// is the mean Ray printed with these totals.
    pub fn interval_lag(self, printed: Option<f64>, last: Option<Totals>) -> Option<f64> {
        match (last, self.since(last)) {
            (None, _) => printed,
            (Some(_), d) if d.calls > 0 => Some(d.queueing_s / d.calls as f64),
            (Some(_), _) => None,
        }
    }
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, d: Totals) {
        self.calls += d.calls;
        self.execution_s += d.execution_s;
        self.queueing_s += d.queueing_s;
    }
}

/// Seconds as decimal text with at most 9 decimals (Ray prints at most
/// nanoseconds) and no exponent, as JSON and the Prometheus text format take it.
pub fn write_seconds(out: &mut String, v: f64) {
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    out.push_str(if s.is_empty() { "0" } else { s });
}

/// One io_context's block.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block<'a> {
    pub io_context: &'a str,
    pub total: u64,
    pub active: u64,
    pub times: Times,
    pub handlers: Vec<Handler<'a>>,
}

/// The blocks in a record's message, the main io_context's first; empty when it
/// has none.
///
/// A block is named by the line before it (`Main service Event stats:`), or else by
/// where it sits: after `Task Event stats:` it is the task-event buffer's, in the
/// raylet's state dump under `ObjectManager:` the object manager's, and otherwise
/// the process's main io_context.
pub fn parse(message: &str) -> Vec<Block<'_>> {
    let mut blocks: Vec<Block<'_>> = vec![];
    let mut name: Option<&str> = None;
    let mut heading = "";
    let mut in_handlers = false;
    for raw in message.lines() {
        let line = raw.strip_prefix("[state-dump] ").unwrap_or(raw).trim_end();
        if in_handlers {
            if let Some(h) = line.strip_prefix('\t').and_then(handler) {
                if let Some(b) = blocks.last_mut() {
                    b.handlers.push(h);
                }
                continue;
            }
            in_handlers = false;
        }
        if let Some(rest) = line.strip_prefix("Global stats: ") {
            let (total, active, _) = counts(rest).unwrap_or_default();
            let io_context = name.take().unwrap_or(match heading {
                "ObjectManager:" => "ObjectManager",
                _ => MAIN,
            });
            blocks.push(Block { io_context, total, active, ..Block::default() });
        } else if let Some(rest) = line.strip_prefix("Queueing time: ") {
            if let Some(b) = blocks.last_mut() {
                read_times(rest, "queueing", &mut b.times);
            }
        } else if let Some(rest) = line.strip_prefix("Execution time:") {
            if let Some(b) = blocks.last_mut() {
                read_times(rest, "execution", &mut b.times);
            }
        } else if line == "Event stats:" {
            in_handlers = !blocks.is_empty();
        } else if line == "Task Event stats:" {
            name = Some(TASK_EVENTS);
        } else if let Some(n) = line.strip_suffix(" Event stats:") {
            // `Main service Event stats:`, `task_io_context Event stats:` (GCS), maybe
            // after the C++ header's `file.cc:N: ` on the record's first line.
            name = Some(n.rsplit(": ").next().unwrap_or(n).trim());
        } else if line.ends_with(':') && !line.contains(' ') {
            heading = line;
        }
    }
    // The main io_context's figures become the record's own fields.
    if let Some(main) = blocks.iter().position(|b| b.io_context == MAIN) {
        let b = blocks.remove(main);
        blocks.insert(0, b);
    }
    blocks
}

/// `PeriodicalRunner.RunFnPeriodically - 4 total (2 active, 1 running), Execution
/// time: mean = …, total = …, Queueing time: mean = …, max = …, min = …, total = …`.
fn handler(line: &str) -> Option<Handler<'_>> {
    let (name, rest) = line.split_once(" - ")?;
    let (total, active, running) = counts(rest)?;
    let mut times = Times::default();
    if let Some(at) = rest.find("Execution time:") {
        let exec = &rest[at + "Execution time:".len()..];
        let end = exec.find("Queueing time:").unwrap_or(exec.len());
        read_times(&exec[..end], "execution", &mut times);
    }
    if let Some(at) = rest.find("Queueing time:") {
        read_times(&rest[at + "Queueing time:".len()..], "queueing", &mut times);
    }
    Some(Handler { name: name.trim(), total, active, running, times })
}

/// `17 total (3 active)` or `4 total (2 active, 1 running)`.
fn counts(s: &str) -> Option<(u64, u64, u64)> {
    let (total, rest) = s.split_once(" total (")?;
    let inner = &rest[..rest.find(')')?];
    let mut active = 0;
    let mut running = 0;
    for part in inner.split(", ") {
        if let Some(n) = part.strip_suffix(" active") {
            active = n.trim().parse().ok()?;
        } else if let Some(n) = part.strip_suffix(" running") {
            running = n.trim().parse().ok()?;
        }
    }
    Some((total.trim().parse().ok()?, active, running))
}

/// `mean = 1.48ms, max = 19.24ms, min = 0.00ms, total = 25.08ms` into `times`.
fn read_times(s: &str, kind: &str, times: &mut Times) {
    for part in s.split(',') {
        let Some((key, value)) = part.split_once('=') else { continue };
        let v = seconds(value.trim());
        let slot = match (kind, key.trim()) {
            ("execution", "mean") => &mut times.execution_mean,
            ("execution", "total") => &mut times.execution_total,
            ("queueing", "mean") => &mut times.queueing_mean,
            ("queueing", "max") => &mut times.queueing_max,
            ("queueing", "min") => &mut times.queueing_min,
            ("queueing", "total") => &mut times.queueing_total,
            _ => continue,
        };
        *slot = v;
    }
}

/// `1.48ms`, `14.638 ms`, `2.843 us`, `934.000 ns`, `0.000 s` in seconds; `None` for
/// `-nan`, a negative value (`-0.00ms`) or Ray's `INT64_MAX` sentinel.
pub fn seconds(s: &str) -> Option<f64> {
    let digits = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).unwrap_or(s.len());
    let (num, unit) = (&s[..digits], s[digits..].trim());
    if num.starts_with('-') {
        return None;
    }
    let n: f64 = num.parse().ok()?;
    // Divided, not multiplied by 1e-9: `934.000 ns` is then exactly 9.34e-7.
    let per_second = match unit {
        "s" => 1.0,
        "ms" => 1e3,
        "us" | "µs" => 1e6,
        "ns" => 1e9,
        _ => return None,
    };
    let v = n / per_second;
    (v.is_finite() && v < SENTINEL_S).then_some(v)
}

/// The record fields of `blocks`: those of the first block (`io_context`,
/// `global_total`, `global_active`, `global_<time>_s`, `handlers`), and the other
/// blocks, each an object of the same fields, under `more_io_contexts`. Each value
/// is written as JSON into `out`; `put` gets its key and its range in `out`.
pub fn fields(blocks: &[Block<'_>], out: &mut String, mut put: impl FnMut(&'static str, std::ops::Range<usize>)) {
    let Some((first, more)) = blocks.split_first() else { return };
    let mut value = |out: &mut String, key: &'static str, write: &dyn Fn(&mut String)| {
        let start = out.len();
        write(out);
        put(key, start..out.len());
    };
    value(out, "io_context", &|o| write_json_str(o, first.io_context));
    value(out, "global_total", &|o| write_u64(o, first.total));
    value(out, "global_active", &|o| write_u64(o, first.active));
    for (key, v) in time_pairs(&first.times, true) {
        if let Some(v) = v {
            value(out, key, &|o| write_seconds(o, v));
        }
    }
    value(out, "handlers", &|o| write_handlers(o, &first.handlers));
    if !more.is_empty() {
        value(out, "more_io_contexts", &|o| {
            o.push('[');
            for (i, b) in more.iter().enumerate() {
                o.push_str(if i == 0 { "{" } else { ",{" });
                write_block(o, b);
                o.push('}');
            }
            o.push(']');
        });
    }
}

/// A block's fields as JSON members (no braces).
fn write_block(out: &mut String, b: &Block<'_>) {
    out.push_str("\"io_context\":");
    write_json_str(out, b.io_context);
    let _ = write!(out, ",\"global_total\":{},\"global_active\":{}", b.total, b.active);
    for (key, v) in time_pairs(&b.times, true) {
        if let Some(v) = v {
            let _ = write!(out, ",\"{key}\":");
            write_seconds(out, v);
        }
    }
    out.push_str(",\"handlers\":");
    write_handlers(out, &b.handlers);
}

fn write_handlers(out: &mut String, handlers: &[Handler<'_>]) {
    out.push('[');
    for (i, h) in handlers.iter().enumerate() {
        out.push_str(if i == 0 { "{\"handler\":" } else { ",{\"handler\":" });
        write_json_str(out, h.name);
        let _ = write!(out, ",\"total\":{},\"active\":{},\"running\":{}", h.total, h.active, h.running);
        for (key, v) in time_pairs(&h.times, false) {
            if let Some(v) = v {
                let _ = write!(out, ",\"{key}\":");
                write_seconds(out, v);
            }
        }
        out.push('}');
    }
    out.push(']');
}

/// The field names of `t`'s times (prefixed `global_` for a block's own).
fn time_pairs(t: &Times, global: bool) -> [(&'static str, Option<f64>); 6] {
    let names = if global {
        [
            "global_execution_mean_s",
            "global_execution_total_s",
            "global_queueing_mean_s",
            "global_queueing_max_s",
            "global_queueing_min_s",
            "global_queueing_total_s",
        ]
    } else {
        [
            "execution_mean_s",
            "execution_total_s",
            "queueing_mean_s",
            "queueing_max_s",
            "queueing_min_s",
            "queueing_total_s",
        ]
    };
    let values =
        [t.execution_mean, t.execution_total, t.queueing_mean, t.queueing_max, t.queueing_min, t.queueing_total];
    [0, 1, 2, 3, 4, 5].map(|i| (names[i], values[i]))
}

fn write_u64(out: &mut String, v: u64) {
    let _ = write!(out, "{v}");
}

fn write_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests;
