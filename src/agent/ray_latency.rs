//! GCS, raylet and core-worker latency from Ray's own `Event stats:` blocks
//! (issue #25, part 2): per-handler call counts, execution and queueing seconds as
//! counters, and each io_context's event-loop lag as a gauge, on `/metrics`.
//!
//! Ray prints each block's totals cumulative since the process started, so a
//! counter grows by the difference between consecutive blocks of one process (pid,
//! io_context, handler). A process's first block counts whole (its totals are since
//! its start), and so does a block whose totals went down (the same pid reused):
//! a restart starts a new base and never makes a counter go backwards. Summed over
//! processes, a counter is then each process's latest total. The rule is
//! [`raylog_parsers::event_stats::Handler::since`], shared with `raylog health`.
//!
//! The lag gauge is `event_loop_lag_probe`'s mean queueing time over the last
//! interval (the difference of its totals between the last two blocks of the
//! process), or the block's printed mean for a process's first block: Ray's printed
//! mean is since the start and hides a loop that has just become slow.
//!
//! `raylog_ray_nodes_alive` counts the nodes GCS registered (`Finished registering
//! node info`) and has not removed since (the removals `raylog health` counts), on
//! the agent that reads GCS's log; it is absent on the others.
//!
//! Blocks are rare (one a minute per process), so the state sits behind a mutex.
//! Labels stay bounded: the first [`HANDLERS`] handler names of a component keep
//! their name, later ones count as `other`; components past [`COMPONENTS`] as
//! `other`. Bases are kept for the last [`PROCESSES`] processes seen.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::sync::{Mutex, MutexGuard};

use raylog_parsers::event_stats::{self, write_seconds, Block, Totals, LAG_PROBE};
use raylog_parsers::{Id, Record};

use crate::agent::metrics::{escape, Counters};

/// Distinct handler names per component; the rest are `other`.
pub const HANDLERS: usize = 64;
/// Distinct components; the rest are `other`.
pub const COMPONENTS: usize = 16;
/// Processes whose last totals are remembered.
pub const PROCESSES: usize = 4096;

/// (component, io_context, handler).
type SeriesKey = (String, String, String);

#[derive(Debug, Default)]
struct Process {
    /// Last block number that touched it (for eviction).
    seen: u64,
    /// (io_context, handler) → its totals in the last block.
    last: HashMap<(String, String), Totals>,
    /// io_context → time of the newest block counted (nanoseconds).
    newest: HashMap<String, i64>,
}

#[derive(Debug, Default)]
struct State {
    node: String,
    series: BTreeMap<SeriesKey, Totals>,
    /// (component, io_context) → seconds.
    lag: BTreeMap<(String, String), f64>,
    handlers: HashMap<String, HashSet<String>>,
    processes: HashMap<(String, u32), Process>,
    blocks: u64,
    /// Nodes registered with GCS and not removed; `None` until GCS's log is read.
    alive: Option<HashSet<Id>>,
}

/// The counters and gauges, shared with the `/metrics` handler.
#[derive(Debug, Default)]
pub struct RayLatency {
    state: Mutex<State>,
}

impl RayLatency {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Labels every series with the agent's node name.
    pub fn set_node(&self, node: &str) {
        node.clone_into(&mut self.lock().node);
    }

    /// Counts the blocks of record `r`, if it holds any (the parser then gave it an
    /// `io_context` field).
    pub fn observe(&self, r: &Record<'_>) {
        if r.fields.get("io_context").is_none() {
            return;
        }
        let blocks = event_stats::parse(r.message);
        let mut st = self.lock();
        let component = st.component(r.component());
        let time = r.timestamp.map(|t| t.0);
        for b in &blocks {
            st.observe_block(&component, r.pid.unwrap_or(0), time, b);
        }
    }

    /// A node GCS registered (`Finished registering node info`).
    pub fn node_registered(&self, node: Id) {
        self.lock().alive.get_or_insert_with(HashSet::new).insert(node);
    }

    /// A node GCS removed.
    pub fn node_removed(&self, node: Option<Id>) {
        let mut st = self.lock();
        let alive = st.alive.get_or_insert_with(HashSet::new);
        if let Some(n) = node {
            alive.remove(&n);
        }
    }
}

impl Counters for RayLatency {
    /// Appends the Prometheus text exposition.
    fn render(&self, s: &mut String) {
        let st = self.lock();
        if let Some(alive) = &st.alive {
            let name = "raylog_ray_nodes_alive";
            let _ = writeln!(
                s,
                "# HELP {name} Nodes GCS registered and has not removed (GCS's log).\n# TYPE {name} gauge\n{name} {}",
                alive.len()
            );
        }
        let node = escape(&st.node);
        type Get = fn(&Totals) -> String;
        let counters: [(&str, &str, Get); 3] = [
            (
                "raylog_ray_handler_calls_total",
                "Calls of each Ray event-loop handler (Ray's Event stats: blocks).",
                |s| s.calls.to_string(),
            ),
            ("raylog_ray_handler_execution_seconds_total", "Seconds Ray's event-loop handlers spent executing.", |s| {
                seconds(s.execution_s)
            }),
            (
                "raylog_ray_handler_queueing_seconds_total",
                "Seconds Ray's event-loop handlers waited in their loop's queue before running.",
                |s| seconds(s.queueing_s),
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((c, io, h), sums) in &st.series {
                let (c, io, h) = (escape(c), escape(io), escape(h));
                let v = get(sums);
                let _ =
                    writeln!(s, "{name}{{node=\"{node}\",component=\"{c}\",io_context=\"{io}\",handler=\"{h}\"}} {v}");
            }
        }
        let name = "raylog_ray_event_loop_lag_seconds";
        let _ = writeln!(
            s,
            "# HELP {name} Mean queueing time of Ray's event_loop_lag_probe over the last Event stats: interval.\n# TYPE {name} gauge"
        );
        for ((c, io), v) in &st.lag {
            let (c, io) = (escape(c), escape(io));
            let _ = writeln!(s, "{name}{{node=\"{node}\",component=\"{c}\",io_context=\"{io}\"}} {}", seconds(*v));
        }
    }
}

impl State {
    fn component(&mut self, c: &str) -> String {
        if self.handlers.contains_key(c) || self.handlers.len() < COMPONENTS {
            self.handlers.entry(c.to_string()).or_default();
            c.to_string()
        } else {
            "other".to_string()
        }
    }

    fn handler_label(&mut self, component: &str, h: &str) -> String {
        let names = self.handlers.entry(component.to_string()).or_default();
        if names.contains(h) || names.len() < HANDLERS {
            names.insert(h.to_string());
            h.to_string()
        } else {
            "other".to_string()
        }
    }

    fn observe_block(&mut self, component: &str, pid: u32, time: Option<i64>, b: &Block<'_>) {
        self.blocks += 1;
        let seen = self.blocks;
        self.evict();
        let proc = self.processes.entry((component.to_string(), pid)).or_default();
        proc.seen = seen;
        if let Some(t) = time {
            let newest = proc.newest.entry(b.io_context.to_string()).or_insert(i64::MIN);
            // Totals are cumulative, so a block older than one already counted adds
            // nothing. It arrives when a rotated file's last block is read after its
            // successor's first (the old file's last record waits `idle_flush`), and
            // against the newer totals it would look like a restart and count whole.
            if t < *newest {
                return;
            }
            *newest = t;
        }
        let mut deltas = Vec::with_capacity(b.handlers.len());
        let mut lag = None;
        for h in &b.handlers {
            let before = proc.last.insert((b.io_context.to_string(), h.name.to_string()), h.totals());
            if h.name == LAG_PROBE {
                lag = h.interval_lag(before);
            }
            deltas.push((h.name, h.since(before)));
        }
        for (name, d) in deltas {
            let label = self.handler_label(component, name);
            *self.series.entry((component.to_string(), b.io_context.to_string(), label)).or_default() += d;
        }
        if let Some(l) = lag {
            self.lag.insert((component.to_string(), b.io_context.to_string()), l);
        }
    }

    /// Drops the least recently seen process when over [`PROCESSES`].
    fn evict(&mut self) {
        if self.processes.len() < PROCESSES {
            return;
        }
        if let Some(oldest) = self.processes.iter().min_by_key(|(_, p)| p.seen).map(|(k, _)| k.clone()) {
            self.processes.remove(&oldest);
        }
    }
}

fn seconds(v: f64) -> String {
    let mut s = String::new();
    write_seconds(&mut s, v);
    s
}

#[cfg(test)]
mod tests;
