//! What Loki's refusals say, and the reasons written to the dead-letter file.
//!
//! Loki 3.x answers a push whose entries it partly refused with 400 and text, in two
//! shapes (`pkg/ingester/stream.go`, `pkg/distributor/distributor.go`):
//! - the ingester, for its out-of-order window, about the *last* stream that lost
//!   entries: up to ten `entry with timestamp <Go time> ignored, reason: '<why>',`
//!   lines, then `user '<tenant>', total ignored: N out of M for stream: {labels}`;
//! - the distributor, for its validations (age, line size, metadata, labels):
//!   `N errors like: <first error>; M errors like: …`, naming no entry.
//!
//! Each dead-letter reason names the Loki setting behind the refusal, so the operator
//! knows what to raise.

use std::time::Duration;

use raylog_parsers::time::parse_civil;
use raylog_parsers::{Timestamp, Zone};

use crate::agent::config::values::format_duration;
use crate::agent::sinks::DeadReason;

/// The ingester's account of one stream's refused entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// The stream's label string, as Loki prints it (`{a="x", b="y"}`).
    pub stream: String,
    /// How many of its entries were refused.
    pub total: usize,
    /// The times (Unix ns) of the ones listed (at most ten).
    pub listed: Vec<i64>,
    pub kind: DeadReason,
    /// The dead-letter reason: Loki's words and what to do.
    pub reason: String,
}

/// Reads an ingester refusal; `None` for any other text.
pub fn parse_ignored(body: &str) -> Option<Ignored> {
    let (head, tail) = body.rsplit_once("total ignored: ")?;
    let (total, rest) = tail.split_once(" out of ")?;
    let total = total.trim().parse().ok()?;
    let stream = rest.split_once(" for stream: ")?.1.lines().next()?.trim().to_string();
    let mut listed = Vec::new();
    let mut first_reason = None;
    for part in head.split("entry with timestamp ").skip(1) {
        let (time, after) = part.split_once(" ignored, reason: '")?;
        listed.push(go_time(time)?);
        let why = after.rsplit_once("',").map_or(after, |(w, _)| w);
        first_reason.get_or_insert_with(|| why.to_string());
    }
    let why = first_reason.unwrap_or_default();
    let behind = why.contains("too far behind") || why.contains("out of order");
    let (kind, reason) = if behind {
        (
            DeadReason::TooFarBehind,
            format!(
                "Loki: {why} (an entry more than the out-of-order window, max_chunk_age / 2 = 1h by default, \
                 behind the newest entry of its stream is refused; raylog sends each stream in time order, so \
                 this is a replay of entries Loki already has, or another writer of the stream)"
            ),
        )
    } else {
        (DeadReason::Rejected, format!("Loki: {why}"))
    };
    Some(Ignored { stream, total, listed, kind, reason })
}

/// Whether a distributor refusal (`N errors like: …`) counts at least `entries`
/// errors: then every entry sent was refused.
pub fn counts_all(body: &str, entries: usize) -> bool {
    let counted: usize = body
        .split(" errors like: ")
        .filter_map(|before| before.rsplit(|c: char| !c.is_ascii_digit()).next()?.parse::<usize>().ok())
        .sum();
    counted >= entries
}

/// A dead-letter reason for a refusal that names no entry.
pub fn describe(body: &str) -> String {
    let body: String = body.trim().chars().take(1000).collect();
    let hint = if body.contains("timestamp too old") {
        " (raise Loki's limits_config.reject_old_samples_max_age, and reject_old_after here)"
    } else if body.contains("timestamp too new") {
        " (Loki's limits_config.creation_grace_period; check the node's clock and source.timezone)"
    } else if body.contains("Max entry size") {
        " (lower max_line_bytes here to Loki's limits_config.max_line_size)"
    } else if body.contains("structured metadata") {
        " (Loki's limits_config.max_structured_metadata_size / _entries_count)"
    } else {
        ""
    };
    format!("Loki refused it: {body}{hint}")
}

/// The reason for an entry older than `reject_old_after`.
pub fn too_old(ts: i64, limit: Duration) -> String {
    format!(
        "{} is older than reject_old_after ({}): Loki refuses entries older than limits_config.\
         reject_old_samples_max_age (168h by default); raise both to ship it",
        Timestamp(ts).to_rfc3339(),
        format_duration(limit)
    )
}

/// The reason for an entry further ahead than `reject_future_after`.
pub fn too_new(ts: i64, limit: Duration) -> String {
    format!(
        "{} is more than reject_future_after ({}) ahead of this node's clock: Loki refuses entries past \
         limits_config.creation_grace_period (10m by default); check the clocks and source.timezone",
        Timestamp(ts).to_rfc3339(),
        format_duration(limit)
    )
}

/// Unix ns of Go's `Time.String()`: `2026-12-01 09:11:09.204873586 +0000 UTC`.
fn go_time(s: &str) -> Option<i64> {
    let s = s.trim();
    let (civil, used) = parse_civil(s.as_bytes())?;
    let utc = Zone::Utc.to_utc(civil)?.0;
    let zone = s[used..].trim_start();
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let hhmm: i64 = zone.get(1..5)?.parse().ok()?;
    let offset = sign * ((hhmm / 100) * 3600 + (hhmm % 100) * 60);
    utc.checked_sub(offset * 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real answer of Loki 3.4.5 (two streams pushed, the last one named).
    const INGESTER: &str = "entry with timestamp 2026-12-01 09:11:09.204873586 +0000 UTC ignored, reason: 'entry too far behind, entry timestamp is: 2026-12-01T09:11:09Z, oldest acceptable timestamp is: 2026-12-01T09:17:39Z',\nuser 'fake', total ignored: 1 out of 2 for stream: {service_name=\"probe\", t=\"c\"}\n";
    /// A real distributor answer (one entry too old, one line too long).
    const DISTRIBUTOR: &str = "1 errors like: entry for stream '{service_name=\"probe\", t=\"a\"}' has timestamp too old: 2026-11-23T10:17:49Z, oldest acceptable timestamp is: 2026-11-24T10:17:49Z; 1 errors like: Max entry size '262144' bytes exceeded for stream '{service_name=\"probe\", t=\"a\"}' while adding an entry with length '300000' bytes\n";

    #[test]
    fn the_ingester_names_a_stream_and_its_refused_entries() {
        let ig = parse_ignored(INGESTER).expect("an ingester refusal");
        assert_eq!(ig.stream, "{service_name=\"probe\", t=\"c\"}");
        assert_eq!(ig.total, 1);
        let want = "2026-12-01T09:11:09.204873586Z".parse::<jiff::Timestamp>().unwrap().as_nanosecond() as i64;
        assert_eq!(ig.listed, [want]);
        assert_eq!(ig.kind, DeadReason::TooFarBehind);
        assert!(ig.reason.contains("oldest acceptable timestamp") && ig.reason.contains("out-of-order window"));
        assert_eq!(parse_ignored(DISTRIBUTOR), None);
        assert_eq!(go_time("2026-12-01 10:11:09.5 +0100 CET"), go_time("2026-12-01 09:11:09.5 +0000 UTC"));
    }

    #[test]
    fn distributor_refusals_are_counted() {
        assert!(counts_all(DISTRIBUTOR, 2));
        assert!(!counts_all(DISTRIBUTOR, 3), "a third entry was stored");
        assert!(!counts_all("error at the proxy", 1));
        assert!(describe(DISTRIBUTOR).contains("reject_old_samples_max_age"));
    }
}
