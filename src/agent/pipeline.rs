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

use crate::agent::batch::Batch;
use crate::agent::checkpoint::{CheckpointStore, FileCheckpoint};
use crate::agent::metrics::Metrics;
use crate::agent::sinks::Ack;
use crate::agent::source::Cut;

/// What the [`Dispatcher`] tells the ack tracker about each batch.
pub struct Pending {
    pub seq: u64,
    pub positions: Vec<FileCheckpoint>,
}

/// The reader's handle on the sinks' channels and the ack tracker.
///
/// Dropping it closes the sinks' channels: they drain what they hold and stop.
pub struct Dispatcher {
    pub sinks: Vec<mpsc::Sender<(Arc<Batch>, Instant)>>,
    pub pending: mpsc::UnboundedSender<Pending>,
}

impl Dispatcher {
    /// Registers the cut's checkpoints, then hands its batch to every sink, waiting
    /// while a sink's queue is full. False when the pipeline is gone (shutting down).
    /// Called from the reader thread, never from the async runtime.
    pub fn send(&self, cut: Cut) -> bool {
        let seq = cut.batch.seq;
        if self.pending.send(Pending { seq, positions: cut.positions }).is_err() {
            return false;
        }
        self.sinks.iter().all(|s| s.blocking_send((cut.batch.clone(), cut.made)).is_ok())
    }
}

/// Applies checkpoints in batch order once every sink acknowledged; saves them.
pub async fn track_acks(
    mut pending: mpsc::UnboundedReceiver<Pending>,
    mut acks: mpsc::Receiver<Ack>,
    sinks: usize,
    mut store: CheckpointStore,
    metrics: Arc<Metrics>,
) -> CheckpointStore {
    let mut waiting: BTreeMap<u64, (usize, Vec<FileCheckpoint>)> = BTreeMap::new();
    let mut early: BTreeMap<u64, usize> = BTreeMap::new();
    let mut dirty = false;
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
            _ = tick.tick() => {}
        }
        // Apply every fully acknowledged batch at the front, in order.
        while let Some(entry) = waiting.first_entry() {
            if entry.get().0 > 0 {
                break;
            }
            for cp in entry.remove().1 {
                store.update(cp);
                dirty = true;
            }
        }
        // Saved at every advance: after a crash, only what was in flight is sent
        // again (at most a batch per sink), never everything since a timer tick.
        if dirty {
            save(&store, &metrics);
            dirty = false;
        }
    }
    if dirty {
        save(&store, &metrics);
    }
    store
}

fn save(store: &CheckpointStore, metrics: &Metrics) {
    match store.save() {
        Ok(()) => {
            metrics.checkpoints_written.fetch_add(1, Relaxed);
        }
        Err(e) => tracing::error!(error = %e, "cannot save checkpoints; will retry"),
    }
}
