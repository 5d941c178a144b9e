//! Pipeline: fan batches out to the sinks and advance checkpoints on acknowledgement.
//!
//! The reader thread hands each batch (one `Arc`, not copies) to every sink's bounded
//! channel through the [`Dispatcher`], in order; a slow sink fills its channel, which
//! blocks the reader (backpressure, with no extra queue in between: every batch in
//! flight is memory). The ack tracker keeps the checkpoints each batch completes
//! until every sink has acknowledged that batch and all batches before it, then
//! applies them and persists them each time they advance.

use std::collections::BTreeMap;
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
    pub positions: Vec<FileCheckpoint>,
    pub made: Instant,
}

/// What the [`Dispatcher`] tells the ack tracker about each batch sent: the
/// checkpoints waiting for its acknowledgements.
pub struct InFlight {
    pub seq: u64,
    pub positions: Vec<FileCheckpoint>,
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
        if self.pending.blocking_send(InFlight { seq, positions: cut.positions }).is_err() {
            return false;
        }
        self.sinks.iter().all(|s| s.blocking_send((cut.batch.clone(), cut.made)).is_ok())
    }
}

/// Applies checkpoints in batch order once every sink acknowledged; saves them.
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
) -> CheckpointStore {
    let mut waiting: BTreeMap<u64, (usize, Vec<FileCheckpoint>)> = BTreeMap::new();
    let mut early: BTreeMap<u64, usize> = BTreeMap::new();
    let mut saving: Option<JoinHandle<SaveOutcome>> = None;
    let mut failing = false;
    // After a failed save, the next try waits for the tick: a full disk must not
    // make this loop spin.
    let mut next_try = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut pending_open, mut acks_open) = (true, true);
    while pending_open || acks_open {
        tokio::select! {
            p = pending.recv(), if pending_open => match p {
                Some(p) => {
                    let acked = early.remove(&p.seq).unwrap_or(0);
                    waiting.insert(p.seq, (sinks - acked, p.positions));
                }
                None => pending_open = false,
            },
            a = acks.recv(), if acks_open => match a {
                Some(a) => match waiting.get_mut(&a.seq) {
                    Some(w) => w.0 -= 1,
                    None => *early.entry(a.seq).or_default() += 1,
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
            _ = tick.tick() => {}
        }
        // Apply every fully acknowledged batch at the front, in order.
        while let Some(entry) = waiting.first_entry() {
            if entry.get().0 > 0 {
                break;
            }
            for cp in entry.remove().1 {
                store.update(cp);
            }
        }
        if store.is_dirty() && saving.is_none() && tokio::time::Instant::now() >= next_try {
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
    store
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
