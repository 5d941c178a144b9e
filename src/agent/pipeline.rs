//! Pipeline: fan batches out to the sinks and advance checkpoints on acknowledgement.
//!
//! The dispatcher hands each batch (one `Arc`, not copies) to every sink's bounded
//! channel, in order; a slow sink fills its channel, which stops the dispatcher, which
//! stops the reader. The ack tracker keeps the checkpoints each batch completes
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

/// What the dispatcher tells the ack tracker about each batch.
pub struct Pending {
    pub seq: u64,
    pub positions: Vec<FileCheckpoint>,
}

/// Forwards each cut to every sink; registers its checkpoints first.
pub async fn dispatch(
    mut cuts: mpsc::Receiver<Cut>,
    sinks: Vec<mpsc::Sender<(Arc<Batch>, Instant)>>,
    pending: mpsc::UnboundedSender<Pending>,
) {
    while let Some(cut) = cuts.recv().await {
        let seq = cut.batch.seq;
        if pending.send(Pending { seq, positions: cut.positions }).is_err() {
            return;
        }
        for s in &sinks {
            if s.send((cut.batch.clone(), cut.made)).await.is_err() {
                return;
            }
        }
    }
    // Dropping the senders closes the sinks' channels: they drain and stop.
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
