//! The event parser on what a broken or hostile exporter could send: random bytes,
//! and JSON events of random shape (nesting, Ray's keys in both spellings, unknown
//! keys, huge numbers, weird timestamps, base64 garbage for ids). Run with overflow
//! checks on (`cargo test --profile checked`) it must not panic, and what it makes
//! must hold together: a parsed event has its type, a record is valid JSON, and a
//! time is the one written or flagged.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::*;
use crate::classify::FileKind;
use crate::formats::{LineFormat, ParseCtx};
use crate::time::Zone;

/// Ray's keys (camelCase and snake_case), the spool wrapper's, and others.
const KEYS: &[&str] = &[
    "eventType",
    "event_type",
    "timestamp",
    "severity",
    "nodeId",
    "node_id",
    "sourceType",
    "source_type",
    "eventId",
    "event_id",
    "sessionName",
    "session_name",
    "message",
    "event",
    "post",
    "i",
    "n",
    "actorLifecycleEvent",
    "actor_definition_event",
    "taskLifecycleEvent",
    "task_definition_event",
    "workerLifecycleEvent",
    "nodeLifecycleEvent",
    "driverJobDefinitionEvent",
    "taskProfileEvents",
    "taskId",
    "task_id",
    "jobId",
    "job_id",
    "actorId",
    "actor_id",
    "workerId",
    "worker_id",
    "driverNodeId",
    "driver_node_id",
    "taskName",
    "task_name",
    "actorTaskName",
    "className",
    "class_name",
    "name",
    "pid",
    "workerPid",
    "worker_pid",
    "driverPid",
    "taskAttempt",
    "attempt_number",
    "workerType",
    "nodeName",
    "entrypoint",
    "stateTransitions",
    "state_transitions",
    "state",
    "deathCause",
    "death_cause",
    "actorDiedErrorContext",
    "reason",
    "deathInfo",
    "exitType",
    "exit_type",
    "rayErrorInfo",
    "ray_error_info",
    "errorType",
    "error_type",
    "profileEvents",
    "profile_events",
    "componentId",
    "component_type",
    "componentType",
    "x",
    "",
    "é\u{1F600}",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![9 => prop::sample::select(KEYS).prop_map(str::to_string), 1 => "[a-zA-Z_]{0,12}"]
}

/// Times as Ray writes them, near the edges of what a `Timestamp` holds, and not.
fn timestamp() -> impl Strategy<Value = String> {
    let digits = "[0-9]{1,45}";
    let offset = prop_oneof![
        Just(String::new()),
        Just("Z".to_string()),
        Just("z".to_string()),
        ("[+-]", "[0-9]{1,3}", "[0-9]{1,3}").prop_map(|(s, h, m)| format!("{s}{h}:{m}")),
        ("[+-]", digits, digits).prop_map(|(s, h, m)| format!("{s}{h}:{m}")),
        Just("+99999999999:00".to_string()),
        "[+-:Z0-9x ]{0,6}",
    ];
    let year = prop_oneof![Just(2026u32), 0u32..=9999, 1677u32..=1678, 2261u32..=2262];
    (year, 1u32..=12, 1u32..=31, 0u32..=23, 0u32..=59, 0u32..=60, "(\\.[0-9]{1,10})?", offset)
        .prop_map(|(y, mo, d, h, mi, s, f, o)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{f}{o}"))
}

/// JSON string text (quoted): escaped properly, or holding raw escapes.
fn string() -> impl Strategy<Value = String> {
    let content = prop_oneof![
        timestamp(),
        // Ids: real, and base64 garbage of every length.
        prop::sample::select(&["AQAAAA==", "G364jcMdJAL2/CeoAQAAAA==", "////////", "", "="][..])
            .prop_map(str::to_string),
        "[A-Za-z0-9+/=_-]{0,90}",
        prop::sample::select(&["ALIVE", "DEAD", "RESTARTING", "FAILED", "worker", "INFO", "ERROR", "FATAL"][..])
            .prop_map(str::to_string),
        "\\PC{0,24}",
        any::<String>(),
    ];
    prop_oneof![
        8 => content.prop_map(|s| serde_json::to_string(&s).unwrap()),
        1 => prop::sample::select(&["\"\\u0041\"", "\"\\ud800\"", "\"a\\nb\"", "\"\\u00\"", "\"\\x\""][..])
            .prop_map(str::to_string),
    ]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        "-?[0-9]{1,60}(\\.[0-9]{1,30})?([eE][+-]?[0-9]{1,8})?",
        prop::sample::select(&["4294967296", "0", "-0", "1e999999", "NaN", "Infinity", "-1"][..])
            .prop_map(str::to_string),
    ]
}

/// Any JSON value, nested a few levels, or (rarely) past the nesting the scanner takes.
fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        4 => string(),
        2 => number(),
        1 => prop::sample::select(&["true", "false", "null"][..]).prop_map(str::to_string),
        1 => (1usize..80).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d))),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key(), inner), 0..6).prop_map(|m| object(&m)),
        ]
    })
}

fn object(members: &[(String, String)]) -> String {
    let m: Vec<String> = members.iter().map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap())).collect();
    format!("{{{}}}", m.join(","))
}

/// An event: usually with an `eventType`, its members in random order.
fn event() -> impl Strategy<Value = String> {
    let ty = prop_oneof![
        prop::sample::select(&["ACTOR_LIFECYCLE_EVENT", "TASK_LIFECYCLE_EVENT", "X", ""][..]).prop_map(str::to_string),
        "\\PC{0,10}",
    ];
    let typed = (prop::sample::select(&["eventType", "event_type"][..]), ty)
        .prop_map(|(k, t)| (k.to_string(), serde_json::to_string(&t).unwrap()));
    let timed = timestamp().prop_map(|t| ("timestamp".to_string(), serde_json::to_string(&t).unwrap()));
    (
        prop::option::weighted(0.9, typed),
        prop::option::weighted(0.7, timed),
        prop::collection::vec((key(), value()), 0..10),
    )
        .prop_map(|(ty, ts, mut rest)| {
            rest.extend(ty);
            rest.extend(ts);
            rest.reverse();
            object(&rest)
        })
}

/// A spool line, a bare event, or anything at all.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => event().prop_map(|e| format!(r#"{{"post":"p","i":0,"n":1,"event":{e}}}"#)),
        2 => event(),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => value(),
    ]
}

/// The type a line's event states the way the receiver checks it: the first
/// non-empty plain `eventType` / `event_type` at its top level.
fn stated_type(line: &str) -> Option<String> {
    let mut inner = None;
    crate::json::members(line, |k, v| {
        if k == "event" && v.raw().starts_with('{') {
            inner = Some(v.raw());
        }
    })
    .ok()?;
    let mut ty = None;
    crate::json::members(inner.unwrap_or(line), |k, v| {
        if matches!(k, "eventType" | "event_type") && ty.is_none() {
            ty = v.plain_str().filter(|t| !t.is_empty()).map(str::to_string);
        }
    })
    .ok()?;
    ty
}

proptest! {
    #![proptest_config(Config { cases: 512, ..Config::default() })]

    #[test]
    fn random_events_parse_without_panic_into_records_that_hold_together(line in line()) {
        let (zone, mut scratch, mut d) = (Zone::Utc, String::new(), Draft::default());
        let cx = ParseCtx { zone: &zone, kind: FileKind::RayEvent };
        let parsed = parse(&line, &mut String::new(), &mut Draft::default());
        crate::formats::parse(LineFormat::RayEvent, &line, &mut scratch, &cx, &mut d);
        // Parsed exactly when the event states a type, and then named by it.
        let ty = stated_type(&line);
        prop_assert_eq!(parsed, ty.is_some());
        if let Some(ty) = &ty {
            prop_assert!(d.message.starts_with(ty.as_str()), "{:?} for {}", d.message, ty);
            prop_assert_eq!(d.fields.get("event_type"), Some(FieldValue::Str(ty.as_str())));
        }
        // The time: the one written, else flagged when it was out of range.
        d.flag_problems(false);
        let flagged = d.fields.get("time_out_of_range").is_some();
        prop_assert!(!(flagged && d.timestamp.is_some()));
        // Through the file parser: one record per line, valid JSON.
        let mut p = crate::FileParser::new(crate::classify("ray_events/ray_events-000000000001.ndjson", None), None, None);
        let (mut corr, opts, mut out) = (crate::Correlator::new(), crate::Options::default(), vec![]);
        let mut keep = |r: &crate::Record<'_>| crate::ndjson::write_record(&mut out, r);
        p.push(format!("{line}\n").as_bytes(), &mut corr, &opts, &mut keep);
        p.finish(&mut corr, &opts, &mut keep);
        for rec in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = match serde_json::from_slice(rec) {
                Ok(v) => v,
                // JSON serde_json refuses: a number past an f64 (`1e999999`), or an
                // escaped lone surrogate (`"\ud800"`): kept verbatim as Ray sent it.
                Err(e) if ["number out of range", "unexpected end of hex escape", "lone leading surrogate"]
                    .iter()
                    .any(|m| e.to_string().starts_with(m)) => continue,
                Err(e) => return Err(TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(rec)))),
            };
            prop_assert_eq!(v["component"].as_str(), Some("ray_event"));
            prop_assert_eq!(v["fields"]["event_type"].as_str(), ty.as_deref());
        }
    }

    /// Against jiff, for every civil time Ray could write and offsets far past any
    /// real one: the instant exactly, or out of range; never another time.
    #[test]
    fn rfc3339_is_exact_or_out_of_range(
        (y, mo, d, h, mi, s, ns) in (0i16..=9999, 1i8..=12, 1i8..=28, 0i8..=23, 0i8..=59, 0i8..=59, 0i32..1_000_000_000),
        sign in prop::sample::select(&["+", "-", "Z"][..]),
        (oh, om) in prop_oneof![(0u64..=48, 0u64..=59), (0u64..=u64::MAX, 0u64..=u64::MAX)],
    ) {
        let civil = jiff::civil::date(y, mo, d).at(h, mi, s, ns);
        let utc = civil.to_zoned(jiff::tz::TimeZone::UTC).unwrap().timestamp().as_nanosecond();
        let (text, want) = if sign == "Z" {
            (format!("{civil}Z"), Some(utc))
        } else {
            let off = (oh as i128 * 60 + om as i128) * 60_000_000_000;
            let at = if sign == "+" { utc - off } else { utc + off };
            (format!("{civil}{sign}{oh:02}:{om:02}"), Some(at))
        };
        let want = want.and_then(|n| i64::try_from(n).ok()).map(Timestamp).ok_or(OutOfRange);
        prop_assert_eq!(rfc3339(&text), Some(want), "{}", text);
    }
}
