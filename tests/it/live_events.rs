//! The live test's Ray events (`[events]`): Ray 2.60 exports to the agent, which
//! forwards every post to a capture server standing in for KubeRay's history server.
//! Checked: the workload's tasks and actors arrive as `ray_event` records with the
//! ids the workload read from Ray, each Phoenix with both incarnations' workers,
//! and the forward target got exactly the posts the agent accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::live_check::Row;

/// The env that makes Ray 2.60 export its events to `port`.
pub fn ray_env(port: u16) -> [(&'static str, String); 4] {
    [
        ("RAY_enable_ray_event", "1".into()),
        ("RAY_enable_core_worker_ray_event_to_aggregator", "1".into()),
        ("RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR", format!("http://127.0.0.1:{port}")),
        ("RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES", "ALL".into()),
    ]
}

/// A forward target on port 0 keeping every body it is posted.
pub struct Capture {
    pub url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Capture {
    pub async fn start() -> Capture {
        let bodies = Arc::new(Mutex::new(vec![]));
        let b = bodies.clone();
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(move |body: axum::body::Bytes| {
                let b = b.clone();
                async move {
                    b.lock().unwrap().push(body.to_vec());
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Capture { url, bodies }
    }

    /// Event ids of every forwarded post, in order.
    pub fn event_ids(&self) -> Vec<String> {
        let mut v = vec![];
        for b in self.bodies.lock().unwrap().iter() {
            let events: Vec<Value> = serde_json::from_slice(b).unwrap_or_default();
            v.extend(events.iter().map(|e| e["eventId"].as_str().unwrap_or("").to_string()));
        }
        v
    }

    /// Every event of every forwarded post, in order.
    pub fn events(&self) -> Vec<Value> {
        let mut v = vec![];
        for b in self.bodies.lock().unwrap().iter() {
            v.extend(serde_json::from_slice::<Vec<Value>>(b).unwrap_or_default());
        }
        v
    }

    pub fn posts(&self) -> usize {
        self.bodies.lock().unwrap().len()
    }
}

fn s<'a>(d: &'a Value, k: &str) -> Option<&'a str> {
    d[k].as_str()
}

/// The checks on the `ray_event` documents Elasticsearch received.
pub fn check(events: &[&Value], rows: &[Row], forwarded: &Capture, metrics: &str, failures: &mut Vec<String>) {
    let mut fail = |m: String| failures.push(format!("events: {m}"));
    if events.is_empty() {
        fail("no ray_event record arrived".into());
        return;
    }
    fn of_type<'e>(events: &'e [&'e Value], t: &'static str) -> impl Iterator<Item = &'e &'e Value> {
        events.iter().filter(move |d| d["fields"]["event_type"] == t)
    }
    // Actors: every actor the workload made, defined and alive, by the same id.
    let actors: BTreeSet<&str> = rows.iter().filter_map(|r| r.actor_id.as_deref()).collect();
    for a in &actors {
        if !of_type(events, "ACTOR_DEFINITION_EVENT").any(|d| s(d, "actor_id") == Some(a)) {
            fail(format!("actor {a}: no ACTOR_DEFINITION_EVENT"));
        }
        // Each Phoenix restarted once: the first and the last worker it printed from.
        let mut workers: Vec<&str> =
            rows.iter().filter(|r| r.actor_id.as_deref() == Some(a)).filter_map(|r| r.worker_id.as_deref()).collect();
        workers.dedup();
        // One event may carry several transitions (ALIVE → RESTARTING → ALIVE): every
        // worker it went ALIVE on is in `fields.workers`.
        let alive: BTreeSet<&str> = of_type(events, "ACTOR_LIFECYCLE_EVENT")
            .filter(|d| s(d, "actor_id") == Some(a))
            .flat_map(|d| d["fields"]["workers"].as_str().unwrap_or("").split(','))
            .filter(|w| !w.is_empty())
            .collect();
        let (first, last) = (workers.first(), workers.last());
        if first == last || !first.is_some_and(|w| alive.contains(w)) || !last.is_some_and(|w| alive.contains(w)) {
            fail(format!(
                "actor {a}: its incarnations' workers {workers:?} are not both in its lifecycle events {alive:?}"
            ));
        }
    }
    // Tasks: every task (and actor method) the workload ran, by the same id, job and
    // worker. (Task ids repeat across sessions: the second session's job is 01000000
    // again, so a task is its id and the worker that ran it.)
    let tasks: BTreeMap<(&str, Option<&str>), &Row> =
        rows.iter().filter_map(|r| Some(((r.task_id.as_deref()?, r.worker_id.as_deref()), r))).collect();
    for ((t, worker), row) in &tasks {
        let found: Vec<&&Value> = events.iter().filter(|d| s(d, "task_id") == Some(t)).collect();
        if found.is_empty() {
            fail(format!("task {t} ({}): no event", row.tok));
        } else if !found.iter().all(|d| s(d, "job_id") == row.job_id.as_deref()) {
            fail(format!("task {t}: events with another job than {:?}", row.job_id));
        } else if !found.iter().any(|d| s(d, "worker_id") == *worker) {
            fail(format!("task {t} ({}): no event names the worker Ray said ran it, {worker:?}", row.tok));
        }
    }
    // The forward target got every accepted post, and the sinks every event in them.
    let accepted = super::live::metric(metrics, "raylog_events_accepted_total");
    let fwd = forwarded.event_ids();
    let fwd_set: BTreeSet<&str> = fwd.iter().map(String::as_str).collect();
    let shipped: BTreeSet<&str> = events.iter().filter_map(|d| d["fields"]["event_id"].as_str()).collect();
    if accepted != Some(fwd.len() as u64) {
        fail(format!("/metrics says {accepted:?} events accepted, the forward target got {}", fwd.len()));
    }
    if fwd_set != shipped {
        fail(format!(
            "forwarded and shipped events differ: {} forwarded, {} shipped, {} only forwarded, {} only shipped",
            fwd_set.len(),
            shipped.len(),
            fwd_set.difference(&shipped).count(),
            shipped.difference(&fwd_set).count()
        ));
    }
    println!(
        "live: {} Ray events in {} posts forwarded; {} ray_event records; {} actors, {} tasks matched",
        fwd.len(),
        forwarded.posts(),
        events.len(),
        actors.len(),
        tasks.len()
    );
}
