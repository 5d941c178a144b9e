//! The reader driven by hand, round by round: the descriptor cap holds while every
//! file is read, and a closed file reopens where it stopped, with its identity, even
//! after a rename while it was closed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::*;
use crate::agent::batch::Batch;

struct Rig {
    dir: PathBuf,
    source: Source,
    batches: mpsc::Receiver<(Arc<Batch>, Instant)>,
    _pending: mpsc::Receiver<crate::agent::pipeline::InFlight>,
}

impl Rig {
    fn new(tag: &str, max_open: usize) -> Rig {
        let dir = std::env::temp_dir().join(format!("raylog-src-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ray/session_2026-11-30_09-00-00_000000_1/logs")).unwrap();
        let toml = format!(
            "[source]\npaths = [\"{}\"]\nstate_dir = \"{}\"\nidle_flush = \"1ms\"\npartial_line_timeout = \"1ms\"\n\
             close_inactive = \"1h\"\n[batch]\nmax_wait = \"1ms\"\n[api]\naddress = \"\"\n",
            dir.join("ray").display(),
            dir.join("state").display()
        );
        let (_, cfg) = crate::agent::config::parse(&toml, "test").unwrap();
        let (tx, batches) = mpsc::channel(100_000);
        let (ptx, pending) = mpsc::channel(100_000);
        let out = Dispatcher { sinks: vec![tx], pending: ptx };
        let metrics = Arc::new(Metrics::new(&["file"]));
        let shutdown = Arc::new(AtomicBool::new(false));
        let recycler = Recycler::new(1 << 20);
        let source = Source::new(cfg, HashMap::new(), out, recycler, metrics, shutdown, false, max_open, false);
        Rig { dir, source, batches, _pending: pending }
    }

    fn logs(&self) -> PathBuf {
        self.dir.join("ray/session_2026-11-30_09-00-00_000000_1/logs")
    }

    /// One pass of the reader's loop; returns the messages sent, checking the cap.
    fn round(&mut self, changes: Changes) -> Vec<String> {
        let s = &mut self.source;
        s.look(changes);
        s.read_round();
        assert!(s.table.open_count() <= s.max_open, "{} files open, cap {}", s.table.open_count(), s.max_open);
        s.flush_idle();
        s.close_inactive();
        s.release_held(false);
        s.first_scan = false;
        s.cut(true);
        let mut got = vec![];
        while let Ok((b, _)) = self.batches.try_recv() {
            for e in &b.entries {
                let v: serde_json::Value = serde_json::from_str(b.json_of(e)).unwrap();
                got.push(v["message"].as_str().unwrap().to_string());
            }
        }
        got
    }

    fn key_of(&self, path: &Path) -> FileKey {
        FileKey::of(&std::fs::metadata(path).unwrap())
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn settle(rig: &mut Rig, want: usize) -> Vec<String> {
    let mut got = vec![];
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(2));
        got.extend(rig.round(Changes::default()));
        if got.len() >= want {
            break;
        }
    }
    got
}

#[test]
fn at_the_cap_every_file_is_still_read_once() {
    let mut rig = Rig::new("cap", 8);
    for i in 0..50 {
        let name = format!("worker-{:056x}-01000000-{}.out", 0xc000 + i, 30_000 + i);
        write(&rig.logs().join(name), &format!("line a of {i}\nline b of {i}\n"));
    }
    let mut got = rig.round(Changes { everything: true, ..Default::default() });
    got.extend(settle(&mut rig, 100));
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
    let mut got = rig.round(Changes { everything: true, ..Default::default() });
    got.extend(settle(&mut rig, 3));
    assert_eq!(got.len(), 3, "{got:?}");
    let key = rig.key_of(&file);
    let ident = rig.source.table.get(&key).and_then(|t| t.open.as_ref()).and_then(|o| o.ident());
    assert!(ident.is_some(), "the first line's hash is known once read");
    rig.source.close(key);
    assert_eq!(rig.source.table.open_count(), 0);
    // Rotated while closed: the file moves to file.out.1 and grows; a new
    // file.out appears.
    let rotated = rig.logs().join(format!("{name}.1"));
    std::fs::rename(&file, &rotated).unwrap();
    write(&rotated, &line(3));
    write(&file, &line(4));
    let mut got = rig.round(Changes { paths: vec![file.clone(), rotated.clone()], everything: false });
    got.extend(settle(&mut rig, 2));
    got.sort();
    assert_eq!(got, ["line 3", "line 4"], "the old lines are not read again");
    let t = rig.source.table.get(&key).unwrap();
    assert_eq!(*t.rel, format!("{name}.1"), "the closed file was followed to its new name");
    assert_eq!(t.open.as_ref().and_then(|o| o.ident()).or(t.ident), ident, "same identity (document ids)");
}

#[test]
fn counters_keep_counting_across_a_copy_truncate() {
    let mut rig = Rig::new("truncate", 8);
    let path = rig.logs().join(format!("worker-{:056x}-01000000-4343.out", 0xbeef));
    let lines: String = (0..50).map(|i| format!("before truncation {i}\n")).collect();
    write(&path, &lines);
    let mut got = rig.round(Changes { everything: true, ..Default::default() });
    got.extend(settle(&mut rig, 50));
    assert_eq!(got.len(), 50);
    let read = |rig: &Rig| rig.source.metrics.lines_read.load(Relaxed);
    assert_eq!(read(&rig), 50);
    // Copy-truncate: the file is emptied in place, then written again from 0.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    write(&path, "after 1\nafter 2\nafter 3\n");
    let mut got = rig.round(Changes { paths: vec![path.clone()], everything: false });
    got.extend(settle(&mut rig, 3));
    assert_eq!(got, ["after 1", "after 2", "after 3"]);
    assert_eq!(read(&rig), 53, "the replaced parser's 50 lines stay counted");
}
