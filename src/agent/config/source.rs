//! `[source]`: what to read, and how.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{self, DurationValue, Problems, SizeValue, DAY, HOUR, MS, SEC};

/// `[source]`: what to read.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceRaw {
    /// Ray temp roots, session dirs or logs dirs. Default `["/tmp/ray"]`.
    pub paths: Option<Vec<PathBuf>>,
    /// Where checkpoints and the dead-letter file live. Default `/var/lib/raylog`.
    pub state_dir: Option<PathBuf>,
    /// `"beginning"` or `"end"`: where to start in files present at the first start.
    pub start_at: Option<String>,
    /// Skip files not modified for this long (e.g. `"24h"`). Default: read everything.
    pub ignore_older: Option<DurationValue>,
    /// How often to stat files and directories (the fallback when inotify is silent).
    pub poll_interval: Option<DurationValue>,
    /// Emit a file's last complete record after this much quiet.
    pub idle_flush: Option<DurationValue>,
    /// Emit a line without its newline after this much quiet.
    pub partial_line_timeout: Option<DurationValue>,
    /// Longer lines are cut and flagged `truncated`.
    pub max_line_bytes: Option<SizeValue>,
    /// Zone of Ray's naive timestamps.
    pub timezone: Option<String>,
    /// How long to hold an actor worker's output until its actor id is known.
    pub actor_hold: Option<DurationValue>,
    /// Use inotify (true) or polling only (false, for file systems without events).
    pub watch: Option<bool>,
    /// Files not to ship: globs (`*`, `?`) on the path inside the logs dir.
    /// Default `["debug_state*.txt"]` (state dumps rewritten in place every few
    /// seconds, not logs); `[]` ships everything.
    pub exclude: Option<Vec<String>>,
    /// Descriptors held for log files at most. Default 256.
    pub max_open_files: Option<usize>,
    /// Close a file idle this long (it is reopened when it changes). Default `"5m"`.
    pub close_inactive: Option<DurationValue>,
    /// Drop the checkpoint of a file gone this long. Default `"24h"`.
    pub forget_after: Option<DurationValue>,
}

/// Where to start reading files present at the first start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StartAt {
    Beginning,
    End,
}

/// Validated `[source]`.
#[derive(Clone, Debug)]
pub struct SourceConfig {
    pub paths: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub start_at: StartAt,
    pub ignore_older: Option<Duration>,
    pub poll_interval: Duration,
    pub idle_flush: Duration,
    pub partial_line_timeout: Duration,
    pub actor_hold: Duration,
    pub watch: bool,
    pub exclude: Vec<values::Glob>,
    pub parse: raylog_parsers::Options,
    pub max_open_files: usize,
    pub close_inactive: Duration,
    pub forget_after: Duration,
}

pub(super) fn validate_source(s: &SourceRaw, p: &mut Problems) -> SourceConfig {
    let dur =
        |v: &Option<DurationValue>, key: &str, def: Duration, range: RangeInclusive<Duration>, p: &mut Problems| {
            v.as_ref().map_or(def, |v| v.get(key, range, p))
        };
    let paths = s.paths.clone().unwrap_or_else(|| vec![PathBuf::from("/tmp/ray")]);
    if paths.is_empty() {
        p.add("source.paths", "is empty; list Ray temp roots, session dirs or logs dirs, e.g. [\"/tmp/ray\"]");
    }
    let start_at = match s.start_at.as_deref().unwrap_or("beginning") {
        "beginning" => StartAt::Beginning,
        "end" => StartAt::End,
        other => {
            p.add("source.start_at", format!("{other:?} is not \"beginning\" or \"end\""));
            StartAt::Beginning
        }
    };
    let zone = raylog_parsers::Zone::parse(s.timezone.as_deref().unwrap_or("UTC")).unwrap_or_else(|e| {
        p.add("source.timezone", e);
        raylog_parsers::Zone::Utc
    });
    let max_line_bytes = s.max_line_bytes.as_ref().map_or(1 << 20, |v| v.get("source.max_line_bytes", 16..=1 << 30, p));
    SourceConfig {
        paths,
        state_dir: s.state_dir.clone().unwrap_or_else(|| PathBuf::from("/var/lib/raylog")),
        start_at,
        ignore_older: s.ignore_older.as_ref().map(|v| v.get("source.ignore_older", SEC..=3650 * DAY, p)),
        poll_interval: dur(&s.poll_interval, "source.poll_interval", SEC, 10 * MS..=HOUR, p),
        idle_flush: dur(&s.idle_flush, "source.idle_flush", 500 * MS, MS..=HOUR, p),
        partial_line_timeout: dur(&s.partial_line_timeout, "source.partial_line_timeout", 5 * SEC, MS..=DAY, p),
        actor_hold: dur(&s.actor_hold, "source.actor_hold", 10 * SEC, Duration::ZERO..=HOUR, p),
        watch: s.watch.unwrap_or(true),
        exclude: exclude_globs(s.exclude.as_deref(), p),
        parse: raylog_parsers::Options { zone, max_line_bytes: max_line_bytes as usize },
        max_open_files: max_open_files(s.max_open_files, p),
        close_inactive: dur(&s.close_inactive, "source.close_inactive", 300 * SEC, 100 * MS..=30 * DAY, p),
        forget_after: dur(&s.forget_after, "source.forget_after", DAY, 60 * SEC..=3650 * DAY, p),
    }
}

fn max_open_files(v: Option<usize>, p: &mut Problems) -> usize {
    let n = v.unwrap_or(256);
    if !(8..=1 << 20).contains(&n) {
        p.add("source.max_open_files", format!("{n} is out of range: 8 to 1048576"));
    }
    n.max(8)
}

fn exclude_globs(raw: Option<&[String]>, p: &mut Problems) -> Vec<values::Glob> {
    let default = [String::from("debug_state*.txt")];
    let mut out = vec![];
    for (i, g) in raw.unwrap_or(&default).iter().enumerate() {
        match values::Glob::new(g) {
            Ok(g) => out.push(g),
            Err(e) => p.add(&format!("source.exclude[{i}]"), e),
        }
    }
    out
}
