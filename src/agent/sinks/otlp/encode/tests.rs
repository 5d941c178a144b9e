//! The encoders against a decoder written here from the `.proto` files alone, and
//! against each other: the protobuf and the JSON body of one batch must decode to
//! the same records, and each record must say what `raylog parse`'s record says.

use std::collections::BTreeMap;
use std::sync::Arc;

use raylog_parsers::{classify, Correlator, FileParser, Options};
use serde_json::{json, Value};

use super::{OtlpEncoder, SCOPE_NAME, SCOPE_VERSION};
use crate::agent::batch::{doc_id, Batch, NodeIdentity};
use crate::agent::config::values::Problems;
use crate::agent::sinks::gzip::tests::gunzip;
use crate::agent::sinks::otlp::config::{OtlpConfig, OtlpRaw};

/// A decoded `LogRecord`: attribute values as JSON (kvlist → object, array → array).
#[derive(Debug, PartialEq)]
pub struct Rec {
    pub time: u64,
    pub observed: u64,
    pub severity: Option<(u64, String)>,
    pub body: Value,
    pub attrs: BTreeMap<String, Value>,
}

/// A decoded request: resource attributes, scope, records.
#[derive(Debug, PartialEq)]
pub struct Req {
    pub resource: BTreeMap<String, Value>,
    pub scope: (String, String),
    pub records: Vec<Rec>,
}

fn varint(b: &mut &[u8]) -> u64 {
    let mut v = 0;
    for i in 0.. {
        let (byte, rest) = b.split_first().expect("varint past the end");
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            break;
        }
    }
    v
}

enum F<'a> {
    V(u64),
    L(&'a [u8]),
    X(u64),
}

/// Every field of a message, in order; panics on anything malformed.
fn fields(mut b: &[u8]) -> Vec<(u64, F<'_>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let tag = varint(&mut b);
        let v = match tag & 7 {
            0 => F::V(varint(&mut b)),
            1 => {
                let (x, rest) = b.split_at(8);
                b = rest;
                F::X(u64::from_le_bytes(x.try_into().unwrap()))
            }
            2 => {
                let n = varint(&mut b) as usize;
                let (x, rest) = b.split_at(n);
                b = rest;
                F::L(x)
            }
            w => panic!("wire type {w}"),
        };
        out.push((tag >> 3, v));
    }
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8")
}

fn any(b: &[u8]) -> Value {
    let f = fields(b);
    assert!(f.len() <= 1, "an AnyValue holds one value");
    match f.first() {
        None => Value::Null,
        Some((1, F::L(s))) => Value::String(text(s)),
        Some((2, F::V(v))) => Value::Bool(*v != 0),
        Some((3, F::V(v))) => json!(*v as i64),
        Some((4, F::X(v))) => json!(f64::from_bits(*v)),
        Some((5, F::L(a))) => {
            Value::Array(fields(a).iter().map(|(_, v)| if let F::L(x) = v { any(x) } else { panic!() }).collect())
        }
        Some((6, F::L(kv))) => Value::Object(
            fields(kv).iter().map(|(_, v)| if let F::L(x) = v { key_value(x) } else { panic!() }).collect(),
        ),
        Some((n, _)) => panic!("AnyValue field {n}"),
    }
}

fn key_value(b: &[u8]) -> (String, Value) {
    let (mut k, mut v) = (String::new(), Value::Null);
    for (n, f) in fields(b) {
        match (n, f) {
            (1, F::L(s)) => k = text(s),
            (2, F::L(s)) => v = any(s),
            (n, _) => panic!("KeyValue field {n}"),
        }
    }
    (k, v)
}

fn attrs_into(map: &mut BTreeMap<String, Value>, b: &[u8]) {
    let (k, v) = key_value(b);
    assert!(map.insert(k.clone(), v).is_none(), "attribute {k} twice");
}

/// Decodes an `ExportLogsServiceRequest` with one resource and one scope.
pub fn decode_pb(body: &[u8]) -> Req {
    let top = fields(body);
    assert_eq!(top.len(), 1, "one ResourceLogs");
    let F::L(rl) = top[0].1 else { panic!() };
    let mut req = Req { resource: BTreeMap::new(), scope: Default::default(), records: Vec::new() };
    for (n, f) in fields(rl) {
        match (n, f) {
            (1, F::L(res)) => fields(res).iter().for_each(|(n, f)| match (n, f) {
                (1, F::L(kv)) => attrs_into(&mut req.resource, kv),
                _ => panic!("Resource field {n}"),
            }),
            (2, F::L(sl)) => {
                for (n, f) in fields(sl) {
                    match (n, f) {
                        (1, F::L(scope)) => {
                            for (n, f) in fields(scope) {
                                match (n, f) {
                                    (1, F::L(s)) => req.scope.0 = text(s),
                                    (2, F::L(s)) => req.scope.1 = text(s),
                                    _ => panic!(),
                                }
                            }
                        }
                        (2, F::L(r)) => req.records.push(record(r)),
                        (n, _) => panic!("ScopeLogs field {n}"),
                    }
                }
            }
            (n, _) => panic!("ResourceLogs field {n}"),
        }
    }
    req
}

fn record(b: &[u8]) -> Rec {
    let mut r = Rec { time: 0, observed: 0, severity: None, body: Value::Null, attrs: BTreeMap::new() };
    let mut sev = (0, String::new());
    for (n, f) in fields(b) {
        match (n, f) {
            (1, F::X(t)) => r.time = t,
            (11, F::X(t)) => r.observed = t,
            (2, F::V(s)) => sev.0 = s,
            (3, F::L(s)) => sev.1 = text(s),
            (5, F::L(s)) => r.body = any(s),
            (6, F::L(kv)) => attrs_into(&mut r.attrs, kv),
            (n, _) => panic!("LogRecord field {n}"),
        }
    }
    r.severity = (sev.0 != 0).then_some(sev);
    r
}

/// Decodes an OTLP/JSON request into the same shape, strictly: 64-bit integers
/// must be strings, names lowerCamelCase.
pub fn decode_json(body: &[u8]) -> Req {
    let v: Value = serde_json::from_slice(body).expect("JSON");
    let rl = &v["resourceLogs"].as_array().unwrap()[..];
    assert_eq!(rl.len(), 1);
    let kvs = |a: &Value| -> BTreeMap<String, Value> {
        a.as_array()
            .unwrap()
            .iter()
            .map(|kv| (kv["key"].as_str().unwrap().to_string(), json_any(&kv["value"])))
            .collect()
    };
    let sl = &rl[0]["scopeLogs"][0];
    let records = sl["logRecords"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Rec {
            time: r["timeUnixNano"].as_str().expect("a string").parse().unwrap(),
            observed: r["observedTimeUnixNano"].as_str().expect("a string").parse().unwrap(),
            severity: r
                .get("severityNumber")
                .map(|n| (n.as_u64().unwrap(), r["severityText"].as_str().unwrap().into())),
            body: json_any(&r["body"]),
            attrs: kvs(&r["attributes"]),
        })
        .collect();
    Req {
        resource: kvs(&rl[0]["resource"]["attributes"]),
        scope: (sl["scope"]["name"].as_str().unwrap().into(), sl["scope"]["version"].as_str().unwrap().into()),
        records,
    }
}

fn json_any(v: &Value) -> Value {
    let o = v.as_object().unwrap();
    assert!(o.len() <= 1, "one value in {v}");
    match o.iter().next() {
        None => Value::Null,
        Some((k, x)) => match k.as_str() {
            "stringValue" | "boolValue" | "doubleValue" => x.clone(),
            "intValue" => json!(x.as_str().expect("int64 as a string").parse::<i64>().unwrap()),
            "arrayValue" => Value::Array(x["values"].as_array().unwrap().iter().map(json_any).collect()),
            "kvlistValue" => Value::Object(
                x["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|kv| (kv["key"].as_str().unwrap().into(), json_any(&kv["value"])))
                    .collect(),
            ),
            other => panic!("AnyValue member {other}"),
        },
    }
}

const SESSION: &str = "session_2026-11-30_10-22-01_024701_5177";

/// Real lines of several kinds (from the fixtures), parsed as the agent does.
pub fn sample_batch() -> Batch {
    let labels = [("ray.io/node-type".to_string(), "head".to_string())].into();
    let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), labels));
    let mut b = Batch::new(1, node);
    let files: [(&str, &str); 5] = [
        ("gcs_server.out", "[2026-11-30 10:21:03,080 I 4034 4034] (gcs_server) gcs_server.cc:1322: Main service Event stats: tab\tand \"quotes\" é\n[2026-11-30 10:21:04,001 W 4034 4034] (gcs_server) gcs_actor_manager.cc:77: Actor died actor_id=946fe8f36ddb9dc6e6afc94401000000\n"),
        ("worker-d361d2f5cf595a2fc4000787fc546f9695478a0a0532d84be46f5093-01000000-5490.out", ":job_id:01000000\nhello from a print\n"),
        ("events/event_GCS.log", "{\"event_id\":\"aa01\",\"source_type\":\"GCS\",\"severity\":\"INFO\",\"label\":\"X\",\"message\":\"m\",\"timestamp\":1764618359,\"custom_fields\":{\"job_id\":\"01000000\"},\"node_id\":\"not an id\",\"truncated\":1}\n"),
        ("export_events/event_EXPORT_ACTOR.log", "{\"event_id\":\"1d54\",\"timestamp\":1764498127,\"source_type\":\"EXPORT_ACTOR\",\"event_data\":{\"actor_id\":\"lG/o823bncbmr8lEAQAAAA==\",\"job_id\":\"AQAAAA==\",\"state\":\"ALIVE\",\"pid\":5490,\"is_detached\":false,\"labels\":{},\"ratio\":0.5,\"tags\":[\"a\",1,null],\"name\":\"say \\\"hi\\\"\"}}\n"),
        ("events/event_RAYLET.log", "{\"event_id\":\"70c8\",\"source_type\":\"RAYLET\",\"source_hostname\":\"vm\",\"source_pid\":3171,\"severity\":\"ERROR\",\"label\":\"RAY_WORKER_FAILURE\",\"message\":\"A worker died\",\"timestamp\":1764618359,\"custom_fields\":{\"worker_id\":\"b1ba2105ece393310e260b0e179de287f32d8622e7bca48f0a9fc358\",\"job_id\":\"01000000\"}}\n"),
    ];
    let (mut corr, opts) = (Correlator::new(), Options::default());
    for (name, body) in files {
        let mut meta = classify(name, Some(SESSION));
        meta.path = Some(format!("/tmp/ray/{SESSION}/logs/{name}"));
        let mut p = FileParser::new(meta, None, None);
        let mut push =
            |r: &raylog_parsers::Record<'_>| b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message));
        p.push(body.as_bytes(), &mut corr, &opts, &mut push);
        p.finish(&mut corr, &opts, &mut push);
    }
    b
}

pub fn config(extra: &str) -> OtlpConfig {
    config_at("http://c:4318", extra)
}

pub fn config_at(endpoint: &str, extra: &str) -> OtlpConfig {
    let raw: OtlpRaw = toml::from_str(&format!("endpoint = \"{endpoint}\"\n{extra}")).unwrap();
    let mut p = Problems::default();
    let c = raw.validate("sinks[0]", &mut p);
    assert!(p.is_empty(), "{p}");
    c
}

fn encode(extra: &str, b: &Batch) -> Vec<u8> {
    let sel: Vec<u32> = (0..b.len() as u32).collect();
    OtlpEncoder::new(&config(extra)).encode(b, &sel, usize::MAX).unwrap().body.to_vec()
}

#[test]
fn protobuf_and_json_say_the_same() {
    let b = sample_batch();
    let pb = decode_pb(&encode("compression = \"none\"", &b));
    let js = decode_json(&encode("compression = \"none\"\nencoding = \"json\"", &b));
    assert_eq!(pb, js);
    assert_eq!(pb.records.len(), b.len());
    assert_eq!(decode_pb(&gunzip(&encode("", &b))), pb, "gzip is the same body");
}

#[test]
fn resource_and_scope() {
    let b = sample_batch();
    let req = decode_pb(&encode(
        "compression = \"none\"\nservice_name = \"ray-prod\"\nservice_namespace = \"ml\"\nresource_attributes = { \"deployment.environment.name\" = \"prod\", \"host.name\" = \"ignored\" }",
        &b,
    ));
    let want: BTreeMap<String, Value> = [
        ("service.name", "ray-prod"),
        ("service.namespace", "ml"),
        ("service.instance.id", "node-a"),
        ("k8s.cluster.name", "c1"),
        ("k8s.node.name", "node-a"),
        ("host.name", "node-a"),
        ("deployment.environment.name", "prod"),
        ("ray.io/node-type", "head"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), json!(v)))
    .collect();
    assert_eq!(req.resource, want);
    assert_eq!(req.scope, (SCOPE_NAME.to_string(), SCOPE_VERSION.to_string()));
}

/// Record fields with an attribute of their own (attrs.rs).
const TAKEN: [&str; 15] = [
    "node_id",
    "job_id",
    "worker_id",
    "actor_id",
    "task_id",
    "component",
    "session",
    "submission_id",
    "task_name",
    "actor_name",
    "file",
    "offset",
    "timestamp_inferred",
    "timestamp_estimated",
    "truncated",
];

/// What the record's own JSON says, in the attribute names of docs/otlp.md's table.
fn expected_attrs(rec: &Value, doc: u128) -> BTreeMap<String, Value> {
    let mut want = BTreeMap::new();
    for id in ["node_id", "job_id", "worker_id", "actor_id", "task_id"] {
        if let Some(v) = rec.get(id) {
            want.insert(format!("ray.{id}"), v.clone());
        }
    }
    for k in ["component", "session", "submission_id", "task_name", "actor_name", "file", "offset"] {
        if let Some(v) = rec.get(k) {
            want.insert(format!("ray.{k}"), v.clone());
        }
    }
    let file = rec["file"].as_str().unwrap();
    want.insert("log.file.name".into(), json!(file.rsplit('/').next().unwrap()));
    want.insert("log.file.path".into(), json!(format!("/tmp/ray/{SESSION}/logs/{file}")));
    if let Some(s) = rec.get("stream") {
        want.insert("log.iostream".into(), s.clone());
    }
    if let Some(p) = rec.get("pid") {
        want.insert("process.pid".into(), p.clone());
    }
    want.insert("log.record.uid".into(), json!(format!("{doc:032x}")));
    if rec.get("timestamp_inferred").is_some() || rec.get("timestamp").is_none() {
        want.insert("ray.timestamp_inferred".into(), json!(true));
    }
    if rec.get("timestamp_estimated").is_some() {
        want.insert("ray.timestamp_estimated".into(), json!(true));
    }
    for (k, v) in rec.get("fields").and_then(|f| f.as_object()).into_iter().flatten() {
        match (k.as_str(), v.as_str().and_then(|s| s.rsplit_once(':'))) {
            ("source", Some((f, l))) if l.parse::<u32>().is_ok() => {
                want.insert("code.filepath".into(), json!(f));
                want.insert("code.lineno".into(), json!(l.parse::<i64>().unwrap()));
            }
            _ if TAKEN.contains(&k.as_str()) && rec.get(k).is_some() => {
                want.insert(format!("ray.fields.{k}"), v.clone());
            }
            _ => {
                want.insert(format!("ray.{k}"), v.clone());
            }
        }
    }
    want
}

#[test]
fn every_record_says_what_its_json_says() {
    let b = sample_batch();
    let req = decode_pb(&encode("compression = \"none\"", &b));
    let mut kinds = std::collections::BTreeSet::new();
    for (e, got) in b.entries.iter().zip(&req.records) {
        let rec: Value = serde_json::from_str(b.json_of(e)).unwrap();
        kinds.insert(rec["component"].as_str().unwrap().to_string());
        assert_eq!(got.body, rec["message"], "{rec}");
        let level = rec.get("level").and_then(|l| l.as_str());
        let want_sev = level.map(|l| {
            let n = match l {
                "DEBUG" => 5,
                "INFO" => 9,
                "WARNING" => 13,
                "ERROR" => 17,
                "FATAL" => 21,
                other => panic!("{other}"),
            };
            (n, l.to_string())
        });
        assert_eq!(got.severity, want_sev, "{rec}");
        let mut want = expected_attrs(&rec, e.doc_id);
        let mut attrs = got.attrs.clone();
        // The event keys are derived, checked below.
        for k in ["ray.event_type", "ray.state"] {
            want.remove(k);
            attrs.remove(k);
        }
        assert_eq!(attrs, want, "{rec}");
        // Below the record's own precision (milliseconds, or a second for a print).
        let ts = match rec.get("timestamp") {
            Some(t) => t.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_nanosecond() as u64,
            None => e.timestamp_ns as u64,
        };
        let slack = if e.inferred { 1_000_000_000 } else { 1_000_000 };
        assert!(got.time >= ts && got.time < ts + slack, "{} vs {ts}", got.time);
        assert_eq!(got.observed, 1_764_600_000_000_000_000);
    }
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    let export = req.records.iter().find(|r| r.attrs.contains_key("ray.event_data")).unwrap();
    assert_eq!(export.attrs["ray.event_type"], "EXPORT_ACTOR");
    assert_eq!(export.attrs["ray.state"], "ALIVE");
    assert_eq!(export.attrs["ray.event_data"]["pid"], 5490, "a JSON number is an int");
    assert_eq!(export.attrs["ray.event_data"]["ratio"], 0.5);
    assert_eq!(export.attrs["ray.event_data"]["is_detached"], false);
    assert_eq!(export.attrs["ray.event_data"]["tags"], json!(["a", 1, null]));
    assert_eq!(export.attrs["ray.event_data"]["name"], "say \"hi\"", "escapes decoded");
    let event = req.records.iter().find(|r| r.attrs.get("ray.label") == Some(&json!("RAY_WORKER_FAILURE"))).unwrap();
    let clash = req.records.iter().find(|r| r.attrs.get("ray.label") == Some(&json!("X"))).unwrap();
    // Not an id, so the record has no node_id: the field keeps its plain name.
    assert_eq!(clash.attrs.get("ray.node_id"), Some(&json!("not an id")), "{:?}", clash.attrs);
    assert_eq!(event.attrs["ray.event_type"], "RAY_WORKER_FAILURE");
    let cpp = &req.records[0];
    assert_eq!((&cpp.attrs["code.filepath"], &cpp.attrs["code.lineno"]), (&json!("gcs_server.cc"), &json!(1322)));
    let print = req.records.iter().find(|r| r.attrs.get("ray.component") == Some(&json!("worker"))).unwrap();
    assert_eq!(print.attrs["log.iostream"], "stdout");
    assert_eq!(print.severity, None, "a print has no severity");
}

#[test]
fn a_replay_encodes_the_same_record() {
    let b = sample_batch();
    let first = encode("compression = \"none\"", &b);
    assert_eq!(encode("compression = \"none\"", &b), first);
}

/// Records of three files taking turns, as a batch read in time order has them.
fn interleaved_batch() -> Batch {
    let node = Arc::new(NodeIdentity::new("node-a".into(), None, Default::default()));
    let mut b = Batch::new(1, node);
    let names = [
        "raylet.out",
        "worker-d361d2f5cf595a2fc4000787fc546f9695478a0a0532d84be46f5093-01000000-5490.out",
        "python-core-worker-d361d2f5cf595a2fc4000787fc546f9695478a0a0532d84be46f5093_5490.log",
    ];
    let mut parsers: Vec<FileParser> = names
        .iter()
        .map(|name| {
            let mut meta = classify(name, Some(SESSION));
            meta.path = Some(format!("/tmp/ray/{SESSION}/logs/{name}"));
            FileParser::new(meta, None, None)
        })
        .collect();
    let (mut corr, opts) = (Correlator::new(), Options::default());
    for i in 0..300 {
        let (k, line) = match i % 3 {
            0 => (0, format!("[2026-11-30 10:21:{:02},080 I 4034 4034] node_manager.cc:1322: lease {i} granted worker_id=b1ba2105ece393310e260b0e179de287f32d8622e7bca48f0a9fc358\n", i % 60)),
            1 => (1, format!("step {i}: loss {}\n", 1000 - i)),
            _ => (2, format!("[2026-11-30 10:21:{:02},081 I 5490 5511] core_worker.cc:889: task {i} done\n", i % 60)),
        };
        let name = names[k];
        let mut push =
            |r: &raylog_parsers::Record<'_>| b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message));
        parsers[k].push(line.as_bytes(), &mut corr, &opts, &mut push);
    }
    for (k, p) in parsers.iter_mut().enumerate() {
        let name = names[k];
        p.finish(&mut corr, &opts, &mut |r| b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message)));
    }
    b
}

/// The uncompressed body of `b` written with no run repeated.
fn without_repeats(b: &Batch) -> Vec<u8> {
    let sel: Vec<u32> = (0..b.len() as u32).collect();
    let mut enc = OtlpEncoder::new(&config("compression = \"none\""));
    enc.repeats.off = true;
    enc.encode(b, &sel, usize::MAX).unwrap().body.to_vec()
}

#[test]
fn the_gzip_body_sends_each_files_repeated_attributes_as_matches() {
    let b = interleaved_batch();
    assert!(b.len() >= 290, "{} records", b.len());
    let raw = encode("compression = \"none\"", &b);
    assert_eq!(raw, without_repeats(&b), "a run copied is the run a record has");
    let body = encode("", &b);
    assert_eq!(gunzip(&body), raw, "the gzip body is the protobuf body");
    // Each record repeats its file's ids, names and path: most of its bytes.
    assert!(body.len() * 2 < raw.len(), "{} bytes gzipped of {}", body.len(), raw.len());
    // zlib's level, when set, compresses the same body further.
    let zlib = encode("compression_level = 6", &b);
    assert_eq!(gunzip(&zlib), raw);
    assert!(zlib.len() < body.len());
}

/// Records of more files than the encoder keeps runs for, in turns, with ids that
/// change from line to line and lines that push a file's last record out of
/// deflate's window.
fn many_files_batch() -> Batch {
    let node = Arc::new(NodeIdentity::new("node-a".into(), None, Default::default()));
    let mut b = Batch::new(1, node);
    let names: Vec<String> = (0..40)
        .map(|k| match k % 4 {
            0 => format!("raylet.out.{k}"),
            _ => format!("worker-{:056x}-0100000{}-{}.out", k * 7919, k % 3, 5000 + k),
        })
        .collect();
    let mut parsers: Vec<FileParser> = names
        .iter()
        .map(|name| {
            let mut meta = classify(name, Some(SESSION));
            meta.path = (name.len() % 2 == 0).then(|| format!("/tmp/ray/{SESSION}/logs/{name}"));
            FileParser::new(meta, None, None)
        })
        .collect();
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let mut x: u64 = 7;
    for i in 0..2_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        // Mostly a few files at a time, now and then any of them.
        let k =
            if x >> 60 == 0 { (x >> 32) as usize % names.len() } else { (i / 50) as usize % 6 + (x >> 62) as usize };
        let line = match (k % 4, x >> 58) {
            (0, n) => format!("[2026-11-30 10:21:{:02},080 I 4034 4034] node_manager.cc:{i}: worker_id={:056x} task_id={:048x} lease {i}\n", i % 60, n % 3, i / 7),
            (_, 0) => format!("{}\n", "big".repeat(12_000)),
            (_, n) => format!("step {i}: loss {n}\n"),
        };
        let name = &names[k];
        let mut push =
            |r: &raylog_parsers::Record<'_>| b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message));
        parsers[k].push(line.as_bytes(), &mut corr, &opts, &mut push);
    }
    for (k, p) in parsers.iter_mut().enumerate() {
        let name = &names[k];
        p.finish(&mut corr, &opts, &mut |r| b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message)));
    }
    b
}

#[test]
fn runs_kept_for_many_files_changing_ids_and_far_repeats_give_the_same_body() {
    let b = many_files_batch();
    assert!(b.len() >= 1_900, "{} records", b.len());
    let raw = encode("compression = \"none\"", &b);
    assert_eq!(raw, without_repeats(&b));
    let body = encode("", &b);
    assert_eq!(gunzip(&body), raw);
    assert!(body.len() < raw.len());
    let req = decode_pb(&raw);
    assert_eq!(req.records.len(), b.len());
    assert_eq!(req, decode_json(&encode("compression = \"none\"\nencoding = \"json\"", &b)));
    // A record's size and the head's lengths are right for a body of several MiB too.
    let sel: Vec<u32> = (0..b.len() as u32).rev().collect();
    let mut enc = OtlpEncoder::new(&config(""));
    let req = enc.encode(&b, &sel, usize::MAX).unwrap();
    assert_eq!(decode_pb(&gunzip(&req.body)).records.len(), b.len());
    assert_eq!(gunzip(&req.body).len(), req.raw_bytes);
}

#[test]
fn a_request_takes_the_records_that_fit_in_its_limit() {
    let b = many_files_batch();
    for extra in ["", "compression = \"none\"", "encoding = \"json\"", "compression_level = 1"] {
        let mut enc = OtlpEncoder::new(&config(extra));
        let (all, limit): (Vec<u32>, usize) = ((0..b.len() as u32).collect(), 64 << 10);
        let (mut rest, mut seen, mut requests) = (&all[..], Vec::new(), 0);
        while !rest.is_empty() {
            let req = enc.encode(&b, rest, limit).unwrap();
            assert!(req.records >= 1, "{extra}: at least one record");
            let body = if extra.contains("none") { req.body.to_vec() } else { gunzip(&req.body) };
            assert_eq!(body.len(), req.raw_bytes, "{extra}");
            let records = if extra.contains("json") { decode_json(&body).records } else { decode_pb(&body).records };
            assert_eq!(records.len(), req.records, "{extra}");
            // Only a record larger than the limit on its own makes a larger request.
            assert!(req.raw_bytes <= limit || req.records == 1, "{extra}: {} bytes", req.raw_bytes);
            seen.extend(records.into_iter().map(|r| r.attrs["log.record.uid"].clone()));
            rest = &rest[req.records..];
            requests += 1;
        }
        assert!(requests > 5, "{extra}: {requests} requests");
        let want: Vec<_> = decode_pb(&encode("compression = \"none\"", &b))
            .records
            .into_iter()
            .map(|r| r.attrs["log.record.uid"].clone())
            .collect();
        assert_eq!(seen, want, "{extra}: every record once, in order");
    }
}
