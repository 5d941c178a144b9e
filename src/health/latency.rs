//! The `latency` section of `raylog health` (issue #25, part 3): for GCS and each
//! raylet, from Ray's `Event stats:` blocks ([`raylog_parsers::event_stats`]) in the
//! records scanned (so within `--since/--until`), the slowest handlers by mean
//! execution and by mean queueing time, the event-loop lag (first, last, largest) and
//! the call rate; and the live nodes over time.
//!
//! Totals are cumulative since a process started, so what a window holds is the
//! difference between its blocks, by the rule the agent's counters use too
//! ([`raylog_parsers::event_stats::Handler::since`]): a process's first block whole,
//! each later one by its difference from the one before, a block whose totals went
//! down as a restart. "Before" is in time: files are read in name order
//! (`gcs_server.out` before `gcs_server.out.1`), so each file's blocks are kept as a
//! segment and the segments joined in time order at the end.
//! `calls` here then equals the agent's `raylog_ray_handler_calls_total` on the same
//! files. A block's lag is `event_loop_lag_probe`'s mean queueing time over the
//! interval since the block before.

use std::collections::BTreeMap;

use raylog_parsers::event_stats::{self, Block, Totals, LAG_PROBE};
use raylog_parsers::{Id, Record, Timestamp};
use serde::Serialize;

/// Handlers listed per process and ranking.
pub const SLOWEST: usize = 5;

/// One handler's activity over the window.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HandlerRow {
    pub handler: String,
    pub calls: u64,
    pub execution_mean_s: Option<f64>,
    pub queueing_mean_s: Option<f64>,
}

/// Event-loop lag over the window, in seconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Lag {
    pub first_s: f64,
    pub last_s: f64,
    pub max_s: f64,
}

/// One io_context of one GCS or raylet process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessLatency {
    pub component: String,
    pub node_id: Option<String>,
    /// The Ray session dir's name: a node's GCS of each session is its own process.
    pub session: Option<String>,
    pub pid: Option<u32>,
    pub io_context: String,
    pub blocks: usize,
    pub first: Option<String>,
    pub last: Option<String>,
    /// Calls per second between the first and the last block.
    pub calls_per_second: Option<f64>,
    pub lag: Option<Lag>,
    pub slowest_by_execution: Vec<HandlerRow>,
    pub slowest_by_queueing: Vec<HandlerRow>,
    /// Every handler called in the window, the most called first (JSON only): the
    /// rows the agent's `raylog_ray_handler_*` counters add up to.
    pub handlers: Vec<HandlerRow>,
}

/// A change in the number of live nodes.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodesAlive {
    pub time: Option<String>,
    pub alive: usize,
}

/// The section.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub processes: Vec<ProcessLatency>,
    pub nodes_alive: Vec<NodesAlive>,
}

/// One file's blocks of one process's io_context. A file is read in order, but
/// files may come in any order (`gcs_server.out` before `gcs_server.out.1`), so a
/// file's first block is kept whole and joined to the file before it in time at
/// [`Collector::finish`].
#[derive(Default)]
struct Segment {
    blocks: usize,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    first_total: u64,
    last_total: u64,
    /// The first block: each handler's totals, and the probe's printed mean.
    head: BTreeMap<String, Totals>,
    head_lag: Option<f64>,
    /// What the later blocks add, and the last block's totals.
    added: BTreeMap<String, Totals>,
    tail: BTreeMap<String, Totals>,
    /// The interval lags of the later blocks, in order.
    lags: Vec<f64>,
}

/// One process's io_context: its segments by file.
#[derive(Default)]
struct Acc {
    node_id: Option<Id>,
    segments: BTreeMap<String, Segment>,
}

/// Per-scan state.
#[derive(Default)]
pub struct Collector {
    /// (component, session, pid, io_context).
    procs: BTreeMap<(String, Option<String>, Option<u32>, String), Acc>,
    /// (time, node, alive), in the order read: files are read one after another.
    node_events: Vec<(Option<Timestamp>, Id, bool)>,
}

impl Collector {
    /// Takes in one record of GCS or a raylet holding `Event stats:` blocks.
    pub fn observe(&mut self, r: &Record<'_>) {
        if !observes(r) {
            return;
        }
        let comp = r.component();
        for b in event_stats::parse(r.message) {
            let key = (comp.to_string(), r.file.session.clone(), r.pid, b.io_context.to_string());
            let acc = self.procs.entry(key).or_default();
            acc.node_id = acc.node_id.or(r.ids.node_id);
            let seg = match acc.segments.get_mut(r.file.rel_path.as_str()) {
                Some(seg) => seg,
                None => acc.segments.entry(r.file.rel_path.clone()).or_default(),
            };
            add_block(seg, &b, r.timestamp);
        }
    }

    /// A node came (`true`) or went, at `t`.
    pub fn node(&mut self, id: Id, alive: bool, t: Option<Timestamp>) {
        self.node_events.push((t, id, alive));
    }

    pub fn finish(mut self) -> Latency {
        let processes = self.procs.into_iter().map(|(k, acc)| process_row(k, acc)).collect();
        // In time order: each raylet and GCS say it, in files read one by one.
        self.node_events.sort_by_key(|e| e.0.map(|t| t.0));
        let (mut alive, mut nodes_alive) = (std::collections::HashSet::new(), vec![]);
        for (t, id, up) in self.node_events {
            if if up { alive.insert(id) } else { alive.remove(&id) } {
                nodes_alive.push(NodesAlive { time: t.map(|t| t.to_rfc3339()), alive: alive.len() });
            }
        }
        Latency { processes, nodes_alive }
    }
}

fn add_block(seg: &mut Segment, b: &Block<'_>, t: Option<Timestamp>) {
    if seg.blocks == 0 {
        seg.first = t;
        seg.first_total = b.total;
    }
    seg.blocks += 1;
    seg.last = t.or(seg.last);
    seg.last_total = b.total;
    for h in &b.handlers {
        let last = seg.tail.get(h.name).copied();
        if seg.blocks == 1 {
            seg.head.insert(h.name.to_string(), h.totals());
            if h.name == LAG_PROBE {
                seg.head_lag = h.times.queueing_mean;
            }
        } else {
            // A handler first seen after the file's first block had no calls before.
            *slot(&mut seg.added, h.name) += h.since(last);
            if h.name == LAG_PROBE {
                seg.lags.extend(h.interval_lag(last));
            }
        }
        *slot(&mut seg.tail, h.name) = h.totals();
    }
}

/// `map[name]`, inserted as zero the first time: a name is copied once per file,
/// not once per block.
fn slot<'m>(map: &'m mut BTreeMap<String, Totals>, name: &str) -> &'m mut Totals {
    if !map.contains_key(name) {
        map.insert(name.to_string(), Totals::default());
    }
    map.get_mut(name).expect("inserted above")
}

/// A process's io_context over the window: its segments joined in time order.
#[derive(Default)]
struct Joined {
    blocks: usize,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    first_total: u64,
    last_total: u64,
    handlers: BTreeMap<String, Totals>,
    lags: Vec<f64>,
}

fn join(acc: Acc) -> Joined {
    let mut segs: Vec<Segment> = acc.segments.into_values().collect();
    // In time order; a file whose blocks carry no time comes first.
    segs.sort_by_key(|s| s.first.map(|t| t.0));
    let mut j = Joined::default();
    let mut prev: BTreeMap<String, Totals> = BTreeMap::new();
    for (i, seg) in segs.into_iter().enumerate() {
        if i == 0 {
            (j.first, j.first_total) = (seg.first, seg.first_total);
        }
        j.blocks += seg.blocks;
        j.last = seg.last.or(j.last);
        j.last_total = seg.last_total;
        for (name, now) in &seg.head {
            let last = prev.get(name).copied();
            *j.handlers.entry(name.clone()).or_default() += now.since(last);
            if name == LAG_PROBE {
                j.lags.extend(now.interval_lag(seg.head_lag, last));
            }
        }
        for (name, added) in seg.added {
            *j.handlers.entry(name).or_default() += added;
        }
        j.lags.extend(seg.lags);
        prev.extend(seg.tail);
    }
    j
}

fn process_row(key: (String, Option<String>, Option<u32>, String), acc: Acc) -> ProcessLatency {
    let (component, session, pid, io_context) = key;
    let node_id = acc.node_id.map(|i| i.as_str().to_string());
    let acc = join(acc);
    let mut rows: Vec<HandlerRow> = acc
        .handlers
        .iter()
        .filter(|(_, s)| s.calls > 0)
        .map(|(name, s)| HandlerRow {
            handler: name.clone(),
            calls: s.calls,
            execution_mean_s: Some(round9(s.execution_s / s.calls as f64)),
            queueing_mean_s: Some(round9(s.queueing_s / s.calls as f64)),
        })
        .collect();
    let top = |key: fn(&HandlerRow) -> f64| {
        let mut v = rows.clone();
        v.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.handler.cmp(&b.handler)));
        v.truncate(SLOWEST);
        v
    };
    let span = match (acc.first, acc.last) {
        (Some(a), Some(b)) if b.0 > a.0 => Some((b.0 - a.0) as f64 / 1e9),
        _ => None,
    };
    ProcessLatency {
        component,
        node_id,
        session,
        pid,
        io_context,
        blocks: acc.blocks,
        first: acc.first.map(|t| t.to_rfc3339()),
        last: acc.last.map(|t| t.to_rfc3339()),
        calls_per_second: span.map(|s| round9(acc.last_total.saturating_sub(acc.first_total) as f64 / s)),
        lag: (!acc.lags.is_empty()).then(|| Lag {
            first_s: round9(acc.lags[0]),
            last_s: round9(*acc.lags.last().unwrap_or(&0.0)),
            max_s: round9(acc.lags.iter().copied().fold(0.0, f64::max)),
        }),
        slowest_by_execution: top(|r| r.execution_mean_s.unwrap_or(0.0)),
        slowest_by_queueing: top(|r| r.queueing_mean_s.unwrap_or(0.0)),
        handlers: {
            rows.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.handler.cmp(&b.handler)));
            rows
        },
    }
}

/// Whether [`Collector::observe`] takes anything from `r`: a multi-line record of
/// GCS or a raylet with an `io_context` (an `Event stats:` block).
pub fn observes(r: &Record<'_>) -> bool {
    let comp = r.component();
    r.lines >= 2 && (comp == "gcs_server" || comp == "raylet") && r.fields.get("io_context").is_some()
}

/// A node coming or going, as GCS registers it (`Finished registering node info`)
/// or as GCS tells every raylet (`Received [address and liveness] notification for
/// node, IsAlive = 1 node_id=<hex>`; Ray 2.9: `… for node id = <hex>, IsAlive = 1`).
/// GCS's removals are [`super::detect::NodeDeath`]s.
pub fn node_liveness(r: &Record<'_>) -> Option<(bool, Id)> {
    let m = r.message;
    let alive = if m.starts_with("Finished registering node info") {
        true
    } else if m.starts_with("Received ") && r.component() == "raylet" {
        let at = m.find("IsAlive = ")? + "IsAlive = ".len();
        m.as_bytes().get(at)? == &b'1'
    } else {
        return None;
    };
    let id = r.ids.node_id.or_else(|| {
        let at = m.find("node id = ")? + "node id = ".len();
        Id::parse(m[at..].split([',', ' ']).next()?.as_bytes())
    })?;
    Some((alive, id))
}

fn round9(v: f64) -> f64 {
    (v * 1e9).round() / 1e9
}
