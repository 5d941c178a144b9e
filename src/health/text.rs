//! Text: the report for a person at a terminal, most urgent first.
//!
//! Every section is printed, empty ones as `none`, so "no OOM kills" is a finding
//! rather than a missing line. Worker and node ids are cut to 12 characters (enough
//! for `raylog trace --worker-id`); actor and task ids stay whole.

use std::fmt::Write;

use super::latency::HandlerRow;
use super::report::Report;

fn short_id(id: &Option<String>) -> String {
    id.as_deref().map_or_else(|| "?".to_string(), |s| s.chars().take(12).collect())
}

fn t(time: &Option<String>) -> &str {
    time.as_deref().unwrap_or("(no time)")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The whole report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    worker_deaths(&mut s, r);
    oom(&mut s, r);
    actors(&mut s, r);
    nodes(&mut s, r);
    gcs(&mut s, r);
    tasks(&mut s, r);
    drivers(&mut s, r);
    spilling(&mut s, r);
    latency(&mut s, r);
    errors(&mut s, r);
    s
}

fn worker_deaths(s: &mut String, r: &Report) {
    let w = &r.worker_deaths;
    let _ = writeln!(s, "Worker deaths: {}", if w.total == 0 { "none".into() } else { w.total.to_string() });
    for g in &w.by_exit_type {
        let _ = writeln!(s, "  {} ×{}", g.exit_type, g.count);
        for d in &g.workers {
            let pid = d.pid.map_or_else(|| "?".into(), |p| p.to_string());
            let actor = d.actor_id.as_deref().map(|a| format!("  actor {a}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "    {}  worker {}  pid {pid}  node {}{actor}",
                t(&d.time),
                short_id(&d.worker_id),
                short_id(&d.node_id)
            );
            if let Some(detail) = &d.detail {
                let _ = writeln!(s, "      {detail}");
            }
        }
    }
}

fn oom(s: &mut String, r: &Report) {
    let o = &r.oom_kills;
    let _ = writeln!(s, "OOM kills: {}", if o.total == 0 { "none".into() } else { o.total.to_string() });
    for k in &o.kills {
        let _ = writeln!(
            s,
            "  {}  node {}  {}  {}",
            t(&k.time),
            short_id(&k.node_id),
            plural(k.workers as usize, "worker", "workers"),
            k.detail
        );
    }
}

fn actors(s: &mut String, r: &Report) {
    let a = &r.actor_failures;
    if a.failures == 0 {
        let _ = writeln!(s, "Actor failures: none");
        return;
    }
    let _ = writeln!(s, "Actor failures: {} ({})", a.failures, plural(a.restarts, "restart", "restarts"));
    for actor in &a.actors {
        let class = actor.class.as_deref().unwrap_or("?");
        let name = actor.name.as_deref().map(|n| format!(" \"{n}\"")).unwrap_or_default();
        let job = actor.job_id.as_deref().unwrap_or("?");
        let _ = writeln!(
            s,
            "  {}  {class}{name}  job {job}  {}, {}",
            actor.actor_id,
            plural(actor.failures, "failure", "failures"),
            plural(actor.restarts, "restart", "restarts")
        );
        for e in &actor.events {
            let pid = e.pid.map_or_else(|| "?".into(), |p| p.to_string());
            let exit = e.exit_type.as_deref().unwrap_or("?");
            let then = if e.restarted { "restarted" } else { "not restarted" };
            let _ = writeln!(
                s,
                "    {}  worker {}  pid {pid}  node {}  {exit}  {then}",
                t(&e.time),
                short_id(&e.worker_id),
                short_id(&e.node_id)
            );
        }
    }
}

fn nodes(s: &mut String, r: &Report) {
    let n = &r.node_deaths;
    if n.total == 0 {
        let _ = writeln!(s, "Node deaths: none");
        return;
    }
    let _ = writeln!(s, "Node deaths: {} ({} unexpected)", n.total, n.unexpected);
    for d in &n.nodes {
        let reason = d.reason.as_deref().unwrap_or("reason not logged by this Ray version");
        let msg = d.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        let _ = writeln!(s, "  {}  node {}  {reason}{msg}", t(&d.time), short_id(&d.node_id));
    }
}

fn gcs(s: &mut String, r: &Report) {
    let g = &r.gcs_health;
    if g.total == 0 {
        let _ = writeln!(s, "GCS health: no failed health checks, GCS reachable");
        return;
    }
    let kinds: Vec<String> = g.by_kind.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
    let _ = writeln!(s, "GCS health: {} ({})", g.total, kinds.join(", "));
    for e in &g.events {
        let _ = writeln!(s, "  {}  {}  node {}  {}", t(&e.time), e.kind, short_id(&e.node_id), e.detail);
    }
}

fn tasks(s: &mut String, r: &Report) {
    let f = &r.task_failures;
    let _ = writeln!(s, "Task failures: {}", if f.total == 0 { "none".into() } else { f.total.to_string() });
    for g in &f.by_exception {
        let _ = writeln!(s, "  {} ×{}", g.exception, g.count);
        for task in &g.tasks {
            let name = task.name.as_deref().map(|n| format!("  {n}")).unwrap_or_default();
            let attempt = task.attempt.map(|a| format!("  attempt {a}")).unwrap_or_default();
            let id = task.task_id.as_deref().unwrap_or("?");
            let _ = writeln!(s, "    {}  task {id}{name}{attempt}", t(&task.time));
        }
    }
}

fn drivers(s: &mut String, r: &Report) {
    if r.driver_failures.is_empty() {
        return;
    }
    let _ = writeln!(s, "Failed jobs: {}", r.driver_failures.len());
    for d in &r.driver_failures {
        let _ = writeln!(s, "  {}  {}  {}", t(&d.time), d.submission_id, d.outcome);
    }
}

fn errors(s: &mut String, r: &Report) {
    if r.top_errors.is_empty() {
        let _ = writeln!(s, "ERROR messages: none");
        return;
    }
    let _ = writeln!(s, "Top ERROR messages ({} records; count, components, template):", r.error_records);
    for e in &r.top_errors {
        let comps: Vec<String> = e.components.iter().map(|(c, n)| format!("{c}:{n}")).collect();
        let _ = writeln!(s, "  {:>5}  {}  {}", e.count, comps.join(","), e.template);
    }
}

fn spilling(s: &mut String, r: &Report) {
    let sp = &r.object_spilling;
    if sp.events > 0 {
        let _ = writeln!(s, "Object spilling: {} spills, {:.0} MiB, {} objects", sp.events, sp.mib, sp.objects);
    }
}

/// Seconds as the unit Ray would print them in.
fn dur(v: f64) -> String {
    match v {
        v if v >= 1.0 => format!("{v:.2}s"),
        v if v >= 1e-3 => format!("{:.2}ms", v * 1e3),
        v => format!("{:.0}us", v * 1e6),
    }
}

fn latency(s: &mut String, r: &Report) {
    let l = &r.latency;
    if !l.processes.is_empty() {
        let _ = writeln!(s, "GCS and raylet latency (Ray's Event stats: blocks):");
    }
    // Each process's main io_context in full; its others in one line, by lag.
    for p in l.processes.iter().filter(|p| p.io_context == "Main service") {
        let pid = p.pid.map_or(String::new(), |p| format!(" pid {p}"));
        let rate = p.calls_per_second.map_or(String::new(), |c| format!(", {c:.1} calls/s"));
        let lag = p
            .lag
            .as_ref()
            .map_or(String::new(), |g| format!(", lag {} -> {} (max {})", dur(g.first_s), dur(g.last_s), dur(g.max_s)));
        let blocks = plural(p.blocks, "block", "blocks");
        let _ = writeln!(s, "  {}{pid}: {blocks} from {} to {}{rate}{lag}", p.component, t(&p.first), t(&p.last));
        for (what, rows, mean) in [
            ("execution", &p.slowest_by_execution, (|h| h.execution_mean_s) as fn(&HandlerRow) -> Option<f64>),
            ("queueing", &p.slowest_by_queueing, |h| h.queueing_mean_s),
        ] {
            let list: Vec<String> = rows
                .iter()
                .take(3)
                .map(|h| format!("{} {} ({})", h.handler, dur(mean(h).unwrap_or(0.0)), h.calls))
                .collect();
            if !list.is_empty() {
                let _ = writeln!(s, "    slowest by mean {what}: {}", list.join(", "));
            }
        }
        let others: Vec<String> = l
            .processes
            .iter()
            .filter(|o| o.component == p.component && o.pid == p.pid && o.io_context != "Main service")
            .filter_map(|o| Some(format!("{} {}", o.io_context, dur(o.lag.as_ref()?.max_s))))
            .collect();
        if !others.is_empty() {
            let _ = writeln!(s, "    other io_contexts, lag max: {}", others.join(", "));
        }
    }
    if !l.nodes_alive.is_empty() {
        let steps: Vec<String> = l.nodes_alive.iter().map(|n| format!("{} at {}", n.alive, t(&n.time))).collect();
        let _ = writeln!(s, "Live nodes: {}", steps.join(", then "));
    }
}
