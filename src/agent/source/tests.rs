//! The reader driven by hand, round by round: the descriptor cap holds while every
//! file is read, a closed file reopens where it stopped, with its identity, and the
//! three ways rotation used to send a file twice (M1: a rename's events split
//! across rounds; M2: a closed file reopened by a path that now names another;
//! M3: a listing that failed) each send every line once. The random interleavings
//! of all of these are in `model_tests.rs`, on the same [`Rig`].

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::*;
use crate::agent::batch::Batch;

/// A record as the sinks got it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sent {
    pub message: String,
    pub offset: u64,
    pub doc_id: u128,
    /// The entry's time (the record's, or the one it was given).
    pub time: i64,
    /// The batch it went out in.
    pub seq: u64,
}

pub(super) struct Rig {
    pub dir: PathBuf,
    pub source: Source,
    batches: mpsc::Receiver<(Arc<Batch>, Instant)>,
    pending: mpsc::Receiver<crate::agent::pipeline::InFlight>,
    cfg: Config,
    max_open: usize,
    watched: bool,
}

impl Rig {
    fn new(tag: &str, max_open: usize) -> Rig {
        Rig::with(tag, max_open, false)
    }

    /// A rig whose source believes inotify watches (`watched`): then only the
    /// changes handed to [`Rig::round`] and the listings they ask for find files,
    /// as in the agent, where the periodic listing is minutes away.
    pub fn with(tag: &str, max_open: usize, watched: bool) -> Rig {
        Rig::with_source(tag, max_open, watched, "")
    }

    /// [`Rig::with`], with more `[source]` keys (`extra`, TOML lines).
    pub fn with_source(tag: &str, max_open: usize, watched: bool, extra: &str) -> Rig {
        let dir = std::env::temp_dir().join(format!("raylog-src-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ray/session_2026-11-30_09-00-00_000000_1/logs")).unwrap();
        let toml = format!(
            "[source]\npaths = [\"{}\"]\nstate_dir = \"{}\"\nidle_flush = \"1ms\"\n{}\
             close_inactive = \"1h\"\n[batch]\nmax_wait = \"1ms\"\n[api]\naddress = \"\"\n",
            dir.join("ray").display(),
            dir.join("state").display(),
            if extra.contains("partial_line_timeout") {
                extra.to_string()
            } else {
                format!("partial_line_timeout = \"1ms\"\n{extra}")
            }
        );
        let (_, cfg) = crate::agent::config::parse(&toml, "test").unwrap();
        let (source, batches, pending) = Rig::source(&cfg, Resume::default(), max_open, watched);
        Rig { dir, source, batches, pending, cfg, max_open, watched }
    }

    /// A reader resuming from `resume`, and the channels it sends into.
    #[allow(clippy::type_complexity)]
    fn source(
        cfg: &Config,
        resume: Resume,
        max_open: usize,
        watched: bool,
    ) -> (Source, mpsc::Receiver<(Arc<Batch>, Instant)>, mpsc::Receiver<crate::agent::pipeline::InFlight>) {
        let (tx, batches) = mpsc::channel(100_000);
        let (ptx, pending) = mpsc::channel(100_000);
        let out = Dispatcher { sinks: vec![tx], pending: ptx };
        let metrics = Arc::new(Metrics::new(&["file"]));
        let shutdown = Arc::new(AtomicBool::new(false));
        let recycler = Recycler::new(1 << 20);
        let times = TimesLog::for_resume(&cfg.source.state_dir, &resume).unwrap();
        let source =
            Source::new(cfg.clone(), resume, out, recycler, metrics, shutdown, false, max_open, watched, times);
        (source, batches, pending)
    }

    /// The agent killed and started again: every batch cut so far but the last
    /// `unacked` was acknowledged, its marks and positions saved in order as the
    /// ack tracker saves them (the others never were), and a new reader resumes
    /// from what is in `state_dir`. Records sent and not taken are dropped.
    pub fn restart(&mut self, unacked: usize) {
        self.restart_edited(unacked, |_| {});
    }

    /// [`Rig::restart`]; returns the numbers of the batches not acknowledged.
    pub fn restart_unacked(&mut self, unacked: usize) -> Vec<u64> {
        self.restart_edited(unacked, |_| {})
    }

    /// [`Rig::restart`], each checkpoint saved edited by `edit` first (as an
    /// older raylog, or another file on the inode, would have left it).
    pub fn restart_edited(
        &mut self,
        unacked: usize,
        edit: impl Fn(&mut crate::agent::checkpoint::FileCheckpoint),
    ) -> Vec<u64> {
        let state = self.cfg.source.state_dir.clone();
        let (mut store, _) = crate::agent::checkpoint::CheckpointStore::open(&state, 86_400).unwrap();
        let mut flights = vec![];
        while let Ok(f) = self.pending.try_recv() {
            flights.push(f);
        }
        let acked = flights.len().saturating_sub(unacked);
        let lost: Vec<u64> = flights[acked..].iter().map(|f| f.seq).collect();
        let debug = std::env::var_os("RAYLOG_MODEL_DEBUG").is_some();
        for f in flights.into_iter().take(acked) {
            let seq = f.seq;
            f.marks.into_iter().flat_map(|m| m.positions).chain(f.positions).for_each(|mut cp| {
                if debug {
                    eprintln!("  saved from batch {seq}: {:?} at {}", cp.key, cp.offset);
                }
                edit(&mut cp);
                store.update(cp)
            });
        }
        store.save().unwrap();
        drop(store);
        let _ = self.sent();
        let resume = crate::agent::checkpoint::CheckpointStore::open(&state, 86_400).unwrap().1;
        if debug {
            for e in std::fs::read_dir(&state).unwrap().flatten() {
                if e.file_name().to_string_lossy().starts_with("times.") {
                    eprintln!("  {}: {}", e.file_name().to_string_lossy(), std::fs::read_to_string(e.path()).unwrap());
                }
            }
        }
        (self.source, self.batches, self.pending) = Rig::source(&self.cfg, resume, self.max_open, self.watched);
        lost
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.join("ray/session_2026-11-30_09-00-00_000000_1/logs")
    }

    /// One pass of the reader's loop; returns the messages sent, checking the cap.
    fn round(&mut self, changes: Changes) -> Vec<String> {
        self.round_sent(changes).into_iter().map(|s| s.message).collect()
    }

    /// [`Rig::round`] with each record's offset and document id.
    pub fn round_sent(&mut self, changes: Changes) -> Vec<Sent> {
        self.source.look(changes);
        self.rest_of_round()
    }

    /// A round after its `look`: what the reader does once it has taken in the
    /// changes (a test may change the files in between, as a writer can).
    pub fn rest_of_round(&mut self) -> Vec<Sent> {
        self.step();
        self.sent()
    }

    /// [`Rig::round`], the records as the sinks' JSON.
    pub fn round_json(&mut self, changes: Changes) -> Vec<serde_json::Value> {
        self.source.look(changes);
        self.rest_of_round_json()
    }

    /// [`Rig::rest_of_round`], the records as the sinks' JSON.
    fn rest_of_round_json(&mut self) -> Vec<serde_json::Value> {
        self.step();
        self.sent_json()
    }

    /// What the reader does in a round once it has taken in the changes.
    fn step(&mut self) {
        let s = &mut self.source;
        s.read_round();
        assert!(s.table.open_count() <= s.max_open, "{} files open, cap {}", s.table.open_count(), s.max_open);
        s.flush_idle();
        s.close_inactive();
        s.release_held(false);
        s.first_scan = false;
        s.cut(true);
    }

    /// The records cut into batches so far and not yet taken.
    pub fn sent(&mut self) -> Vec<Sent> {
        let mut got = vec![];
        while let Ok((b, _)) = self.batches.try_recv() {
            for e in &b.entries {
                let v: serde_json::Value = serde_json::from_str(b.json_of(e)).unwrap();
                let message = v["message"].as_str().unwrap().to_string();
                got.push(Sent { message, offset: e.offset, doc_id: e.doc_id, time: e.timestamp_ns, seq: b.seq });
            }
        }
        got
    }

    /// The records cut into batches so far and not yet taken, as the sinks' JSON.
    pub fn sent_json(&mut self) -> Vec<serde_json::Value> {
        let mut got = vec![];
        while let Ok((b, _)) = self.batches.try_recv() {
            got.extend(b.entries.iter().map(|e| serde_json::from_str(b.json_of(e)).unwrap()));
        }
        got
    }

    fn key_of(&self, path: &Path) -> FileKey {
        FileKey::of(&std::fs::metadata(path).unwrap())
    }

    /// The inode of the file at `path`, and its incarnation as its stat gives it.
    fn ident_of(&self, path: &Path) -> (FileKey, u32) {
        let md = std::fs::metadata(path).unwrap();
        (FileKey::of(&md), crate::agent::checkpoint::born::of_metadata(&md))
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn write(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Rounds with no news, a fixed number of them: what is sent late (or a second
/// time) shows up, rather than the loop stopping at the first count it wanted.
fn rounds(rig: &mut Rig, n: usize) -> Vec<Sent> {
    let mut got = vec![];
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(2));
        got.extend(rig.round_sent(Changes::default()));
    }
    got
}

fn settle(rig: &mut Rig) -> Vec<String> {
    rounds(rig, 30).into_iter().map(|s| s.message).collect()
}

fn everything() -> Changes {
    Changes { everything: true, ..Default::default() }
}

fn paths(p: &[&Path]) -> Changes {
    Changes { paths: p.iter().map(|p| p.to_path_buf()).collect(), everything: false }
}

/// The document id the agent gives the record at `offset` of the file `key` whose
/// first line is `first_line`, whatever happened to the file.
fn doc_id((key, born): (FileKey, u32), first_line: &str, offset: u64, message: &str) -> u128 {
    let identity = crate::agent::enrich::route::identity(key, born, crate::agent::fnv::hash64(first_line.as_bytes()));
    doc_id_from(crate::agent::batch::doc_id_seed(&identity), offset, message)
}

fn worker(n: u32) -> String {
    format!("worker-{:056x}-01000000-{}.out", 0xa000 + n, 40_000 + n)
}

#[test]
fn at_the_cap_every_file_is_still_read_once() {
    let mut rig = Rig::new("cap", 8);
    for i in 0..50 {
        let name = format!("worker-{:056x}-01000000-{}.out", 0xc000 + i, 30_000 + i);
        write(&rig.logs().join(name), &format!("line a of {i}\nline b of {i}\n"));
    }
    let mut got = rig.round(everything());
    got.extend(settle(&mut rig));
    got.sort();
    let mut want: Vec<String> = (0..50).flat_map(|i| [format!("line a of {i}"), format!("line b of {i}")]).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(rig.source.table.len(), 50);
    assert!(rig.source.table.open_count() <= 8);
}

#[test]
fn a_closed_file_reopens_where_it_stopped_even_renamed_meanwhile() {
    let mut rig = Rig::new("reopen", 8);
    // A worker's output (file or GCS logs appearing later would make the dir
    // wait for a node id, as a new session does).
    let name = format!("worker-{:056x}-01000000-4242.out", 0xd00d);
    let file = rig.logs().join(&name);
    let line = |n: u32| format!("line {n}\n");
    write(&file, &(0..3).map(line).collect::<String>());
    let mut got = rig.round(everything());
    got.extend(settle(&mut rig));
    assert_eq!(got.len(), 3, "{got:?}");
    let key = rig.key_of(&file);
    let ident = rig.source.table.open_of(&key).and_then(|o| o.ident());
    assert!(ident.is_some(), "the first line's hash is known once read");
    rig.source.close(key);
    assert_eq!(rig.source.table.open_count(), 0);
    // Rotated while closed: the file moves to file.out.1 and grows; a new
    // file.out appears.
    let rotated = rig.logs().join(format!("{name}.1"));
    std::fs::rename(&file, &rotated).unwrap();
    write(&rotated, &line(3));
    write(&file, &line(4));
    let mut got = rig.round(paths(&[&file, &rotated]));
    got.extend(settle(&mut rig));
    got.sort();
    assert_eq!(got, ["line 3", "line 4"], "the old lines are not read again");
    let t = rig.source.table.get(&key).unwrap();
    assert_eq!(rig.source.table.rel(t), format!("{name}.1"), "the closed file was followed to its new name");
    let reopened = rig.source.table.open_of(&key).and_then(|o| o.ident());
    assert_eq!(reopened, ident, "same identity (document ids), hashed again from the reopened file");
}

#[test]
fn counters_keep_counting_across_a_copy_truncate() {
    let mut rig = Rig::new("truncate", 8);
    let path = rig.logs().join(format!("worker-{:056x}-01000000-4343.out", 0xbeef));
    let lines: String = (0..50).map(|i| format!("before truncation {i}\n")).collect();
    write(&path, &lines);
    let mut got = rig.round(everything());
    got.extend(settle(&mut rig));
    assert_eq!(got.len(), 50);
    let read = |rig: &Rig| rig.source.metrics.lines_read.load(Relaxed);
    assert_eq!(read(&rig), 50);
    // Copy-truncate: the file is emptied in place, then written again from 0.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    write(&path, "after 1\nafter 2\nafter 3\n");
    let mut got = rig.round(paths(&[&path]));
    got.extend(settle(&mut rig));
    assert_eq!(got, ["after 1", "after 2", "after 3"]);
    assert_eq!(read(&rig), 53, "the replaced parser's 50 lines stay counted");
}

/// Every record of `got` once, with the offset and document id of where it was
/// written: `want` is (message, offset, file key, first line of that file).
fn assert_once(got: &[Sent], want: &[(&str, u64, (FileKey, u32), &str)]) {
    let mut got: Vec<(String, u64, u128)> = got.iter().map(|s| (s.message.clone(), s.offset, s.doc_id)).collect();
    got.sort();
    let mut want: Vec<(String, u64, u128)> =
        want.iter().map(|(m, o, k, first)| (m.to_string(), *o, doc_id(*k, first, *o, m))).collect();
    want.sort();
    assert_eq!(got, want);
}

/// M1: rotation's events (`x` moved away and created anew; `x.1` moved in) reach the
/// reader in two rounds. The old file, read to its end, must not be forgotten while
/// its new name is still to come, and so must not be read again from 0 under it.
#[test]
fn m1_a_rename_whose_events_land_in_two_rounds_is_read_once() {
    let mut rig = Rig::with("m1", 8, true);
    let x = rig.logs().join(worker(1));
    let x1 = rig.logs().join(format!("{}.1", worker(1)));
    write(&x, "old 0\nold 1\nold 2\n");
    let mut got = rig.round_sent(everything());
    got.extend(rounds(&mut rig, 5));
    assert_eq!(got.len(), 3, "read and flushed before the rotation: {got:?}");
    let a = rig.ident_of(&x);
    // Ray renames `x`; its half of the events comes first, before `x` is made anew.
    std::fs::rename(&x, &x1).unwrap();
    got.extend(rig.round_sent(paths(&[&x])));
    got.extend(rounds(&mut rig, 5));
    write(&x, "new 0\n");
    let b = rig.ident_of(&x);
    got.extend(rig.round_sent(paths(&[&x1, &x])));
    got.extend(rounds(&mut rig, 30));
    let want =
        [("old 0", 0, a, "old 0"), ("old 1", 6, a, "old 0"), ("old 2", 12, a, "old 0"), ("new 0", 0, b, "new 0")];
    assert_once(&got, &want);
}

/// M2: a file closed at the cap is due to be read again, and its path is rotated to
/// another file before the reader opens it. Opening the path would read the new
/// file under the old one's identity (and then again under its own), and lose the
/// old file's unread tail.
#[test]
fn m2_a_closed_file_is_not_reopened_through_a_path_that_names_another() {
    let mut rig = Rig::with("m2", 8, true);
    let x = rig.logs().join(worker(2));
    let x1 = rig.logs().join(format!("{}.1", worker(2)));
    write(&x, "old 0\nold 1\nold 2\n");
    let mut got = rig.round_sent(everything());
    got.extend(rounds(&mut rig, 5));
    let a = rig.ident_of(&x);
    rig.source.close(a.0);
    write(&x, "old 3\n");
    // The write is taken in; the writer rotates before the reader gets to it.
    rig.source.look(paths(&[&x]));
    std::fs::rename(&x, &x1).unwrap();
    write(&x, "new 0\nnew 1\nnew 2\nnew 3\nnew 4\n");
    let b = rig.ident_of(&x);
    got.extend(rig.rest_of_round());
    got.extend(rounds(&mut rig, 5));
    got.extend(rig.round_sent(paths(&[&x, &x1])));
    got.extend(rounds(&mut rig, 30));
    let old = |i: u64| (["old 0", "old 1", "old 2", "old 3"][i as usize], 6 * i, a, "old 0");
    let new = |i: u64| (["new 0", "new 1", "new 2", "new 3", "new 4"][i as usize], 6 * i, b, "new 0");
    let want: Vec<_> = (0..4).map(old).chain((0..5).map(new)).collect();
    assert_once(&got, &want);
}

/// M3: a listing that cannot read a logs dir (out of descriptors, say) must not take
/// its files for vanished: the next listing would then track them anew, from 0.
#[test]
fn m3_a_listing_that_fails_forgets_nothing() {
    let mut rig = Rig::with("m3", 8, true);
    let x = rig.logs().join(worker(3));
    let y = rig.logs().join(worker(4));
    write(&x, "x 0\nx 1\n");
    write(&y, "y 0\n");
    let mut got = rig.round_sent(everything());
    got.extend(rounds(&mut rig, 5));
    let (a, b) = (rig.ident_of(&x), rig.ident_of(&y));
    rig.source.close(b.0);
    rig.source.list_fault = Some(rig.logs());
    got.extend(rig.round_sent(everything()));
    got.extend(rounds(&mut rig, 5));
    rig.source.list_fault = None;
    write(&x, "x 2\n");
    got.extend(rig.round_sent(everything()));
    got.extend(rounds(&mut rig, 30));
    assert_once(&got, &[("x 0", 0, a, "x 0"), ("x 1", 4, a, "x 0"), ("x 2", 8, a, "x 0"), ("y 0", 0, b, "y 0")]);
    assert_eq!(rig.source.table.len(), 2, "both files still tracked");
}

/// What Ray deleted before it could be read is the one loss allowed: counted, in
/// files and bytes, once the file is known to be gone.
#[test]
fn a_closed_file_deleted_with_bytes_unread_is_counted_lost() {
    let mut rig = Rig::with("lost", 8, true);
    let x = rig.logs().join(worker(5));
    write(&x, "a 0\na 1\n");
    let mut got = rig.round_sent(everything());
    got.extend(rounds(&mut rig, 5));
    let a = rig.ident_of(&x);
    rig.source.close(a.0);
    write(&x, "a 2\n");
    // The write is seen; Ray deletes the file before the reader opens it again.
    rig.source.look(paths(&[&x]));
    std::fs::remove_file(&x).unwrap();
    got.extend(rig.rest_of_round());
    got.extend(rounds(&mut rig, 30));
    assert_once(&got, &[("a 0", 0, a, "a 0"), ("a 1", 4, a, "a 0")]);
    let m = &rig.source.metrics;
    assert_eq!((m.files_lost.load(Relaxed), m.bytes_lost.load(Relaxed)), (1, 4), "one file, its 4 unread bytes");
    assert_eq!(rig.source.table.len(), 0, "forgotten once a listing confirmed it gone");
}

/// A closed file deleted is forgotten, its position kept should it be found again
/// (it may have moved), and that position is dropped once `forget_after` has passed,
/// without waiting for a listing (minutes apart on a large node).
#[test]
fn positions_of_deleted_files_go_after_forget_after_without_a_listing() {
    let mut rig = Rig::with("expire", 8, true);
    let files: Vec<PathBuf> = (1..=3).map(|n| rig.logs().join(worker(n))).collect();
    for f in &files {
        write(f, "line\n");
    }
    rig.round_sent(everything());
    rounds(&mut rig, 5);
    for f in &files {
        let key = rig.key_of(f);
        rig.source.close(key);
        std::fs::remove_file(f).unwrap();
    }
    let all: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    rig.round_sent(paths(&all));
    rounds(&mut rig, 10);
    assert_eq!(rig.source.table.len(), 0, "forgotten once a listing confirmed them gone");
    assert_eq!(rig.source.resume.len(), 3, "their positions are kept for forget_after");
    let far = Instant::now() + Duration::from_secs(3600);
    rig.source.next_rescan = far;
    rig.source.next_expire = Instant::now();
    rig.source.look(paths(&[]));
    assert_eq!(rig.source.resume.len(), 3, "not yet: forget_after has not passed");
    for cp in rig.source.resume.values_mut() {
        cp.gone_since = cp.gone_since.saturating_sub(rig.source.cfg.source.forget_after.as_secs() + 1);
    }
    rig.source.next_expire = Instant::now();
    rig.source.look(paths(&[]));
    assert_eq!(rig.source.next_rescan, far, "no listing ran");
    assert_eq!(rig.source.resume.len(), 0, "dropped once forget_after passed");
}

/// SIGTERM during start-up discovery: the listing stops within [`STOP_CHECK`]
/// entries, nothing of the cut-short listing is tracked or counted missing, and the
/// reader returns instead of reading. Without the flag the same tree is all tracked.
#[test]
fn discovery_stops_when_the_agent_is_stopping() {
    let mut rig = Rig::new("stop-discovery", 64);
    let logs = rig.logs();
    for i in 0..3 * super::files::STOP_CHECK {
        std::fs::write(logs.join(format!("worker-{i:056x}-01000000-{i}.out")), "hello\n").unwrap();
    }
    rig.source.shutdown.store(true, Relaxed);
    assert_eq!(rig.source.rescan(), 0);
    assert_eq!(rig.source.table.len(), 0, "a cut-short listing tracks nothing");
    rig.source.shutdown.store(false, Relaxed);
    let mut tracked = rig.source.rescan();
    assert_eq!(tracked, super::backlog::TRACK_CHUNK, "a listing of many files tracks a chunk at once");
    while !rig.source.backlog.is_empty() {
        tracked += rig.source.track_backlog();
    }
    assert_eq!(tracked, 3 * super::files::STOP_CHECK);
    assert_eq!(rig.source.table.len(), 3 * super::files::STOP_CHECK);
}

/// A worker whose files are all read, closed and quiet is forgotten; one hosting an
/// actor or with a file still open is not. A line its file gets later keeps the job
/// the file's `:job_id:` line named (from the context the file ended in).
#[test]
fn quiet_workers_are_forgotten_and_their_files_keep_their_job() {
    let mut rig = Rig::new("quiet", 8);
    // Pre-started workers: the job is in the marker, not in the name.
    let name = |n: u32| format!("worker-{:056x}-ffffffff-{}.out", 0xa000 + n, 40_000 + n);
    let core = |n: u32| format!("python-core-worker-{:056x}_{}.log", 0xa000 + n, 40_000 + n);
    let files: Vec<PathBuf> = (1..=3).map(|n| rig.logs().join(name(n))).collect();
    for f in &files {
        write(f, ":job_id:03000000\nhello\n");
    }
    let mut got = rig.round(everything());
    got.extend(settle(&mut rig));
    assert_eq!(got, ["hello"; 3]);
    assert_eq!(rig.source.corr.workers(), 3);
    let id = |n: u32| Id::parse(format!("{:056x}", 0xa000 + n).as_bytes()).unwrap();
    let actor = Id::parse(b"0123456789abcdef0123456789abcdef").unwrap();
    assert!(rig.source.corr.link(id(2), actor));
    for f in &files[..2] {
        let key = rig.key_of(f);
        rig.source.close(key);
    }
    assert_eq!(rig.source.forget_quiet_workers(Instant::now(), Duration::from_secs(3600)), 0, "not quiet yet");
    rig.source.next_forget = Instant::now();
    assert_eq!(rig.source.forget_quiet_workers(Instant::now(), Duration::ZERO), 1);
    rig.source.next_gauges = Instant::now();
    rig.source.update_gauges();
    assert!(rig.source.metrics.render().contains("\nraylog_workers_known 2\n"));
    let corr = &rig.source.corr;
    assert_eq!(corr.workers(), 2);
    assert_eq!(corr.job_of(&id(1)), None, "worker 1: read, closed, quiet");
    assert_eq!(corr.actor_of(&id(2)), Some(actor), "worker 2 hosts an actor");
    assert!(corr.job_of(&id(3)).is_some(), "worker 3's file is open");
    write(&files[0], "later\n");
    let mut later = rig.round_json(paths(&[&files[0]]));
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(2));
        later.extend(rig.round_json(Changes::default()));
    }
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!((later[0]["message"].as_str(), later[0]["job_id"].as_str()), (Some("later"), Some("03000000")));
    // Reopened, the file told the correlator its job again: its worker's core-worker
    // log, new now, gets it.
    assert_eq!(rig.source.corr.job_of(&id(1)).map(|j| j.to_string()), Some("03000000".into()));
    let log = rig.logs().join(core(1));
    write(&log, "[2026-11-30 09:05:36,393 I 40001 40001] core_worker.cc:1: a line naming no job\n");
    let mut core_lines = rig.round_json(paths(&[&log]));
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(2));
        core_lines.extend(rig.round_json(Changes::default()));
    }
    assert_eq!(core_lines.len(), 1, "{core_lines:?}");
    assert_eq!(core_lines[0]["job_id"].as_str(), Some("03000000"), "{core_lines:?}");
}

/// A backfill of a dense file and a sparse one of the same merge group, 40 minutes
/// of each: raylet's READ_BUDGET moves the time limit ~2 minutes a round, yet GCS's
/// file, stopped by the limit, is read again only in steps of minutes (a read per
/// round for every small file was most of the syscalls of a one-stream catch-up),
/// and no record goes out more than MERGE_SLACK behind the newest sent before it.
#[test]
fn a_file_the_limit_stopped_is_read_again_in_steps_of_minutes() {
    let mut rig = Rig::new("reread", 100);
    let stamp = |s: u32| format!("2026-11-30 09:{:02}:{:02},000", s / 60, s % 60);
    let pad = "x".repeat(900);
    let raylet: String = (0..4800)
        .map(|i| format!("[{} I 1 2] (raylet) node_manager.cc:1: raylet t={} {pad}\n", stamp(i / 2), i / 2))
        .collect();
    let gcs: String =
        (0..240).map(|i| format!("[{} I 3 3] (gcs_server) gcs.cc:1: gcs t={}\n", stamp(i * 10), i * 10)).collect();
    write(&rig.logs().join("raylet.out"), &raylet);
    write(&rig.logs().join("gcs_server.out"), &gcs);
    let mut got = rig.round(everything());
    got.extend(settle(&mut rig));
    let time = |m: &str| m.split(['=', ' ']).nth(2).and_then(|t| t.parse::<u64>().ok()).unwrap();
    assert_eq!(got.len(), 4800 + 240, "every record once");
    let mut newest = 0;
    for m in &got {
        assert!(time(m) + MERGE_SLACK.as_secs() >= newest, "{m} after a record at {newest} s");
        newest = newest.max(time(m));
    }
    // Stretches of GCS records between raylet's: 5 minutes or more each.
    let stretches = got.windows(2).filter(|w| w[0].starts_with("raylet") && w[1].starts_with("gcs")).count();
    assert!((2..=10).contains(&stretches), "GCS read in {stretches} stretches over 40 minutes");
}

/// A worker whose only file is one old stdout file leaves no slot in the correlator:
/// its prescan teaches nothing, and the slot its reading made goes when it is closed
/// read to its end. Its records keep the job its marker named; a
/// worker with a core-worker log or two streams keeps its slot, and a file written
/// after a rotation of the lone file gets the job from the rotated file.
#[test]
fn a_workers_only_file_leaves_no_slot_once_read() {
    let mut rig = Rig::new("alone", 8);
    let id = |n: u32| format!("{:056x}", 0xb000 + n);
    let out = |n: u32, ext: &str| format!("worker-{}-ffffffff-{}.{ext}", id(n), 50_000 + n);
    let logs = rig.logs();
    let lone = logs.join(out(1, "out"));
    let files = [lone.clone(), logs.join(out(2, "out")), logs.join(out(3, "out")), logs.join(out(3, "err"))];
    for f in &files {
        // No `:actor_name:`: an actor's prints would wait for its core-worker log.
        write(f, ":job_id:03000000\nhello\n");
    }
    let core = logs.join(format!("python-core-worker-{}_{}.log", id(2), 50_002));
    write(&core, "[2026-11-30 09:05:36,393 I 50002 50002] core_worker.cc:1: a line naming no job\n");
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for f in files.iter().chain([&core]) {
        std::fs::File::options().append(true).open(f).unwrap().set_modified(hour_ago).unwrap();
    }
    let job = |rig: &Rig, n: u32| rig.source.corr.job_of(&Id::parse(id(n).as_bytes()).unwrap());
    rig.source.look(everything());
    while !rig.source.backlog.is_empty() {
        rig.source.look(Changes::default());
    }
    assert_eq!((job(&rig, 1), job(&rig, 2).is_some(), job(&rig, 3).is_some()), (None, true, true), "prescanned");
    let mut got = rig.rest_of_round_json();
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(2));
        got.extend(rig.round_json(Changes::default()));
    }
    assert_eq!(got.len(), 5, "{got:?}");
    for r in &got {
        assert_eq!(r["job_id"].as_str(), Some("03000000"), "{r}");
    }
    assert_eq!(got.iter().filter(|r| r["message"] == "hello").count(), 4);
    for key in rig.source.table.open_keys() {
        rig.source.close(key);
    }
    assert_eq!(job(&rig, 1), None, "the lone file's worker is forgotten once it is read and closed");
    assert!(job(&rig, 2).is_some() && job(&rig, 3).is_some());
    assert_eq!(rig.source.corr.workers(), 2);
    // Rotated: the new file has no markers of its own.
    let rotated = logs.join(out(1, "out.1"));
    std::fs::rename(&lone, &rotated).unwrap();
    write(&lone, "after the rotation\n");
    let mut later = rig.round_json(paths(&[&lone, &rotated]));
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(2));
        later.extend(rig.round_json(Changes::default()));
    }
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!(later[0]["job_id"].as_str(), Some("03000000"), "{later:?}");
}

/// A new line of raylet.out, the newest record of all, goes out at the start of the
/// next round, ahead of the round's backlog of older worker files (their merge group
/// has its own time limit): at a million files a round of them takes a second and
/// a half, and a live line waited for a round and a half.
#[test]
fn ray_files_are_read_before_the_round_of_backlog_worker_files() {
    let mut rig = Rig::new("ray-first", 100);
    // Each file's last line goes out only once idle_flush (1 ms) has passed, in the
    // first round or a later one (as fast as the machine is): a line after the
    // ones looked at makes them go out as they are read.
    for i in 0..5 {
        write(&rig.logs().join(worker(i)), &format!("old worker line {i}\nits last line\n"));
    }
    // Stamped later than anything the workers' files may be dated by (their mtime).
    let live = "[2031-01-01 09:00:00,000 I 1 2] (raylet) node_manager.cc:1: live raylet line\n\
                [2031-01-01 09:00:00,001 I 1 2] (raylet) node_manager.cc:1: its last line\n";
    write(&rig.logs().join("raylet.out"), live);
    let mut got = rig.round(everything());
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(3));
        got.extend(rig.round(Changes::default()));
    }
    assert!(got.first().is_some_and(|m| m.contains("live raylet line")), "{got:?}");
    assert_eq!(got.iter().filter(|m| m.contains("old worker line")).count(), 5, "the backlog too: {got:?}");
}

/// After a round that read what there was, the reader lets writes gather before the
/// next (a live node's files, written line by line, would otherwise make a round per
/// line); while a file still has work (its read budget stopped it) it goes on at once.
#[test]
fn a_round_that_caught_up_lingers_and_a_catch_up_does_not() {
    let mut rig = Rig::new("linger", 8);
    let (small, large) = (rig.logs().join("raylet.out"), rig.logs().join("gcs_server.out"));
    write(&small, "[2026-11-30 09:00:00,000 I 1 1] main.cc:1: a line\n");
    rig.round(everything());
    settle(&mut rig);
    assert_eq!(rig.source.linger(false), None, "a round that read nothing waits for a change instead");
    // The rig's batch.max_wait is 1 ms: a batch waits that long anyway.
    assert_eq!(rig.source.linger(true), Some(Duration::from_micros(25)), "caught up");
    let line = "[2026-11-30 09:00:01,000 I 1 1] main.cc:2: ".to_string() + &"x".repeat(200) + "\n";
    write(&large, &line.repeat(3 * (READ_BUDGET as usize) / line.len()));
    rig.round(everything());
    assert!(rig.source.table.ready().any(|t| t.has_work()), "three budgets of bytes take three rounds");
    assert_eq!(rig.source.linger(true), None, "a file stopped by its budget is read on at once");
}
