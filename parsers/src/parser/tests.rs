//! Tests of the parser: joining, time limits, dating records without a time.

use super::*;

fn messages(name: &str, text: &str) -> Vec<String> {
    let mut p = FileParser::new(crate::classify(name, None), None, None);
    let (mut corr, opts, mut out) = (Correlator::new(), Options::default(), vec![]);
    p.push(text.as_bytes(), &mut corr, &opts, &mut |r| out.push(r.message.to_string()));
    p.finish(&mut corr, &opts, &mut |r| out.push(r.message.to_string()));
    out
}

#[test]
fn a_traceback_joins_an_error_line_but_not_an_info_line() {
    let tb = "Traceback (most recent call last):\n  File \"m.py\", line 1, in <module>\nValueError: bad\n";
    let info = format!("2026-11-30 13:34:42,410\tINFO worker.py:2029 -- Connected.\n{tb}");
    let got = messages("job-driver-raysubmit_1.log", &info);
    assert_eq!(got, ["Connected.", tb.trim_end()], "an uncaught exception is not the INFO line's");
    let err = format!("2026-11-30 13:34:42,410\tERROR m.py:3 -- lookup failed\n{tb}");
    assert_eq!(messages("job-driver-raysubmit_1.log", &err).len(), 1, "logger.exception keeps its traceback");
    assert_eq!(messages("worker-x-ffffffff-1.err", &format!("bare message\n{tb}")).len(), 1);
}

/// Parses `text` pushed in pieces of `chunk` bytes with `limit`, returning
/// (time, message) of each record and whether the parser ended blocked.
fn dated(
    name: &str,
    text: &str,
    corr: &mut Correlator,
    hint: Option<Timestamp>,
) -> Vec<(Option<Timestamp>, TimeSource, String)> {
    let mut p = FileParser::new(crate::classify(name, None), None, Some(Timestamp::from_secs(9)));
    p.set_time_hint(hint);
    let (opts, mut out) = (Options::default(), vec![]);
    let mut keep = |r: &Record<'_>| {
        let src = match (r.timestamp_inferred, r.timestamp_estimated) {
            (false, _) => TimeSource::Own,
            (true, true) => TimeSource::Estimated,
            (true, false) if r.timestamp == Some(Timestamp::from_secs(9)) => TimeSource::Mtime,
            (true, false) => TimeSource::Previous,
        };
        out.push((r.timestamp, src, r.message.to_string()))
    };
    p.push(text.as_bytes(), corr, &opts, &mut keep);
    p.finish(corr, &opts, &mut keep);
    out
}

fn ts(s: &str) -> Timestamp {
    let (c, _) = crate::time::parse_civil(s.as_bytes()).unwrap();
    Zone::Utc.to_utc(c).unwrap()
}

const WID: &str = "21dc0df5ded5fb4aec71a925b0bf97f61e4d13473624ef1e715e6988";

#[test]
fn prints_are_dated_from_the_file_then_the_worker_then_the_mtime() {
    let out_file = format!("worker-{WID}-01000000-4356.out");
    let text = ":job_id:01000000\nfirst print\n2026-11-30 10:21:13,560\tWARNING w.py:1 -- logged\nsecond print\n";
    // Nothing known: the mtime, then the previous timed record.
    let got = dated(&out_file, text, &mut Correlator::new(), None);
    assert_eq!(got[0], (Some(Timestamp::from_secs(9)), TimeSource::Mtime, "first print".into()));
    assert_eq!(got[2], (Some(ts("2026-11-30 10:21:13,560")), TimeSource::Previous, "second print".into()));
    // The worker's core-worker log ends at 10:21:17: a print before any timed line
    // of its file is dated no later than that, nor later than the file's first timed line.
    let mut corr = Correlator::new();
    let log = format!("python-core-worker-{WID}_4356.log");
    corr.prescan(
        &crate::classify(&log, None),
        b"[2026-11-30 10:21:12,000 I 4356 4356] a.cc:1: start\n[2026-11-30 10:21:17,247 W 4356 4356] a.cc:2: exit\n",
    );
    let w = Id::parse(WID.as_bytes()).unwrap();
    assert_eq!(corr.worker_time(&w), Some(ts("2026-11-30 10:21:17,247")));
    let got = dated(&out_file, text, &mut corr, None);
    assert_eq!(got[0], (Some(ts("2026-11-30 10:21:17,247")), TimeSource::Estimated, "first print".into()));
    let got = dated(&out_file, text, &mut corr, Some(ts("2026-11-30 10:21:13,560")));
    assert_eq!(got[0], (Some(ts("2026-11-30 10:21:13,560")), TimeSource::Estimated, "first print".into()));
    // Learning record by record ends where the prescan does.
    let mut learned = Correlator::new();
    let mut p = FileParser::new(crate::classify(&log, None), None, None);
    let lines =
        b"[2026-11-30 10:21:12,000 I 4356 4356] a.cc:1: start\n[2026-11-30 10:21:17,247 W 4356 4356] a.cc:2: exit\n";
    p.push(lines, &mut learned, &Options::default(), &mut |_| {});
    p.finish(&mut learned, &Options::default(), &mut |_| {});
    assert_eq!(learned.worker_time(&w), corr.worker_time(&w));
}

#[test]
fn a_limit_stops_before_a_later_record_and_resumes_where_it_stopped() {
    let text = "[2026-11-30 10:00:00,000 I 1 1] a.cc:1: one\n\
                [2026-11-30 10:30:00,000 I 1 1] a.cc:2: two\n  continued\n\
                [2026-11-30 11:00:00,000 I 1 1] a.cc:3: three\n\
                [2026-11-30 11:00:01,000 I 1 1] a.cc:4: four\n";
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let mut p = FileParser::new(crate::classify("raylet.out", None), None, None);
    let mut got = vec![];
    p.set_limit(Some(ts("2026-11-30 10:45:00")));
    let took = p.push(text.as_bytes(), &mut corr, &opts, &mut |r| got.push(r.message.to_string()));
    assert_eq!(got, ["one", "two\n  continued"], "three is after the limit");
    assert_eq!(p.blocked(), Some(ts("2026-11-30 11:00:00")));
    // It took the line of `three` (pending) but not the line that would complete it.
    let four_at = text.find("[2026-11-30 11:00:01").unwrap();
    assert_eq!(took, four_at);
    assert_eq!(p.offset(), four_at as u64);
    assert_eq!(p.unemitted_offset(), text.find("[2026-11-30 11:00:00").unwrap() as u64);
    // Flushing respects the limit too; raising it lets the rest through.
    assert!(!p.flush(&mut corr, &opts, &mut |r| got.push(r.message.to_string())));
    p.set_limit(None);
    p.push(&text.as_bytes()[took..], &mut corr, &opts, &mut |r| got.push(r.message.to_string()));
    p.finish(&mut corr, &opts, &mut |r| got.push(r.message.to_string()));
    assert_eq!(got, ["one", "two\n  continued", "three", "four"]);
    assert_eq!(p.blocked(), None);
    assert_eq!(p.stats().lines, 5, "no line counted twice");
    assert_eq!(p.stats().bytes, text.len() as u64);
}

#[test]
fn a_limit_in_a_worker_file_keeps_markers_and_tracebacks_whole() {
    let text = ":job_id:01000000\n\
                2026-11-30 10:00:00,000\tINFO w.py:1 -- early\n\
                :task_name:late_task\n\
                2026-11-30 12:00:00,000\tERROR w.py:2 -- late\n\
                Traceback (most recent call last):\n  File \"w.py\", line 2, in f\nValueError: x\n\
                2026-11-30 12:00:01,000\tINFO w.py:3 -- after\n";
    let name = format!("worker-{WID}-01000000-4356.err");
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let mut all = vec![];
    for split in 1..text.len() {
        let mut p = FileParser::new(crate::classify(&name, None), None, None);
        let got = std::cell::RefCell::new(Vec::<(String, Option<String>)>::new());
        let mut keep = |r: &Record<'_>| got.borrow_mut().push((r.message.to_string(), r.task_name.map(str::to_string)));
        p.set_limit(Some(ts("2026-11-30 11:00:00")));
        let (a, b) = text.as_bytes().split_at(split);
        let took = p.push(a, &mut corr, &opts, &mut keep);
        let mut rest = a[took..].to_vec();
        rest.extend_from_slice(b);
        let again = p.push(&rest, &mut corr, &opts, &mut keep);
        assert_eq!(got.borrow().len(), 1, "{split}: only `early` is before the limit: {:?}", got.borrow());
        assert_eq!(p.blocked(), Some(ts("2026-11-30 12:00:00")), "{split}");
        p.set_limit(None);
        p.push(&rest[again..], &mut corr, &opts, &mut keep);
        p.finish(&mut corr, &opts, &mut keep);
        all.push(got.into_inner());
    }
    let want = vec![
        ("early".to_string(), None),
        (
            "late\nTraceback (most recent call last):\n  File \"w.py\", line 2, in f\nValueError: x".to_string(),
            Some("late_task".to_string()),
        ),
        ("after".to_string(), Some("late_task".to_string())),
    ];
    for (split, got) in all.iter().enumerate() {
        assert_eq!(got, &want, "split at {}", split + 1);
    }
}

#[test]
fn a_time_out_of_range_is_flagged_and_inferred_not_wrapped() {
    let text = "[2026-11-30 10:21:03,123 I 1 1] (raylet) x.cc:1: before\n\
                [2300-01-01 00:00:00,000 I 1 1] (raylet) x.cc:1: far future\n\
                [1600-01-01 00:00:00,000 I 1 1] (raylet) x.cc:1: far past\n";
    let mut p = FileParser::new(crate::classify("raylet.out", None), None, None);
    let (mut corr, opts, mut out) = (Correlator::new(), Options::default(), vec![]);
    let mut keep = |r: &Record<'_>| crate::ndjson::write_record(&mut out, r);
    p.push(text.as_bytes(), &mut corr, &opts, &mut keep);
    p.finish(&mut corr, &opts, &mut keep);
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(!lines[0].contains("time_out_of_range"), "{}", lines[0]);
    for line in &lines[1..] {
        assert!(
            line.starts_with(r#"{"timestamp":"2026-11-30T10:21:03.123Z","timestamp_inferred":true,"level":"INFO""#),
            "{line}"
        );
        assert!(line.contains(r#""time_out_of_range":true"#), "{line}");
    }
}
