//! Which records belong to a trace: the [`Target`] and what the scan has learned
//! about it ([`Knowledge`]).
//!
//! Most records name the traced id themselves (the parser tags an actor's worker
//! files, GCS and raylet lines with its `actor_id`). Two kinds do not, and are
//! picked up through what other records taught:
//! - lines about an actor's worker that carry only the worker id (a safety net: the
//!   parser's correlation already tags those it knows);
//! - a task's stdout/stderr lines, which carry only the `:task_name:` marker's name.
//!   They are taken from the workers that ran the task, and only when no other task
//!   of that name left tagged records on the same worker (a worker that ran
//!   `square` three times cannot say which print belongs to which call).

use std::collections::{BTreeSet, HashMap, HashSet};

use raylog_parsers::record::Ids;
use raylog_parsers::{Id, Record};

use crate::filter::IdFilter;

/// What is traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Actor,
    Task,
    Job,
    Worker,
}

impl Kind {
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Actor => "actor",
            Kind::Task => "task",
            Kind::Job => "job",
            Kind::Worker => "worker",
        }
    }

    pub fn flag(self) -> &'static str {
        match self {
            Kind::Actor => "--actor-id",
            Kind::Task => "--task-id",
            Kind::Job => "--job-id",
            Kind::Worker => "--worker-id",
        }
    }

    /// Hex length of a full id of this kind.
    pub fn id_len(self) -> usize {
        match self {
            Kind::Actor => 32,
            Kind::Task => 48,
            Kind::Job => 8,
            Kind::Worker => 56,
        }
    }

    /// The id of this kind on a record.
    pub fn id_of(self, ids: &Ids) -> Option<Id> {
        match self {
            Kind::Actor => ids.actor_id,
            Kind::Task => ids.task_id,
            Kind::Job => ids.job_id,
            Kind::Worker => ids.worker_id,
        }
    }
}

/// The traced entity: a kind and a full id or prefix.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: Kind,
    pub id: IdFilter,
}

impl Target {
    /// Validates the user's id for `kind` (the error names the flag).
    pub fn parse(kind: Kind, value: &str) -> anyhow::Result<Target> {
        Ok(Target { kind, id: IdFilter::parse(kind.flag(), value, kind.id_len())? })
    }

    /// Whether the record carries the traced id itself.
    pub fn names(&self, ids: &Ids) -> bool {
        self.id.matches(self.kind.id_of(ids))
    }

    /// False only for a record [`Knowledge::observe`] learns nothing from, whatever
    /// is known: lets a scan on many threads leave it on its worker.
    pub fn may_teach(&self, r: &Record<'_>) -> bool {
        self.names(r.ids)
            || self.kind == Kind::Task && r.ids.worker_id.is_some() && r.ids.task_id.is_some() && r.task_name.is_some()
    }

    /// False only for a record [`Knowledge::selects`] says no to, whatever is known.
    pub fn may_select(&self, r: &Record<'_>) -> bool {
        if self.names(r.ids) {
            return true;
        }
        match (self.kind, r.ids.worker_id) {
            (Kind::Worker, None) => true,
            (_, None) => false,
            (Kind::Actor, Some(_)) => r.ids.actor_id.is_none(),
            (Kind::Task, Some(_)) => r.component() == "worker" && r.ids.task_id.is_none() && r.task_name.is_some(),
            (Kind::Job | Kind::Worker, Some(_)) => false,
        }
    }
}

/// GCS/raylet phrases whose `worker_id` is the worker hosting the named actor.
const HOSTING: [&str; 5] = [
    "Submitting actor creation task to worker",
    "Actor creation task succeeded",
    "Start creating actor",
    "Received KillLocalActor",
    "Actor is failed on worker",
];

/// What the records seen so far say about the target.
#[derive(Debug, Default)]
pub struct Knowledge {
    /// Full ids that matched the (possibly prefix) filter.
    pub matched: BTreeSet<String>,
    /// Actor: the workers that hosted it. Task: the workers that ran it.
    pub workers: HashSet<Id>,
    /// Task: its name (from structured logging or export events).
    pub task_names: BTreeSet<String>,
    /// Per worker, per task name: the task ids tagged records showed running there.
    tasks_by_name: HashMap<Id, HashMap<String, HashSet<Id>>>,
}

/// Whether a record comes from the worker process's own files (not a driver's).
fn own_worker_file(r: &Record<'_>) -> bool {
    r.file.worker_id.is_some()
        && r.ids.worker_id == r.file.worker_id
        && matches!(r.component(), "worker" | "core_worker")
}

impl Knowledge {
    /// Learns from one record (called for every record, selected or not).
    pub fn observe(&mut self, target: &Target, r: &Record<'_>) {
        let named = target.names(r.ids);
        if named {
            if let Some(id) = target.kind.id_of(r.ids) {
                if !self.matched.contains(id.as_str()) {
                    self.matched.insert(id.as_str().to_string());
                }
            }
        }
        match target.kind {
            Kind::Actor if named => self.learn_actor_worker(r),
            Kind::Task => self.learn_task(named, r),
            _ => {}
        }
    }

    fn learn_actor_worker(&mut self, r: &Record<'_>) {
        let hosting = matches!(r.component(), "gcs_server" | "raylet") && HOSTING.iter().any(|p| r.message.contains(p));
        if own_worker_file(r) || hosting {
            // C++ JSON lines keep GCS's prose, whose worker id the parser may not place.
            let w = r
                .ids
                .worker_id
                .or_else(|| hosting.then(|| super::facts::worker_in_text(r.component(), r.message)).flatten());
            if let Some(w) = w {
                self.workers.insert(w);
            }
        }
    }

    fn learn_task(&mut self, named: bool, r: &Record<'_>) {
        if let (Some(w), Some(t), Some(name)) = (r.ids.worker_id, r.ids.task_id, r.task_name) {
            if r.component() == "worker" {
                let names = self.tasks_by_name.entry(w).or_default();
                match names.get_mut(name) {
                    Some(ids) => {
                        ids.insert(t);
                    }
                    None => {
                        names.insert(name.to_string(), HashSet::from([t]));
                    }
                }
            }
        }
        if !named {
            return;
        }
        if let Some(w) = r.ids.worker_id {
            if own_worker_file(r) || r.component() == "export_event" {
                self.workers.insert(w);
            }
        }
        let name = r.task_name.map(str::to_string).or_else(|| {
            (r.component() == "export_event")
                .then(|| super::facts::export_word(r.message, "func_or_class_name"))
                .flatten()
        });
        if let Some(n) = name {
            self.task_names.insert(n);
        }
    }

    /// Whether `r` belongs to the trace.
    pub fn selects(&self, target: &Target, r: &Record<'_>) -> bool {
        if target.names(r.ids) {
            return true;
        }
        let Some(w) = r.ids.worker_id else {
            // A line the parser left without a worker id may still name one in prose.
            return target.kind == Kind::Worker
                && target.id.matches(super::facts::worker_in_text(r.component(), r.message));
        };
        match target.kind {
            Kind::Actor => r.ids.actor_id.is_none() && self.workers.contains(&w),
            Kind::Task => {
                r.component() == "worker"
                    && r.ids.task_id.is_none()
                    && self.workers.contains(&w)
                    && r.task_name.is_some_and(|n| self.task_names.contains(n) && self.name_is_ours(target, &w, n))
            }
            Kind::Job | Kind::Worker => false,
        }
    }

    /// True when no other task of this name left tagged records on worker `w`.
    fn name_is_ours(&self, target: &Target, w: &Id, name: &str) -> bool {
        self.tasks_by_name
            .get(w)
            .and_then(|names| names.get(name))
            .is_none_or(|ids| ids.iter().all(|t| target.id.matches(Some(*t))))
    }
}
