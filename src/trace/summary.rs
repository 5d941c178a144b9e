//! The summary at the top of a trace: what the records say about the traced actor,
//! task, job or worker as a whole.
//!
//! Built after the scan from the trace's own records (context records excluded),
//! so it can only state what the logs given contain; fields nothing spoke for are
//! left out rather than guessed.

use std::collections::{BTreeMap, BTreeSet};

use raylog_parsers::id::IdMapState;
use raylog_parsers::{Id, Timestamp};

use super::entry::Entry;
use super::facts::{actor_notification, export_word, json_path, without_pairs};
use super::life::{by_worker, life_of, lives, Life, TimeRange};
use super::select::{Kind, Knowledge};
use super::task::{task_summary, TaskSummary};

/// Counts every summary has.
#[derive(Clone, Debug, Default)]
pub struct Common {
    pub records: usize,
    pub context_records: usize,
    pub errors: usize,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
    pub nodes: Vec<Id>,
}

/// An actor's life.
#[derive(Clone, Debug, Default)]
pub struct ActorSummary {
    pub actor_id: String,
    pub class: Option<String>,
    pub name: Option<String>,
    pub job_id: Option<Id>,
    pub state: Option<String>,
    pub restarts: usize,
    pub death_cause: Option<String>,
    /// Export events' `death_cause` reason (`OWNER_DIED`, `WORKER_DIED`...).
    pub death_reason: Option<String>,
    pub incarnations: Vec<Life>,
}

/// A driver of a job.
#[derive(Clone, Debug, Default)]
pub struct Driver {
    pub pid: Option<u32>,
    pub worker_id: Option<Id>,
    pub node_id: Option<Id>,
    pub submission_id: Option<String>,
    pub files: BTreeSet<String>,
    pub records: usize,
}

/// An actor seen in a job.
#[derive(Clone, Debug, Default)]
pub struct ActorSeen {
    pub actor_id: Option<Id>,
    pub class: Option<String>,
    pub workers: BTreeSet<String>,
    pub records: usize,
}

/// A job's drivers, workers and actors.
#[derive(Clone, Debug, Default)]
pub struct JobSummary {
    pub job_id: String,
    pub drivers: Vec<Driver>,
    pub workers: Vec<Life>,
    pub actors: Vec<ActorSeen>,
    pub tasks: usize,
}

/// One worker process, and what it ran.
#[derive(Clone, Debug, Default)]
pub struct WorkerSummary {
    pub life: Life,
    pub tasks: BTreeMap<String, usize>,
}

/// The summary of one trace.
#[derive(Clone, Debug)]
pub enum Detail {
    Actor(ActorSummary),
    Task(TaskSummary),
    Job(JobSummary),
    Worker(WorkerSummary),
}

#[derive(Clone, Debug)]
pub struct Summary {
    pub kind: Kind,
    pub common: Common,
    pub detail: Detail,
}

fn common(entries: &[&Entry]) -> Common {
    // Distinct ids, not a string per entry for a string set (9 % of the summary's
    // instructions for a 67,000-record actor); one pass over entries cold in cache.
    let mut nodes: std::collections::HashSet<Id, IdMapState> = Default::default();
    let mut c = Common::default();
    let mut last_node = None;
    let mut times = TimeRange::default();
    for e in entries.iter().filter(|e| !e.context) {
        c.records += 1;
        c.errors += e.is_error() as usize;
        if let Some(t) = e.timestamp {
            times.add(t);
        }
        // Neighbours mostly share a node: hashing each entry's 57-byte id was most of this pass.
        if e.ids.node_id != last_node {
            last_node = e.ids.node_id;
            nodes.extend(last_node);
        }
    }
    c.context_records = entries.len() - c.records;
    (c.first, c.last) = times.bounds();
    c.nodes = nodes.into_iter().collect();
    c.nodes.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
    c
}

/// Builds the summary of `entries` (sorted) for the target whose full id is `id`.
pub fn summarize(kind: Kind, id: &str, entries: &[&Entry], k: &Knowledge) -> Summary {
    let own: Vec<&Entry> = entries.iter().copied().filter(|e| !e.context).collect();
    let detail = match kind {
        Kind::Actor => Detail::Actor(actor_summary(id, &own, k)),
        Kind::Task => Detail::Task(task_summary(id, &own, k)),
        Kind::Job => Detail::Job(job_summary(id, &own)),
        Kind::Worker => Detail::Worker(worker_summary(id, &own)),
    };
    Summary { kind, common: common(entries), detail }
}

/// The class: export events name it, an actor task's name starts with it
/// (`Phoenix.hello`), else the workers' `:actor_name:` marker.
fn actor_class(own: &[&Entry], incarnations: &[Life]) -> Option<String> {
    own.iter()
        .filter(|e| e.component() == "export_event")
        .find_map(|e| export_word(&e.message, "class_name"))
        .or_else(|| {
            own.iter()
                .filter(|e| e.in_worker_file())
                .find_map(|e| e.task_name.as_deref()?.split_once('.').map(|(c, _)| c.to_string()))
        })
        .or_else(|| incarnations.iter().find_map(|l| l.actor_class.clone()))
}

/// The user-given name: export events' `name=`, else a structured-logging
/// `actor_name` that differs from the class.
fn actor_name(own: &[&Entry], class: Option<&str>) -> Option<String> {
    own.iter().filter(|e| e.component() == "export_event").find_map(|e| export_word(&e.message, "name")).or_else(|| {
        own.iter()
            .filter(|e| e.in_worker_file())
            .filter_map(|e| e.actor_name.as_deref())
            .find(|n| Some(*n) != class)
            .map(str::to_string)
    })
}

fn actor_summary(id: &str, own: &[&Entry], k: &Knowledge) -> ActorSummary {
    let mut workers: Vec<&Id> = k.workers.iter().collect();
    workers.sort_by_key(|w| w.as_str().to_string());
    let of_worker = by_worker(own);
    let mut incarnations: Vec<Life> =
        workers.into_iter().map(|w| life_of(*w, of_worker.get(w).map_or(&[][..], |es| es.as_slice()))).collect();
    incarnations.sort_by_key(|l| l.start);
    let class = actor_class(own, &incarnations);
    let name = actor_name(own, class.as_deref());
    let notified = own.iter().filter_map(|e| actor_notification(&e.message)).collect::<Vec<_>>();
    let restarts_told = notified.iter().filter_map(|(_, n)| *n).max().unwrap_or(0) as usize;
    let exported_dead = own
        .iter()
        .rev()
        .find(|e| e.component() == "export_event" && export_word(&e.message, "state").as_deref() == Some("DEAD"));
    let last = incarnations.last();
    // GCS destroying the actor after its last incarnation started ends it too (when
    // that worker's own files are not among the inputs).
    let destroyed = own.iter().rev().find(|e| {
        e.component() == "gcs_server"
            && e.message.starts_with("Destroying actor")
            && last.is_none_or(|l| e.timestamp >= l.start)
    });
    let ended = destroyed.is_some()
        || last.is_some_and(|l| l.exit_type.is_some() || l.signal.is_some() || l.exit_detail.is_some());
    let state = own
        .iter()
        .rev()
        .filter(|e| e.component() == "export_event")
        .find_map(|e| export_word(&e.message, "state"))
        .or_else(|| ended.then(|| "DEAD".to_string()))
        .or_else(|| notified.last().map(|(s, _)| s.clone()));
    let export_cause = |path: &[&str]| exported_dead.and_then(|e| json_path(e.event_data.as_deref()?, path));
    ActorSummary {
        actor_id: id.to_string(),
        class,
        name,
        job_id: Id::parse(id.as_bytes()).and_then(|a| a.job_of_actor_or_task()),
        state,
        restarts: incarnations.len().saturating_sub(1).max(restarts_told),
        death_cause: export_cause(&["death_cause", "actor_died_error_context", "error_message"])
            .or_else(|| last.filter(|_| ended).and_then(|l| l.exit_detail.clone()))
            .or_else(|| destroyed.and_then(|e| without_pairs(&e.message)).map(|m| format!("GCS: {m}"))),
        death_reason: export_cause(&["death_cause", "actor_died_error_context", "reason"]),
        incarnations,
    }
}

/// A driver process: its session, pid and Jobs API submission id.
type DriverKey = (Option<String>, Option<u32>, Option<String>);

/// A driver's own files: its core log, or a Jobs API driver log (the job supervisor
/// also names the submission, but it is an actor, not the driver).
fn is_driver(e: &Entry) -> bool {
    matches!(e.component(), "core_driver" | "driver")
}

fn job_summary(id: &str, own: &[&Entry]) -> JobSummary {
    let mut drivers: BTreeMap<DriverKey, Driver> = BTreeMap::new();
    for e in own.iter().filter(|e| is_driver(e)) {
        let key = (e.session().map(str::to_string), e.pid, e.submission_id().map(str::to_string));
        let d = drivers.entry(key).or_default();
        d.pid = d.pid.or(e.pid);
        d.worker_id = d.worker_id.or(e.ids.worker_id.filter(|_| e.file_worker));
        d.node_id = d.node_id.or(e.ids.node_id);
        d.submission_id = d.submission_id.clone().or(e.submission_id().map(str::to_string));
        d.files.insert(e.file().to_string());
        d.records += 1;
    }
    let driver_workers: std::collections::HashSet<Id> = drivers.values().filter_map(|d| d.worker_id).collect();
    let workers: Vec<Life> = lives(own)
        .into_iter()
        .filter(|l| !l.driver && l.worker_id.is_some_and(|w| !driver_workers.contains(&w)))
        .filter(|l| l.worker_id.is_some_and(|w| w.job_of_driver_worker().is_none()))
        .collect();
    let mut actors: BTreeMap<String, ActorSeen> = BTreeMap::new();
    for e in own {
        let Some(a) = e.ids.actor_id else { continue };
        let seen = actors.entry(a.as_str().to_string()).or_default();
        seen.actor_id = Some(a);
        seen.records += 1;
        if e.in_worker_file() {
            if let Some(w) = e.ids.worker_id {
                seen.workers.insert(w.as_str().to_string());
            }
            // An actor task's name starts with the class; `actor_name` may be the
            // user-given name (structured logging) rather than the class.
            if let Some((class, _)) = e.task_name.as_deref().and_then(|t| t.split_once('.')) {
                seen.class = Some(class.to_string());
            } else if seen.class.is_none() && e.component() == "worker" {
                seen.class = e.actor_name.clone();
            }
        }
    }
    let tasks: BTreeSet<&str> = own.iter().filter_map(|e| e.ids.task_id.as_ref()).map(|t| t.as_str()).collect();
    JobSummary {
        job_id: id.to_string(),
        drivers: drivers.into_values().collect(),
        workers,
        actors: actors.into_values().collect(),
        tasks: tasks.len(),
    }
}

fn worker_summary(id: &str, own: &[&Entry]) -> WorkerSummary {
    let life = match Id::parse(id.as_bytes()) {
        Some(w) => life_of(w, own),
        None => Life::default(),
    };
    let mut tasks: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for e in own.iter().filter(|e| e.in_worker_file()) {
        if let (Some(t), Some(n)) = (e.ids.task_id, &e.task_name) {
            if seen.insert(t.as_str().to_string()) {
                *tasks.entry(n.clone()).or_default() += 1;
            }
        }
    }
    WorkerSummary { life, tasks }
}
