//! Ray health counters: what the records the agent reads say about the cluster,
//! counted at read time (issue #14, part 3), so they need no sink.
//!
//! The reader thread owns a [`RayCounter`] and counts every record once, when the
//! [`crate::agent::enrich::Router`] receives it from the parser (before the hold and
//! the batch, so a held record is not counted again when it is released). The
//! counts live in [`RayMetrics`], a stage of the shared [`crate::agent::metrics::Metrics`]:
//! fixed-size tables of atomics, indexed by small ids the reader interns, so the hot
//! path neither locks nor allocates. A label value gets its slot the first time it
//! is seen and keeps it for the life of the process; the slot's name is published
//! through a `OnceLock`, which `/metrics` reads without a lock.
//!
//! Label sets are bounded, never per id:
//! - `node` is the agent's node name (`node.name`, the Loki `node` label);
//! - `component`: the first [`COMPONENTS`] distinct components keep their name,
//!   later ones count as `other`; `level` is one of Ray's six levels, or empty for a
//!   record without one (as in Loki);
//! - `exit_type`: the first [`EXIT_TYPES`] distinct exit types, then `other`;
//! - `exception`: the first [`EXCEPTIONS`] distinct exception types, then `other`.
//!
//! Which events count is [`Event::counts_once`], so these counters agree with
//! `raylog health` on the same logs. Counters restart from zero with the process:
//! records re-read from a checkpoint after a restart are counted again.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use raylog_parsers::{Level, Record};

use crate::agent::metrics::{escape, Counters, Metrics};
use crate::agent::ray_latency::RayLatency;
use crate::health::{detect, Event};

/// Distinct `component` label values; the rest are `other`.
pub const COMPONENTS: usize = 48;
/// Distinct `exit_type` label values; the rest are `other`.
pub const EXIT_TYPES: usize = 16;
/// Distinct `exception` label values; the rest are `other`.
pub const EXCEPTIONS: usize = 50;
/// The `level` values: Ray's six, and none.
const LEVELS: [&str; 7] = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL", ""];

fn level_index(l: Option<Level>) -> usize {
    match l {
        Some(Level::Trace) => 0,
        Some(Level::Debug) => 1,
        Some(Level::Info) => 2,
        Some(Level::Warning) => 3,
        Some(Level::Error) => 4,
        Some(Level::Fatal) => 5,
        None => 6,
    }
}

/// Counters by one bounded label: slot `cap` is `other`.
#[derive(Debug)]
pub struct Labelled {
    names: Vec<OnceLock<Box<str>>>,
    counts: Vec<AtomicU64>,
}

impl Labelled {
    /// `cap` named values, `per` counters each.
    fn new(cap: usize, per: usize) -> Labelled {
        Labelled {
            names: (0..cap).map(|_| OnceLock::new()).collect(),
            counts: (0..(cap + 1) * per).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn cap(&self) -> usize {
        self.names.len()
    }

    /// The label value of slot `i`.
    fn name(&self, i: usize) -> Option<&str> {
        match self.names.get(i) {
            Some(n) => n.get().map(|n| &**n),
            None => Some("other"),
        }
    }
}

/// Every Ray health counter, shared with the `/metrics` handler.
#[derive(Debug)]
pub struct RayMetrics {
    node: OnceLock<Box<str>>,
    /// By component slot × level.
    records: Labelled,
    worker_deaths: Labelled,
    task_failures: Labelled,
    oom_kills: AtomicU64,
    actor_failures: AtomicU64,
    actor_restarts: AtomicU64,
    node_deaths: AtomicU64,
    gcs_health_failures: AtomicU64,
}

impl Default for RayMetrics {
    fn default() -> RayMetrics {
        RayMetrics {
            node: OnceLock::new(),
            records: Labelled::new(COMPONENTS, LEVELS.len()),
            worker_deaths: Labelled::new(EXIT_TYPES, 1),
            task_failures: Labelled::new(EXCEPTIONS, 1),
            oom_kills: AtomicU64::new(0),
            actor_failures: AtomicU64::new(0),
            actor_restarts: AtomicU64::new(0),
            node_deaths: AtomicU64::new(0),
            gcs_health_failures: AtomicU64::new(0),
        }
    }
}

impl Counters for RayMetrics {
    /// Appends the Prometheus text exposition of the Ray health counters.
    fn render(&self, s: &mut String) {
        let node = escape(self.node.get().map_or("", |n| n));
        let head = |s: &mut String, name: &str, help: &str| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
        };
        let labelled = |s: &mut String, name: &str, label: &str, t: &Labelled| {
            for i in 0..=t.cap() {
                let (Some(v), n) = (t.name(i), t.counts[i].load(Relaxed)) else { continue };
                if n > 0 || i < t.cap() {
                    let _ = writeln!(s, "{name}{{node=\"{node}\",{label}=\"{}\"}} {n}", escape(v));
                }
            }
        };
        let n = "raylog_ray_worker_deaths_total";
        head(s, n, "Ray worker processes that died other than as intended, by exit type (the raylet's events).");
        labelled(s, n, "exit_type", &self.worker_deaths);
        let n = "raylog_ray_oom_kills_total";
        head(s, n, "Workers killed by the raylet's memory monitor.");
        let _ = writeln!(s, "{n}{{node=\"{node}\"}} {}", self.oom_kills.load(Relaxed));
        let n = "raylog_ray_actor_failures_total";
        head(s, n, "Actor failures GCS handled (the actor's worker died unintended), restarted or not.");
        let _ = writeln!(s, "{n}{{node=\"{node}\"}} {}", self.actor_failures.load(Relaxed));
        let n = "raylog_ray_actor_restarts_total";
        head(s, n, "Actor failures after which GCS restarts the actor.");
        let _ = writeln!(s, "{n}{{node=\"{node}\"}} {}", self.actor_restarts.load(Relaxed));
        let n = "raylog_ray_node_deaths_total";
        head(s, n, "Nodes GCS removed from the cluster (head node's GCS log).");
        let _ = writeln!(s, "{n} {}", self.node_deaths.load(Relaxed));
        let n = "raylog_ray_gcs_health_failures_total";
        head(s, n, "GCS health problems: failed health checks, nodes declared dead, GCS unreachable.");
        let _ = writeln!(s, "{n} {}", self.gcs_health_failures.load(Relaxed));
        let n = "raylog_ray_task_failures_total";
        head(s, n, "Failed task attempts, by exception type (the first 50 seen; the rest are \"other\").");
        labelled(s, n, "exception", &self.task_failures);
        let n = "raylog_ray_records_total";
        head(s, n, "Records read, by component and level.");
        for c in 0..=self.records.cap() {
            let Some(comp) = self.records.name(c) else { continue };
            for (l, level) in LEVELS.iter().enumerate() {
                let v = self.records.counts[c * LEVELS.len() + l].load(Relaxed);
                if v > 0 {
                    let _ = writeln!(s, "{n}{{node=\"{node}\",component=\"{}\",level=\"{level}\"}} {v}", escape(comp));
                }
            }
        }
    }
}

/// Label values seen, each with its slot (reader-owned).
#[derive(Debug, Default)]
struct Interner {
    slots: HashMap<Box<str>, usize>,
}

impl Interner {
    /// The slot of `v` in `t`: its own among the first `cap` values, else `other`.
    /// Allocates only the first time a value gets a slot.
    fn slot(&mut self, v: &str, t: &Labelled) -> usize {
        if let Some(&i) = self.slots.get(v) {
            return i;
        }
        let i = self.slots.len();
        if i >= t.cap() {
            return t.cap();
        }
        let _ = t.names[i].set(v.into());
        self.slots.insert(v.into(), i);
        i
    }
}

/// The reader's side: interns label values and counts each record.
#[derive(Debug)]
pub struct RayCounter {
    ray: Arc<RayMetrics>,
    latency: Arc<RayLatency>,
    components: Interner,
    exit_types: Interner,
    exceptions: Interner,
}

impl RayCounter {
    /// Counts into `metrics`' [`RayMetrics`] and [`RayLatency`], labelled with the
    /// agent's `node` name.
    pub fn new(metrics: Arc<Metrics>, node: &str) -> RayCounter {
        let (ray, latency) = (metrics.stage::<RayMetrics>(), metrics.stage::<RayLatency>());
        let _ = ray.node.set(node.into());
        latency.set_node(node);
        RayCounter {
            ray,
            latency,
            components: Interner::default(),
            exit_types: Interner::default(),
            exceptions: Interner::default(),
        }
    }

    /// The slot of a file's component: looked up once per file read, not per record.
    pub fn component(&mut self, component: &str) -> usize {
        self.components.slot(component, &self.ray.records)
    }

    /// Counts record `r` of a file whose component has slot `comp`.
    pub fn count(&mut self, comp: usize, r: &Record<'_>) {
        let m = &self.ray;
        m.records.counts[comp * LEVELS.len() + level_index(r.level)].fetch_add(1, Relaxed);
        // Only a multi-line record can hold an `Event stats:` block.
        if r.lines > 1 {
            self.latency.observe(r);
        }
        match crate::health::latency::node_liveness(r) {
            Some((true, n)) => self.latency.node_registered(n),
            Some((false, n)) => self.latency.node_removed(Some(n)),
            None => {}
        }
        let Some(ev) = detect(r) else { return };
        if !ev.counts_once() {
            return;
        }
        match ev {
            Event::WorkerDeath(d) => {
                let i = self.exit_types.slot(d.exit_type, &m.worker_deaths);
                m.worker_deaths.counts[i].fetch_add(1, Relaxed);
            }
            Event::OomKill(k) => {
                m.oom_kills.fetch_add(u64::from(k.workers), Relaxed);
            }
            Event::ActorFailure(a) => {
                m.actor_failures.fetch_add(1, Relaxed);
                if a.restarts() {
                    m.actor_restarts.fetch_add(1, Relaxed);
                }
            }
            Event::NodeDeath(n) => {
                m.node_deaths.fetch_add(1, Relaxed);
                self.latency.node_removed(n.node_id);
            }
            Event::GcsHealth(_) => {
                m.gcs_health_failures.fetch_add(1, Relaxed);
            }
            Event::TaskFailure(f) => {
                let i = self.exceptions.slot(&f.exception, &m.task_failures);
                m.task_failures.counts[i].fetch_add(1, Relaxed);
            }
            Event::DriverExit(_) | Event::Spill(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> (RayCounter, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new(&[]));
        (RayCounter::new(metrics.clone(), "node-a"), metrics)
    }

    #[test]
    fn exceptions_past_the_first_50_are_other() {
        let (mut c, _metrics) = counter();
        let m = c.ray.clone();
        let t = &m.task_failures;
        for round in 0..2 {
            for e in 0..60 {
                let i = c.exceptions.slot(&format!("Error{e}"), t);
                t.counts[i].fetch_add(1, Relaxed);
                assert_eq!(i, e.min(EXCEPTIONS), "round {round}");
            }
        }
        let mut s = String::new();
        m.render(&mut s);
        let lines: Vec<&str> = s.lines().filter(|l| l.starts_with("raylog_ray_task_failures_total{")).collect();
        assert_eq!(lines.len(), 51, "{s}");
        assert!(s.contains("raylog_ray_task_failures_total{node=\"node-a\",exception=\"Error0\"} 2\n"), "{s}");
        assert!(s.contains("raylog_ray_task_failures_total{node=\"node-a\",exception=\"Error49\"} 2\n"), "{s}");
        assert!(s.contains("raylog_ray_task_failures_total{node=\"node-a\",exception=\"other\"} 20\n"), "{s}");
        assert!(!s.contains("Error50"), "{s}");
    }

    #[test]
    fn components_and_exit_types_are_capped() {
        let (mut c, _metrics) = counter();
        let m = c.ray.clone();
        let slots: Vec<usize> = (0..COMPONENTS + 5).map(|i| c.component(&format!("comp{i}"))).collect();
        assert_eq!(slots[COMPONENTS - 1], COMPONENTS - 1);
        assert!(slots[COMPONENTS..].iter().all(|&s| s == COMPONENTS));
        assert_eq!(c.component("comp3"), 3, "a value keeps its slot");
        for i in 0..EXIT_TYPES + 3 {
            assert_eq!(c.exit_types.slot(&format!("EXIT{i}"), &m.worker_deaths), i.min(EXIT_TYPES));
        }
        assert_eq!(c.exceptions.slots.len(), 0);
        assert_eq!(c.components.slots.len(), COMPONENTS, "no slot past the cap, so no allocation");
    }

    #[test]
    fn renders_the_exposition_format() {
        let (mut c, metrics) = counter();
        let m = c.ray.clone();
        let raylet = c.component("raylet");
        let other = (0..COMPONENTS + 1).map(|i| c.component(&format!("c{i}"))).last().unwrap();
        m.records.counts[raylet * LEVELS.len() + level_index(Some(Level::Error))].fetch_add(3, Relaxed);
        m.records.counts[raylet * LEVELS.len() + level_index(None)].fetch_add(1, Relaxed);
        m.records.counts[other * LEVELS.len() + level_index(Some(Level::Info))].fetch_add(2, Relaxed);
        let i = c.exit_types.slot("SYSTEM_ERROR", &m.worker_deaths);
        m.worker_deaths.counts[i].fetch_add(2, Relaxed);
        m.actor_restarts.fetch_add(1, Relaxed);
        let t = metrics.render();
        for want in [
            "# TYPE raylog_ray_worker_deaths_total counter\n",
            "raylog_ray_worker_deaths_total{node=\"node-a\",exit_type=\"SYSTEM_ERROR\"} 2\n",
            "raylog_ray_oom_kills_total{node=\"node-a\"} 0\n",
            "raylog_ray_actor_failures_total{node=\"node-a\"} 0\n",
            "raylog_ray_actor_restarts_total{node=\"node-a\"} 1\n",
            "raylog_ray_node_deaths_total 0\n",
            "raylog_ray_gcs_health_failures_total 0\n",
            "# TYPE raylog_ray_task_failures_total counter\n",
            "raylog_ray_records_total{node=\"node-a\",component=\"raylet\",level=\"ERROR\"} 3\n",
            "raylog_ray_records_total{node=\"node-a\",component=\"raylet\",level=\"\"} 1\n",
            "raylog_ray_records_total{node=\"node-a\",component=\"other\",level=\"INFO\"} 2\n",
        ] {
            assert!(t.contains(want), "no {want:?} in\n{t}");
        }
        assert!(!t.contains("exit_type=\"other\""), "an empty other is not rendered");
        assert_eq!(t.matches("raylog_ray_records_total{").count(), 3, "only non-zero series");
        assert_eq!(escape("a\"b\\c"), "a\\\"b\\\\c");
    }
}
