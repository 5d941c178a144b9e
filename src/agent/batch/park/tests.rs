//! A parked batch reads back as the batch it was (the chosen entries, every field
//! the sinks read), and damaged bytes are refused, never trusted.

use std::collections::BTreeMap;

use raylog_parsers::{classify, Correlator, FileParser, Options};

use super::*;
use crate::agent::batch::IdField;

/// Three records of a real worker stderr (JSON lines with fields, a print), every
/// arena built, on a node with a cluster and labels.
fn three() -> Batch {
    let labels = BTreeMap::from([("zone".to_string(), "eu-1".to_string())]);
    let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), labels));
    let mut b = Batch::new(9, node).needing(Needs::ALL);
    let name = "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4242.err";
    let mut p = FileParser::new(classify(name, Some("session_x")), None, None);
    let text = concat!(
        r#"{"asctime": "2026-11-30 09:06:00,509", "levelname": "INFO", "message": "m é", "filename": "w.py", "#,
        r#""lineno": 28, "user": {"a": [1, "b"]}, "plain": "ü"}"#,
        "\n",
        "(MyActor pid=4242) a print\n",
        r#"{"asctime": "2026-11-30 09:06:00,510", "levelname": "ERROR", "message": "none", "filename": "w.py", "lineno": 2}"#,
        "\n"
    );
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let mut n = 0u128;
    let mut push = |r: &raylog_parsers::Record<'_>| {
        n += 1;
        b.push(r, 1_700_000_000_000_000_000, n << 100 | 7)
    };
    p.push(text.as_bytes(), &mut corr, &opts, &mut push);
    p.finish(&mut corr, &opts, &mut push);
    assert_eq!(b.len(), 3);
    b
}

/// What any sink could read of `e` in `b`.
fn seen(b: &Batch, e: &BatchRecord) -> String {
    let pairs: Vec<_> = b.pairs_of(e).collect();
    let ids: Vec<_> = IdField::ALL.iter().map(|&f| b.id(e, f)).collect();
    format!(
        "{} {} {:?} {:?} {:?} {} {} {:?} {} {} {} {} {:?} {:?} {} {:?} {} {} {:?} {:?}",
        e.timestamp_ns,
        e.observed_ns,
        e.level,
        e.stream,
        e.pid,
        e.offset,
        b.json_of(e),
        e.pieces,
        b.str(e.message),
        b.str(e.component),
        b.str(e.file),
        b.str(e.path),
        ids,
        pairs,
        e.doc_id,
        (e.truncated, e.task_attempt),
        e.inferred,
        e.estimated,
        (b.str(e.session), b.str(e.submission_id), b.str(e.task_name), b.str(e.actor_name)),
        (&b.node.name, &b.node.cluster, &b.node.labels, b.node.json_members(), b.needs),
    )
}

#[test]
fn a_parked_batch_reads_back_as_it_was_sent() {
    let b = three();
    let back = unpark(&park(&b, None), 41).unwrap();
    assert_eq!(back.seq, 41, "a parked batch is numbered where it is read back");
    assert_eq!(back.len(), 3);
    for (a, z) in b.entries.iter().zip(&back.entries) {
        assert_eq!(seen(&b, a), seen(&back, z));
    }
    // Only the chosen entries, in the order given.
    let some = unpark(&park(&b, Some(&[2, 0])), 1).unwrap();
    assert_eq!(some.len(), 2);
    assert_eq!(seen(&b, &b.entries[2]), seen(&some, &some.entries[0]));
    assert_eq!(seen(&b, &b.entries[0]), seen(&some, &some.entries[1]));
    assert!(unpark(&park(&b, Some(&[])), 1).unwrap().is_empty());
}

/// Version 1, as a raylog before task attempts parked it: the same bytes less each
/// entry's attempt. It still reads back, its records without an attempt.
#[test]
fn a_batch_parked_by_the_version_before_reads_back() {
    let mut b = three();
    b.entries[1].task_attempt = Some(2);
    let v2 = park(&b, None);
    assert_eq!(unpark(&v2, 0).unwrap().entries[1].task_attempt, Some(2));
    let start = v2.len() - b.len() * ENTRY;
    // Less the spans section (no spans: its length and `[]`) before the entry count.
    let mut v1 = [&v2[..start - 4 - 6], &v2[start - 4..start]].concat();
    v1[..8].copy_from_slice(MAGIC_V1);
    for e in v2[start..].chunks(ENTRY) {
        // The attempt follows the two times, three flag bytes and the pid.
        let at = 16 + 3 + 4;
        let mut e = e.to_vec();
        e[18] &= !16;
        e.drain(at..at + 4);
        v1.extend_from_slice(&e);
    }
    let crc = crc32fast::hash(&v1[12..]);
    v1[8..12].copy_from_slice(&crc.to_le_bytes());
    let back = unpark(&v1, 0).unwrap();
    b.entries[1].task_attempt = None;
    for (a, z) in b.entries.iter().zip(&back.entries) {
        assert_eq!(seen(&b, a), seen(&back, z));
    }
}

/// The task spans a batch carries are parked with it, whatever entries are kept.
#[test]
fn a_parked_batch_keeps_its_spans() {
    use crate::agent::traces::span::{AttrValue, Kind, TaskSpan};
    let mut b = three();
    b.spans.push(TaskSpan {
        trace_id: [7; 16],
        span_id: [3; 8],
        parent: Some([1; 8]),
        name: "square".into(),
        kind: Kind::Run,
        start_ns: 10,
        end_ns: 20,
        error: Some("TASK_EXECUTION_EXCEPTION: bad".into()),
        attrs: vec![("ray.task_attempt".into(), AttrValue::Int(1)), ("ray.span".into(), AttrValue::Str("run".into()))],
        events: vec![("RUNNING".into(), 10)],
        links: vec![[2; 8]],
    });
    let back = unpark(&park(&b, Some(&[1])), 1).unwrap();
    assert_eq!(back.spans, b.spans);
    assert_eq!(back.len(), 1);
}

#[test]
fn damaged_bytes_are_refused() {
    let bytes = park(&three(), None);
    assert!(unpark(b"", 0).is_err());
    assert!(unpark(b"RLPARK1\n", 0).is_err());
    // Every cut and every flipped byte: refused, never a panic.
    for n in 0..bytes.len() {
        assert!(unpark(&bytes[..n], 0).is_err(), "cut at {n}");
        let mut bad = bytes.clone();
        bad[n] ^= 0x40;
        assert!(unpark(&bad, 0).is_err(), "byte {n} flipped");
    }
}

#[test]
fn spans_outside_their_arena_are_refused_even_with_a_good_checksum() {
    let b = three();
    let mut bad = Batch::new(0, b.node.clone()).needing(b.needs);
    (bad.json, bad.text, bad.pairs) = (b.json.clone(), b.text.clone(), b.pairs.clone());
    let mut e = b.entries[0].clone();
    e.message = Span { start: b.text.len() as u32 - 1, len: 2 };
    bad.entries.push(e);
    assert!(unpark(&park(&bad, None), 0).is_err());
    // A span cutting a character in two.
    let mut e = b.entries[0].clone();
    let at = b.text.iter().position(|&c| c >= 0x80).expect("a non-ASCII character");
    e.message = Span { start: at as u32, len: 1 };
    bad.entries = vec![e];
    assert!(unpark(&park(&bad, None), 0).is_err());
}
