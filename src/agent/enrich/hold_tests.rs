//! The hold by hand: the order records leave in, the bound, the per-file index,
//! the gap between passes, and the settled shortcut against full passes.

use super::*;
use raylog_parsers::{classify, FileParser, Options};

/// An actor worker's prints whose actor is never learned: every record waits.
fn held(n: usize) -> (Hold, Correlator) {
    let name = "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4242.out";
    let meta = Arc::new(classify(name, Some("session_x")));
    let mut text = String::from(":actor_name:Counter\n");
    for i in 0..n {
        text.push_str(&format!("print {i}\n"));
    }
    let (mut hold, mut corr, opts) = (Hold::default(), Correlator::new(), Options::default());
    let key = FileKey { dev: 1, ino: 2 };
    let wait = Wait { until: Instant::now() + std::time::Duration::from_secs(3600), node_until: None };
    let mut p = FileParser::new((*meta).clone(), None, None);
    let mut push = |r: &Record<'_>| {
        assert!(Hold::awaits(r));
        hold.push(r, key, 0, meta.clone(), wait);
    };
    p.push(text.as_bytes(), &mut corr, &opts, &mut push);
    p.finish(&mut corr, &opts, &mut push);
    (hold, corr)
}

fn messages(hold: &mut Hold, corr: &Correlator, force: bool, budget: usize) -> (Vec<String>, bool) {
    let mut out = vec![];
    let more =
        hold.release(Instant::now(), corr, &|_| None, force, budget, &mut |r, _, _| out.push(r.message.to_string()));
    (out, more)
}

#[test]
fn release_stops_at_its_budget_and_keeps_the_order() {
    let (mut hold, corr) = held(25);
    assert_eq!(hold.len(), 25);
    assert_eq!(messages(&mut hold, &corr, false, 10), (vec![], false), "nothing is due yet");
    let (first, more) = messages(&mut hold, &corr, true, 10);
    assert!(more);
    assert_eq!(first, (0..10).map(|i| format!("print {i}")).collect::<Vec<_>>());
    let (rest, more) = messages(&mut hold, &corr, true, 100);
    assert!(!more && hold.is_empty());
    assert_eq!(rest, (10..25).map(|i| format!("print {i}")).collect::<Vec<_>>());
}

/// A file's held records keep one copy of their ids and names between them, and
/// each still goes out with its own: a record whose ids differ (a line naming a
/// task) gets its own copy, and the next record shares again.
#[test]
fn held_records_share_their_ids_and_go_out_with_their_own() {
    let (mut hold, mut corr) = held(100);
    assert!(std::mem::size_of::<HeldRecord>() <= 256, "{} bytes", std::mem::size_of::<HeldRecord>());
    let first = hold.queue[0].shared.clone();
    assert_eq!(Arc::strong_count(&first), 101, "one copy for a file's 100 records (and `first`)");
    drop(first);
    let meta = hold.queue[0].meta.clone();
    let (key, wait) = (hold.queue[0].key, hold.queue[0].wait);
    let task = Id::parse(b"c8ef45ccd0112571ffffffffffffffffffffffff01000000").unwrap();
    let mut ids = hold.queue[0].shared.ids;
    ids.task_id = Some(task);
    let fields = Fields::default();
    for (i, ids) in [ids, hold.queue[0].shared.ids].iter().enumerate() {
        let r = Record {
            timestamp: None,
            timestamp_inferred: false,
            timestamp_estimated: false,
            level: None,
            message: "late",
            file: &meta,
            offset: 10_000 + i as u64,
            lines: 1,
            ids,
            pid: None,
            task_name: None,
            actor_name: Some("Counter"),
            fields: &fields,
            truncated: false,
            task_pending: false,
            at: Default::default(),
        };
        hold.push(&r, key, 0, meta.clone(), wait);
    }
    assert!(!Arc::ptr_eq(&hold.queue[100].shared, &hold.queue[99].shared), "other ids, another copy");
    assert!(!Arc::ptr_eq(&hold.queue[101].shared, &hold.queue[100].shared), "back to the first ids");
    let worker = hold.queue[0].shared.ids.worker_id.unwrap();
    let actor = Id::parse(b"6b5c1cd3ac1d3ea6c1c4a1b301000000").unwrap();
    assert!(corr.link(worker, actor));
    let mut out = vec![];
    hold.release(Instant::now(), &corr, &|_| None, false, usize::MAX, &mut |r, _, _| {
        out.push((r.message.to_string(), r.ids.task_id, r.ids.actor_id, r.actor_name.map(str::to_string)));
    });
    assert_eq!(out.len(), 102);
    assert!(out.iter().all(|(_, _, a, name)| *a == Some(actor) && name.as_deref() == Some("Counter")), "{out:?}");
    let tasks: Vec<Option<Id>> = out[99..].iter().map(|o| o.1).collect();
    assert_eq!(tasks, [None, Some(task), None]);
}

#[test]
fn past_the_bound_the_oldest_go_out() {
    let (mut hold, corr) = held(MAX_HELD + 5);
    assert!(hold.is_full());
    let (out, _) = messages(&mut hold, &corr, false, usize::MAX);
    assert!(!hold.is_full(), "{} still held", hold.len());
    assert_eq!(out.len() + hold.len(), MAX_HELD + 5);
    assert_eq!(out, (0..out.len()).map(|i| format!("print {i}")).collect::<Vec<_>>(), "oldest first");
}

/// The per-file index answers as a pass over the queue would, as records of
/// two files come and go (one file read again from its start meanwhile).
#[test]
fn the_file_index_follows_the_queue() {
    let (mut hold, corr) = held(6);
    let (a, b) = (FileKey { dev: 1, ino: 2 }, FileKey { dev: 1, ino: 3 });
    let (mut other, _) = held(3);
    for mut h in other.queue.drain(..) {
        h.key = b;
        h.offset += 1_000;
        hold.offsets.entry(b).or_default().offsets.push_back((h.offset, Default::default()));
        hold.queue.push_back(h);
    }
    let first = |hold: &Hold, k: &FileKey| hold.queue.iter().filter(|h| &h.key == k).map(|h| h.offset).min();
    assert_eq!(hold.files(), vec![a, b]);
    assert_eq!((hold.min_offset(&a), hold.min_offset(&b)), (first(&hold, &a), first(&hold, &b)));
    let (out, _) = messages(&mut hold, &corr, true, 7);
    assert_eq!(out.len(), 7);
    assert!(!hold.holds_file(&a) && hold.holds_file(&b));
    assert_eq!(hold.files(), vec![b]);
    assert_eq!(hold.min_offset(&b), first(&hold, &b));
    assert!(hold.min_offset(&b).is_some_and(|o| o > 1_000));
    messages(&mut hold, &corr, true, 100);
    assert!(hold.files().is_empty() && !hold.holds_file(&b) && hold.min_offset(&b).is_none());
}

/// Waits ending one after another (actor output streaming in) ask for a pass at
/// most every `PASS_GAP`, and no record whose wait ended stays longer than that;
/// a link learned is acted on at once.
#[test]
fn waits_ending_in_a_stream_make_a_pass_at_most_every_gap() {
    let name = "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4242.out";
    let meta = Arc::new(classify(name, Some("session_x")));
    let mut text = String::from(":actor_name:Counter\n");
    for i in 0..200 {
        text.push_str(&format!("print {i}\n"));
    }
    let (mut hold, mut corr, opts) = (Hold::default(), Correlator::new(), Options::default());
    let (key, t0, step) = (FileKey { dev: 1, ino: 2 }, Instant::now(), Duration::from_millis(10));
    let mut dues = vec![];
    let mut p = FileParser::new((*meta).clone(), None, None);
    let mut push = |r: &Record<'_>| {
        // Read 10 ms apart, so due 10 ms apart.
        let until = t0 + step * dues.len() as u32;
        dues.push(until);
        hold.push(r, key, 0, meta.clone(), Wait { until, node_until: None });
    };
    p.push(text.as_bytes(), &mut corr, &opts, &mut push);
    p.finish(&mut corr, &opts, &mut push);
    let (total, mut gone, mut passes) = (dues.len(), 0, 0);
    for k in 0..150u32 {
        let now = t0 + step * k;
        let before = gone;
        hold.release(now, &corr, &|_| None, false, usize::MAX, &mut |_, _, _| gone += 1);
        passes += (gone > before) as u32;
        assert!(dues[..gone].iter().all(|&d| d <= now), "step {k}: a record went out before its wait ended");
        let overdue = dues[gone..].iter().filter(|&&d| d + PASS_GAP <= now).count();
        assert_eq!(overdue, 0, "step {k}: records waited past their wait and the gap");
    }
    assert!(gone > total / 2 && gone < total, "{gone} of {total} out");
    assert!((10..=16).contains(&passes), "{passes} passes over 1.5 s (a pass each 10 ms step without the gap)");
    // A link ends the wait of the rest at once, within the gap.
    let worker = hold.queue[0].shared.ids.worker_id.unwrap();
    assert!(corr.link(worker, Id::parse(b"6b5c1cd3ac1d3ea6c1c4a1b301000000").unwrap()));
    let now = t0 + step * 150 + Duration::from_millis(1);
    hold.release(now, &corr, &|_| None, false, usize::MAX, &mut |_, _, _| gone += 1);
    assert_eq!((gone, hold.len()), (total, 0));
}

/// The shortcut between full passes changes nothing: a hold that takes it and
/// one made to look at every record each call release the same records in the
/// same order, through random reads, links learned, time and the bound.
#[test]
fn settled_release_matches_full_passes() {
    let worker = |i: usize| format!("{:056x}", 0xabc0 + i);
    let files: Vec<(FileKey, Arc<FileMeta>, Option<String>)> = (0..6)
        .map(|i| {
            let name = format!("worker-{}-01000000-{}.out", worker(i), 100 + i);
            // Four actors' workers, two task workers (never held on their own).
            let actor = (i < 4).then(|| format!(":actor_name:A{i}\n"));
            (FileKey { dev: 1, ino: 10 + i as u64 }, Arc::new(classify(&name, Some("session_x"))), actor)
        })
        .collect();
    let mut parsers: Vec<FileParser> = files.iter().map(|f| FileParser::new((*f.1).clone(), None, None)).collect();
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let mut holds = [Hold::default(), Hold::default()];
    // Call by call: the settled hold may not wait out the gap between passes.
    holds[0].set_pass_gap(Duration::ZERO);
    let mut outs: [Vec<String>; 2] = [vec![], vec![]];
    let mut now = Instant::now();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut line, mut node) = (0, None);
    for step in 0..3_000 {
        match rand(100) {
            0..=59 => {
                let f = rand(6) as usize;
                let mut text =
                    if line == 0 || rand(50) == 0 { files[f].2.clone().unwrap_or_default() } else { String::new() };
                let n = if rand(20) == 0 { 1_500 } else { 1 + rand(20) };
                for _ in 0..n {
                    line += 1;
                    text.push_str(&format!("line {line}\n"));
                }
                // A new session's task workers wait for its node, as the source asks.
                let node_until = (f >= 4 && node.is_none()).then(|| now + std::time::Duration::from_secs(3));
                let wait = Wait { until: now + std::time::Duration::from_secs(5), node_until };
                let (key, meta) = (files[f].0, files[f].1.clone());
                let mut route = |r: &Record<'_>| {
                    for (hold, out) in holds.iter_mut().zip(outs.iter_mut()) {
                        if hold.holds_file(&key) || Hold::awaits(r) || node_until.is_some() {
                            hold.push(r, key, 0, meta.clone(), wait);
                        } else {
                            out.push(r.message.to_string());
                        }
                    }
                };
                parsers[f].push(text.as_bytes(), &mut corr, &opts, &mut route);
                parsers[f].flush(&mut corr, &opts, &mut route);
            }
            60..=61 => {
                let i = rand(4) as usize;
                let w = Id::parse(worker(i).as_bytes()).unwrap();
                corr.link(w, Id::parse(format!("{:032x}", 0xbeef_0000u64 + step as u64).as_bytes()).unwrap());
            }
            62..=69 => now += std::time::Duration::from_millis(rand(1_000)),
            70 if node.is_none() && step > 1_500 => {
                node = Id::parse(format!("{:056x}", 0xfeed).as_bytes());
                holds[0].unsettle();
            }
            _ => {
                let (force, budget) = (rand(40) == 0, 1 + rand(3_000) as usize);
                holds[1].unsettle();
                for (hold, out) in holds.iter_mut().zip(outs.iter_mut()) {
                    hold.release(now, &corr, &|_| None, force, budget, &mut |r, _, _| out.push(r.message.to_string()));
                }
                assert_eq!(outs[0], outs[1], "step {step}: the settled hold released differently");
                assert_eq!(holds[0].len(), holds[1].len());
            }
        }
    }
    assert!(outs[0].len() > 10_000, "the run released only {} records", outs[0].len());
}
