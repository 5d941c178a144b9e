//! The receiver's body check on what a broken or hostile client could post: random
//! bytes, Ray's real posts cut or bent, and JSON arrays of random shape (nesting,
//! Ray's keys in both spellings, huge numbers, weird timestamps, base64 garbage,
//! line breaks between tokens), against limits from tiny to the default. With
//! overflow checks on (`cargo test --profile checked`) it must not panic, and an
//! accepted body (what the receiver answers 200 for once spooled) must come back
//! from the spool as exactly its events, each one whole record.

use proptest::prelude::*;
use proptest::test_runner::Config;
use raylog_parsers::record::FieldValue;

use super::*;
use crate::agent::events::spool::wrapper;

const KEYS: &[&str] = &[
    "eventType",
    "event_type",
    "timestamp",
    "severity",
    "nodeId",
    "node_id",
    "eventId",
    "event_id",
    "sessionName",
    "message",
    "event",
    "post",
    "i",
    "n",
    "actorLifecycleEvent",
    "task_lifecycle_event",
    "taskId",
    "jobId",
    "actor_id",
    "workerId",
    "pid",
    "stateTransitions",
    "state",
    "deathCause",
    "rayErrorInfo",
    "errorType",
    "x",
    "",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(KEYS).prop_map(str::to_string), 1 => "\\PC{0,8}"]
        .prop_map(|k| serde_json::to_string(&k).unwrap())
}

fn scalar() -> impl Strategy<Value = String> {
    let text = prop_oneof![
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{1,14}:[0-9]{1,3})?",
        "[A-Za-z0-9+/=]{0,60}",
        prop::sample::select(&["ACTOR_LIFECYCLE_EVENT", "ALIVE", "DEAD", "AQAAAA==", ""][..]).prop_map(str::to_string),
        any::<String>(),
    ];
    prop_oneof![
        6 => text.prop_map(|s| serde_json::to_string(&s).unwrap()),
        2 => "-?(0|[1-9][0-9]{0,49})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,7})?",
        2 => prop::sample::select(&["true", "false", "null", "\"\\ud800\"", "1e999999"][..]).prop_map(str::to_string),
        1 => (1usize..12).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d))),
        // Long enough to cross the smaller limits.
        1 => (0usize..3000).prop_map(|n| format!("\"{}\"", "y".repeat(n))),
    ]
}

/// Whitespace JSON allows between tokens, line breaks included.
fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["", "", " ", "\n", "\r\n", "\t", "\n  "][..])
}

fn value() -> impl Strategy<Value = String> {
    scalar().prop_recursive(5, 40, 5, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..5), ws()).prop_map(|(v, w)| format!("[{w}{}{w}]", v.join(","))),
            (prop::collection::vec((key(), inner), 0..5), ws()).prop_map(|(m, w)| format!(
                "{{{w}{}}}",
                m.iter().map(|(k, v)| format!("{k}:{w}{v}")).collect::<Vec<_>>().join(",")
            )),
        ]
    })
}

/// An element: mostly an event with a type, sometimes not an event at all.
fn element() -> impl Strategy<Value = String> {
    let ty = prop_oneof![
        8 => prop::sample::select(&["\"TASK_LIFECYCLE_EVENT\"", "\"X\"", "\"é\""][..]),
        // No type a record could be named by.
        1 => prop::sample::select(&["\"\"", "3", "[]", "\"\\u0041\""][..]),
    ];
    let typed = (prop::sample::select(&["\"eventType\"", "\"event_type\""][..]), ty)
        .prop_map(|(k, t)| (k.to_string(), t.to_string()));
    let event =
        (prop::option::weighted(0.9, typed), prop::collection::vec((key(), value()), 0..8), ws(), any::<bool>())
            .prop_map(|(ty, mut rest, w, first)| {
                match ty {
                    Some(t) if first => rest.insert(0, t),
                    Some(t) => rest.push(t),
                    None => {}
                }
                let m: Vec<String> = rest.iter().map(|(k, v)| format!("{w}{k}{w}:{w}{v}")).collect();
                format!("{{{}{w}}}", m.join(","))
            });
    prop_oneof![30 => event, 1 => value()]
}

/// A body: a random array, a real post bent, or bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let real = posts();
    let n = real.len();
    // Ray's posts as they are, and pretty-printed (line breaks between tokens).
    let mut whole = real.clone();
    for p in &real {
        let v: serde_json::Value = serde_json::from_slice(p).unwrap();
        whole.push(serde_json::to_vec_pretty(&v).unwrap());
    }
    prop_oneof![
        6 => (prop::collection::vec(element(), 0..5), ws())
            .prop_map(|(v, w)| format!("{w}[{w}{}{w}]{w}", v.join(&format!(",{w}"))).into_bytes()),
        // One element spoilt: not JSON (Python writes NaN), or nested past what the
        // scanner takes.
        1 => (prop::collection::vec(element(), 1..4), prop::sample::select(&["NaN", "[1,]", "{\"a\"}", "\"\\x\"", "012"][..]), 50usize..70)
            .prop_map(|(mut v, bad, d)| {
                v.push(format!(r#"{{"eventType":"X","v":{bad}}}"#));
                v.push(format!(r#"{{"eventType":"X","v":{}{}}}"#, "[".repeat(d), "]".repeat(d)));
                format!("[{}]", v.join(",")).into_bytes()
            }),
        1 => prop::sample::select(whole),
        1 => (0..n, any::<prop::sample::Index>(), any::<u8>(), 0u8..4).prop_map(move |(p, at, b, how)| {
            let mut body = real[p].clone();
            let at = at.index(body.len() + 1);
            match how {
                0 => body.truncate(at),
                1 if at < body.len() => body[at] = b,
                _ => body.insert(at.min(body.len()), b'\n'),
            }
            body
        }),
        1 => prop::collection::vec(any::<u8>(), 0..300),
    ]
}

/// The limit: as small as the config allows, small enough to refuse some events,
/// and the default.
fn max_line() -> impl Strategy<Value = usize> {
    prop_oneof![Just(16), 100usize..4000, Just(MAX_LINE)]
}

/// The records the source makes of spool bytes with `max_line`.
fn records(lines: &[u8], max_line: usize) -> Vec<(String, bool, Option<String>)> {
    let opts = raylog_parsers::Options { max_line_bytes: max_line, ..Default::default() };
    let meta = raylog_parsers::classify("ray_events/ray_events-000000000001.ndjson", None);
    let (mut p, mut corr, mut got) =
        (raylog_parsers::FileParser::new(meta, None, None), raylog_parsers::Correlator::new(), vec![]);
    let mut keep = |r: &raylog_parsers::Record<'_>| {
        let ty = match r.fields.get("event_type") {
            Some(FieldValue::Str(s) | FieldValue::Json(s)) => Some(s.to_string()),
            None => None,
        };
        got.push((r.message.to_string(), !r.truncated, ty));
    };
    p.push(lines, &mut corr, &opts, &mut keep);
    p.finish(&mut corr, &opts, &mut keep);
    got
}

proptest! {
    #![proptest_config(Config { cases: 512, ..Config::default() })]

    #[test]
    fn random_bodies_are_refused_or_spooled_whole_and_read_back_as_their_events(body in body(), max_line in max_line()) {
        let post = post_id();
        let elements: Option<Vec<String>> = std::str::from_utf8(&body).ok().and_then(|t| {
            let mut v = vec![];
            raylog_parsers::json::elements(t, |e| v.push(e.to_string())).ok().map(|_| v)
        });
        match spool_lines(&body, &post, max_line) {
            Ok(None) => prop_assert_eq!(elements.map(|e| e.len()), Some(0)),
            Ok(Some((lines, n))) => {
                let elements = elements.expect("accepted: a JSON array");
                prop_assert_eq!(n as usize, elements.len());
                prop_assert_eq!(complete_posts(&lines), lines.len() as u64, "whole posts");
                let text = String::from_utf8(lines.clone()).expect("UTF-8 in, UTF-8 out");
                prop_assert!(text.ends_with('\n'));
                let spooled: Vec<&str> = text.lines().collect();
                prop_assert_eq!(spooled.len(), elements.len());
                for (i, (line, e)) in spooled.iter().zip(&elements).enumerate() {
                    prop_assert!(line.len() <= max_line, "{} > {}", line.len(), max_line);
                    prop_assert_eq!(wrapper(line), Some((post.as_str(), i as u64, n)));
                    let kept = format!(r#"{{"post":"{post}","i":{i},"n":{n},"event":{}}}"#, e.replace(['\n', '\r'], " "));
                    prop_assert_eq!(*line, kept.as_str(), "the event as Ray sent it");
                }
                // The source reads each line as one whole record of its event.
                let got = records(&lines, max_line);
                prop_assert_eq!(got.len(), elements.len());
                for (message, uncut, ty) in got {
                    prop_assert!(uncut);
                    let ty = ty.expect("an event_type");
                    prop_assert!(!ty.is_empty() && message.starts_with(&ty), "{} / {}", ty, message);
                }
            }
            Err(Refusal::TooLong { index, event, line, max }) => {
                let elements = elements.expect("measured: a JSON array");
                prop_assert_eq!(max, max_line);
                prop_assert!(line > max && index < elements.len());
                prop_assert_eq!(event, elements[index].len());
            }
            Err(Refusal::Malformed(why)) => {
                prop_assert!(why.starts_with("the body is not") || why.starts_with("element "), "{}", why);
                if let Some(i) = why.strip_prefix("element ").and_then(|r| r.split(' ').next()) {
                    let i: usize = i.parse().unwrap();
                    prop_assert!(i < elements.map_or(0, |e| e.len()));
                }
            }
        }
    }
}
