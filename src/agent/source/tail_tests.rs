//! The tailer's flush decisions on a stepped clock: `wants_flush` and
//! `flush_if_idle` take the time they decide at, and are called here at instants
//! relative to when the file's data arrived (`last_data`): just before and just at
//! `idle_flush` and `partial_line_timeout`. No assertion depends on how long the
//! test takes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use raylog_parsers::{classify, Correlator, Options};

use super::Tailed;

const IDLE: Duration = Duration::from_millis(100);
const PARTIAL: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(1);

struct Rig {
    dir: PathBuf,
    t: Tailed,
    corr: Correlator,
    /// Every message emitted so far, in order.
    out: Vec<String>,
}

impl Rig {
    fn new(tag: &str, name: &str, text: &str) -> Rig {
        let dir = std::env::temp_dir().join(format!("raylog-tail-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let meta = Arc::new(classify(name, Some("session_x")));
        let key = crate::agent::checkpoint::FileKey::of(&std::fs::metadata(&path).unwrap());
        let (t, _) =
            Tailed::open(path, key, meta, None, 0, Default::default(), None, 0).unwrap().expect("the file is there");
        Rig { dir, t, corr: Correlator::new(), out: vec![] }
    }

    fn append(&self, text: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&self.t.path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Reads up to `budget` bytes; returns what was emitted.
    fn read(&mut self, budget: u64) -> Vec<String> {
        let mut buf = vec![0u8; 64 << 10];
        let mut got = vec![];
        assert!(!self.t.refresh().unwrap(), "not truncated");
        self.t
            .read(&mut buf, budget, None, &mut self.corr, &Options::default(), &mut |r| got.push(r.message.to_string()))
            .unwrap();
        self.out.extend(got.iter().cloned());
        got
    }

    /// What a flush round at `after` past the last data emits; checks that it
    /// emits exactly when `wants_flush` said it would.
    fn flush_at(&mut self, after: Duration) -> Vec<String> {
        let now = self.t.last_data + after;
        let wants = self.t.wants_flush(now, IDLE, PARTIAL);
        let mut got = vec![];
        let opts = Options::default();
        self.t.flush_if_idle(now, IDLE, PARTIAL, None, &mut self.corr, &opts, &mut |r| got.push(r.message.to_string()));
        assert_eq!(wants, !got.is_empty(), "wants_flush said {wants} at {after:?}, the flush emitted {got:?}");
        self.out.extend(got.iter().cloned());
        got
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const WORKER_OUT: &str = "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4468.out";

fn raylet(msg: &str) -> String {
    format!("[2026-11-30 09:05:33,150 I 4214 4214] (raylet) node_manager.cc:1: {msg}\n")
}

#[test]
fn a_partial_line_waits_for_partial_line_timeout() {
    let mut rig = Rig::new("partial", WORKER_OUT, "complete seq=0\nhalf a li");
    rig.read(u64::MAX);
    assert!(rig.t.at_eof);
    assert_eq!(rig.flush_at(IDLE - TICK), Vec::<String>::new());
    rig.flush_at(IDLE);
    assert_eq!(rig.out, ["complete seq=0"], "the complete line by idle_flush, the partial one not");
    assert_eq!(rig.flush_at(PARTIAL - TICK), Vec::<String>::new(), "the partial line went out early");
    assert_eq!(rig.flush_at(PARTIAL), ["half a li"]);
    assert_eq!(rig.flush_at(PARTIAL * 10), Vec::<String>::new(), "flushed twice");
    assert!(rig.t.is_clean());
    assert_eq!(rig.out, ["complete seq=0", "half a li"]);
}

#[test]
fn a_partial_line_completed_in_time_goes_out_whole() {
    let mut rig = Rig::new("join", WORKER_OUT, "complete seq=0\nhalf a li");
    rig.read(u64::MAX);
    rig.flush_at(IDLE);
    let first = rig.t.last_data;
    assert_eq!(rig.flush_at(PARTIAL - TICK), Vec::<String>::new());
    rig.append("ne seq=1\n");
    rig.read(u64::MAX);
    // New data restarts the clocks: its idle_flush counts from the read.
    assert!(rig.t.last_data >= first);
    assert_eq!(rig.flush_at(IDLE - TICK), Vec::<String>::new());
    rig.flush_at(IDLE);
    assert_eq!(rig.flush_at(PARTIAL * 10), Vec::<String>::new());
    assert_eq!(rig.out, ["complete seq=0", "half a line seq=1"], "the line was split or sent twice");
}

#[test]
fn a_complete_last_record_goes_out_after_idle_flush() {
    // A raylet record may go on over the next lines (a traceback): the last one is
    // held open until the file is quiet.
    let text = format!("{}{}", raylet("first"), raylet("second"));
    let mut rig = Rig::new("idle", "raylet.out", &text);
    assert_eq!(rig.read(u64::MAX), ["first"]);
    assert_eq!(rig.flush_at(IDLE - TICK), Vec::<String>::new(), "the open record went out before idle_flush");
    assert_eq!(rig.flush_at(IDLE), ["second"]);
    assert_eq!(rig.flush_at(IDLE + TICK), Vec::<String>::new(), "flushed twice");
    assert_eq!(rig.flush_at(PARTIAL * 10), Vec::<String>::new(), "flushed twice");
    assert!(rig.t.is_clean());
    assert_eq!(rig.out, ["first", "second"]);
}

#[test]
fn a_file_not_read_to_its_end_is_not_idle() {
    // Read in part (others took the round): flushing its open record would split a
    // record whose next lines are still unread.
    let text = format!("{}{}{}", raylet("first"), raylet("second"), raylet("third"));
    let mut rig = Rig::new("notidle", "raylet.out", &text);
    rig.read(raylet("first").len() as u64 + 10);
    assert!(!rig.t.at_eof);
    assert_eq!(rig.flush_at(PARTIAL * 10), Vec::<String>::new());
    rig.read(u64::MAX);
    rig.flush_at(IDLE);
    assert_eq!(rig.out, ["first", "second", "third"]);
}
