//! C++ spdlog lines: raylet, GCS, core workers and drivers.
//!
//! `[2026-11-30 09:05:35,278 I 4214 4214] (raylet) worker_pool.cc:564: msg key=value`
//! The `(component)` part is absent in core-worker logs. Context pairs that Ray 2.4x+
//! appends to the first line become ids or `fields`; ids that older Ray writes in
//! prose are picked up by the word before them. Continuation lines (state dumps,
//! `*** StackTrace Information ***`) stay in the message; an `Event stats:` block
//! among them is also read into fields ([`crate::event_stats`]).

use super::{Draft, ParseCtx};
use crate::event_stats;
use crate::ids_in_text::{scan_prose, trailing_pairs};
use crate::record::{FieldValue, Level};
use crate::time::parse_civil;

/// The time of a C++ header line, with the checks [`parse`] makes before it trusts
/// the header (` L pid tid]` after the time).
pub fn header_time(line: &[u8], zone: &crate::time::Zone) -> Option<crate::time::Timestamp> {
    let (civil, n) = parse_civil(line.get(1..)?)?;
    let i = 1 + n;
    if line.get(i) != Some(&b' ') || Level::from_letter(*line.get(i + 1)?).is_none() {
        return None;
    }
    memchr::memchr(b']', &line[i + 2..])?;
    zone.to_utc(civil)
}

/// Parses one C++ record. Returns false when the header is malformed.
pub fn parse<'a>(text: &'a str, scratch: &'a mut String, cx: &ParseCtx<'_>, d: &mut Draft<'a>) -> bool {
    let b = text.as_bytes();
    let Some((civil, n)) = parse_civil(&b[1..]) else {
        return false;
    };
    // After the time: ` L pid tid] `.
    let mut i = 1 + n;
    if b.get(i) != Some(&b' ') {
        return false;
    }
    let Some(level) = b.get(i + 1).and_then(|&c| Level::from_letter(c)) else {
        return false;
    };
    i += 2;
    let Some(close) = memchr::memchr(b']', &b[i..]).map(|p| p + i) else {
        return false;
    };
    let mut nums = text[i..close].split_ascii_whitespace();
    d.pid = nums.next().and_then(|p| p.parse().ok());
    i = close + 1;
    if b.get(i) == Some(&b' ') {
        i += 1;
    }
    if b.get(i) == Some(&b'(') {
        if let Some(p) = memchr::memchr(b')', &b[i..]) {
            i += p + 1;
            if b.get(i) == Some(&b' ') {
                i += 1;
            }
        }
    }
    let rest = &text[i..];
    let first_end = memchr::memchr(b'\n', rest.as_bytes()).unwrap_or(rest.len());
    // `file.cc:123: ` source location, when present.
    let (source, msg_start) = source_location(&rest[..first_end]);
    if let Some(src) = source {
        d.fields.push("source", FieldValue::Str(src));
    }
    d.civil_time(cx.zone, civil);
    d.level = Some(level);
    d.message = &rest[msg_start..];
    let first = &rest[msg_start..first_end];
    let pairs_at = trailing_pairs(first, |k, v| d.put_pair(k, v.trim_end_matches(',')));
    scan_prose(&first[..pairs_at], &mut d.ids);
    // Only a multi-line record can hold a block (rare: one a minute per process).
    if first_end < rest.len() && memchr::memmem::find(d.message.as_bytes(), b"Event stats:").is_some() {
        read_event_stats(scratch, d);
    }
    true
}

/// The fields of the `Event stats:` blocks in `d.message`, written into `scratch`.
fn read_event_stats<'a>(scratch: &'a mut String, d: &mut Draft<'a>) {
    let blocks = event_stats::parse(d.message);
    if blocks.is_empty() {
        return;
    }
    scratch.clear();
    let mut spans = Vec::with_capacity(12);
    event_stats::fields(&blocks, scratch, |key, range| spans.push((key, range)));
    let text: &'a String = scratch;
    for (key, range) in spans {
        d.fields.push(key, FieldValue::Json(&text[range]));
    }
}

/// Splits `file.ext:N: ` off the start of a message.
fn source_location(s: &str) -> (Option<&str>, usize) {
    let b = s.as_bytes();
    let Some(sp) = memchr::memchr(b' ', b) else {
        return (None, 0);
    };
    let tok = &s[..sp];
    if let Some(loc) = tok.strip_suffix(':') {
        if let Some((file, line)) = loc.rsplit_once(':') {
            if file.contains('.') && !line.is_empty() && line.bytes().all(|c| c.is_ascii_digit()) {
                return (Some(loc), sp + 1);
            }
        }
    }
    (None, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FileKind;
    use crate::time::Zone;

    fn run(text: &str) -> Draft<'_> {
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Cpp };
        let mut d = Draft::default();
        let scratch = Box::leak(Box::default());
        assert!(parse(text, scratch, &cx, &mut d), "{text}");
        d
    }

    #[test]
    fn header_pairs_and_component() {
        let d = run("[2026-11-30 09:05:35,278 I 4214 4214] (raylet) worker_pool.cc:564: Started worker process with pid 4468 worker_id=abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2");
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2026-11-30T09:05:35.278Z");
        assert_eq!(d.level, Some(Level::Info));
        assert_eq!(d.pid, Some(4214));
        assert_eq!(
            d.message,
            "Started worker process with pid 4468 worker_id=abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2"
        );
        assert_eq!(d.ids.worker_id.unwrap().as_str(), "abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2");
        assert_eq!(d.fields.get("source"), Some(FieldValue::Str("worker_pool.cc:564")));
    }

    #[test]
    fn no_component_and_continuation() {
        let d = run("[2026-11-30 09:05:37,813 C 4748 4750] core_worker.cc:3247: Check failed\n*** StackTrace Information ***\n  frame 0");
        assert_eq!(d.level, Some(Level::Fatal));
        assert_eq!(d.message, "Check failed\n*** StackTrace Information ***\n  frame 0");
    }

    #[test]
    fn malformed_headers_fall_back() {
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Cpp };
        for bad in [
            "[2026-11-30 09:05:37,813 Q 1 1] x",
            "[2026-11-30 09:05:37,813 I 1 1 no bracket",
            "[2026-99-30 09:05:37,813 I 1 1] x",
        ] {
            assert!(!parse(bad, &mut String::new(), &cx, &mut Draft::default()), "{bad}");
        }
    }
}
