//! Value types used in the config file: durations (`"500ms"`, `"5s"`, `"24h"`), byte
//! sizes (`4194304` or `"4MiB"`), secrets (`"literal"` or `{ env = "NAME" }` or
//! `{ file = "/path" }`), and the collector that gathers every problem with its key.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Every problem found while validating, each prefixed with the key it concerns.
#[derive(Debug, Default)]
pub struct Problems(pub Vec<String>);

impl Problems {
    pub fn add(&mut self, key: &str, msg: impl fmt::Display) {
        self.0.push(format!("{key}: {msg}"));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.0 {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

/// Units for writing the allowed ranges of keys.
pub const MS: Duration = Duration::from_millis(1);
pub const SEC: Duration = Duration::from_secs(1);
pub const HOUR: Duration = Duration::from_secs(3600);
pub const DAY: Duration = Duration::from_secs(86_400);

/// Parses `"250ms"`, `"5s"`, `"2m"`, `"24h"`, `"7d"` (or a bare number of seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 =
        num.parse().map_err(|_| format!("{s:?} is not a duration; write e.g. \"500ms\", \"5s\", \"2m\", \"24h\""))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        u => return Err(format!("unknown duration unit {u:?} in {s:?}; use ms, s, m, h or d")),
    };
    // `from_secs_f64` panics past u64 seconds; each key's range is checked later.
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long a duration"))
}

/// Renders a duration the way the config file spells it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 86_400_000 == 0 && ms > 0 {
        format!("{}d", ms / 86_400_000)
    } else if ms % 3_600_000 == 0 && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A duration as written in the config.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum DurationValue {
    Text(String),
    Seconds(u64),
}

impl DurationValue {
    /// The value, which must lie in `range` (both ends allowed); otherwise a problem
    /// naming `key` and the range, and the nearest end of the range.
    pub fn get(&self, key: &str, range: RangeInclusive<Duration>, p: &mut Problems) -> Duration {
        let d = match self {
            DurationValue::Seconds(s) => Duration::from_secs(*s),
            DurationValue::Text(t) => match parse_duration(t) {
                Ok(d) => d,
                Err(e) => {
                    p.add(key, e);
                    return *range.start();
                }
            },
        };
        if !range.contains(&d) {
            let (lo, hi) = (format_duration(*range.start()), format_duration(*range.end()));
            p.add(key, format!("{} is out of range: {lo} to {hi}", format_duration(d)));
            return d.clamp(*range.start(), *range.end());
        }
        d
    }
}

/// A byte size: a number, or text with a unit (`"4MiB"`, `"512KiB"`, `"1GiB"`, `"10MB"`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    /// The value, which must lie in `range` (both ends allowed); otherwise a problem
    /// naming `key` and the range, and the nearest end of the range.
    pub fn get(&self, key: &str, range: RangeInclusive<u64>, p: &mut Problems) -> u64 {
        let n = match self {
            SizeValue::Bytes(b) => *b,
            SizeValue::Text(t) => match parse_size(t) {
                Ok(n) => n,
                Err(e) => {
                    p.add(key, e);
                    return *range.start();
                }
            },
        };
        if !range.contains(&n) {
            let (lo, hi) = (format_size(*range.start()), format_size(*range.end()));
            p.add(key, format!("{} is out of range: {lo} to {hi}", format_size(n)));
            return n.clamp(*range.start(), *range.end());
        }
        n
    }
}

/// Renders a size the way the config file spells it: the largest binary unit that
/// divides it, else bytes.
pub fn format_size(n: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n > 0 && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    format!("{n}B")
}

/// Parses `"4MiB"` etc.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size; write bytes or e.g. \"4MiB\""))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TiB" => 1 << 40,
        "TB" => 1_000_000_000_000,
        u => return Err(format!("unknown size unit {u:?} in {s:?}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

/// A secret: literal text, or read from an environment variable or a file (so
/// Kubernetes Secrets can be mounted either way).
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Secret {
    Literal(String),
    Env { env: String },
    File { file: String },
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Literal(_) => f.write_str("Secret(<redacted>)"),
            Secret::Env { env } => write!(f, "Secret(env {env})"),
            Secret::File { file } => write!(f, "Secret(file {file})"),
        }
    }
}

impl Secret {
    /// Resolves the secret's value, reporting a missing variable or file under `key`.
    pub fn resolve(&self, key: &str, p: &mut Problems) -> String {
        match self {
            Secret::Literal(s) => s.clone(),
            Secret::Env { env } => std::env::var(env).unwrap_or_else(|_| {
                p.add(key, format!("environment variable {env} is not set"));
                String::new()
            }),
            Secret::File { file } => match std::fs::read_to_string(file) {
                Ok(s) => s.trim_end_matches(['\n', '\r']).to_string(),
                Err(e) => {
                    p.add(key, format!("cannot read {file}: {e}"));
                    String::new()
                }
            },
        }
    }

    /// How the secret is shown by `check-config`: never the value itself.
    pub fn redacted(&self) -> Secret {
        match self {
            Secret::Literal(_) => Secret::Literal("<redacted>".into()),
            other => other.clone(),
        }
    }
}

/// A file-name glob: `*` any run of characters but `/`, `?` one such character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("is empty; write a glob such as \"debug_state*.txt\" or drop the entry".into());
        }
        Ok(Glob(pattern.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `path` (relative to the logs dir, `/`-separated) matches the whole glob.
    pub fn matches(&self, path: &str) -> bool {
        glob_match(self.0.as_bytes(), path.as_bytes())
    }
}

fn glob_match(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != b'/').any(|i| glob_match(rest, &s[i..]))
        }
        Some((b'?', rest)) => s.first().is_some_and(|&c| c != b'/') && glob_match(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob_match(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86400));
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert!(parse_size("4 lots").is_err());
    }

    #[test]
    fn huge_values_are_refused_with_the_key_and_range() {
        assert!(parse_size("99999999999999GiB").unwrap_err().contains("too large"));
        assert!(parse_size("99999999999999999999").is_err(), "beyond u64");
        assert!(parse_duration("99999999999999999999999d").unwrap_err().contains("too long"));
        let mut p = Problems::default();
        let v = SizeValue::Text("8GiB".into()).get("batch.max_bytes", 1024..=1 << 30, &mut p);
        assert_eq!(v, 1 << 30, "clamped, so later checks see a sane value");
        assert_eq!(p.0, ["batch.max_bytes: 8GiB is out of range: 1KiB to 1GiB"]);
        let mut p = Problems::default();
        let day = Duration::from_secs(86_400);
        let d = DurationValue::Seconds(u64::MAX).get("retry.max_backoff", Duration::ZERO..=day, &mut p);
        assert_eq!(d, day);
        assert_eq!(p.0.len(), 1);
        assert!(p.0[0].starts_with("retry.max_backoff: ") && p.0[0].ends_with("is out of range: 0s to 1d"), "{p}");
        let mut p = Problems::default();
        SizeValue::Text("99999999999999GiB".into()).get("dead_letter.max_bytes", 0..=1, &mut p);
        assert_eq!(p.0, ["dead_letter.max_bytes: \"99999999999999GiB\" is too large"]);
        assert_eq!(format_size(3 << 20), "3MiB");
        assert_eq!(format_size(1000), "1000B");
    }

    #[test]
    fn globs() {
        let g = Glob::new("debug_state*.txt").unwrap();
        assert!(g.matches("debug_state.txt") && g.matches("debug_state_gcs.txt"));
        assert!(!g.matches("old/debug_state.txt") && !g.matches("debug_state.txt.1"));
        let any_dir = Glob::new("*/worker-?.out").unwrap();
        assert!(any_dir.matches("old/worker-1.out") && !any_dir.matches("worker-1.out"));
        assert!(Glob::new("").is_err());
    }
}
