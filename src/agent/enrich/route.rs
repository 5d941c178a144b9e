//! Route: where a parsed record goes. Into the batch, with its document id; or into
//! the [`Hold`] while something it must carry is not known yet: the actor of an actor
//! worker's output, or the node id of a session whose raylet has not announced it
//! (GCS and dashboard write before raylet starts). Once one record of a file is
//! held, the file's later records are held behind it, so a file keeps its order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use raylog_parsers::{FileMeta, Record};

use super::hold::{Hold, Wait};
use crate::agent::batch::{doc_id_from, Batch};
use crate::agent::checkpoint::FileKey;
use crate::agent::ray_metrics::RayCounter;

/// Routes the records of one file during one read.
pub struct Router<'a> {
    batch: &'a mut Batch,
    hold: &'a mut Hold,
    ray: &'a mut RayCounter,
    /// The file's component slot in the Ray record counters.
    component: usize,
    held_file: bool,
    key: FileKey,
    meta: Arc<FileMeta>,
    /// Document-id hash state after the file's identity.
    seed: u128,
    now: i64,
    /// Records without a node id wait for it until then (a new session, briefly).
    wait_node: Option<Instant>,
    actor_hold: Duration,
}

impl<'a> Router<'a> {
    /// The records of the file `key`, whose document ids derive from `seed` (see
    /// [`crate::agent::batch::doc_id_seed`]). `wait_node`: until when records
    /// without a node id wait for it.
    pub fn new(
        batch: &'a mut Batch,
        hold: &'a mut Hold,
        ray: &'a mut RayCounter,
        (key, meta, seed): (FileKey, Arc<FileMeta>, u128),
        wait_node: Option<Instant>,
        actor_hold: Duration,
    ) -> Router<'a> {
        let component = ray.component(&meta.component);
        Router {
            held_file: hold.holds_file(&key),
            seed,
            key,
            meta,
            now: now_ns(),
            wait_node,
            actor_hold,
            batch,
            hold,
            ray,
            component,
        }
    }

    pub fn route(&mut self, r: &Record<'_>) {
        // Counted here, once: a held record is released into the batch, not routed again.
        self.ray.count(self.component, r);
        let node_until = self.wait_node.filter(|_| r.ids.node_id.is_none());
        if self.held_file || Hold::awaits_actor(r) || node_until.is_some() {
            let wait = Wait { until: Instant::now() + self.actor_hold, node_until };
            self.hold.push(r, self.key, self.seed, self.meta.clone(), wait);
            self.held_file = true;
        } else {
            self.batch.push(r, self.now, doc_id_from(self.seed, r.offset, r.message));
        }
    }
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// The identity a file's document ids derive from: its inode and first-line hash,
/// so a recycled inode gives different ids.
pub fn identity(key: FileKey, first_line_hash: u64) -> String {
    format!("{}:{first_line_hash:x}", key.label())
}
