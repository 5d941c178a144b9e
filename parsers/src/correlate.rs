//! Enrichment, the parsers' half: worker → actor correlation, the node a logs dir
//! belongs to, and [`Correlator::tag`], which gives each parsed record the ids its
//! file and what was learned imply. (The agent's half, records that wait for an id
//! not known yet, is `raylog::agent::enrich`.)
//!
//! A worker's stdout holds no ids, yet every print of an actor must carry its
//! `actor_id`. The link is learned from other files: the actor's own core-worker log
//! (`Creating actor actor_id=X`, older `Creating actor: X`), GCS lines naming both the
//! actor and the worker its creation task went to, raylet's `KillLocalActor`, and
//! structured log lines of the actor's worker, and Ray's exported events (an actor
//! going `ALIVE` on a worker, an actor task run by one), which state it outright
//! ([`crate::formats::Draft::links`]). A restarted actor gets a new worker,
//! which maps to the same actor id.
//!
//! Order independence: [`Correlator::prescan`] reads those sources with a substring
//! search before any file is parsed, so reparsing a directory gives the same answer
//! whatever order files come in. The live agent instead learns as records stream by
//! ([`Correlator::learn`]) and holds unmatched worker output briefly.
//!
//! It also keeps each worker's latest time: the newest record of its core-worker log
//! (which dumps its event stats every minute while the worker lives). Worker output
//! without a time of its own is dated from it (see `parser`), so the estimate is the
//! same whatever order files are read in: the maximum over a file's header lines is
//! what the prescan finds and what learning record by record ends at.

use crate::classify::FileMeta;
use crate::id::{Id, ACTOR_HEX, WORKER_HEX};
use crate::ids_in_text::{scan_prose, trailing_pairs};
use crate::record::Ids;
use crate::task_logs::{Lookup, TaskLog, TaskLogInfo, TaskRanges};
use crate::time::{Timestamp, Zone};
use crate::workers::Workers;

/// What has been learned about workers and nodes.
#[derive(Debug, Default, Clone)]
pub struct Correlator {
    /// Each worker's actor, job (from its `:job_id:` marker: a worker file rotated
    /// past its marker still knows), actor class (`:actor_name:`) and the newest
    /// time of its core-worker log.
    workers: Workers,
    /// Zone of naive times, for the times read by [`Correlator::prescan`].
    zone: Zone,
    /// See [`Correlator::learned`].
    learned: u64,
    /// See [`Correlator::changes`].
    changes: u64,
    /// Which task attempt wrote which bytes of worker files (Ray's task events).
    tasks: TaskRanges,
    /// Task events are received (the agent's `[events]`): a print may wait for its
    /// range even before any range of its session came (see [`Correlator::expects_tasks`]).
    awaits_tasks: bool,
}

/// GCS/raylet phrases whose `actor_id` and `worker_id` are the actor and the worker
/// hosting it (other lines naming both may mean an owner or a caller).
const HOSTING_PHRASES: [&str; 5] = [
    "Actor creation task succeeded",
    "Submitting actor creation task to worker",
    "Start creating actor",
    "Received KillLocalActor",
    "Actor is failed on worker",
];

impl Correlator {
    /// Enrichment: combines the ids found in a record's text with what its file
    /// says (`meta`, the logs dir's `node`, the `job` and `task` its marker lines
    /// set) and what has been learned (the actor a worker hosts, a worker's job).
    ///
    /// In files a worker owns (its stdout/stderr and core-worker log) the worker id
    /// and the hosted actor come from the file, not from the text, which may name
    /// peers; elsewhere the text wins and the file only fills gaps.
    pub fn tag(&self, meta: &FileMeta, node: Option<Id>, job: Option<Id>, task: Option<Id>, ids: &mut Ids) {
        if let (Some(w), Some(k)) = (&meta.worker_id, meta.worker_key()) {
            ids.worker_id = Some(*w);
            if let Some(a) = self.workers.actor(&k) {
                ids.actor_id = Some(a);
            }
            if ids.job_id.is_none() {
                ids.job_id = meta.job_id.or(job).or_else(|| self.workers.job(&k));
            }
        } else {
            // A line elsewhere (GCS, raylet, events) about a worker that hosts an actor
            // is about that actor too: its start, its exit, the failure event.
            if let (None, Some(w)) = (&ids.actor_id, &ids.worker_id) {
                ids.actor_id = self.actor_of(w);
            }
            if ids.job_id.is_none() {
                ids.job_id = meta.job_id.or(job);
            }
        }
        if ids.task_id.is_none() {
            ids.task_id = task;
        }
        if ids.node_id.is_none() {
            ids.node_id = node;
        }
        ids.derive();
    }

    pub fn new() -> Correlator {
        Correlator::default()
    }

    /// A correlator that reads naive times in `zone` (as the parsers do).
    pub fn with_zone(zone: Zone) -> Correlator {
        Correlator { zone, ..Correlator::default() }
    }

    /// The zone naive times are read in.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The newest time seen in `worker`'s core-worker log, if any.
    #[inline]
    pub fn worker_time(&self, worker: &Id) -> Option<Timestamp> {
        self.workers.time(&worker.packed())
    }

    /// [`Correlator::worker_time`] of a file's worker ([`FileMeta::worker_key`]).
    #[inline]
    pub fn worker_time_of(&self, file: &FileMeta) -> Option<Timestamp> {
        self.workers.time(&file.worker_key()?)
    }

    /// Notes a time of `worker`'s core-worker log (only a newer one changes anything).
    #[inline]
    pub fn note_worker_time(&mut self, worker: Id, t: Timestamp) {
        self.changes += self.workers.note_time(&worker.packed(), t) as u64;
    }

    /// How many times what is known changed (a link, a job, a class, a newer
    /// time): a reader that parsed with a copy can tell whether the copy learned
    /// anything the original lacks.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The actor a worker hosts, if known.
    #[inline]
    pub fn actor_of(&self, worker: &Id) -> Option<Id> {
        self.workers.actor(&worker.packed())
    }

    /// Records that `worker` hosts `actor`. Returns true when this is new.
    pub fn link(&mut self, worker: Id, actor: Id) -> bool {
        if worker.len() != WORKER_HEX || actor.len() != ACTOR_HEX {
            return false;
        }
        if !self.workers.set_actor(&worker.packed(), actor) {
            return false;
        }
        self.learned += 1;
        self.changes += 1;
        true
    }

    /// Takes in a task attempt's byte ranges, from an event of `session` (which
    /// stands in when the event names none). Returns true when anything changed.
    pub fn learn_task_log(&mut self, info: &TaskLogInfo<'_>, session: &str) -> bool {
        let changed = self.tasks.add(info, session);
        if changed {
            self.learned += 1;
            self.changes += 1;
        }
        changed
    }

    /// The task ranges known (the agent journals and restores them).
    pub fn tasks_mut(&mut self) -> &mut TaskRanges {
        &mut self.tasks
    }

    /// [`Correlator::tasks_mut`], to read.
    pub fn tasks(&self) -> &TaskRanges {
        &self.tasks
    }

    /// Which task attempt wrote the record at `offset` of `file`, for a task
    /// worker's stdout or stderr (`None` for any other file). The file is known by
    /// its session and name, as Ray's events name it: a rotated copy
    /// (`worker-….out.1`) by the name it was written under. `marker_at`: where the
    /// file's last task marker before the record starts (see [`TaskRanges::lookup_in`]).
    pub fn task_at(&self, file: &FileMeta, offset: u64, marker_at: Option<u64>) -> Option<Lookup> {
        if file.component != "worker" || file.stream.is_none() || file.worker_id.is_none() {
            return None;
        }
        let name = file.rel_path.rsplit('/').next().unwrap_or(&file.rel_path);
        let name = match (file.rotation, name.rsplit_once('.')) {
            (Some(_), Some((live, n))) if n.bytes().all(|b| b.is_ascii_digit()) => live,
            _ => name,
        };
        Some(self.tasks.lookup_in(file.session.as_deref(), name, offset, marker_at))
    }

    /// Whether a print of `file` can still wait for a task range: events are
    /// received ([`Correlator::await_tasks`]), or its session's events have named
    /// ranges (see [`TaskRanges::expects`]). On a new cluster a task's first prints
    /// are read before any event of the session arrives, so knowing ranges of the
    /// session is not enough where events come live.
    pub fn expects_tasks(&self, file: &FileMeta) -> bool {
        let session = file.session.as_deref();
        self.tasks.expects(session) || (self.awaits_tasks && !self.tasks.without_ranges(session))
    }

    /// Whether any print can be tagged with a task, or wait for one: ranges are
    /// known, or task events are received.
    #[inline]
    pub fn tags_tasks(&self) -> bool {
        self.awaits_tasks || !self.tasks.is_empty()
    }

    /// Task events are received as the logs are read (the agent with `[events]`):
    /// a task worker's print no range covers yet may wait for one.
    pub fn await_tasks(&mut self, on: bool) {
        self.awaits_tasks = on;
    }

    /// How many worker → actor links (and task ranges) were learned or changed so
    /// far: a cheap "anything new?" for those waiting on them.
    pub fn learned(&self) -> u64 {
        self.learned
    }

    /// The job a worker's `:job_id:` marker named, if seen.
    #[inline]
    pub fn job_of(&self, worker: &Id) -> Option<Id> {
        self.workers.job(&worker.packed())
    }

    /// The actor class a worker's `:actor_name:` marker named, if seen.
    #[inline]
    pub fn class_of(&self, worker: &Id) -> Option<&str> {
        self.workers.class(&worker.packed())
    }

    /// [`Correlator::class_of`] a file's worker ([`FileMeta::worker_key`]).
    #[inline]
    pub fn class_of_file(&self, file: &FileMeta) -> Option<&str> {
        self.workers.class(&file.worker_key()?)
    }

    /// Records what a worker-file marker says about its worker.
    pub fn learn_marker(&mut self, worker: Option<Id>, marker: &crate::assemble::Marker<'_>) {
        use crate::assemble::Marker;
        let Some(w) = worker.map(|w| w.packed()) else { return };
        let w = &w;
        match *marker {
            Marker::JobId(j) => {
                if let Some(j) = Id::parse_len(j, crate::id::JOB_HEX) {
                    self.changes += self.workers.set_job(w, j) as u64;
                }
            }
            Marker::ActorName(a) => self.changes += self.workers.set_class_once(w, a) as u64,
            _ => {}
        }
    }

    /// Forgets what is known of workers that host no actor, except those `keep`
    /// names (by [`FileMeta::worker_key`]); returns how many went. Their files were
    /// read to their end: each carries its own job and actor class in the context
    /// it ended in, and only a worker's actor is asked for by other files' lines.
    pub fn forget_workers(&mut self, keep: impl Fn(&crate::id::PackedId) -> bool) -> usize {
        self.workers.forget(keep)
    }

    /// Forgets one worker ([`Correlator::forget_workers`] for a single worker, in
    /// constant time) unless it hosts an actor; true if it went.
    pub fn forget_worker(&mut self, worker: &crate::id::PackedId) -> bool {
        self.workers.remove(worker)
    }

    /// Tells again what a worker file's markers said (its job, its actor class), as
    /// kept in the context the file ended in: for a worker forgotten meanwhile
    /// ([`Correlator::forget_workers`]), or not prescanned by a restarted agent, whose
    /// other files (its core-worker log) take their job from it. What is known stays.
    pub fn recall_worker(&mut self, worker: &crate::id::PackedId, job: Option<&str>, class: Option<&str>) {
        if let Some(j) = job.and_then(|j| Id::parse_len(j.as_bytes(), crate::id::JOB_HEX)) {
            if self.workers.job(worker).is_none() {
                self.changes += self.workers.set_job(worker, j) as u64;
            }
        }
        if let Some(c) = class {
            self.changes += self.workers.set_class_once(worker, c.as_bytes()) as u64;
        }
    }

    /// Adds what `other` learned (from files read after the ones this one learned
    /// from), with the result of learning it all here in that order: how a scan that
    /// prescans files on many threads, each into a correlator of its own, puts
    /// their findings together.
    pub fn absorb(&mut self, other: &Correlator) {
        let (links, changes) = self.workers.absorb(&other.workers);
        self.learned += links;
        self.changes += changes;
        for r in other.tasks.saved() {
            if self.tasks.restore(&r) {
                self.learned += 1;
                self.changes += 1;
            }
        }
    }

    /// Takes in the task ranges a spool line of `file` (a `ray_event` file) states,
    /// if any, or that its session's tasks run without them. A substring test
    /// first: most events are of neither kind.
    pub fn learn_task_log_of(&mut self, file: &FileMeta, text: &str) -> bool {
        let finder = |n: &[u8]| memchr::memmem::find(text.as_bytes(), n).is_some();
        if !(finder(b"askLogInfo") || finder(b"ask_log_info") || finder(b"\"RUNNING\"")) {
            return false;
        }
        let default = file.session.as_deref().unwrap_or("");
        match TaskLog::parse(text) {
            Some(TaskLog::Ranges(info)) => self.learn_task_log(&info, default),
            Some(TaskLog::RunningWithout { session }) if self.tasks.note_without(session.unwrap_or(default)) => {
                // Prints held for a range of that session go out now.
                self.learned += 1;
                true
            }
            _ => false,
        }
    }

    /// Workers known (see [`Correlator::forget_workers`]).
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Number of known worker → actor links.
    pub fn len(&self) -> usize {
        self.workers.actors()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.actors() == 0
    }

    /// Learns from one parsed record of `file` (called by the parser for every record).
    /// `ids` are the ids found in the record's own text, before file context is added;
    /// `own_time` is the time written on the record, if any.
    #[inline]
    pub fn learn(&mut self, file: &FileMeta, message: &str, ids: &Ids, own_time: Option<Timestamp>) -> bool {
        if let (Some(t), Some(k), "core_worker") = (own_time, file.worker_key(), file.component.as_str()) {
            self.changes += self.workers.note_time(&k, t) as u64;
        }
        let Some(actor) = ids.actor_id else {
            return false;
        };
        match file.component.as_str() {
            "core_worker" if message.starts_with("Creating actor") => match file.worker_id {
                Some(w) => self.link(w, actor),
                None => false,
            },
            "gcs_server" | "raylet" if HOSTING_PHRASES.iter().any(|p| message.starts_with(p)) => match ids.worker_id {
                Some(w) => self.link(w, actor),
                None => false,
            },
            // Structured logging inside the actor's worker names both.
            "worker" => match (file.worker_id, ids.worker_id) {
                (Some(fw), Some(w)) if fw == w && ids.task_id.is_some_and(|t| t.actor_of_task() == Some(actor)) => {
                    self.link(w, actor)
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Learns from a whole file's bytes without parsing it: used before parsing a
    /// directory so the result does not depend on file order. Reads core-worker
    /// logs, GCS/raylet logs and the markers at the top of worker files; other
    /// files are ignored.
    pub fn prescan(&mut self, file: &FileMeta, bytes: &[u8]) {
        match file.component.as_str() {
            "core_worker" => {
                let Some(w) = file.worker_id else { return };
                if let Some(t) = newest_time(file, bytes, &self.zone) {
                    self.note_worker_time(w, t);
                }
                for line in lines_containing(bytes, b"Creating actor") {
                    let mut ids = Ids::default();
                    ids_of_line(line, &mut ids);
                    if let Some(a) = ids.actor_id {
                        self.link(w, a);
                    }
                }
            }
            "worker" => {
                // Markers sit at the top of each worker file.
                for line in bytes.split(|&b| b == b'\n').take(8) {
                    if let Some(m) = crate::assemble::Marker::parse(line) {
                        self.learn_marker(file.worker_id, &m);
                    }
                }
            }
            "ray_event" => {
                // Ray's exported events state the links outright (see `formats::ray_event`).
                for line in bytes.split(|&b| b == b'\n') {
                    let Ok(text) = std::str::from_utf8(line) else { continue };
                    let (mut scratch, mut d) = (String::new(), crate::formats::Draft::default());
                    if crate::formats::ray_event::parse(text, &mut scratch, &mut d) {
                        for (w, a) in d.links {
                            self.link(w, a);
                        }
                    }
                    self.learn_task_log_of(file, text);
                }
            }
            "gcs_server" | "raylet" => {
                for line in hosting_lines(bytes) {
                    let mut ids = Ids::default();
                    ids_of_line(line, &mut ids);
                    if let (Some(w), Some(a)) = (ids.worker_id, ids.actor_id) {
                        self.link(w, a);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The newest time written on a header line of `bytes` (every header line starts a
/// record, so this is the newest record time the parser will find there).
///
/// C++ headers (`[2026-11-30 09:05:35,278 …`) write a fixed-width naive time, which
/// sorts as text the way it sorts as time: the greatest header is found by comparing
/// bytes and only it is parsed. Other lines are parsed one by one.
fn newest_time(file: &FileMeta, bytes: &[u8], zone: &Zone) -> Option<Timestamp> {
    const HEAD: usize = 24; // `[YYYY-MM-DD HH:MM:SS,mmm`
    let mut newest = None;
    let mut greatest: Option<&[u8]> = None;
    let mut start = 0;
    while start < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |e| start + e);
        let line = &bytes[start..end];
        if line.len() > HEAD && crate::formats::starts_cpp_header(line) {
            if greatest.is_none_or(|g| line[..HEAD] > g[..HEAD]) {
                greatest = Some(line);
            }
        } else if let Some(t) = crate::formats::line_time(file.kind, line, zone) {
            newest = newest.max(Some(t));
        }
        start = end + 1;
    }
    let from_cpp = greatest.and_then(|g| crate::formats::line_time(file.kind, g, zone));
    newest.max(from_cpp)
}

/// The lines of `bytes` holding each of [`HOSTING_PHRASES`], phrase by phrase (a line
/// once per phrase it holds, lines in file order within a phrase), found in one
/// pass: GCS logs are read whole, and five searches of them cost five passes. The
/// order is the one five searches give, because a later link to a worker replaces
/// an earlier one.
fn hosting_lines(bytes: &[u8]) -> impl Iterator<Item = &str> {
    static PHRASES: std::sync::LazyLock<aho_corasick::AhoCorasick> = std::sync::LazyLock::new(|| {
        aho_corasick::AhoCorasick::new(HOSTING_PHRASES).expect("fixed phrases make an automaton")
    });
    let mut hits: Vec<(usize, usize, usize)> = Vec::new();
    // The line of the last hit: hits come in order of position, so a line is
    // measured once however many hits it holds (a long line repeating a phrase
    // stays linear), and searched back from only as far as the last line's end.
    let (mut start, mut end) = (0, None);
    for m in PHRASES.find_overlapping_iter(bytes) {
        let phrase = m.pattern().as_usize();
        if end.is_none_or(|e| m.start() > e) {
            let from = end.map_or(0, |e| e + 1);
            start = memchr::memrchr(b'\n', &bytes[from..m.start()]).map_or(from, |s| from + s + 1);
            end = Some(memchr::memchr(b'\n', &bytes[m.start()..]).map_or(bytes.len(), |e| m.start() + e));
        } else if hits.iter().rev().take_while(|h| h.1 == start).any(|h| h.0 == phrase) {
            continue;
        }
        hits.push((phrase, start, end.unwrap_or(bytes.len())));
    }
    hits.sort_by_key(|h| h.0);
    hits.into_iter().map(|(_, s, e)| std::str::from_utf8(&bytes[s..e]).unwrap_or(""))
}

/// Each line of `bytes` that contains `needle`, once, however often it occurs there.
///
/// The search resumes after the line it found: resuming after the match instead
/// would measure and parse a line once per occurrence, which is quadratic in a long
/// line that repeats the needle.
fn lines_containing<'b>(bytes: &'b [u8], needle: &'b [u8]) -> impl Iterator<Item = &'b str> + 'b {
    let finder = memchr::memmem::Finder::new(needle);
    let mut from = 0;
    std::iter::from_fn(move || {
        let pos = from + finder.find(bytes.get(from..)?)?;
        let start = memchr::memrchr(b'\n', &bytes[from..pos]).map_or(from, |s| from + s + 1);
        let end = memchr::memchr(b'\n', &bytes[pos..]).map_or(bytes.len(), |e| pos + e);
        from = end + 1;
        Some(std::str::from_utf8(&bytes[start..end]).unwrap_or(""))
    })
}

/// Ids of one raw line: JSON members (`RAY_BACKEND_LOG_JSON=1`), `key=value` pairs, prose.
fn ids_of_line(line: &str, ids: &mut Ids) {
    if line.starts_with('{') {
        let _ = crate::json::members(line, |k, v| {
            if let (Some(kind), Some(s)) = (crate::ids_in_text::IdKind::from_key(k), v.plain_str()) {
                kind.store(ids, Id::parse(s.as_bytes()));
            }
        });
        return;
    }
    trailing_pairs(line, |k, v| {
        if let Some(kind) = crate::ids_in_text::IdKind::from_key(k) {
            kind.store(ids, Id::parse(v.trim_end_matches(',').as_bytes()));
        }
    });
    scan_prose(line, ids);
}

/// Finds the node id a raylet log announces (`Setting node ID node_id=X`, older
/// `Setting node ID to: X`, or `[state-dump] NodeManager:\nNode ID: X`).
pub fn node_id_from_raylet(bytes: &[u8]) -> Option<Id> {
    for needle in [&b"Setting node ID"[..], b"NodeManager server started", b"Node ID: "] {
        for line in lines_containing(bytes, needle) {
            let mut ids = Ids::default();
            ids_of_line(line, &mut ids);
            if ids.node_id.is_some() {
                return ids.node_id;
            }
            // `Setting node ID to: <hex>`
            if let Some(id) = line.rsplit(' ').next().and_then(|t| Id::parse_len(t.as_bytes(), WORKER_HEX)) {
                return Some(id);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;

    const W: &str = "f6c129302d91187c69e18e3176aba830cf787f1fdc10442b6f7a4cb0";
    const A: &str = "c849596ab2d001ad77a3612801000000";

    #[test]
    fn prescan_core_worker_both_wordings() {
        for line in [
            format!("[x] core_worker.cc:3247: Creating actor actor_id={A}"),
            format!("[x] core_worker.cc:2: Creating actor: {A}"),
            format!(r#"{{"asctime":"x","levelname":"I","message":"Creating actor","actor_id":"{A}"}}"#),
        ] {
            let meta = classify(&format!("python-core-worker-{W}_4610.log"), None);
            let mut c = Correlator::new();
            c.prescan(&meta, format!("noise\n{line}\nmore\n").as_bytes());
            assert_eq!(c.actor_of(&Id::parse(W.as_bytes()).unwrap()).unwrap().as_str(), A, "{line}");
        }
    }

    #[test]
    fn hosting_lines_come_as_five_searches_give_them() {
        let [p0, p1, p2, p3, p4] = HOSTING_PHRASES;
        let text = format!(
            "{p2} a\nnone\n{p0} {p0} b\n{p4} and {p1} c\n\n{p1}\nx {p3}{p3} d\nReceived KillLocalActor is failed on worker e\n{p2}"
        );
        let five: Vec<&str> =
            HOSTING_PHRASES.iter().flat_map(|p| lines_containing(text.as_bytes(), p.as_bytes())).collect();
        assert_eq!(hosting_lines(text.as_bytes()).collect::<Vec<_>>(), five);
        assert_eq!(five.len(), 9, "{five:?}");
        // A long line repeating a phrase is one line, found in linear time.
        let long = format!("{}\n", p3.repeat(50_000));
        assert_eq!(hosting_lines(long.as_bytes()).count(), 1);
    }

    #[test]
    fn each_line_with_the_needle_is_seen_once() {
        let text = b"a x x x\nno\nx\n\nxx tail x";
        let got: Vec<&str> = lines_containing(text, b"x").collect();
        assert_eq!(got, ["a x x x", "x", "xx tail x"]);
        assert_eq!(lines_containing(b"x\n", b"x").collect::<Vec<_>>(), ["x"]);
        assert_eq!(lines_containing(b"", b"x").count(), 0);
        // A line repeating the phrase thousands of times still links its actor.
        let meta = classify(&format!("python-core-worker-{W}_4610.log"), None);
        let line = format!("[x] core_worker.cc:1: {}actor_id={A}\n", "Creating actor ".repeat(20_000));
        let mut c = Correlator::new();
        c.prescan(&meta, line.as_bytes());
        assert_eq!(c.actor_of(&Id::parse(W.as_bytes()).unwrap()).unwrap().as_str(), A);
    }

    #[test]
    fn prescan_gcs_only_hosting_lines() {
        let meta = classify("gcs_server.out", None);
        let mut c = Correlator::new();
        let owner = "01000000ffffffffffffffffffffffffffffffffffffffffffffffff";
        c.prescan(&meta, format!("[t] (gcs_server) x.cc:1: Owner died worker_id={owner} actor_id={A}\n").as_bytes());
        assert!(c.is_empty(), "an owner is not the host");
        c.prescan(&meta, format!("[t] (gcs_server) gcs_actor_scheduler.cc:463: Actor creation task succeeded. actor_id={A} worker_id={W} job_id=01000000\n").as_bytes());
        assert_eq!(c.actor_of(&Id::parse(W.as_bytes()).unwrap()).unwrap().as_str(), A);
    }

    #[test]
    fn node_from_raylet() {
        let n = "695e461fb0f54d6e7375eeaf092edbcbcbd997954cab95dbf3635b7a";
        let text = format!("[t] (raylet) main.cc:711: Setting node ID node_id={n}\n");
        assert_eq!(node_id_from_raylet(text.as_bytes()).unwrap().as_str(), n);
    }
}
