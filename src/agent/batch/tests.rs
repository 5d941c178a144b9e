//! The batch's arenas: what each sink's needs build, spans shared within a file,
//! the parser's fields kept and read back.

use super::*;
use raylog_parsers::record::FieldValue;
use raylog_parsers::{classify, Correlator, FileParser, Options};

#[test]
fn records_land_in_the_arenas() {
    let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), Default::default()));
    let mut b = Batch::new(7, node);
    let meta = classify("raylet.out", Some("session_x"));
    let mut p = FileParser::new(meta, None, None);
    let text = b"[2026-11-30 09:05:35,278 I 4214 4214] (raylet) worker_pool.cc:564: Started worker_id=abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2\n";
    let mut corr = Correlator::new();
    p.push(text, &mut corr, &Options::default(), &mut |r| b.push(r, 0, doc_id("1:2", r.offset, r.message)));
    p.finish(&mut corr, &Options::default(), &mut |r| b.push(r, 0, doc_id("1:2", r.offset, r.message)));
    assert_eq!(b.len(), 1);
    let e = &b.entries[0];
    assert_eq!(b.str(e.component), "raylet");
    assert_eq!(b.id(e, IdField::Worker), Some("abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2"));
    assert_eq!(b.id(e, IdField::Actor), None);
    let v: serde_json::Value = serde_json::from_str(b.json_of(e)).unwrap();
    assert_eq!(v["node"], "node-a");
    assert_eq!(v["cluster"], "c1");
    assert_eq!(v["component"], "raylet");
    assert_ne!(doc_id("1:2", 0, "a"), doc_id("1:2", 1, "a"));
    assert_ne!(doc_id("1:2", 0, "a"), doc_id("1:2", 0, "b"), "new text at an old offset");
    assert_eq!(doc_id("1:2", 0, "a"), doc_id("1:2", 0, "a"));
}

fn one_record(needs: Needs) -> Batch {
    let node = Arc::new(NodeIdentity::new("node-a".into(), None, Default::default()));
    let mut b = Batch::new(3, node).needing(needs);
    let meta = classify(
        "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4242.out",
        Some("session_x"),
    );
    let mut p = FileParser::new(meta, None, None);
    let text = b"(MyActor pid=4242) hello \"world\"\n";
    let (mut corr, opts) = (Correlator::new(), Options::default());
    p.push(text, &mut corr, &opts, &mut |r| b.push(r, 5_000_000_000, 1));
    p.finish(&mut corr, &opts, &mut |r| b.push(r, 5_000_000_000, 1));
    assert_eq!(b.len(), 1);
    b
}

#[test]
fn only_what_the_sinks_read_is_built() {
    let loki = one_record(Needs { json: false, fields: true, extra: false });
    assert!(loki.json.is_empty(), "no sink reads the JSON");
    let e = &loki.entries[0];
    assert_eq!(loki.str(e.component), "worker");
    assert!(loki.str(e.message).contains("hello"));
    // Dead letters fall back to the fields Loki would have been sent.
    let mut out = Vec::new();
    loki.write_fields_json(e, &mut out, usize::MAX);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["message"], loki.str(e.message));
    assert_eq!(v["job_id"], "01000000");
    assert_eq!(v["worker_id"], "abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2");
    assert_eq!(v["pid"], 4242);
    assert_eq!(v["node"], "node-a");
    assert_eq!(v["session"], "session_x");
    assert_eq!(v["timestamp"], "1970-01-01T00:00:05.000Z");

    let es = one_record(Needs { json: true, fields: false, extra: false });
    assert!(es.text.is_empty(), "no sink reads the fields");
    let v: serde_json::Value = serde_json::from_str(es.json_of(&es.entries[0])).unwrap();
    assert_eq!(v["job_id"], "01000000");
    assert_eq!(v["node"], "node-a");
}

#[test]
fn a_records_fields_come_back_as_they_were_and_dead_letter_as_json() {
    let node = Arc::new(NodeIdentity::new("n".into(), None, Default::default()));
    let mut b = Batch::new(1, node).needing(Needs::ALL);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let name = "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4242.err";
    let mut p = FileParser::new(classify(name, Some("s")), None, None);
    let text = concat!(
        r#"{"asctime": "2026-11-30 09:06:00,509", "levelname": "INFO", "message": "m", "filename": "w.py", "#,
        r#""lineno": 28, "user": {"a": [1, "b"]}, "note": "quo\"te é", "plain": "ü", "n": 1.5, "ok": true}"#,
        "\n",
        r#"{"asctime": "2026-11-30 09:06:00,510", "levelname": "INFO", "message": "none", "filename": "w.py", "lineno": 2}"#,
        "\n"
    );
    p.push(text.as_bytes(), &mut corr, &opts, &mut |r| b.push(r, 0, 0));
    p.finish(&mut corr, &opts, &mut |r| b.push(r, 0, 0));
    assert_eq!(b.len(), 2);
    for e in &b.entries {
        let got: Vec<_> = b.pairs_of(e).collect();
        // What the parser gives, as the JSON object the fields used to be kept as.
        let mut p = FileParser::new(classify(name, Some("s")), None, None);
        let mut want = vec![];
        let mut keep = |r: &Record<'_>| {
            if r.offset == e.offset {
                raylog_parsers::ndjson::write_fields_object(&mut want, r.fields);
            }
        };
        p.push(text.as_bytes(), &mut corr, &opts, &mut keep);
        p.finish(&mut corr, &opts, &mut keep);
        let want: serde_json::Value = serde_json::from_slice(&want).unwrap();
        let mut out = vec![];
        b.write_fields_json(e, &mut out, usize::MAX);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["fields"], want, "{got:?}");
        assert_eq!(got.len(), want.as_object().unwrap().len());
    }
    let first: Vec<_> = b.pairs_of(&b.entries[0]).collect();
    assert!(first.contains(&("plain", FieldValue::Str("ü"))), "{first:?}");
    assert!(first.contains(&("note", FieldValue::Json(r#""quo\"te é""#))), "{first:?}");
    assert!(first.contains(&("user", FieldValue::Json(r#"{"a": [1, "b"]}"#))), "{first:?}");
}

#[test]
fn records_of_one_file_share_its_spans() {
    let node = Arc::new(NodeIdentity::new("n".into(), None, Default::default()));
    let mut b = Batch::new(1, node).needing(Needs { json: false, fields: true, extra: false });
    let (mut corr, opts) = (Correlator::new(), Options::default());
    for name in ["raylet.out", "gcs_server.out"] {
        let mut p = FileParser::new(classify(name, Some("s")), None, None);
        let text = b"[2026-11-30 09:05:35,278 I 1 1] a.cc:1: one\n[2026-11-30 09:05:35,279 I 1 1] a.cc:2: two\n";
        p.push(text, &mut corr, &opts, &mut |r| b.push(r, 0, 0));
        p.finish(&mut corr, &opts, &mut |r| b.push(r, 0, 0));
    }
    let [r1, r2, g1, g2] = [&b.entries[0], &b.entries[1], &b.entries[2], &b.entries[3]];
    assert_eq!((r1.component, r1.file), (r2.component, r2.file));
    assert_eq!((g1.component, g1.file), (g2.component, g2.file));
    assert_eq!(b.str(r2.component), "raylet");
    assert_eq!(b.str(g1.component), "gcs_server");
    assert_eq!(b.str(g2.file), "gcs_server.out");
}

#[test]
fn the_last_sink_hands_the_batch_back_empty() {
    let mut b = one_record(Needs::ALL);
    b.seq = 9;
    let (cap_json, cap_text) = (b.json.capacity(), b.text.capacity());
    let pool = Recycler::new(usize::MAX);
    let shared = Arc::new(b);
    let other_sink = shared.clone();
    pool.put(shared);
    assert!(pool.take().is_none(), "another sink still holds it");
    pool.put(other_sink);
    let again = pool.take().expect("the last holder recycles it").reuse(10);
    assert!(pool.take().is_none());
    assert_eq!(again.seq, 10);
    assert!(again.is_empty() && again.json.is_empty() && again.text.is_empty());
    assert!(again.json.capacity() >= cap_json && again.text.capacity() >= cap_text);
    assert_eq!(again.needs, Needs::ALL);
    let small = Recycler::new(again.capacity() - 1);
    small.put(Arc::new(again));
    assert!(small.take().is_none(), "a batch that grew too large is freed");
}
