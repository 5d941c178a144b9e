//! Pipeline: fan batches out to the sinks and advance checkpoints on acknowledgement.
//!
//! The reader thread hands each batch (one `Arc`, not copies) to every sink's bounded
//! channel through the [`Dispatcher`], in order; a slow sink fills its channel, which
//! blocks the reader (backpressure, with no extra queue in between: every batch in
//! flight is memory). The ack tracker keeps the checkpoints each batch completes
//! until every sink has acknowledged that batch and all batches before it, then
//! applies them and persists them each time they advance. When the pipeline stops,
//! it reports the records read but not acknowledged by every sink ([`Undelivered`]).
//!
//! A batch can take a sink many requests (Loki's pacing splits it into pushes a
//! stream's burst allows, OTLP into requests of `max_request_bytes`), and a 429 or
//! an outage can stop it halfway for minutes. So the reader also leaves [`Mark`]s in
//! each batch (where its files stood after the first `end` entries), and a sink
//! reports progress within a batch (every entry before an index settled, see
//! [`crate::agent::sinks::Progress`]): the front batch's marks every sink has passed
//! are applied at once. A restart then re-sends what was in flight, not every push
//! of a half-delivered batch.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};

use crate::agent::batch::Batch;
use crate::agent::checkpoint::{CheckpointError, CheckpointStore, FileCheckpoint, Saved};
use crate::agent::metrics::Metrics;
use crate::agent::sinks::Ack;

/// A batch the reader cut, with the checkpoints it completes.
pub struct Cut {
    pub batch: Arc<Batch>,
    /// Checkpoints that hold once a prefix of the batch is delivered, in order.
    pub marks: Vec<Mark>,
    pub positions: Vec<FileCheckpoint>,
    pub made: Instant,
}

/// Where files stood when the first `end` entries of a batch were in it: their
/// checkpoints hold once every sink settled those entries.
#[derive(Debug)]
pub struct Mark {
    pub end: u32,
    pub positions: Vec<FileCheckpoint>,
}

/// What the [`Dispatcher`] tells the ack tracker about each batch sent: the
/// checkpoints waiting for its acknowledgements.
pub struct InFlight {
    pub seq: u64,
    /// Records in the batch: what is undelivered if it is never acknowledged.
    pub records: u64,
    /// See [`Cut::marks`].
    pub marks: Vec<Mark>,
    pub positions: Vec<FileCheckpoint>,
}

/// What the pipeline stopped without delivering: records read whose batch some
/// sink never acknowledged (their checkpoints stay behind them: the next start
/// reads them again).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// Records in batches not acknowledged by every sink.
    pub records: u64,
    /// Of those, per sink (by index): records in batches that sink did not acknowledge.
    pub per_sink: Vec<u64>,
}

/// A batch waiting for acknowledgements.
struct Waiting {
    /// `acked[i]`: sink `i` acknowledged it.
    acked: Vec<bool>,
    /// `settled[i]`: sink `i` settled every entry before this index (progress).
    settled: Vec<u32>,
    records: u64,
    marks: VecDeque<Mark>,
    positions: Vec<FileCheckpoint>,
}

impl Waiting {
    fn new(p: InFlight, sinks: usize) -> Waiting {
        Waiting {
            acked: vec![false; sinks],
            settled: vec![0; sinks],
            records: p.records,
            marks: p.marks.into(),
            positions: p.positions,
        }
    }

    fn done(&self) -> bool {
        self.acked.iter().all(|&a| a)
    }

    /// Takes in sink `a.sink`'s acknowledgement: of the whole batch, or of a prefix.
    fn ack(&mut self, a: &Ack) {
        match a.upto {
            None => {
                if let Some(acked) = self.acked.get_mut(a.sink) {
                    *acked = true;
                }
            }
            Some(n) => {
                if let Some(s) = self.settled.get_mut(a.sink) {
                    *s = (*s).max(n);
                }
            }
        }
    }

    /// The marks every sink has passed, taken off the batch (front batch only:
    /// a later batch's positions lie beyond what an earlier one has not delivered).
    fn passed_marks(&mut self) -> impl Iterator<Item = Mark> + '_ {
        let reach = self.acked.iter().zip(&self.settled).map(|(&a, &s)| if a { u32::MAX } else { s }).min();
        let reach = reach.unwrap_or(u32::MAX);
        let n = self.marks.iter().take_while(|m| m.end <= reach).count();
        self.marks.drain(..n)
    }
}

/// The reader's handle on the sinks' channels and the ack tracker.
///
/// Dropping it closes the sinks' channels: they drain what they hold and stop.
pub struct Dispatcher {
    pub sinks: Vec<mpsc::Sender<(Arc<Batch>, Instant)>>,
    pub pending: mpsc::Sender<InFlight>,
}

impl Dispatcher {
    /// Registers the cut's checkpoints, then hands its batch to every sink, waiting
    /// while a sink's queue is full. False when the pipeline is gone (shutting down).
    /// Called from the reader thread, never from the async runtime.
    pub fn send(&self, cut: Cut) -> bool {
        let seq = cut.batch.seq;
        let records = cut.batch.len() as u64;
        let flight = InFlight { seq, records, marks: cut.marks, positions: cut.positions };
        if self.pending.blocking_send(flight).is_err() {
            return false;
        }
        self.sinks.iter().all(|s| s.blocking_send((cut.batch.clone(), cut.made)).is_ok())
    }
}

/// The least time between the starts of two saves. A sink that stores a batch in
/// many pushes reports each (see [`crate::agent::sinks::Progress`]); saving after
/// every one (an fsync each) took a 64 MiB `ship --once` into Loki in 64 KiB pushes
/// from 0.06 to 0.2 s of system CPU. A restart resends at most this much more.
const SAVE_GAP: Duration = Duration::from_millis(20);

/// Applies checkpoints in batch order once every sink acknowledged; saves them.
/// Returns when both channels closed (the reader and every sink stopped), after
/// the last save, with what was left unacknowledged.
///
/// Saving (a journal append and an fsync, now and then a merge) runs on a blocking
/// thread, one save at a time, so a slow disk never stalls the runtime the sinks run
/// on. Advances made while a save is under way go into the next one: checkpoints
/// lag what was acknowledged by at most one save, so after a crash only what was in
/// flight is sent again. Nothing changed, nothing written.
pub async fn track_acks(
    mut pending: mpsc::Receiver<InFlight>,
    mut acks: mpsc::Receiver<Ack>,
    sinks: usize,
    mut store: CheckpointStore,
    metrics: Arc<Metrics>,
) -> (CheckpointStore, Undelivered) {
    let mut waiting: BTreeMap<u64, Waiting> = BTreeMap::new();
    // Acks for batches not registered yet.
    let mut early: BTreeMap<u64, Vec<Ack>> = BTreeMap::new();
    let mut saving: Option<JoinHandle<SaveOutcome>> = None;
    let mut failing = false;
    // After a failed save, the next try waits for the tick: a full disk must not
    // make this loop spin.
    let mut next_try = tokio::time::Instant::now();
    // When the next save may start (see `SAVE_GAP`).
    let mut next_save = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut pending_open, mut acks_open) = (true, true);
    while pending_open || acks_open {
        let deferred = store.is_dirty() && saving.is_none() && next_save > tokio::time::Instant::now();
        tokio::select! {
            p = pending.recv(), if pending_open => match p {
                Some(p) => {
                    let seq = p.seq;
                    let mut w = Waiting::new(p, sinks);
                    for a in early.remove(&seq).unwrap_or_default() {
                        w.ack(&a);
                    }
                    waiting.insert(seq, w);
                }
                None => pending_open = false,
            },
            a = acks.recv(), if acks_open => match a {
                Some(a) => match waiting.get_mut(&a.seq) {
                    Some(w) => w.ack(&a),
                    None => early.entry(a.seq).or_default().push(a),
                },
                None => acks_open = false,
            },
            done = async { saving.as_mut().expect("guarded by is_some").await }, if saving.is_some() => {
                saving = None;
                // A failed save is tried again at the next tick.
                if !saved(&mut store, done, &metrics, &mut failing) {
                    next_try = tokio::time::Instant::now() + Duration::from_secs(1);
                }
            }
            _ = tokio::time::sleep_until(next_save), if deferred => {}
            _ = tick.tick() => {}
        }
        // Apply every fully acknowledged batch at the front, in order, then the
        // marks of the first one not done that every sink has passed.
        while let Some(mut entry) = waiting.first_entry() {
            for m in entry.get_mut().passed_marks() {
                m.positions.into_iter().for_each(|cp| store.update(cp));
            }
            if !entry.get().done() {
                break;
            }
            let seq = *entry.key();
            for cp in entry.remove().positions {
                store.update(cp);
            }
            store.applied(seq);
        }
        let now = tokio::time::Instant::now();
        if store.is_dirty() && saving.is_none() && now >= next_try && now >= next_save {
            next_save = now + SAVE_GAP;
            let batch = store.take();
            saving = Some(tokio::task::spawn_blocking(move || batch.write()));
        }
    }
    if let Some(s) = saving {
        saved(&mut store, s.await, &metrics, &mut failing);
    }
    if store.is_dirty() {
        let batch = store.take();
        saved(&mut store, tokio::task::spawn_blocking(move || batch.write()).await, &metrics, &mut failing);
    }
    (store, undelivered(waiting.values(), sinks))
}

/// Sums the records of the batches some sink did not acknowledge.
fn undelivered<'a>(waiting: impl Iterator<Item = &'a Waiting>, sinks: usize) -> Undelivered {
    let mut u = Undelivered { records: 0, per_sink: vec![0; sinks] };
    for w in waiting.filter(|w| !w.done()) {
        u.records += w.records;
        for (n, _) in u.per_sink.iter_mut().zip(&w.acked).filter(|(_, &acked)| !acked) {
            *n += w.records;
        }
    }
    u
}

type SaveOutcome = Result<Saved, (CheckpointError, Vec<FileCheckpoint>)>;

/// Takes in a finished save: counts it, or puts its entries back and logs why it
/// failed (once per run of failures). True when it saved.
fn saved(
    store: &mut CheckpointStore,
    done: Result<SaveOutcome, JoinError>,
    metrics: &Metrics,
    failing: &mut bool,
) -> bool {
    if matches!(&done, Ok(Ok(s)) if s.journal_bytes == 0) {
        // A merge streamed the snapshot and held the journal in memory.
        crate::agent::trim_heap();
    }
    let result = match done {
        Ok(outcome) => store.saved(outcome).map_err(|e| e.to_string()),
        Err(e) => Err(format!("the checkpoint writer failed: {e}")),
    };
    match result {
        Ok(()) => {
            metrics.checkpoints_written.fetch_add(1, Relaxed);
            if std::mem::take(failing) {
                tracing::info!("checkpoints saved again");
            }
            true
        }
        Err(why) => {
            if !std::mem::replace(failing, true) {
                tracing::error!(error = %why, "cannot save checkpoints; retrying every second (delivery goes on, but a restart would resend more)");
            }
            false
        }
    }
}

#[cfg(test)]
mod tests;
