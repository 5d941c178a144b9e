//! Event-stats blocks read from real Ray runs (the fixtures), one test per form:
//! GCS in Ray 2.60 (`1.48ms`) and 2.40 (`14.638 ms`), a 2.9 core worker (two
//! io_contexts in one record), and the raylet's `[state-dump]` block.

use serde_json::{json, Value};

use super::*;
use crate::record::FieldValue;
use crate::{classify, Correlator, FileParser, Options};

/// The fields of each record of a fixture file (`fixtures/<run>/session_*/logs/<name>`)
/// that holds an event-stats block, as one JSON object per record.
fn blocks_in(run: &str, name: &str) -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(run);
    let session = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("session_"))
        .expect("a session dir");
    let text = std::fs::read(session.path().join("logs").join(name)).unwrap();
    let mut p = FileParser::new(classify(name, None), None, None);
    let (mut corr, opts, mut out) = (Correlator::new(), Options::default(), vec![]);
    let mut keep = |r: &crate::Record<'_>| {
        if r.fields.get("io_context").is_some() {
            let mut obj = serde_json::Map::new();
            for f in r.fields.iter() {
                let v = match f.value {
                    FieldValue::Json(j) => serde_json::from_str(j).unwrap_or_else(|e| panic!("{}: {e}: {j}", f.key)),
                    FieldValue::Str(s) => json!(s),
                };
                obj.insert(f.key.to_string(), v);
            }
            out.push(Value::Object(obj));
        }
    };
    p.push(&text, &mut corr, &opts, &mut keep);
    p.finish(&mut corr, &opts, &mut keep);
    out
}

fn handler<'v>(block: &'v Value, name: &str) -> &'v Value {
    let hs = block["handlers"].as_array().expect("handlers");
    hs.iter().find(|h| h["handler"] == name).unwrap_or_else(|| panic!("no handler {name} in {hs:?}"))
}

#[test]
fn gcs_blocks_of_ray_2_60_become_numbers_in_seconds() {
    let blocks = blocks_in("ray-2.60-text", "gcs_server.out");
    // The block the issue quotes: 10:21:03,080, `Main service`, 17 total (3 active).
    let main = blocks.iter().find(|b| b["io_context"] == "Main service" && b["global_total"] == 17).expect("block");
    assert_eq!(main["global_active"], 3);
    assert_eq!(main["global_queueing_mean_s"], json!(0.00148));
    assert_eq!(main["global_queueing_max_s"], json!(0.01924));
    assert_eq!(main["global_execution_total_s"], json!(0.03903));
    assert_eq!(
        handler(main, "GcsInMemoryStore.Put"),
        &json!({"handler": "GcsInMemoryStore.Put", "total": 3, "active": 0, "running": 0,
                "execution_mean_s": 0.00649, "execution_total_s": 0.01946, "queueing_mean_s": 0.00651,
                "queueing_max_s": 0.01924, "queueing_min_s": 0.00001, "queueing_total_s": 0.01952})
    );
    // `min = 9223372036854.78ms`: no sample yet, so no `queueing_min_s`.
    let runner = handler(main, "PeriodicalRunner.RunFnPeriodically");
    assert_eq!(
        (runner["total"].as_u64(), runner["active"].as_u64(), runner["running"].as_u64()),
        (Some(2), Some(2), Some(1))
    );
    assert!(runner.get("queueing_min_s").is_none(), "{runner}");
    let contexts: Vec<&str> = blocks.iter().map(|b| b["io_context"].as_str().unwrap()).collect();
    assert!(contexts.contains(&"task_io_context"), "{contexts:?}");
    // Every number is a plain finite number, never a sentinel.
    for b in &blocks {
        for h in b["handlers"].as_array().unwrap() {
            for (k, v) in h.as_object().unwrap() {
                if k.ends_with("_s") {
                    let s = v.as_f64().unwrap();
                    assert!((0.0..1e6).contains(&s), "{k} = {s} in {h}");
                }
            }
        }
    }
}

#[test]
fn gcs_blocks_of_ray_2_40_read_every_unit() {
    let blocks = blocks_in("ray-2.40-text", "gcs_server.out");
    let main = blocks.iter().find(|b| b["io_context"] == "Main service").expect("Main service");
    assert!(main["global_total"].as_u64().unwrap() > 0);
    let all: Vec<&Value> = blocks.iter().flat_map(|b| b["handlers"].as_array().unwrap()).collect();
    assert!(all.len() > 5, "{}", all.len());
    // `max = -0.000 s, min = 9223372036.855 s` leave both out; a handler that ran
    // has both.
    assert!(all.iter().any(|h| h.get("queueing_max_s").is_none() && h.get("queueing_min_s").is_none()));
    assert!(all.iter().any(|h| h["queueing_min_s"].as_f64().is_some_and(|m| m > 0.0 && m < 1e-3)));
}

#[test]
fn a_ray_2_9_core_worker_record_holds_two_io_contexts() {
    let name = "python-core-";
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ray-2.9-plain");
    let session =
        std::fs::read_dir(&dir).unwrap().flatten().find(|e| e.file_name().to_string_lossy().starts_with("session_"));
    let logs = session.unwrap().path().join("logs");
    let file = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|f| f.starts_with(name) && std::fs::read_to_string(logs.join(f)).unwrap().contains("mean = 934.000 ns"))
        .expect("the core worker log with `mean = 934.000 ns`");
    let blocks = blocks_in("ray-2.9-plain", &file);
    let b = blocks.first().expect("a block");
    assert_eq!(b["io_context"], "Main service");
    let more = b["more_io_contexts"].as_array().expect("the task-event buffer's block");
    assert_eq!(more[0]["io_context"], TASK_EVENTS);
    assert!(more[0]["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["handler"] == "PeriodicalRunner.RunFnPeriodically"));
    // Ray 2.9 prints nanoseconds too: `mean = 934.000 ns`.
    let runner = handler(b, "PeriodicalRunner.RunFnPeriodically");
    assert_eq!(runner["execution_mean_s"], json!(9.34e-7), "{runner}");
}

#[test]
fn the_raylets_state_dump_block_is_read_past_its_prefix() {
    let blocks = blocks_in("ray-2.60-text", "raylet.out");
    let b = blocks.iter().find(|b| b["global_total"] == 32).expect("the 32-event block");
    assert_eq!(b["io_context"], "Main service", "the node manager's own io_context comes first");
    assert_eq!(b["more_io_contexts"][0]["io_context"], "ObjectManager");
    assert_eq!(b["global_active"], 15);
    let lag = handler(b, "event_loop_lag_probe");
    assert_eq!(lag["queueing_mean_s"], json!(0.00306));
    assert_eq!(lag["total"], 2);
}

#[test]
fn sentinels_and_units() {
    assert_eq!(seconds("1.48ms"), Some(0.00148));
    assert_eq!(seconds("14.638 ms"), Some(0.014638));
    assert_eq!(seconds("934.000 ns"), Some(934e-9));
    assert_eq!(seconds("2.843 us"), Some(2.843e-6));
    assert_eq!(seconds("0.000 s"), Some(0.0));
    for sentinel in
        ["-nanms", "-nan s", "-0.00ms", "-0.000 s", "9223372036854.78ms", "9223372036.855 s", "12 parsecs", ""]
    {
        assert_eq!(seconds(sentinel), None, "{sentinel}");
    }
}

#[test]
fn other_multi_line_records_get_no_fields() {
    assert!(parse("Check failed\n*** StackTrace Information ***\n  frame 0").is_empty());
    assert!(parse("Event stats:\n\tnot a handler line").is_empty(), "no `Global stats:`: no block");
}
