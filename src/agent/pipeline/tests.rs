//! The ack tracker on tokio's paused clock: its one-second tick and the tests' waits
//! advance virtual time only when every task is idle, so "nothing was saved after a
//! while" is a fact about the tracker's decisions, not about how fast the machine is.
//! While a checkpoint save runs on a blocking thread, paused time does not advance,
//! so a save the tracker started is finished (and counted) before a wait returns.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::agent::checkpoint::{load, FileKey, Fingerprint};

struct Rig {
    dir: PathBuf,
    pending: mpsc::Sender<InFlight>,
    acks: mpsc::Sender<Ack>,
    metrics: Arc<Metrics>,
    tracker: JoinHandle<(CheckpointStore, Undelivered)>,
}

impl Rig {
    fn new(tag: &str, sinks: usize) -> Rig {
        let dir = std::env::temp_dir().join(format!("raylog-acks-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = CheckpointStore::open(&dir, 86_400).unwrap().0;
        let (pending, prx) = mpsc::channel(16);
        let (acks, arx) = mpsc::channel(16);
        let metrics = Arc::new(Metrics::new(&["a", "b"][..sinks]));
        let tracker = tokio::spawn(track_acks(prx, arx, sinks, store, metrics.clone()));
        Rig { dir, pending, acks, metrics, tracker }
    }

    async fn batch(&self, seq: u64, positions: &[(u64, u64)]) {
        self.batch_of(seq, 1, positions).await;
    }

    /// A batch of `records` records.
    async fn batch_of(&self, seq: u64, records: u64, positions: &[(u64, u64)]) {
        let positions = positions.iter().map(|&(ino, offset)| cp(ino, offset)).collect();
        self.pending.send(InFlight { seq, records, marks: vec![], positions }).await.unwrap();
    }

    async fn ack(&self, seq: u64, sink: usize) {
        self.acks.send(Ack { seq, sink, upto: None }).await.unwrap();
    }

    /// A batch of `records` records with `marks`: `(end, [(ino, offset)])`.
    async fn batch_marked(&self, seq: u64, records: u64, marks: &[(u32, &[(u64, u64)])], positions: &[(u64, u64)]) {
        let to_cps = |p: &[(u64, u64)]| p.iter().map(|&(ino, offset)| cp(ino, offset)).collect();
        let marks = marks.iter().map(|&(end, p)| Mark { end, positions: to_cps(p) }).collect();
        self.pending.send(InFlight { seq, records, marks, positions: to_cps(positions) }).await.unwrap();
    }

    /// Sink `sink` settled every entry of batch `seq` before `upto`.
    async fn progress(&self, seq: u64, sink: usize, upto: u32) {
        self.acks.send(Ack { seq, sink, upto: Some(upto) }).await.unwrap();
    }

    /// Lets the tracker run for `secs` virtual seconds (several ticks).
    async fn idle(&self, secs: u64) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }

    /// Waits (in virtual time, bounded) until `n` saves were made.
    async fn saves(&self, n: u64) {
        for _ in 0..600 {
            if self.metrics.checkpoints_written.load(Relaxed) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} saves, waited for {n}", self.metrics.checkpoints_written.load(Relaxed));
    }

    /// `ino` → offset, as saved on disk.
    fn on_disk(&self) -> HashMap<u64, u64> {
        load(&self.dir).unwrap().into_iter().map(|(k, c)| (k.ino, c.offset)).collect()
    }

    /// Closes the channels (the pipeline shutting down) and waits for the last save.
    async fn finish(self) -> HashMap<u64, u64> {
        self.finish_with_undelivered().await.0
    }

    /// [`Rig::finish`], with what the tracker reports as undelivered.
    async fn finish_with_undelivered(self) -> (HashMap<u64, u64>, Undelivered) {
        let Rig { dir, pending, acks, tracker, .. } = self;
        drop((pending, acks));
        let (store, undelivered) = tracker.await.unwrap();
        assert!(!store.is_dirty(), "the tracker's last save left changes unsaved");
        let saved = load(&dir).unwrap().into_iter().map(|(k, c)| (k.ino, c.offset)).collect();
        let _ = std::fs::remove_dir_all(&dir);
        (saved, undelivered)
    }
}

fn cp(ino: u64, offset: u64) -> FileCheckpoint {
    FileCheckpoint {
        key: FileKey { dev: 1, ino },
        fingerprint: Fingerprint { len: 10, hash: 99 },
        offset,
        context: None,
        last_time_ns: None,
        updated: crate::agent::checkpoint::unix_now(),
        born: 0,
        gone_since: 0,
    }
}

fn map(pairs: &[(u64, u64)]) -> HashMap<u64, u64> {
    pairs.iter().copied().collect()
}

/// Batch 1 fully acknowledged, batch 0 by one sink of two: nothing may be saved
/// (checkpoints past an undelivered batch would skip it after a restart). The last
/// sink's ack for batch 0 releases both, in one go. Batch 2, acknowledged by one
/// sink only, is never saved, not even by the last save at shutdown.
#[tokio::test(start_paused = true)]
async fn checkpoints_wait_for_every_sink_and_every_earlier_batch() {
    let rig = Rig::new("order", 2);
    rig.batch(0, &[(1, 100)]).await;
    rig.batch(1, &[(1, 200), (2, 50)]).await;
    rig.batch(2, &[(1, 300), (3, 10)]).await;
    rig.ack(1, 0).await;
    rig.ack(1, 1).await;
    rig.ack(0, 0).await;
    rig.ack(2, 1).await;
    rig.idle(5).await;
    assert_eq!(rig.metrics.checkpoints_written.load(Relaxed), 0, "saved before batch 0 was delivered everywhere");
    assert_eq!(rig.on_disk(), map(&[]));

    rig.ack(0, 1).await;
    rig.saves(1).await;
    assert_eq!(rig.on_disk(), map(&[(1, 200), (2, 50)]), "batches 0 and 1, not 2");
    rig.idle(5).await;
    assert_eq!(rig.metrics.checkpoints_written.load(Relaxed), 1, "nothing changed, nothing written");

    assert_eq!(rig.finish().await, map(&[(1, 200), (2, 50)]), "batch 2 was never acknowledged by sink 0");
}

/// A sink may acknowledge a batch before the tracker hears of it (the dispatcher
/// registers a batch, then sends it; the two channels race). Those acks count: the
/// batch is saved once registered, and only after every sink's ack.
#[tokio::test(start_paused = true)]
async fn acks_that_arrive_before_their_batch_count() {
    let rig = Rig::new("early", 2);
    rig.ack(0, 1).await;
    rig.ack(0, 0).await;
    rig.ack(1, 0).await;
    rig.idle(3).await;
    assert_eq!(rig.metrics.checkpoints_written.load(Relaxed), 0, "acks alone carry no checkpoint");
    rig.batch(0, &[(7, 40)]).await;
    rig.batch(1, &[(7, 90)]).await;
    rig.saves(1).await;
    assert_eq!(rig.on_disk(), map(&[(7, 40)]), "batch 1 has one early ack of two");
    rig.ack(1, 1).await;
    rig.saves(2).await;
    assert_eq!(rig.on_disk(), map(&[(7, 90)]));
    assert_eq!(rig.finish().await, map(&[(7, 90)]));
}

/// With a single sink, each ack advances the checkpoints as soon as the batches
/// before it are in: an out-of-order ack waits for the gap to fill.
#[tokio::test(start_paused = true)]
async fn an_out_of_order_ack_waits_for_the_gap() {
    let rig = Rig::new("gap", 1);
    for seq in 0..4 {
        rig.batch(seq, &[(seq + 1, 10 * (seq + 1))]).await;
    }
    rig.ack(0, 0).await;
    rig.saves(1).await;
    assert_eq!(rig.on_disk(), map(&[(1, 10)]));
    rig.ack(2, 0).await;
    rig.ack(3, 0).await;
    rig.idle(5).await;
    assert_eq!(rig.on_disk(), map(&[(1, 10)]), "batches 2 and 3 saved past the unacknowledged batch 1");
    rig.ack(1, 0).await;
    rig.saves(2).await;
    assert_eq!(rig.on_disk(), map(&[(1, 10), (2, 20), (3, 30), (4, 40)]));
    assert_eq!(rig.finish().await, map(&[(1, 10), (2, 20), (3, 30), (4, 40)]));
}

/// At shutdown the tracker counts the records of every batch some sink did not
/// acknowledge, per sink too; a batch acknowledged by all (even one stuck behind an
/// unacknowledged one) is not undelivered, and an early ack counts.
#[tokio::test(start_paused = true)]
async fn the_records_left_unacknowledged_are_reported_per_sink() {
    let rig = Rig::new("undelivered", 2);
    rig.batch_of(0, 10, &[(1, 100)]).await;
    rig.batch_of(1, 20, &[(1, 200)]).await;
    rig.batch_of(2, 30, &[(1, 300)]).await;
    rig.ack(3, 1).await;
    rig.batch_of(3, 40, &[(1, 400)]).await;
    rig.ack(0, 0).await;
    rig.ack(0, 1).await;
    rig.ack(1, 0).await;
    rig.ack(2, 0).await;
    rig.ack(2, 1).await;
    rig.saves(1).await;
    let (saved, undelivered) = rig.finish_with_undelivered().await;
    assert_eq!(saved, map(&[(1, 100)]), "only batch 0 was acknowledged by both with nothing missing before it");
    // Batch 1 lacks sink 1, batch 3 sink 0 (sink 1's ack came early); batch 2 is
    // delivered, only held back behind batch 1.
    assert_eq!(undelivered, Undelivered { records: 60, per_sink: vec![40, 20] });
}

/// A batch half delivered (a 429 stopped its later pushes) has its marks applied as
/// far as every sink settled it, so a restart does not send the first half again;
/// a mark one sink has not passed waits, and a later batch's marks wait for the
/// batch before it to be done.
#[tokio::test(start_paused = true)]
async fn marks_every_sink_passed_are_saved_before_the_batch_is_done() {
    let rig = Rig::new("marks", 2);
    rig.batch_marked(0, 100, &[(30, &[(1, 300)]), (60, &[(1, 600), (2, 20)]), (90, &[(2, 90)])], &[(1, 999)]).await;
    rig.batch_marked(1, 50, &[(10, &[(3, 10)])], &[(3, 50)]).await;
    rig.progress(1, 0, 50).await;
    rig.progress(1, 1, 50).await;
    rig.progress(0, 0, 70).await;
    rig.idle(3).await;
    assert_eq!(rig.on_disk(), map(&[]), "sink 1 has settled nothing of batch 0");
    rig.progress(0, 1, 65).await;
    rig.saves(1).await;
    assert_eq!(rig.on_disk(), map(&[(1, 600), (2, 20)]), "the marks at 30 and 60, not 90");
    rig.ack(0, 0).await;
    rig.progress(0, 1, 40).await;
    rig.idle(3).await;
    assert_eq!(rig.on_disk(), map(&[(1, 600), (2, 20)]), "progress never goes back, batch 1 waits for batch 0");
    rig.ack(0, 1).await;
    rig.saves(2).await;
    assert_eq!(rig.on_disk(), map(&[(1, 999), (2, 90), (3, 10)]), "batch 0 done, then batch 1's first mark");
    assert_eq!(rig.finish().await, map(&[(1, 999), (2, 90), (3, 10)]));
}
