//! Python lines: component logs and structured logging in TEXT encoding.
//!
//! `2026-11-30 09:05:34,791\tINFO agent.py:177 -- message` is the format of every
//! Python component (dashboard, agents, monitor) and, with Ray context pairs appended
//! (`job_id=… worker_id=… task_id=… timestamp_ns=…`), of structured logging in a
//! worker. The context pairs are Ray's metadata, not the user's message, so they are
//! moved into ids and stripped from `message`; Ray 2.40 writes them after the last
//! traceback line, so they are looked for at the end of the whole record.

use super::{Draft, ParseCtx};
use crate::ids_in_text::trailing_pairs;
use crate::record::{FieldValue, Level};
use crate::time::{parse_civil, EpochUnit};

/// Keys Ray's structured TEXT formatter appends after the message.
fn is_ray_context_key(k: &str) -> bool {
    matches!(
        k,
        "job_id"
            | "worker_id"
            | "node_id"
            | "actor_id"
            | "task_id"
            | "task_name"
            | "task_func_name"
            | "actor_name"
            | "timestamp_ns"
            | "placement_group_id"
    )
}

/// Parses one Python-format record. Returns false if the prefix is not there.
pub fn parse<'a>(text: &'a str, cx: &ParseCtx<'_>, d: &mut Draft<'a>) -> bool {
    let b = text.as_bytes();
    let Some((civil, n)) = parse_civil(b) else {
        return false;
    };
    let mut i = n;
    while matches!(b.get(i), Some(b'\t' | b' ')) {
        i += 1;
    }
    let lvl_end = b[i..].iter().position(|c| !c.is_ascii_alphabetic()).map_or(b.len(), |p| p + i);
    let Some(level) = Level::from_name(&b[i..lvl_end]) else {
        return false;
    };
    i = lvl_end;
    while b.get(i) == Some(&b' ') {
        i += 1;
    }
    // Optional `(component) ` with RAY_LOG_TO_STDERR=1.
    if b.get(i) == Some(&b'(') {
        if let Some(p) = memchr::memchr(b')', &b[i..]) {
            i += p + 1;
            while b.get(i) == Some(&b' ') {
                i += 1;
            }
        }
    }
    let first_end = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |p| p + i);
    // `file.py:N -- ` before the message.
    if let Some(sep) = super::find_separator(&b[i..first_end]) {
        let src = &text[i..i + sep];
        if !src.contains(' ') {
            d.fields.push("source", FieldValue::Str(src));
        }
        i += sep + 4;
    }
    d.civil_time(cx.zone, civil);
    d.level = Some(level);
    d.message = strip_context(&text[i..], d);
    true
}

/// Moves Ray's trailing context pairs into `d` and returns the message without them.
///
/// The pairs are the run of `key=value` tokens at the end of the record's last line,
/// from the first (leftmost) Ray context key on: Ray 2.40 writes `timestamp_ns=… item=1
/// job_id=…` (user `extra` pairs among its own, which become `fields` like the JSON
/// encoding's extra keys), 2.60 writes `item=1 job_id=… timestamp_ns=…`. Pairs left of
/// the first Ray key stay in the message: they may be the user's own text
/// (`loss=0.3 lr=3e-4`) and the line cannot tell.
fn strip_context<'a>(msg: &'a str, d: &mut Draft<'a>) -> &'a str {
    const MAX_PAIRS: usize = 24;
    let last_line_start = memchr::memrchr(b'\n', msg.as_bytes()).map_or(0, |p| p + 1);
    let last = &msg[last_line_start..];
    let mut pairs: [(&str, &str); MAX_PAIRS] = [("", ""); MAX_PAIRS];
    let mut n = 0;
    let mut cut: Option<usize> = None;
    trailing_pairs(last, |k, v| {
        if n == MAX_PAIRS {
            return;
        }
        pairs[n] = (k, v);
        n += 1;
        if is_ray_context_key(k) {
            // Offset of this token in `last`; pairs are found right to left, so the
            // last Ray key seen is the leftmost.
            cut = Some(k.as_ptr() as usize - last.as_ptr() as usize);
        }
    });
    let Some(cut) = cut else { return msg };
    // Apply left to right so the first of a repeated key wins.
    for &(k, v) in pairs[..n].iter().rev() {
        if (k.as_ptr() as usize - last.as_ptr() as usize) < cut {
            continue;
        }
        if k == "timestamp_ns" {
            d.epoch_time(v, EpochUnit::Nanos);
        } else {
            d.put_pair(k, v);
        }
    }
    msg[..last_line_start + cut].trim_end_matches([' ', '\n'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FileKind;
    use crate::time::Zone;

    fn run(text: &str) -> Draft<'_> {
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Worker };
        let mut d = Draft::default();
        assert!(parse(text, &cx, &mut d), "{text}");
        d
    }

    #[test]
    fn component_line() {
        let d = run("2026-11-30 09:05:34,791\tINFO agent.py:177 -- Dashboard agent grpc address: 0.0.0.0:1");
        assert_eq!(d.level, Some(Level::Info));
        assert_eq!(d.message, "Dashboard agent grpc address: 0.0.0.0:1");
        assert_eq!(d.fields.get("source"), Some(FieldValue::Str("agent.py:177")));
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2026-11-30T09:05:34.791Z");
    }

    #[test]
    fn structured_text_strips_context() {
        let d = run("2026-11-30 09:05:37,936\tWARNING workload.py:28 -- counter beta at 1 lr=3 job_id=01000000 worker_id=78d4630a58840d032a9dd87f4bf08d0f07a48465f2b862515c3b4935 actor_id=750d082651ea8a01532ff64101000000 task_id=d695f922effe6d99750d082651ea8a01532ff64101000000 task_name=Counter.incr actor_name=beta timestamp_ns=1796029537936183997");
        assert_eq!(d.message, "counter beta at 1 lr=3", "pairs before Ray's stay the user's text");
        assert_eq!(d.fields.get("lr"), None);
        assert_eq!(d.task_name, Some("Counter.incr"));
        assert_eq!(d.actor_name, Some("beta"));
        assert_eq!(d.ids.actor_id.unwrap().as_str(), "750d082651ea8a01532ff64101000000");
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2026-11-30T09:05:37.936183997Z");
    }

    #[test]
    fn ray_240_order() {
        let d = run("2026-11-30 10:20:35,732\tINFO workload.py:37 -- squaring 1 timestamp_ns=1796034035732288839 item=1 job_id=01000000 task_id=16310a0f0a45af5cffffffffffffffffffffffff01000000");
        assert_eq!(d.message, "squaring 1");
        assert_eq!(d.fields.get("item"), Some(FieldValue::Str("1")));
        let d = run("2026-11-30 10:20:35,732\tINFO x.py:1 -- user says a=1 b=2");
        assert_eq!(d.message, "user says a=1 b=2", "no Ray key: the pairs are the user's text");
    }

    #[test]
    fn pairs_after_traceback() {
        let d = run("2026-11-30 09:05:37,936\tERROR w.py:9 -- failed\nTraceback (most recent call last):\n  File \"w.py\", line 9, in f\nValueError: bad job_id=01000000 task_id=16310a0f0a45af5cffffffffffffffffffffffff01000000");
        assert_eq!(
            d.message,
            "failed\nTraceback (most recent call last):\n  File \"w.py\", line 9, in f\nValueError: bad"
        );
        assert_eq!(d.ids.task_id.unwrap().as_str(), "16310a0f0a45af5cffffffffffffffffffffffff01000000");
    }
}
