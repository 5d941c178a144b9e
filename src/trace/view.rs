//! `--format json`: one document, `{"summary": {...}, "records": [...]}`.
//!
//! Records are the NDJSON record objects of `raylog parse` (one per line inside the
//! array), plus `"context": true` on `--context` records. Absent summary members
//! are left out, as in records.
//!
//! Summary members, after `kind` (`actor`, `task`, `job`, `worker`):
//! - actor: `actor_id`, `class`, `name`, `job_id`, `state`, `restarts`,
//!   `death_cause`, `death_reason`, `incarnations` (each a worker life: `worker_id`,
//!   `node_id`, `pid`, `start`, `end`, `exit_type`, `exit_detail`, `signal`,
//!   `death_context`);
//! - task: `task_id`, `name`, `job_id`, `actor_id`, `attempt_count`,
//!   `resubmissions`, `attempts` (`attempt` number when Ray numbers them, the
//!   worker life, `error_type`, `error_message`), `exception` (`time`, `level`,
//!   `worker_id`, `file`, `error_type`, `message` in full), `exception_count`;
//! - job: `job_id`, `drivers` (`pid`, `worker_id`, `node_id`, `submission_id`,
//!   `files`, `records`), `worker_count`, `actor_count`, `task_count`, `workers`,
//!   `actors`;
//! - worker: the worker life plus `job_id`, `actor_id`, `actor_class`, `driver`,
//!   `tasks` (name → count);
//! - all: `records`, `context_records`, `errors` (ERROR/FATAL), `first`, `last`,
//!   `nodes`.

use super::entry::Entry;
use super::json::{Obj, J};
use super::life::Life;
use super::summary::{ActorSummary, Detail, JobSummary, Summary, WorkerSummary};
use super::task::TaskSummary;

fn n(v: usize) -> J {
    J::Num(v as u64)
}

/// Adds a worker life's members to `o`.
fn life_members(o: &mut Obj, l: &Life) {
    o.id("worker_id", l.worker_id)
        .id("node_id", l.node_id)
        .num("pid", l.pid.map(u64::from))
        .time("start", l.start)
        .time("end", l.end)
        .str("exit_type", l.exit_type.as_deref())
        .str("exit_detail", l.exit_detail.as_deref())
        .str("signal", l.signal.as_deref())
        .str("death_context", l.death_context.as_deref());
}

fn life_json(l: &Life) -> J {
    let mut o = Obj::new();
    life_members(&mut o, l);
    o.done()
}

fn actor_json(o: &mut Obj, a: &ActorSummary) {
    o.str("actor_id", Some(&a.actor_id))
        .str("class", a.class.as_deref())
        .str("name", a.name.as_deref())
        .id("job_id", a.job_id)
        .str("state", a.state.as_deref())
        .set("restarts", n(a.restarts))
        .str("death_cause", a.death_cause.as_deref())
        .str("death_reason", a.death_reason.as_deref())
        .set("incarnations", J::Arr(a.incarnations.iter().map(life_json).collect()));
}

fn task_json(o: &mut Obj, t: &TaskSummary) {
    let attempts = t.attempts.iter().map(|a| {
        let mut o = Obj::new();
        o.num("attempt", a.number.map(u64::from));
        life_members(&mut o, &a.life);
        o.str("error_type", a.error_type.as_deref()).str("error_message", a.error_message.as_deref()).done()
    });
    let exception = t.main_exception.and_then(|i| t.exceptions.get(i)).map(|x| {
        Obj::new()
            .time("time", x.time)
            .str("level", x.level.map(|l| l.as_str()))
            .id("worker_id", x.worker_id)
            .str("file", Some(&x.file))
            .str("error_type", x.error_type.as_deref())
            .str("message", Some(&x.message))
            .done()
    });
    o.str("task_id", Some(&t.task_id))
        .str("name", t.name.as_deref())
        .id("job_id", t.job_id)
        .id("actor_id", t.actor_id)
        .set("attempt_count", n(t.attempt_count))
        .set("resubmissions", n(t.resubmissions))
        .set("attempts", J::Arr(attempts.collect()))
        .opt("exception", exception)
        .set("exception_count", n(t.exceptions.len()));
}

fn job_json(o: &mut Obj, j: &JobSummary) {
    let drivers = j.drivers.iter().map(|d| {
        Obj::new()
            .num("pid", d.pid.map(u64::from))
            .id("worker_id", d.worker_id)
            .id("node_id", d.node_id)
            .str("submission_id", d.submission_id.as_deref())
            .set("files", J::Arr(d.files.iter().map(|f| J::Str(f.clone())).collect()))
            .set("records", n(d.records))
            .done()
    });
    let workers = j.workers.iter().map(|l| {
        Obj::new()
            .id("worker_id", l.worker_id)
            .id("node_id", l.node_id)
            .num("pid", l.pid.map(u64::from))
            .id("actor_id", l.actor_id)
            .str("exit_type", l.exit_type.as_deref())
            .set("records", n(l.records))
            .done()
    });
    let actors = j.actors.iter().map(|a| {
        Obj::new()
            .id("actor_id", a.actor_id)
            .str("class", a.class.as_deref())
            .set("workers", n(a.workers.len()))
            .set("records", n(a.records))
            .done()
    });
    o.str("job_id", Some(&j.job_id))
        .set("drivers", J::Arr(drivers.collect()))
        .set("worker_count", n(j.workers.len()))
        .set("actor_count", n(j.actors.len()))
        .set("task_count", n(j.tasks))
        .set("workers", J::Arr(workers.collect()))
        .set("actors", J::Arr(actors.collect()));
}

fn worker_json(o: &mut Obj, w: &WorkerSummary) {
    let l = &w.life;
    o.id("worker_id", l.worker_id)
        .id("node_id", l.node_id)
        .num("pid", l.pid.map(u64::from))
        .id("job_id", l.job_id)
        .id("actor_id", l.actor_id)
        .str("actor_class", l.actor_class.as_deref())
        .set("driver", J::Bool(l.driver))
        .time("start", l.start)
        .time("end", l.end)
        .str("exit_type", l.exit_type.as_deref())
        .str("exit_detail", l.exit_detail.as_deref())
        .str("signal", l.signal.as_deref())
        .str("death_context", l.death_context.as_deref());
    let mut tasks = Obj::new();
    for (name, count) in &w.tasks {
        tasks.set(name, n(*count));
    }
    o.set("tasks", tasks.done());
}

/// The summary as a JSON value.
pub fn summary_json(s: &Summary) -> J {
    let mut o = Obj::new();
    o.str("kind", Some(s.kind.noun()));
    match &s.detail {
        Detail::Actor(a) => actor_json(&mut o, a),
        Detail::Task(t) => task_json(&mut o, t),
        Detail::Job(j) => job_json(&mut o, j),
        Detail::Worker(w) => worker_json(&mut o, w),
    }
    let c = &s.common;
    o.set("records", n(c.records))
        .set("context_records", n(c.context_records))
        .set("errors", n(c.errors))
        .time("first", c.first)
        .time("last", c.last)
        .set("nodes", J::Arr(c.nodes.iter().map(|x| J::Str(x.as_str().to_string())).collect()));
    o.done()
}

/// Record `i` of the `records` array, with the separator before it.
pub fn write_record(out: &mut String, i: usize, e: &Entry) {
    out.push_str(if i == 0 { "\n    " } else { ",\n    " });
    e.write_json(out);
}

/// The document up to its first record: the summary and the opening of `records`.
pub fn document_head(s: &Summary) -> String {
    let mut out = String::from("{\n  \"summary\": ");
    summary_json(s).write_pretty(&mut out, 1);
    out.push_str(",\n  \"records\": [");
    out
}

/// The document after its last record: the whole `--format json` document is
/// [`document_head`], a [`write_record`] per entry, then this (with a final newline).
pub fn document_tail(no_records: bool) -> &'static str {
    if no_records {
        "]\n}\n"
    } else {
        "\n  ]\n}\n"
    }
}
