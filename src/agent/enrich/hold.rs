//! Hold: an actor worker's output read before the actor's id is known, and a new
//! session's first records read before its raylet names the node.
//!
//! Live, a worker's stdout (`:actor_name:Counter` then prints) can be read before its
//! core-worker log says `Creating actor actor_id=…`. Such records are copied out of
//! the parser (the rare path, so owning them is fine) and held, bounded in count and
//! time, until the correlator knows the worker's actor; then they are released with
//! the actor id (and the job it implies). On timeout they go out as they are: late
//! correlation must never turn into data loss.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use raylog_parsers::record::{FieldValue, Fields, Ids, Level};
use raylog_parsers::{Correlator, FileMeta, Id, Record, Timestamp};

use crate::agent::checkpoint::FileKey;

/// How long a held record may wait, and for what.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    /// It goes out by then, whatever is still unknown.
    pub until: Instant,
    /// It waits for its logs dir's node id, until then at the latest.
    pub node_until: Option<Instant>,
}

/// A record copied out of the parser.
#[derive(Debug)]
pub struct HeldRecord {
    pub key: FileKey,
    /// Its file's document-id seed when it was read: the file may be closed,
    /// renamed or forgotten before the record goes out, and its id must not change.
    pub seed: u128,
    pub meta: Arc<FileMeta>,
    pub wait: Wait,
    timestamp: Option<Timestamp>,
    timestamp_inferred: bool,
    timestamp_estimated: bool,
    level: Option<Level>,
    message: String,
    offset: u64,
    lines: u32,
    ids: Ids,
    pid: Option<u32>,
    task_name: Option<String>,
    actor_name: Option<String>,
    /// `(key, value, is_raw_json)`.
    fields: Vec<(String, String, bool)>,
    truncated: bool,
}

impl HeldRecord {
    fn copy(r: &Record<'_>, key: FileKey, seed: u128, meta: Arc<FileMeta>, wait: Wait) -> HeldRecord {
        HeldRecord {
            key,
            seed,
            meta,
            wait,
            timestamp: r.timestamp,
            timestamp_inferred: r.timestamp_inferred,
            timestamp_estimated: r.timestamp_estimated,
            level: r.level,
            message: r.message.to_string(),
            offset: r.offset,
            lines: r.lines,
            ids: *r.ids,
            pid: r.pid,
            task_name: r.task_name.map(str::to_string),
            actor_name: r.actor_name.map(str::to_string),
            fields: r
                .fields
                .iter()
                .map(|f| match f.value {
                    FieldValue::Str(s) => (f.key.to_string(), s.to_string(), false),
                    FieldValue::Json(j) => (f.key.to_string(), j.to_string(), true),
                })
                .collect(),
            truncated: r.truncated,
        }
    }

    /// Offset of the record in its file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the record waits for its worker's actor (see [`Hold::awaits_actor`]).
    fn awaits_actor(&self) -> bool {
        awaits_actor(&self.ids, self.actor_name.is_some(), &self.meta)
    }

    /// Hands the record to `out`, tagged with `actor` and `node` when known.
    pub fn emit(&self, actor: Option<Id>, node: Option<Id>, out: &mut dyn FnMut(&Record<'_>, FileKey, u128)) {
        let mut ids = self.ids;
        ids.node_id = ids.node_id.or(node);
        if let Some(a) = actor {
            ids.actor_id = Some(a);
            ids.derive();
        }
        let mut fields = Fields::default();
        for (k, v, raw) in &self.fields {
            fields.push(k, if *raw { FieldValue::Json(v) } else { FieldValue::Str(v) });
        }
        let rec = Record {
            timestamp: self.timestamp,
            timestamp_inferred: self.timestamp_inferred,
            timestamp_estimated: self.timestamp_estimated,
            level: self.level,
            message: &self.message,
            file: &self.meta,
            offset: self.offset,
            lines: self.lines,
            ids: &ids,
            pid: self.pid,
            task_name: self.task_name.as_deref(),
            actor_name: self.actor_name.as_deref(),
            fields: &fields,
            truncated: self.truncated,
        };
        out(&rec, self.key, self.seed);
    }
}

/// Records waiting for their actor, oldest first.
#[derive(Debug, Default)]
pub struct Hold {
    queue: VecDeque<HeldRecord>,
}

/// Bound on held records: past it, the oldest go out untagged. A held record owns
/// its strings (about half a KiB), so this bounds the hold to a few MiB even when a
/// backlog of actor output is read faster than the actors become known.
pub const MAX_HELD: usize = 5_000;

impl Hold {
    /// Whether `r` should wait: an actor worker's record (its file carried
    /// `:actor_name:`) that the parser could not tag with an actor id yet (it
    /// consults the correlator, so a missing id means the actor is unknown).
    pub fn awaits_actor(r: &Record<'_>) -> bool {
        awaits_actor(r.ids, r.actor_name.is_some(), r.file)
    }

    /// Whether anything of file `key` is held (then later records of that file must
    /// wait too, to keep the file's order).
    pub fn holds_file(&self, key: &FileKey) -> bool {
        self.queue.iter().any(|h| &h.key == key)
    }

    pub fn push(&mut self, r: &Record<'_>, key: FileKey, seed: u128, meta: Arc<FileMeta>, wait: Wait) {
        self.queue.push_back(HeldRecord::copy(r, key, seed, meta, wait));
    }

    /// The files that have records held.
    pub fn files(&self) -> Vec<FileKey> {
        let mut keys: Vec<FileKey> = self.queue.iter().map(|h| h.key).collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the hold has reached [`MAX_HELD`] and its oldest records must go.
    pub fn is_full(&self) -> bool {
        self.queue.len() >= MAX_HELD
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The smallest held offset of file `key` (a checkpoint must not pass it).
    pub fn min_offset(&self, key: &FileKey) -> Option<u64> {
        self.queue.iter().filter(|h| &h.key == key).map(|h| h.offset).min()
    }

    /// Releases, in order, every record whose worker's actor and node (`node_of` its
    /// file's logs dir) are now known or no longer awaited, whose wait is over, or all of them
    /// when `force`; stops at the first record of a file that must keep waiting so
    /// each file's order is kept. At most `budget` records go out per call, so the
    /// caller can cut its batch in between; returns true when it stopped there.
    /// `now` is the time the waits are measured against (the caller's clock, so
    /// tests can step it).
    pub fn release(
        &mut self,
        now: Instant,
        corr: &Correlator,
        node_of: &dyn Fn(&FileKey) -> Option<Id>,
        force: bool,
        budget: usize,
        out: &mut dyn FnMut(&Record<'_>, FileKey, u128),
    ) -> bool {
        let mut blocked: Vec<FileKey> = vec![];
        let mut keep = VecDeque::new();
        let mut sent = 0;
        while let Some(h) = self.queue.pop_front() {
            if sent == budget {
                keep.push_back(h);
                keep.append(&mut self.queue);
                self.queue = keep;
                return true;
            }
            let actor = h.ids.worker_id.and_then(|w| corr.actor_of(&w));
            let node = h.ids.node_id.or_else(|| node_of(&h.key));
            let node_ok = node.is_some() || h.wait.node_until.is_none_or(|u| now >= u);
            let ready = (actor.is_some() || !h.awaits_actor()) && node_ok;
            // Counting `h`: a full hold gives up its oldest until it is no longer full.
            let expired = now >= h.wait.until || self.queue.len() + keep.len() + 1 >= MAX_HELD;
            if !blocked.contains(&h.key) && (ready || expired || force) {
                h.emit(actor, node, out);
                sent += 1;
            } else {
                blocked.push(h.key);
                keep.push_back(h);
            }
        }
        self.queue = keep;
        false
    }
}

/// An actor worker's record (its file carried `:actor_name:`) without its actor id.
fn awaits_actor(ids: &Ids, has_actor_name: bool, file: &FileMeta) -> bool {
    ids.actor_id.is_none() && has_actor_name && file.component == "worker"
}

#[cfg(test)]
mod tests {
    use super::*;
    use raylog_parsers::{classify, FileParser, Options};

    /// An actor worker's prints whose actor is never learned: every record waits.
    fn held(n: usize) -> (Hold, Correlator) {
        let name = "worker-abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2-01000000-4242.out";
        let meta = Arc::new(classify(name, Some("session_x")));
        let mut text = String::from(":actor_name:Counter\n");
        for i in 0..n {
            text.push_str(&format!("print {i}\n"));
        }
        let (mut hold, mut corr, opts) = (Hold::default(), Correlator::new(), Options::default());
        let key = FileKey { dev: 1, ino: 2 };
        let wait = Wait { until: Instant::now() + std::time::Duration::from_secs(3600), node_until: None };
        let mut p = FileParser::new((*meta).clone(), None, None);
        let mut push = |r: &Record<'_>| {
            assert!(Hold::awaits_actor(r));
            hold.push(r, key, 0, meta.clone(), wait);
        };
        p.push(text.as_bytes(), &mut corr, &opts, &mut push);
        p.finish(&mut corr, &opts, &mut push);
        (hold, corr)
    }

    fn messages(hold: &mut Hold, corr: &Correlator, force: bool, budget: usize) -> (Vec<String>, bool) {
        let mut out = vec![];
        let more = hold
            .release(Instant::now(), corr, &|_| None, force, budget, &mut |r, _, _| out.push(r.message.to_string()));
        (out, more)
    }

    #[test]
    fn release_stops_at_its_budget_and_keeps_the_order() {
        let (mut hold, corr) = held(25);
        assert_eq!(hold.len(), 25);
        assert_eq!(messages(&mut hold, &corr, false, 10), (vec![], false), "nothing is due yet");
        let (first, more) = messages(&mut hold, &corr, true, 10);
        assert!(more);
        assert_eq!(first, (0..10).map(|i| format!("print {i}")).collect::<Vec<_>>());
        let (rest, more) = messages(&mut hold, &corr, true, 100);
        assert!(!more && hold.is_empty());
        assert_eq!(rest, (10..25).map(|i| format!("print {i}")).collect::<Vec<_>>());
    }

    #[test]
    fn past_the_bound_the_oldest_go_out() {
        let (mut hold, corr) = held(MAX_HELD + 5);
        assert!(hold.is_full());
        let (out, _) = messages(&mut hold, &corr, false, usize::MAX);
        assert!(!hold.is_full(), "{} still held", hold.len());
        assert_eq!(out.len() + hold.len(), MAX_HELD + 5);
        assert_eq!(out, (0..out.len()).map(|i| format!("print {i}")).collect::<Vec<_>>(), "oldest first");
    }
}
