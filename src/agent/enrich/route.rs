//! Route: where a parsed record goes. Into the batch, with its document id; or into
//! the [`Hold`] while something it must carry is not known yet: the actor of an actor
//! worker's output, or the node id of a session whose raylet has not announced it
//! (GCS and dashboard write before raylet starts). Once one record of a file is
//! held, the file's later records are held behind it, so a file keeps its order.
//! [`Enrich`] is the stage as one value; a [`Router`] is its view of one file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use raylog_parsers::{FileMeta, Record};

use super::hold::{Hold, Wait};
use super::times::Times;
use crate::agent::batch::{doc_id_from, Batch};
use crate::agent::checkpoint::FileKey;
use crate::agent::ray_metrics::RayCounter;
use crate::agent::traces::Tracer;

/// The enrich stage, one value owned by the source: the batch being filled, the
/// hold, the Ray record counters, and how long actor output waits. The source hands
/// it every parsed record, in one place ([`Enrich::file`], then [`Router::route`]).
pub struct Enrich {
    pub batch: Batch,
    pub hold: Hold,
    pub ray: RayCounter,
    /// The times untimed records entered the batch with, and got before a restart.
    pub times: Times,
    /// Ray's task events made into spans, when a sink sends traces.
    pub tracer: Option<Tracer>,
    actor_hold: Duration,
}

/// What routing needs of one file: its key, its metadata, the seed of its document
/// ids (see [`crate::agent::batch::doc_id_seed`]), and until when its records
/// without a node id wait for it (a new session, briefly).
pub struct FileRoute {
    pub key: FileKey,
    pub meta: Arc<FileMeta>,
    pub seed: u128,
    pub wait_node: Option<Instant>,
}

impl Enrich {
    pub fn new(batch: Batch, ray: RayCounter, actor_hold: Duration, times: Times) -> Enrich {
        Enrich { batch, hold: Hold::default(), ray, times, tracer: None, actor_hold }
    }

    /// The stage with `tracer` making spans of the task events read.
    pub fn tracing(mut self, tracer: Option<Tracer>) -> Enrich {
        self.tracer = tracer;
        self
    }

    /// Puts `r` of file `key` into the batch, noting its time if not its own.
    pub fn push(&mut self, r: &Record<'_>, key: FileKey, seed: u128, now_ns: i64) {
        self.batch.push(r, now_ns, doc_id_from(seed, r.offset, r.message));
        self.times.note(key, seed, r, r.timestamp.map_or(now_ns, |t| t.0));
    }

    /// Routes the records of one file during one read.
    pub fn file(&mut self, f: FileRoute) -> Router<'_> {
        let component = self.ray.component(&f.meta.component);
        Router { held_file: self.hold.holds_file(&f.key), component, now: now_ns(), f, enrich: self }
    }
}

/// The records of one file during one read, on their way into the batch or the hold.
pub struct Router<'a> {
    enrich: &'a mut Enrich,
    f: FileRoute,
    /// The file's component slot in the Ray record counters.
    component: usize,
    held_file: bool,
    now: i64,
}

impl Router<'_> {
    pub fn route(&mut self, r: &Record<'_>) {
        let e = &mut *self.enrich;
        // Counted here, once: a held record is released into the batch, not routed again.
        e.ray.count(self.component, r);
        if let Some(t) = e.tracer.as_mut().filter(|_| self.f.meta.component == "ray_event") {
            t.observe(r, self.now);
        }
        // Read again after a restart: the time it went out with before.
        let redated;
        let r = match e.times.restored(self.f.seed, r) {
            Some(t) => {
                redated = Record { timestamp: Some(t), timestamp_inferred: true, ..r.clone() };
                &redated
            }
            None => r,
        };
        let node_until = self.f.wait_node.filter(|_| r.ids.node_id.is_none());
        if self.held_file || Hold::awaits(r) || node_until.is_some() {
            let wait = Wait { until: Instant::now() + e.actor_hold, node_until };
            e.hold.push(r, self.f.key, self.f.seed, self.f.meta.clone(), wait);
            self.held_file = true;
        } else {
            e.push(r, self.f.key, self.f.seed, self.now);
        }
    }
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// The identity a file's document ids derive from: its inode, its incarnation
/// where one is known (`checkpoint::born`), and its first line's hash, so a
/// recycled inode gives different ids even under the same first line. A file with
/// no incarnation known (or checkpointed by an older raylog) keeps the form ids had
/// before incarnations, so records sent again after an upgrade keep their ids.
pub fn identity(key: FileKey, born: u32, first_line_hash: u64) -> String {
    if crate::agent::checkpoint::born::known(born) {
        format!("{}:{born:x}:{first_line_hash:x}", key.label())
    } else {
        format!("{}:{first_line_hash:x}", key.label())
    }
}
