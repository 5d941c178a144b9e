//! The summary of a task trace: its attempts, the worker that ran each, and the
//! exception.
//!
//! Attempts are numbered where Ray numbers them (export events' `attempt_number`,
//! structured logging's `attempt=`); otherwise each worker that ran the task is one
//! attempt, and the driver's `Attempting to resubmit task` lines count retries whose
//! worker left no trace. The exception is every traceback the task's records hold,
//! and the `error_info` of export events, in full.

use std::collections::BTreeMap;

use raylog_parsers::{Id, Level, Timestamp};

use super::entry::Entry;
use super::facts::{attempt_in_text, crash_signal, json_path};
use super::life::{life_of, Life};
use super::select::Knowledge;

/// One attempt to run the task.
#[derive(Clone, Debug, Default)]
pub struct Attempt {
    pub number: Option<u32>,
    /// The worker that ran it (empty when no record names one).
    pub life: Life,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
}

/// An exception or crash the task's records show.
#[derive(Clone, Debug)]
pub struct Exception {
    pub time: Option<Timestamp>,
    pub level: Option<Level>,
    pub worker_id: Option<Id>,
    pub file: String,
    pub error_type: Option<String>,
    pub message: String,
    /// Ray's own record of the task's error (export event `error_info`).
    pub from_export: bool,
}

/// A task's story.
#[derive(Clone, Debug, Default)]
pub struct TaskSummary {
    pub task_id: String,
    pub name: Option<String>,
    pub job_id: Option<Id>,
    pub actor_id: Option<Id>,
    pub attempts: Vec<Attempt>,
    /// At least the attempts listed; more when the driver says it resubmitted.
    pub attempt_count: usize,
    pub resubmissions: usize,
    pub exceptions: Vec<Exception>,
    /// Index into `exceptions` of the one that describes the task best: the error
    /// Ray recorded for it (export events), else the last ERROR/FATAL traceback,
    /// else the last traceback (a thread's, say).
    pub main_exception: Option<usize>,
}

/// `error_info` of an export task event, wherever the version put it.
fn error_info(e: &Entry) -> Option<(Option<String>, String)> {
    let data = e.event_data.as_deref()?;
    for base in [&["error_info"][..], &["state_updates", "error_info"][..]] {
        let path = |leaf| [base, &[leaf][..]].concat();
        if let Some(msg) = json_path(data, &path("error_message")) {
            return Some((json_path(data, &path("error_type")), msg));
        }
    }
    None
}

fn is_exception(msg: &str) -> bool {
    msg.contains("Traceback (most recent call last)")
        || msg.starts_with("Fatal Python error")
        || crash_signal(msg).is_some()
}

/// The worker an attempt's records name as running it (not the driver that submitted it).
fn runner(es: &[&Entry]) -> Option<Id> {
    es.iter()
        .filter(|e| e.in_worker_file() || e.component() == "export_event")
        .find_map(|e| e.ids.worker_id.filter(|w| w.job_of_driver_worker().is_none()))
}

fn attempt_of(number: Option<u32>, es: &[&Entry], own: &[&Entry]) -> Attempt {
    let mut life = match runner(es) {
        Some(w) => {
            let of_w: Vec<&Entry> = own.iter().copied().filter(|e| e.ids.worker_id == Some(w)).collect();
            life_of(w, &of_w)
        }
        None => Life::default(),
    };
    if number.is_some() {
        // Several numbered attempts may share a worker: their own records bound them.
        life.start = es.iter().filter_map(|e| e.timestamp).min().or(life.start);
        life.end = es.iter().filter_map(|e| e.timestamp).max().or(life.end);
    }
    let error = es.iter().rev().find_map(|e| error_info(e));
    Attempt {
        number,
        life,
        error_type: error.as_ref().and_then(|(t, _)| t.clone()),
        error_message: error.map(|(_, m)| m),
    }
}

fn attempts(own: &[&Entry], k: &Knowledge) -> Vec<Attempt> {
    let mut numbered: BTreeMap<u32, Vec<&Entry>> = BTreeMap::new();
    for e in own.iter().filter(|e| e.component() == "export_event" || e.in_worker_file()) {
        if let Some(n) = attempt_in_text(&e.message) {
            numbered.entry(n).or_default().push(e);
        }
    }
    if !numbered.is_empty() {
        return numbered.iter().map(|(n, es)| attempt_of(Some(*n), es, own)).collect();
    }
    let mut workers: Vec<&Id> = k.workers.iter().filter(|w| w.job_of_driver_worker().is_none()).collect();
    workers.sort_by_key(|w| w.as_str().to_string());
    let mut v: Vec<Attempt> = workers
        .into_iter()
        .map(|w| {
            let es: Vec<&Entry> = own.iter().copied().filter(|e| e.ids.worker_id == Some(*w)).collect();
            attempt_of(None, &es, own)
        })
        .collect();
    v.sort_by_key(|a| a.life.start);
    v
}

/// Builds the summary of task `id` from its records (sorted by time).
pub fn task_summary(id: &str, own: &[&Entry], k: &Knowledge) -> TaskSummary {
    let tid = Id::parse(id.as_bytes());
    let attempts = attempts(own, k);
    let resubmissions = own
        .iter()
        .filter(|e| e.component() == "core_driver" && e.message.starts_with("Attempting to resubmit task"))
        .count();
    let mut exceptions: Vec<Exception> = own
        .iter()
        .filter(|e| is_exception(&e.message))
        .map(|e| Exception {
            time: e.timestamp,
            level: e.level,
            worker_id: e.ids.worker_id,
            file: e.file().to_string(),
            error_type: None,
            message: e.message.clone(),
            from_export: false,
        })
        .collect();
    for e in own.iter().filter(|e| e.component() == "export_event") {
        let Some((error_type, message)) = error_info(e) else { continue };
        if !exceptions.iter().any(|x| x.message == message) {
            let worker_id = e.ids.worker_id;
            exceptions.push(Exception {
                time: e.timestamp,
                level: None,
                worker_id,
                file: e.file().to_string(),
                error_type,
                message,
                from_export: true,
            });
        }
    }
    exceptions.sort_by_key(|x| x.time);
    let last = |f: &dyn Fn(&Exception) -> bool| exceptions.iter().rposition(f);
    let main_exception = last(&|x| x.from_export)
        .or_else(|| last(&|x| x.level.is_some_and(|l| l >= Level::Error)))
        .or_else(|| exceptions.len().checked_sub(1));
    TaskSummary {
        task_id: id.to_string(),
        name: k.task_names.iter().next().cloned().or_else(|| own.iter().find_map(|e| e.task_name.clone())),
        job_id: tid.and_then(|t| t.job_of_actor_or_task()),
        actor_id: tid.and_then(|t| t.actor_of_task()),
        attempt_count: if resubmissions > 0 { attempts.len().max(resubmissions + 1) } else { attempts.len() },
        attempts,
        resubmissions,
        exceptions,
        main_exception,
    }
}
