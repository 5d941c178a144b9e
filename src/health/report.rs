//! Report: the events of a whole scan, merged and grouped for an incident responder.
//!
//! [`Collector::observe`] runs per record: [`super::detect()`] first, then a few cheap
//! facts other records state (a worker's pid, an actor's class and name) so a death
//! can be told with them; ERROR and FATAL records feed the message templates
//! ([`super::errors`]). One death said twice (GCS and the raylet's event) is one
//! death: rows merge by worker id. [`Collector::finish`] sorts everything into the
//! owned, serialisable [`Report`].

use std::collections::{BTreeMap, HashMap};

use raylog_parsers::id::IdMapState;

use raylog_parsers::{Id, Level, Record, Timestamp};
use serde::Serialize;

use super::detect::{DeathSource, Event, TaskFailureSource};
pub use super::errors::{ErrorTemplate, TOP_ERRORS};

fn time(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.to_rfc3339())
}

fn id(i: Option<Id>) -> Option<String> {
    i.map(|i| i.as_str().to_string())
}

/// One worker that died.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkerDeathRow {
    pub worker_id: Option<String>,
    pub pid: Option<u32>,
    pub node_id: Option<String>,
    pub time: Option<String>,
    pub exit_type: String,
    pub detail: Option<String>,
    /// The actor the worker hosted, when GCS said so.
    pub actor_id: Option<String>,
    /// GCS's time is to the millisecond, the event's to the second.
    #[serde(skip)]
    from_gcs: bool,
}

/// Worker deaths of one exit type.
#[derive(Debug, Serialize)]
pub struct ExitTypeGroup {
    pub exit_type: String,
    pub count: usize,
    pub workers: Vec<WorkerDeathRow>,
}

#[derive(Debug, Default, Serialize)]
pub struct WorkerDeaths {
    pub total: usize,
    pub by_exit_type: Vec<ExitTypeGroup>,
}

/// One decision of the memory monitor.
#[derive(Debug, Serialize)]
pub struct OomKillRow {
    pub time: Option<String>,
    pub node_id: Option<String>,
    pub workers: u32,
    pub detail: String,
}

#[derive(Debug, Default, Serialize)]
pub struct OomKills {
    /// Workers killed by the memory monitor (its kill lines, or, where those are
    /// missing, deaths with exit type `NODE_OUT_OF_MEMORY`).
    pub total: u64,
    pub kills: Vec<OomKillRow>,
}

/// One failure of an actor.
#[derive(Debug, Serialize)]
pub struct ActorFailureRow {
    pub time: Option<String>,
    pub worker_id: Option<String>,
    pub pid: Option<u32>,
    pub node_id: Option<String>,
    pub exit_type: Option<String>,
    pub restarted: bool,
    pub remaining_restarts: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct ActorRow {
    pub actor_id: String,
    pub class: Option<String>,
    pub name: Option<String>,
    pub job_id: Option<String>,
    pub failures: usize,
    pub restarts: usize,
    pub events: Vec<ActorFailureRow>,
}

#[derive(Debug, Default, Serialize)]
pub struct ActorFailures {
    pub failures: usize,
    pub restarts: usize,
    pub actors: Vec<ActorRow>,
}

#[derive(Debug, Serialize)]
pub struct NodeDeathRow {
    pub node_id: Option<String>,
    pub time: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `true` for a planned removal, `null` when Ray did not log a reason (2.9).
    pub expected: Option<bool>,
}

#[derive(Debug, Default, Serialize)]
pub struct NodeDeaths {
    pub total: usize,
    /// Deaths whose logged reason is not a planned removal (`ray stop`, SIGTERM,
    /// drain); 2.9 logs no reason, so its removals count in neither.
    pub unexpected: usize,
    pub nodes: Vec<NodeDeathRow>,
}

#[derive(Debug, Serialize)]
pub struct GcsHealthRow {
    pub time: Option<String>,
    pub kind: &'static str,
    pub node_id: Option<String>,
    pub detail: String,
}

#[derive(Debug, Default, Serialize)]
pub struct GcsHealth {
    pub total: usize,
    pub by_kind: BTreeMap<&'static str, usize>,
    pub events: Vec<GcsHealthRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskFailureRow {
    pub task_id: Option<String>,
    pub name: Option<String>,
    pub attempt: Option<u32>,
    pub error_type: String,
    pub time: Option<String>,
    #[serde(skip)]
    source_export: bool,
}

#[derive(Debug, Serialize)]
pub struct ExceptionGroup {
    pub exception: String,
    pub count: usize,
    pub tasks: Vec<TaskFailureRow>,
}

#[derive(Debug, Default, Serialize)]
pub struct TaskFailures {
    pub total: usize,
    pub by_exception: Vec<ExceptionGroup>,
}

#[derive(Debug, Serialize)]
pub struct DriverFailureRow {
    pub submission_id: String,
    pub outcome: String,
    pub time: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Spilling {
    /// The raylets' `Spilled …` lines.
    pub events: usize,
    /// Spilled in all: each line states its raylet's running total (2.40 in
    /// fixtures/ray-2.40-health: `Spilled 72 MiB, 3 objects` then `Spilled 144 MiB,
    /// 6 objects`), so this is the largest total of each raylet, summed over them.
    pub mib: f64,
    pub objects: u64,
}

/// Everything `raylog health` prints. The JSON form is this, serialised.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub worker_deaths: WorkerDeaths,
    pub oom_kills: OomKills,
    pub actor_failures: ActorFailures,
    pub node_deaths: NodeDeaths,
    pub gcs_health: GcsHealth,
    pub task_failures: TaskFailures,
    pub top_errors: Vec<ErrorTemplate>,
    pub driver_failures: Vec<DriverFailureRow>,
    pub object_spilling: Spilling,
    /// ERROR and FATAL records seen (what `top_errors` groups).
    pub error_records: u64,
    /// GCS's and the raylets' handler timings and lag, and the live nodes.
    pub latency: super::latency::Latency,
}

struct ActorFact {
    time: Option<Timestamp>,
    fail: super::detect::ActorFailure,
}

/// Per-scan state.
#[derive(Default)]
pub struct Collector {
    deaths: Vec<WorkerDeathRow>,
    // Maps looked up per record: a fast hasher, not SipHash (these are the
    // collector's hottest maps; the keys are ids from logs, not an attacker's).
    death_index: HashMap<Id, usize, IdMapState>,
    oom: Vec<OomKillRow>,
    actors: Vec<ActorFact>,
    nodes: Vec<NodeDeathRow>,
    gcs: Vec<GcsHealthRow>,
    tasks: Vec<(String, TaskFailureRow)>,
    drivers: BTreeMap<String, DriverFailureRow>,
    spill: Spilling,
    /// The largest running total (MiB, objects) of each raylet: by session and node.
    spill_totals: HashMap<(Option<String>, Option<Id>), (f64, u64)>,
    pids: HashMap<Id, u32, IdMapState>,
    classes: HashMap<Id, String, IdMapState>,
    /// Every task's name, as an index into `task_name_list`: a run names hundreds of
    /// thousands of tasks (205,839 in the 256 MiB benchmark tree) with a few dozen
    /// names, and a `String` each made this the largest map and most of the
    /// allocations of `health`.
    task_names: HashMap<Id, u32, IdMapState>,
    task_name_list: Vec<String>,
    task_name_index: HashMap<String, u32>,
    /// The name learned last: a worker's tasks mostly share it, so most lookups are
    /// one comparison instead of a hash.
    last_task_name: u32,
    names: HashMap<Id, String, IdMapState>,
    errors: super::errors::Errors,
    latency: super::latency::Collector,
}

impl Collector {
    /// Takes in one record.
    pub fn observe(&mut self, r: &Record<'_>) {
        self.observe_noted(r, None)
    }

    /// [`Collector::observe`], given the record's [`template`](super::template) when
    /// it is an error and that was worked out already (on a parse worker).
    pub fn observe_noted(&mut self, r: &Record<'_>, template: Option<&str>) {
        self.learn(r);
        if r.level >= Some(Level::Error) {
            self.errors.add(r, template);
        }
        if let Some(ev) = super::detect(r) {
            self.record(r, ev);
        }
        self.latency.observe(r);
        if let Some((alive, node)) = super::latency::node_liveness(r) {
            self.latency.node(node, alive, r.timestamp);
        }
    }

    fn record(&mut self, r: &Record<'_>, ev: Event<'_>) {
        let t = r.timestamp;
        match ev {
            Event::WorkerDeath(d) => {
                let row = WorkerDeathRow {
                    worker_id: id(d.worker_id),
                    pid: d.pid,
                    node_id: id(d.node_id),
                    time: time(t),
                    exit_type: d.exit_type.to_string(),
                    detail: d.detail.map(|s| crate::trace::facts::short(s, 160)),
                    actor_id: None,
                    from_gcs: d.source == DeathSource::Gcs,
                };
                self.add_death(d.worker_id, row);
            }
            Event::OomKill(k) => self.oom.push(OomKillRow {
                time: time(t),
                node_id: id(r.ids.node_id),
                workers: k.workers,
                detail: crate::trace::facts::short(k.detail, 200),
            }),
            Event::ActorFailure(fail) => self.actors.push(ActorFact { time: t, fail }),
            Event::NodeDeath(n) => {
                if let (Some(node), false) = (n.node_id, n.from_event) {
                    self.latency.node(node, false, t);
                }
                self.nodes.push(NodeDeathRow {
                    node_id: id(n.node_id),
                    time: time(t),
                    reason: n.reason.map(str::to_string),
                    message: n.message.map(str::to_string),
                    expected: n.reason.map(|_| n.expected()),
                })
            }
            Event::GcsHealth(h) => self.gcs.push(GcsHealthRow {
                time: time(t),
                kind: h.kind.as_str(),
                node_id: id(h.node_id),
                detail: crate::trace::facts::short(h.detail, 200),
            }),
            Event::TaskFailure(f) => self.tasks.push((f.exception.to_string(), task_row(&f, t))),
            Event::DriverExit(d) => {
                let row = DriverFailureRow {
                    submission_id: d.submission_id.to_string(),
                    outcome: d.outcome.to_string(),
                    time: time(t),
                };
                self.drivers.entry(row.submission_id.clone()).or_insert(row);
            }
            Event::Spill(s) => {
                self.spill.events += 1;
                let key = (r.file.session.clone(), r.ids.node_id);
                let total = self.spill_totals.entry(key).or_insert((0.0, 0));
                *total = (total.0.max(s.mib), total.1.max(s.objects));
            }
        }
    }

    /// A death said again (GCS and the event) fills in what the first lacked.
    fn add_death(&mut self, worker: Option<Id>, row: WorkerDeathRow) {
        let Some(w) = worker else {
            self.deaths.push(row);
            return;
        };
        match self.death_index.get(&w) {
            Some(&i) => {
                let d = &mut self.deaths[i];
                d.pid = d.pid.or(row.pid);
                d.node_id = d.node_id.take().or(row.node_id);
                d.detail = d.detail.take().or(row.detail);
                if (row.from_gcs && row.time.is_some()) || d.time.is_none() {
                    d.time = row.time;
                }
            }
            None => {
                self.death_index.insert(w, self.deaths.len());
                self.deaths.push(row);
            }
        }
    }

    /// Takes in what `r` teaches (a worker's pid, a task's name, an actor's class
    /// and name), and nothing else: all a record kept as its facts can change
    /// ([`super::sieve`]).
    pub fn learn(&mut self, r: &Record<'_>) {
        if let (Some(w), Some(pid)) = (r.ids.worker_id, r.pid) {
            if super::sieve::names_pid(r) {
                self.pids.entry(w).or_insert(pid);
            }
        }
        if let (Some(t), Some(n)) = (r.ids.task_id, r.task_name) {
            if let std::collections::hash_map::Entry::Vacant(v) = self.task_names.entry(t) {
                let list = &mut self.task_name_list;
                let last = self.last_task_name;
                let i = if list.get(last as usize).is_some_and(|l| l == n) {
                    last
                } else if let Some(&i) = self.task_name_index.get(n) {
                    i
                } else {
                    let i = u32::try_from(list.len()).expect("fewer than 4 billion task names");
                    list.push(n.to_string());
                    self.task_name_index.insert(n.to_string(), i);
                    i
                };
                v.insert(i);
                self.last_task_name = i;
            }
        }
        let Some(a) = r.ids.actor_id else { return };
        if super::sieve::defines_actor(r) {
            let word = |k| crate::trace::facts::export_word(r.message, k);
            if let Some(c) = word("class_name") {
                self.classes.insert(a, c);
            }
            if let Some(n) = word("name") {
                self.names.insert(a, n);
            }
            return;
        }
        if r.component() != "worker" || self.classes.contains_key(&a) {
            return;
        }
        if let Some(c) = super::sieve::worker_class(r) {
            self.classes.insert(a, c.to_string());
        }
    }

    /// The report, every list sorted (by count, then time, then id).
    pub fn finish(mut self) -> Report {
        let actor_failures = self.actor_report();
        let errors = std::mem::take(&mut self.errors);
        let error_records = errors.records();
        Report {
            worker_deaths: group_deaths(std::mem::take(&mut self.deaths)),
            oom_kills: self.oom_report(),
            actor_failures,
            node_deaths: node_report(std::mem::take(&mut self.nodes)),
            gcs_health: gcs_report(std::mem::take(&mut self.gcs)),
            task_failures: task_report(std::mem::take(&mut self.tasks), &|t| {
                self.task_names.get(t).map(|&i| self.task_name_list[i as usize].clone())
            }),
            top_errors: errors.top(),
            driver_failures: std::mem::take(&mut self.drivers).into_values().collect(),
            object_spilling: Spilling {
                mib: self.spill_totals.values().map(|t| t.0).sum(),
                objects: self.spill_totals.values().map(|t| t.1).sum(),
                ..std::mem::take(&mut self.spill)
            },
            error_records,
            latency: std::mem::take(&mut self.latency).finish(),
        }
    }

    fn oom_report(&mut self) -> OomKills {
        let mut kills = std::mem::take(&mut self.oom);
        kills.sort_by(|a, b| a.time.cmp(&b.time));
        let from_lines: u64 = kills.iter().map(|k| u64::from(k.workers)).sum();
        // Without the raylet's log (a head node's archive only), the deaths say it.
        let from_deaths = self.deaths.iter().filter(|d| d.exit_type == "NODE_OUT_OF_MEMORY").count() as u64;
        OomKills { total: from_lines.max(from_deaths), kills }
    }

    fn actor_report(&mut self) -> ActorFailures {
        for f in &self.actors {
            if let (Some(w), Some(a)) = (f.fail.worker_id, f.fail.actor_id) {
                if let Some(&i) = self.death_index.get(&w) {
                    self.deaths[i].actor_id = Some(a.as_str().to_string());
                }
            }
        }
        for d in &mut self.deaths {
            if d.pid.is_none() {
                d.pid = d
                    .worker_id
                    .as_deref()
                    .and_then(|w| Id::parse(w.as_bytes()))
                    .and_then(|w| self.pids.get(&w).copied());
            }
        }
        let mut by_actor: BTreeMap<String, ActorRow> = BTreeMap::new();
        // An intended exit (need_reschedule = 0: the job ended, the actor exited) is
        // not a failure. Exported events speak for an actor only when GCS's log says
        // nothing of it: they often state a restart without the worker that died
        // (`RESTARTING` alone), so they cannot be matched failure by failure, and
        // GCS's verdict on an exit (intended or not) is the finer one.
        let logged: std::collections::HashSet<Option<Id>> =
            self.actors.iter().filter(|f| !f.fail.from_event).map(|f| f.fail.actor_id).collect();
        let repeated = |f: &ActorFact| f.fail.from_event && logged.contains(&f.fail.actor_id);
        for f in self.actors.iter().filter(|f| f.fail.need_reschedule && !repeated(f)) {
            let key = f.fail.actor_id.map_or_else(|| "unknown".to_string(), |a| a.as_str().to_string());
            let row = by_actor.entry(key.clone()).or_insert_with(|| ActorRow {
                class: f.fail.actor_id.and_then(|a| self.classes.get(&a).cloned()),
                name: f.fail.actor_id.and_then(|a| self.names.get(&a).cloned()),
                actor_id: key,
                job_id: id(f.fail.job_id),
                failures: 0,
                restarts: 0,
                events: vec![],
            });
            let death = f.fail.worker_id.and_then(|w| self.death_index.get(&w)).map(|&i| &self.deaths[i]);
            row.failures += 1;
            row.restarts += usize::from(f.fail.restarts());
            row.events.push(ActorFailureRow {
                time: time(f.time),
                worker_id: id(f.fail.worker_id),
                pid: death.and_then(|d| d.pid).or_else(|| f.fail.worker_id.and_then(|w| self.pids.get(&w).copied())),
                node_id: id(f.fail.node_id),
                exit_type: death.map(|d| d.exit_type.clone()),
                restarted: f.fail.restarts(),
                remaining_restarts: f.fail.remaining_restarts,
            });
        }
        let mut actors: Vec<ActorRow> = by_actor.into_values().collect();
        actors.sort_by(|a, b| b.failures.cmp(&a.failures).then(a.events[0].time.cmp(&b.events[0].time)));
        ActorFailures {
            failures: actors.iter().map(|a| a.failures).sum(),
            restarts: actors.iter().map(|a| a.restarts).sum(),
            actors,
        }
    }
}

fn task_row(f: &super::detect::TaskFailure<'_>, t: Option<Timestamp>) -> TaskFailureRow {
    TaskFailureRow {
        task_id: id(f.task_id),
        name: f.task_name.map(str::to_string),
        attempt: f.attempt,
        error_type: f.error_type.to_string(),
        time: time(t),
        source_export: f.source != TaskFailureSource::Owner,
    }
}

fn group_deaths(mut deaths: Vec<WorkerDeathRow>) -> WorkerDeaths {
    deaths.sort_by(|a, b| a.time.cmp(&b.time).then(a.worker_id.cmp(&b.worker_id)));
    let mut groups: BTreeMap<String, Vec<WorkerDeathRow>> = BTreeMap::new();
    for d in deaths {
        groups.entry(d.exit_type.clone()).or_default().push(d);
    }
    let mut by_exit_type: Vec<ExitTypeGroup> = groups
        .into_iter()
        .map(|(exit_type, workers)| ExitTypeGroup { exit_type, count: workers.len(), workers })
        .collect();
    by_exit_type.sort_by_key(|g| std::cmp::Reverse(g.count));
    WorkerDeaths { total: by_exit_type.iter().map(|g| g.count).sum(), by_exit_type }
}

fn node_report(mut nodes: Vec<NodeDeathRow>) -> NodeDeaths {
    nodes.sort_by(|a, b| a.time.cmp(&b.time));
    // 2.60 logs a removal once; a node that several files report stays one.
    nodes.dedup_by(|a, b| a.node_id.is_some() && a.node_id == b.node_id);
    NodeDeaths { total: nodes.len(), unexpected: nodes.iter().filter(|n| n.expected == Some(false)).count(), nodes }
}

fn gcs_report(mut events: Vec<GcsHealthRow>) -> GcsHealth {
    events.sort_by(|a, b| a.time.cmp(&b.time));
    let mut by_kind = BTreeMap::new();
    for e in &events {
        *by_kind.entry(e.kind).or_insert(0) += 1;
    }
    GcsHealth { total: events.len(), by_kind, events }
}

/// The owner's log and the export events can both report a task that failed on a
/// system error (the owner says `ACTOR_UNAVAILABLE` for the attempt, the export
/// event `ACTOR_DIED` for the task): the export copy is dropped when the owner
/// reported that task. User exceptions only the export events name.
/// `name_of` gives a task's name, when a record stated it.
fn task_report(tasks: Vec<(String, TaskFailureRow)>, name_of: &dyn Fn(&Id) -> Option<String>) -> TaskFailures {
    let owner_said: std::collections::HashSet<Option<String>> =
        tasks.iter().filter(|(_, t)| !t.source_export).map(|(_, t)| t.task_id.clone()).collect();
    let mut groups: BTreeMap<String, Vec<TaskFailureRow>> = BTreeMap::new();
    // The export API and the exported events can both state one attempt.
    let mut stated = std::collections::HashSet::new();
    for (exception, mut t) in tasks {
        if t.source_export && t.task_id.is_some() && !stated.insert((t.task_id.clone(), t.attempt)) {
            continue;
        }
        if t.name.is_none() {
            let tid = t.task_id.as_deref().and_then(|i| Id::parse(i.as_bytes()));
            t.name = tid.and_then(|i| name_of(&i));
        }
        let user_exception = t.error_type == "TASK_EXECUTION_EXCEPTION";
        if t.source_export && !user_exception && t.task_id.is_some() && owner_said.contains(&t.task_id) {
            continue;
        }
        groups.entry(exception).or_default().push(t);
    }
    let mut by_exception: Vec<ExceptionGroup> = groups
        .into_iter()
        .map(|(exception, mut tasks)| {
            tasks.sort_by(|a, b| a.time.cmp(&b.time));
            ExceptionGroup { exception, count: tasks.len(), tasks }
        })
        .collect();
    by_exception.sort_by_key(|g| std::cmp::Reverse(g.count));
    TaskFailures { total: by_exception.iter().map(|g| g.count).sum(), by_exception }
}
