//! Times hostile single lines (1 MiB and 2 MiB) through the whole parsing path.
//!
//! A log line is untrusted input: a worker may print one huge JSON object, a line of
//! nothing but `{`, or invalid UTF-8. Each shape here is a line built to stress one
//! scanner (JSON members, `key=value` pairs, ` -- ` separators, hex ids in prose,
//! continuation lines, the correlator's prescan). The table shows the time of each at
//! 1 MiB and 2 MiB: parsing must stay linear, so the ratio should stay near 2.
//!
//! Run with `cargo run --release -p raylog-parsers --example hostile_bench [filter]`.
//! A shape whose 1 MiB time exceeds 2 s is not run at 2 MiB (it is plainly not linear).

use std::time::{Duration, Instant};

use raylog_parsers::correlate::node_id_from_raylet;
use raylog_parsers::ndjson::write_record;
use raylog_parsers::parser::DEFAULT_MAX_LINE_BYTES;
use raylog_parsers::{classify, Correlator, FileParser, Options};

const WID: &str = "abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2";
const NID: &str = "695e461fb0f54d6e7375eeaf092edbcbcbd997954cab95dbf3635b7a";
const CPP: &str = "[2026-11-30 10:21:03,123 I 1 1] (raylet) x.cc:1: ";
const PY: &str = "2026-11-30 10:21:03,123\tINFO x.py:1 -- ";

/// How a shape is timed.
#[derive(Clone, Copy)]
enum Run {
    /// Parse the file and write every record as NDJSON.
    Parse,
    /// [`Correlator::prescan`] over the file's bytes.
    Prescan,
    /// [`node_id_from_raylet`] over the file's bytes.
    NodeId,
}

struct Shape {
    name: &'static str,
    file: String,
    run: Run,
    make: fn(usize) -> Vec<u8>,
}

/// `prefix`, then `unit(i)` for i = 0, 1, … until `size` bytes, then `suffix`.
fn fill(prefix: &str, unit: impl Fn(usize) -> String, suffix: &str, size: usize) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    let mut i = 0;
    while v.len() + suffix.len() < size {
        v.extend_from_slice(unit(i).as_bytes());
        i += 1;
    }
    v.extend_from_slice(suffix.as_bytes());
    v
}

fn repeat(prefix: &str, byte: u8, size: usize) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.resize(size, byte);
    v
}

/// Mixed content: words, pairs, hex ids, separators, quotes and braces.
fn mixed(i: usize) -> String {
    match i % 8 {
        0 => format!("word{i} "),
        1 => format!("k{i}=v{i} "),
        2 => format!("worker {WID} "),
        3 => " -- ".into(),
        4 => "\"{[ ".into(),
        5 => "= ".into(),
        6 => format!("actor 750d082651ea8a01532ff641{:08x} ", i),
        _ => "é ".into(),
    }
}

fn shapes() -> Vec<Shape> {
    let worker = format!("worker-{WID}-01000000-4468.err");
    let core = format!("python-core-worker-{WID}_4468.log");
    let s = |name, file: &str, run, make| Shape { name, file: file.to_string(), run, make };
    vec![
        s("json 75k distinct keys", &worker, Run::Parse, |n| {
            fill(r#"{"levelname":"INFO","message":"m""#, |i| format!(r#","k{i}":{i}"#), "}", n)
        }),
        s("json string values, distinct", &worker, Run::Parse, |n| {
            fill(r#"{"message":"m""#, |i| format!(r#","k{i}":"v""#), "}", n)
        }),
        s("json keys, 1000 repeated", &worker, Run::Parse, |n| {
            fill(r#"{"message":"m""#, |i| format!(r#","k{}":{i}"#, i % 1000), "}", n)
        }),
        s("json nested 60 deep, repeated", &worker, Run::Parse, |n| {
            let deep = format!("{}1{}", "[".repeat(60), "]".repeat(60));
            fill(r#"{"message":"m""#, |i| format!(r#","k{i}":{deep}"#), "}", n)
        }),
        s("json nested past the limit", &worker, Run::Parse, |n| {
            fill(r#"{"message":"m","a":"#, |_| r#"{"a":"#.into(), "", n)
        }),
        s("event custom_fields keys", "events/event_GCS.log", Run::Parse, |n| {
            fill(
                r#"{"message":"m","timestamp":1796029537,"custom_fields":{"x":"y""#,
                |i| format!(r#","k{i}":"v""#),
                "}}",
                n,
            )
        }),
        s("export event_data keys", "export_events/event_EXPORT_ACTOR.log", Run::Parse, |n| {
            fill(
                r#"{"source_type":"EXPORT_ACTOR","timestamp":1,"event_data":{"state":"ALIVE""#,
                |i| format!(r#","k{i}":{{"state":"x"}}"#),
                "}}",
                n,
            )
        }),
        s("cpp key=value, distinct", "raylet.out", Run::Parse, |n| fill(CPP, |i| format!(" k{i}=v"), "", n)),
        s("cpp key=value, one key", "raylet.out", Run::Parse, |n| fill(CPP, |_| " k=v".into(), "", n)),
        s("python key=value + ray keys", "dashboard.log", Run::Parse, |n| {
            fill(PY, |i| format!(" k{i}=v"), " job_id=01000000 timestamp_ns=1", n)
        }),
        s("python ` -- ` separators", "dashboard.log", Run::Parse, |n| fill(PY, |_| " -- ".into(), "", n)),
        s("serve ` -- ` separators", "serve/controller_1.log", Run::Parse, |n| {
            fill("INFO 2026-11-30 09:32:09,553 a b", |_| " - -- ".into(), "", n)
        }),
        s("cpp hex ids in prose", "raylet.out", Run::Parse, |n| {
            fill(CPP, |_| format!("Worker {WID} on node {NID} exits "), "", n)
        }),
        s("worker hex runs in prose", &worker, Run::Parse, |n| fill("", |i| format!("{:x}g", i * 7919), "", n)),
        s("line of `{` (worker)", &worker, Run::Parse, |n| repeat("", b'{', n)),
        s("line of `{` (event)", "events/event_GCS.log", Run::Parse, |n| repeat("", b'{', n)),
        s("line of `[` (raylet)", "raylet.out", Run::Parse, |n| repeat("", b'[', n)),
        s("line of `\"` (worker)", &worker, Run::Parse, |n| repeat("", b'"', n)),
        s("line of spaces (raylet)", "raylet.out", Run::Parse, |n| repeat(CPP, b' ', n)),
        s("line of `=` (raylet)", "raylet.out", Run::Parse, |n| repeat(CPP, b'=', n)),
        s("`= ` repeated (python)", "dashboard.log", Run::Parse, |n| fill(PY, |_| "= ".into(), "", n)),
        s("cpp header + mixed", "raylet.out", Run::Parse, |n| fill(CPP, mixed, "", n)),
        s("traceback frames in a line", &worker, Run::Parse, |n| {
            fill("Traceback (most recent call last):", |i| format!("  File \"w.py\", line {i}, in f"), "", n)
        }),
        s("traceback, 1 record of frames", &worker, Run::Parse, |n| {
            fill(
                "ERROR:x:failed\nTraceback (most recent call last):\n",
                |i| format!("  File \"w.py\", line {i}, in f\n"),
                "ValueError: x\n",
                n,
            )
        }),
        s("cpp header + continuations", "raylet.out", Run::Parse, |n| fill(CPP, |i| format!("\n\tk{i}=v"), "", n)),
        s("invalid utf-8 (worker)", &worker, Run::Parse, |n| {
            b"\xff a\xc3 x=\xfe ".iter().copied().cycle().take(n).collect()
        }),
        s("invalid utf-8 (raylet)", "raylet.out", Run::Parse, |n| repeat(CPP, 0xfe, n)),
        s("prescan `Creating actor`", &core, Run::Prescan, |n| fill(CPP, |_| "Creating actor ".into(), "", n)),
        s("prescan gcs phrases", "gcs_server.out", Run::Prescan, |n| {
            fill(CPP, |_| "Start creating actor ".into(), "", n)
        }),
        s("node id `Node ID: `", "raylet.out", Run::NodeId, |n| fill(CPP, |_| "Node ID: x ".into(), "", n)),
    ]
}

fn time_once(shape: &Shape, bytes: &[u8]) -> (Duration, usize) {
    let meta = classify(&shape.file, None);
    let start = Instant::now();
    let mut out = Vec::new();
    match shape.run {
        Run::Parse => {
            let opts = Options { max_line_bytes: 8 << 20, ..Options::default() };
            let mut corr = Correlator::new();
            let mut p = FileParser::new(meta, None, None);
            let mut sink = |r: &raylog_parsers::Record<'_>| write_record(&mut out, r);
            p.push(bytes, &mut corr, &opts, &mut sink);
            p.finish(&mut corr, &opts, &mut sink);
        }
        Run::Prescan => Correlator::new().prescan(&meta, bytes),
        Run::NodeId => out.push(node_id_from_raylet(bytes).is_some() as u8),
    }
    (start.elapsed(), out.len())
}

/// Best of a few runs (fewer when a run is slow).
fn time(shape: &Shape, size: usize) -> Duration {
    let mut bytes = (shape.make)(size);
    bytes.push(b'\n');
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let (t, _) = time_once(shape, &bytes);
        best = best.min(t);
        if t > Duration::from_millis(500) {
            break;
        }
    }
    best
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let mib = DEFAULT_MAX_LINE_BYTES;
    println!("{:<34} {:>11} {:>11} {:>7}", "shape", "1 MiB (ms)", "2 MiB (ms)", "ratio");
    for shape in shapes().iter().filter(|s| s.name.contains(&filter)) {
        let one = time(shape, mib);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        if one > Duration::from_secs(2) {
            println!("{:<34} {:>11.1} {:>11} {:>7}", shape.name, ms(one), "skipped", "-");
            continue;
        }
        let two = time(shape, 2 * mib);
        println!("{:<34} {:>11.1} {:>11.1} {:>7.1}", shape.name, ms(one), ms(two), ms(two) / ms(one).max(1e-3));
    }
}
