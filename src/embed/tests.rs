//! The embedding's output against the command line's, on the bundled fixtures.

use std::path::PathBuf;

use super::columns::{Column, SCHEMA};
use super::stream::{Chunk, Kind, Records};
use super::*;

fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/ray-2.60-text").display().to_string()
}

fn query(flags: &[(&str, &str)]) -> Query {
    Query { flags: flags.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect(), paths: vec![fixture()] }
}

fn ndjson(q: &Query) -> Vec<u8> {
    let mut r = Records::start(q, Kind::Ndjson).unwrap();
    let mut out = Vec::new();
    while let Some(c) = r.next_chunk() {
        let Chunk::Ndjson(b) = c else { panic!("asked for NDJSON") };
        out.extend(b);
    }
    assert!(r.end().unwrap().failures.is_empty());
    out
}

#[test]
fn a_keyword_error_names_the_keyword_not_the_flag() {
    let e = Records::start(&query(&[("actor_id", "zz")]), Kind::Ndjson).err().unwrap().to_string();
    assert!(e.contains("actor_id") && !e.contains("--actor-id"), "{e}");
    let e = Records::start(&query(&[("colour", "x")]), Kind::Ndjson).err().unwrap().to_string();
    assert!(e.contains("colour"), "{e}");
    let missing = Query { flags: vec![], paths: vec!["/nonexistent/ray".into()] };
    let e = Records::start(&missing, Kind::Ndjson).err().unwrap();
    assert!(matches!(&e, stream::StartError::Missing(p) if p == "/nonexistent/ray"), "{e}");
}

#[test]
fn threads_do_not_change_the_records() {
    let one = ndjson(&query(&[("threads", "1")]));
    let two = ndjson(&query(&[("threads", "2")]));
    assert!(one.len() > 100_000 && one == two);
    let filtered = ndjson(&query(&[("threads", "2"), ("level", "ERROR")]));
    assert_eq!(filtered, ndjson(&query(&[("threads", "1"), ("level", "ERROR")])), "one thread filters too");
    let want: Vec<&[u8]> = one
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_slice(l).unwrap();
            matches!(v["level"].as_str(), Some("ERROR" | "FATAL"))
        })
        .collect();
    assert!(!want.is_empty());
    assert_eq!(filtered, want.concat());
}

/// Every column of every row holds the value of the record's NDJSON member.
#[test]
fn columns_hold_the_ndjson_values() {
    let lines = ndjson(&query(&[("threads", "1")]));
    let lines: Vec<serde_json::Value> =
        lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    let mut r = Records::start(&query(&[("threads", "1")]), Kind::Columns(1000)).unwrap();
    let mut row = 0;
    while let Some(Chunk::Columns(c)) = r.next_chunk() {
        assert!(c.len() <= 1000);
        for i in 0..c.len() {
            let want = &lines[row + i];
            for (col, (name, _)) in c.columns.iter().zip(SCHEMA) {
                let mut got = value(col, i, name);
                if *name == "fields" && got.is_string() {
                    got = serde_json::from_str(got.as_str().unwrap()).unwrap();
                }
                let expect = match (*name, want.get(*name)) {
                    ("timestamp", Some(t)) => serde_json::json!(ns(t.as_str().unwrap())),
                    (_, Some(v)) => v.clone(),
                    ("timestamp_inferred" | "timestamp_estimated" | "truncated", None) => serde_json::json!(false),
                    (_, None) => serde_json::Value::Null,
                };
                assert_eq!(got, expect, "row {} column {name}", row + i);
            }
        }
        row += c.len();
    }
    assert_eq!(row, lines.len());
}

fn ns(rfc3339: &str) -> i64 {
    let t: jiff::Timestamp = rfc3339.parse().unwrap();
    t.as_nanosecond() as i64
}

fn value(col: &Column, i: usize, name: &str) -> serde_json::Value {
    let bit = |b: &columns::Bits| b.bytes[i / 8] >> (i % 8) & 1 == 1;
    match col {
        Column::Utf8 { valid, offsets, data } if bit(valid) => {
            serde_json::json!(std::str::from_utf8(&data[offsets[i] as usize..offsets[i + 1] as usize]).unwrap())
        }
        Column::Wide { valid, values } if bit(valid) && name == "timestamp" => serde_json::json!(values[i] as i64),
        Column::Wide { valid, values } if bit(valid) => serde_json::json!(values[i]),
        Column::Narrow { valid, values } if bit(valid) => serde_json::json!(values[i]),
        Column::Bool(b) => serde_json::json!(bit(b)),
        _ => serde_json::Value::Null,
    }
}

#[test]
fn health_and_trace_run_into_memory() {
    let h = run_report("health", &query(&[])).unwrap();
    assert_eq!(h.code, 0);
    let v: serde_json::Value = serde_json::from_slice(&h.json).unwrap();
    assert!(v.get("worker_deaths").is_some(), "{v}");
    let t = run_report("trace", &query(&[("actor_id", "ceeabe45")])).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&t.json).unwrap();
    assert!(v["summary"]["actor_id"].as_str().unwrap().starts_with("ceeabe45"), "{}", v["summary"]);
    assert!(v["records"].as_array().unwrap().len() > 10);
}

/// A logs dir, an archive and a single file are each a unit; a path given twice (or
/// once through a symlink'd spelling) is read once, as `parse` reads it.
#[test]
fn read_units_split_by_logs_dir_and_read_each_once() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let text = root.join("ray-2.60-text");
    let health = root.join("ray-2.60-health");
    let units =
        read_units(&[text.clone(), health.clone(), text.join("."), root.join("../fixtures/ray-2.60-text")]).unwrap();
    assert_eq!(units.len(), 2, "{units:?}");
    assert!(units.iter().all(|u| u.ends_with("/logs")), "{units:?}");
    let e = read_units(&[root.join("no-such-dir")]).unwrap_err();
    assert!(e.contains("no-such-dir"), "{e}");
}

/// A value that starts with `-` is the keyword's value, not a flag.
#[test]
fn a_value_starting_with_a_dash_stays_a_value() {
    let q = query(&[("grep", "-+ ?actor"), ("threads", "1")]);
    let Ok(crate::cli::Command::Parse(a)) = q.parse_args("parse") else { panic!("parses") };
    assert_eq!(a.filter.grep.as_deref(), Some("-+ ?actor"));
}
