//! Property tests: arbitrary bytes (uniform, and biased toward Ray-like content) fed
//! to [`FileParser`] for every [`FileKind`], with and without a tiny line cap.
//!
//! - parsing never panics and every record serializes to valid JSON;
//! - any chunking of the input gives exactly the same records as one push;
//! - record lines + marker lines == counted lines == the input's physical lines, and
//!   each record starts at the start of a physical line, offsets increasing.

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use raylog_parsers::ndjson::write_record;
use raylog_parsers::parser::DEFAULT_MAX_LINE_BYTES;
use raylog_parsers::{classify, Correlator, FileKind, FileParser, FileStats, Id, Options, Record, Timestamp};

const WID: &str = "abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2";

/// One file name per [`FileKind`] (and a few components sharing a kind).
fn names() -> Vec<String> {
    vec![
        "raylet.out".into(),
        "gcs_server.out".into(),
        format!("python-core-worker-{WID}_7.log"),
        format!("worker-{WID}-ffffffff-1.err"),
        format!("worker-{WID}-01000000-1.out"),
        "job-driver-raysubmit_1.log".into(),
        "events/event_GCS.log".into(),
        "export_events/event_EXPORT_ACTOR.log".into(),
        "serve/controller_1.log".into(),
        "dashboard.log".into(),
        "foo.txt".into(),
    ]
}

/// Pieces of real Ray lines, to reach the interesting parser states often.
const FRAGMENTS: &[&[u8]] = &[
    b"[2026-11-30 09:05:33,150 I 1 1] ",
    b"[2026-11-30 09:05:33,150 E 4214 4214] (raylet) worker_pool.cc:564: ",
    b"[2026-11-30 09:05:3",
    b"2026-11-30 09:05:34,791\tINFO agent.py:177 -- ",
    b"2026-11-30 09:05:34,791\tERROR ",
    b"INFO 2026-11-30 09:31:14,371 default_Greeter ypwxh5oi -- ",
    b"WARNING 2026-11-30 09:31:14,371 controller 7659 -- ",
    b":job_id:01000000",
    b":job_id:",
    b":actor_name:Counter",
    b":task_name:square",
    b":task_attempt_start:16310a0f0a45af5cffffffffffffffffffffffff01000000-2",
    b":task_attempt_end:16310a0f0a45af5cffffffffffffffffffffffff01000000-2",
    b"Traceback (most recent call last):",
    b"  File \"x\", line 3, in f",
    b"  File \"x\"",
    b"    x = d[\"a\"][\"b\"] + 1 / d[\"zero\"]",
    b"    ~~^~~~~~~~~~~",
    b"KeyError: 'b'",
    b"During handling of the above exception, another exception occurred:",
    b"The above exception was the direct cause of the following exception:",
    b"Exception in thread bg-writer:",
    b"{\"a\":",
    b"{\"a\":1}",
    // Python's json.dumps writes NaN/Infinity for float extras (not valid JSON).
    b", \"loss\": NaN",
    b"{\"loss\": Infinity, \"message\": \"m\"}",
    b"{\"asctime\": \"2026-11-30 10:22:07,234\", \"levelname\": \"ERROR\", \"message\": \"m\\n\\u00e9\", \"job_id\": \"01000000\", \"exc_text\": \"Traceback\"}",
    b"{\"custom_fields\":{\"job_id\":\"01000000\",\"worker_id\":\"abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2\"},\"severity\":\"ERROR\",\"timestamp\":1796029537,\"message\":\"x\",\"source_type\":\"RAYLET\"}",
    b"{\"event_id\":\"1\",\"source_type\":\"EXPORT_ACTOR\",\"timestamp\":1796029537,\"event_data\":{\"actor_id\":\"G364jcMdJAL2/CeoAQAAAA==\",\"job_id\":\"AQAAAA==\"}}",
    b" actor_id=750d082651ea8a01532ff64101000000",
    b" worker_id=abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2",
    b" task_id=16310a0f0a45af5cffffffffffffffffffffffff01000000 job_id=01000000",
    b"Creating actor actor_id=750d082651ea8a01532ff64101000000",
    b"Submitting actor creation task to worker. actor_id=750d082651ea8a01532ff64101000000 worker_id=abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2",
    b"[state-dump] \t",
    b"*** StackTrace Information ***",
    b"\x1b[36m(Aggregator pid=7845)\x1b[0m ",
    b"\n",
    b"\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"\t",
    b" ",
    b"\"",
    b"\\",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xf0\x9f\x9a\x80",
    "naïve café — 日本語".as_bytes(),
];

fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::sample::select(FRAGMENTS).prop_map(|f| f.to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..16),
        1 => (
            proptest::sample::select(&[b'x', b' ', b'\n', b'\r', b'\xff', b'[', b':'][..]),
            1usize..300
        )
            .prop_map(|(b, n)| vec![b; n]),
    ]
}

/// Uniform random bytes, or a concatenation of Ray-like fragments.
fn input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..1500),
        1 => proptest::collection::vec(any::<u8>(), 0..1500).prop_map(|mut v| {
            // Plenty of newlines so lines are short and numerous.
            for (i, b) in v.iter_mut().enumerate() {
                if i % 7 == 3 {
                    *b = b'\n';
                }
            }
            v
        }),
        4 => proptest::collection::vec(fragment(), 0..80).prop_map(|v| v.concat()),
    ]
}

fn max_line() -> impl Strategy<Value = usize> {
    prop_oneof![Just(64usize), Just(16usize), 16usize..200, Just(DEFAULT_MAX_LINE_BYTES),]
}

/// What one parse produced.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// (serialized record, lines, offset) in emission order.
    records: Vec<(String, u32, u64)>,
    stats: FileStats,
}

fn parse_chunks(name: &str, chunks: &[&[u8]], max_line_bytes: usize) -> Outcome {
    let meta = classify(name, Some("session_2026-11-30_09-05-30_825917_3908"));
    let opts = Options { max_line_bytes, ..Options::default() };
    let node = Id::parse(b"695e461fb0f54d6e7375eeaf092edbcbcbd997954cab95dbf3635b7a");
    let mut parser = FileParser::new(meta, node, Some(Timestamp::from_secs(1_767_225_600)));
    let mut corr = Correlator::new();
    let mut records = vec![];
    {
        let mut sink = |r: &Record<'_>| {
            let mut b = vec![];
            write_record(&mut b, r);
            records.push((String::from_utf8(b).expect("NDJSON is UTF-8"), r.lines, r.offset));
        };
        for c in chunks {
            parser.push(c, &mut corr, &opts, &mut sink);
        }
        parser.finish(&mut corr, &opts, &mut sink);
    }
    Outcome { records, stats: *parser.stats() }
}

/// Start offsets of the physical lines of `b` (a last line without `\n` counts when
/// non-empty; a trailing `\n` adds no empty line).
fn line_starts(b: &[u8]) -> Vec<u64> {
    let mut v = vec![];
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            v.push(start as u64);
            start = i + 1;
        }
    }
    if start < b.len() {
        v.push(start as u64);
    }
    v
}

/// Cuts `bytes` at the given (unsorted, possibly repeated) positions.
fn split_at<'a>(bytes: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut pos: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    pos.sort();
    let mut out = vec![];
    let mut prev = 0;
    for p in pos {
        out.push(&bytes[prev..p]);
        prev = p;
    }
    out.push(&bytes[prev..]);
    out
}

/// 256 cases per property (override with `PROPTEST_CASES` for a longer hunt).
fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Never panics; every record is one valid JSON object on one line.
    #[test]
    fn never_panics_and_writes_valid_json(
        name in proptest::sample::select(names()),
        bytes in input(),
        max in max_line(),
    ) {
        let out = parse_chunks(&name, &[&bytes], max);
        for (json, lines, _) in &out.records {
            prop_assert!(*lines >= 1);
            prop_assert!(json.ends_with('\n'));
            prop_assert_eq!(json.matches('\n').count(), 1, "{}", json);
            let v: serde_json::Value = serde_json::from_str(json)
                .map_err(|e| TestCaseError::fail(format!("invalid JSON {json:?}: {e}")))?;
            prop_assert!(v.is_object());
        }
        prop_assert_eq!(out.stats.records, out.records.len() as u64);
        prop_assert_eq!(out.stats.bytes, bytes.len() as u64);
    }

    /// Chunk boundaries do not matter: same records, same stats as one push.
    #[test]
    fn chunking_does_not_change_records(
        name in proptest::sample::select(names()),
        bytes in input(),
        cuts in proptest::collection::vec(any::<Index>(), 0..12),
        max in max_line(),
    ) {
        let whole = parse_chunks(&name, &[&bytes], max);
        let chunks = split_at(&bytes, &cuts);
        let chunked = parse_chunks(&name, &chunks, max);
        prop_assert_eq!(&whole, &chunked, "chunks: {:?}", chunks.iter().map(|c| c.len()).collect::<Vec<_>>());
        // Byte by byte, the extreme case.
        if bytes.len() <= 400 {
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            let one = parse_chunks(&name, &bytewise, max);
            prop_assert_eq!(&whole, &one, "byte-by-byte");
        }
    }

    /// Every line is accounted for, and records start at line starts in order.
    #[test]
    fn lines_reconcile(
        name in proptest::sample::select(names()),
        bytes in input(),
        max in max_line(),
    ) {
        let out = parse_chunks(&name, &[&bytes], max);
        let starts = line_starts(&bytes);
        let rec_lines: u64 = out.records.iter().map(|r| r.1 as u64).sum();
        prop_assert_eq!(out.stats.lines, starts.len() as u64, "stats.lines vs input lines");
        prop_assert_eq!(
            rec_lines + out.stats.markers,
            out.stats.lines,
            "record lines {} + markers {} vs lines {}",
            rec_lines,
            out.stats.markers,
            out.stats.lines
        );
        if classify(&name, None).kind != FileKind::Worker {
            prop_assert_eq!(out.stats.markers, 0);
        }
        let set: HashSet<u64> = starts.iter().copied().collect();
        let mut prev = None;
        for (json, _, off) in &out.records {
            prop_assert!(set.contains(off), "offset {} is not a line start: {}", off, json);
            if let Some(p) = prev {
                prop_assert!(*off > p, "offset {} after {}", off, p);
            }
            prev = Some(*off);
        }
    }
}

/// Deterministic twin of `never_panics_and_writes_valid_json` for lines Ray really
/// writes: structured JSON logging of a float extra that is NaN (Python's `json`
/// emits the bare token `NaN`), and a `{` line whose value is not JSON at all.
#[test]
fn ndjson_stays_valid_for_non_json_values() {
    let lines: [&[u8]; 3] = [
        b"{\"asctime\": \"2026-11-30 10:22:07,234\", \"levelname\": \"INFO\", \"message\": \"epoch done\", \"loss\": NaN}\n",
        b"{\"a\":x}\n",
        b"{\"custom_fields\":{\"job_id\":x},\"message\":\"m\",\"timestamp\":1}\n",
    ];
    let mut failures = vec![];
    for name in names() {
        for line in lines {
            let out = parse_chunks(&name, &[line], DEFAULT_MAX_LINE_BYTES);
            for (json, _, _) in &out.records {
                if let Err(e) = serde_json::from_str::<serde_json::Value>(json) {
                    failures.push(format!(
                        "{name}: input {:?} gave invalid NDJSON ({e}): {}",
                        String::from_utf8_lossy(line),
                        json.trim_end()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} invalid NDJSON record(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn names_cover_every_file_kind() {
    let kinds: Vec<FileKind> = names().iter().map(|n| classify(n, None).kind).collect();
    for k in [
        FileKind::Cpp,
        FileKind::PythonComponent,
        FileKind::Worker,
        FileKind::JobDriver,
        FileKind::Event,
        FileKind::ExportEvent,
        FileKind::Serve,
        FileKind::Plain,
    ] {
        assert!(kinds.contains(&k), "no name classifies as {k:?}: {kinds:?}");
    }
}

#[test]
fn helpers() {
    assert_eq!(line_starts(b""), Vec::<u64>::new());
    assert_eq!(line_starts(b"a\n"), vec![0]);
    assert_eq!(line_starts(b"a\n\nb"), vec![0, 2, 3]);
    let b = b"abcdef";
    let parts = split_at(b, &[]);
    assert_eq!(parts, vec![&b[..]]);
}
