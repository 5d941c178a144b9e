//! Record filters shared by `raylog parse` and `raylog trace`.
//!
//! Id filters match a full id or any prefix of at least 4 hex characters (people
//! paste the short ids Ray's dashboard shows). All filters must match (AND). A record
//! without the field a filter looks at does not match it.

use raylog_parsers::{Id, Level, Record, Timestamp, Zone};
use regex::Regex;

/// A parsed `--*-id` value: lowercase hex, possibly a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdFilter(String);

/// Error for a bad filter value, naming the flag and the fix.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{flag} {value:?}: not a Ray id; expected hex characters (0-9, a-f), at least 4 and at most {max}, e.g. a full id copied from a log line")]
    BadId { flag: &'static str, value: String, max: usize },
    #[error("{flag} {value:?}: not a time; use RFC 3339 (2026-11-30T09:05:33Z), `YYYY-MM-DD HH:MM:SS` (read in --timezone), or a date")]
    BadTime { flag: &'static str, value: String },
    #[error("--grep {pattern:?}: invalid regular expression: {source}")]
    BadRegex { pattern: String, source: regex::Error },
    #[error("--level {0:?}: expected one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL")]
    BadLevel(String),
}

impl IdFilter {
    /// Validates a user-supplied id (or prefix) for `flag`.
    pub fn parse(flag: &'static str, value: &str, max: usize) -> Result<IdFilter, FilterError> {
        let v = value.trim().to_ascii_lowercase();
        if v.len() < 4 || v.len() > max || !v.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(FilterError::BadId { flag, value: value.to_string(), max });
        }
        Ok(IdFilter(v))
    }

    #[inline]
    pub fn matches(&self, id: Option<Id>) -> bool {
        id.is_some_and(|i| i.as_str().starts_with(&self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// All filters of one command line.
#[derive(Debug, Default)]
pub struct Filter {
    pub actor: Option<IdFilter>,
    pub task: Option<IdFilter>,
    pub job: Option<IdFilter>,
    pub worker: Option<IdFilter>,
    pub node: Option<IdFilter>,
    pub components: Vec<String>,
    pub min_level: Option<Level>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub grep: Option<Regex>,
}

/// Parses `--since`/`--until`.
pub fn parse_time(flag: &'static str, v: &str, zone: &Zone) -> Result<Timestamp, FilterError> {
    Timestamp::parse_flexible(v, zone).ok_or_else(|| FilterError::BadTime { flag, value: v.to_string() })
}

/// Parses `--level`.
pub fn parse_level(v: &str) -> Result<Level, FilterError> {
    Level::from_name(v.as_bytes()).ok_or_else(|| FilterError::BadLevel(v.to_string()))
}

/// Compiles `--grep`.
pub fn parse_grep(p: &str) -> Result<Regex, FilterError> {
    Regex::new(p).map_err(|source| FilterError::BadRegex { pattern: p.to_string(), source })
}

impl Filter {
    /// True when no filter is set.
    pub fn is_empty(&self) -> bool {
        self.actor.is_none()
            && self.task.is_none()
            && self.job.is_none()
            && self.worker.is_none()
            && self.node.is_none()
            && self.components.is_empty()
            && self.min_level.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.grep.is_none()
    }

    /// Whether `r` passes every filter.
    pub fn matches(&self, r: &Record<'_>) -> bool {
        let id_ok = |f: &Option<IdFilter>, id: Option<Id>| f.as_ref().is_none_or(|f| f.matches(id));
        id_ok(&self.actor, r.ids.actor_id)
            && id_ok(&self.task, r.ids.task_id)
            && id_ok(&self.job, r.ids.job_id)
            && id_ok(&self.worker, r.ids.worker_id)
            && id_ok(&self.node, r.ids.node_id)
            && (self.components.is_empty() || self.components.iter().any(|c| c == r.component()))
            && self.min_level.is_none_or(|min| r.level.is_some_and(|l| l >= min))
            && self.since.is_none_or(|s| r.timestamp.is_some_and(|t| t >= s))
            && self.until.is_none_or(|u| r.timestamp.is_some_and(|t| t <= u))
            && self.grep.as_ref().is_none_or(|g| g.is_match(r.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_filters_validate() {
        assert!(IdFilter::parse("--actor-id", "750D0826", 32).is_ok());
        let e = IdFilter::parse("--actor-id", "xyz!", 32).unwrap_err().to_string();
        assert!(e.contains("--actor-id") && e.contains("hex"), "{e}");
        assert!(IdFilter::parse("--job-id", "010", 8).is_err());
        let f = IdFilter::parse("--job-id", "01000000", 8).unwrap();
        assert!(f.matches(Id::parse(b"01000000")));
        assert!(!f.matches(Id::parse(b"02000000")));
        assert!(!f.matches(None));
    }
}
