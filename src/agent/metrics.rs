//! The agent's own counters, rendered in the Prometheus text format on `/metrics`.
//!
//! Plain atomics: every pipeline stage bumps its counters without locks, and the
//! API handler reads them when scraped. The source's and the sinks' counters are
//! fields of [`Metrics`]; a stage with counters of its own (Ray's health, handler
//! timings, the event receiver) owns their type, implements [`Counters`] for it and
//! takes its instance from [`Metrics::stage`], which renders it after the rest. So
//! this module names nothing else of the agent, and every stage may depend on it.

use std::any::Any;
use std::fmt::{Debug, Write};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Why a record went to the dead-letter file: a small fixed set, so it can label
/// the `raylog_sink_dead_letters_total` counter. Here, below the sinks that decide
/// it, because [`SinkMetrics`] counts by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadReason {
    /// Older than the sink accepts (Loki's `reject_old_samples_max_age`).
    TooOld,
    /// Too far in the future (Loki's `creation_grace_period`).
    TooNew,
    /// Behind its Loki stream by more than the out-of-order window.
    TooFarBehind,
    /// Any other refusal (invalid for the sink, too large, a mapping conflict).
    Rejected,
    /// Sent in an OTLP request of which the receiver refused some records without
    /// naming them (a partial success): this one may be among them.
    Partial,
}

impl DeadReason {
    pub const ALL: [DeadReason; 5] =
        [DeadReason::TooOld, DeadReason::TooNew, DeadReason::TooFarBehind, DeadReason::Rejected, DeadReason::Partial];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::TooOld => "too_old",
            DeadReason::TooNew => "too_new",
            DeadReason::TooFarBehind => "too_far_behind",
            DeadReason::Rejected => "rejected",
            DeadReason::Partial => "partial",
        }
    }
}

/// One unlabelled series with its `# HELP` and `# TYPE` lines (`kind`: `counter`
/// or `gauge`).
pub fn single(s: &mut String, kind: &str, name: &str, help: &str, v: impl std::fmt::Display) {
    let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
}

/// A label value in the exposition format's quoting.
pub(crate) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A stage's own counters: one instance per agent, made by [`Metrics::stage`].
pub trait Counters: Any + Send + Sync + Debug + Default {
    /// Appends their Prometheus text exposition.
    fn render(&self, s: &mut String);
}

/// One registered [`Counters`], kept both ways: typed (to hand out) and to render.
#[derive(Debug)]
struct Stage {
    any: Arc<dyn Any + Send + Sync>,
    render: fn(&(dyn Any + Send + Sync), &mut String),
}

/// Upper bounds (seconds) of the batch latency histogram buckets.
const LATENCY_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// Counters of one sink.
#[derive(Debug, Default)]
pub struct SinkMetrics {
    pub name: String,
    pub records_sent: AtomicU64,
    pub batches_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub retries: AtomicU64,
    /// By [`DeadReason`] (its discriminant is the index).
    pub dead_letters: [AtomicU64; DeadReason::ALL.len()],
    pub duplicates: AtomicU64,
    /// Records written to `state_dir/parked` when the shutdown grace ended.
    pub parked: AtomicU64,
    /// Parked records (of an earlier stop) delivered since the start.
    pub unparked: AtomicU64,
    /// Task spans stored by the trace backend, and refused by it for good.
    pub spans_sent: AtomicU64,
    pub spans_refused: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
}

impl SinkMetrics {
    pub fn new(name: &str) -> SinkMetrics {
        SinkMetrics { name: name.to_string(), ..SinkMetrics::default() }
    }

    /// Records dead-lettered for `reason`.
    pub fn dead_letter_count(&self, reason: DeadReason) -> u64 {
        self.dead_letters[reason as usize].load(Relaxed)
    }

    /// Records how long one batch took from creation to acknowledgement.
    pub fn observe_latency(&self, secs: f64) {
        for (b, le) in self.latency_buckets.iter().zip(LATENCY_BUCKETS) {
            if secs <= le {
                b.fetch_add(1, Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Relaxed);
        self.latency_sum_us.fetch_add((secs * 1e6) as u64, Relaxed);
    }
}

/// Every counter of the agent.
#[derive(Debug, Default)]
pub struct Metrics {
    pub lines_read: AtomicU64,
    pub bytes_read: AtomicU64,
    pub records_read: AtomicU64,
    pub invalid_utf8: AtomicU64,
    pub truncated_lines: AtomicU64,
    pub files_watched: AtomicI64,
    pub files_open: AtomicI64,
    pub bytes_behind: AtomicI64,
    pub read_errors: AtomicU64,
    /// Files deleted (or moved out of the logs dirs) while closed, before they were
    /// read to their end, and the bytes known unread then.
    pub files_lost: AtomicU64,
    pub bytes_lost: AtomicU64,
    pub checkpoints_written: AtomicU64,
    /// CPU time the start took to load the checkpoints (milliseconds).
    pub checkpoints_load_cpu_ms: AtomicI64,
    pub records_held: AtomicI64,
    /// Task prints that waited for their task attempt's event and went out without it.
    pub task_prints_untagged: AtomicU64,
    /// Task attempt byte ranges known (from Ray's task events).
    pub task_ranges_files: AtomicI64,
    /// The tracer's counts (see `agent::traces::Counts`), and attempts under way.
    pub traces: std::sync::Mutex<crate::agent::traces::Counts>,
    pub trace_open_attempts: AtomicI64,
    /// Workers the correlator keeps a slot for (see `agent::source::quiet`).
    pub workers_known: AtomicI64,
    pub sinks: Vec<SinkMetrics>,
    /// The stages' own counters, rendered in the order they were first asked for.
    stages: Mutex<Vec<Stage>>,
}

impl Metrics {
    pub fn new(sink_names: &[&str]) -> Metrics {
        Metrics { sinks: sink_names.iter().map(|n| SinkMetrics::new(n)).collect(), ..Metrics::default() }
    }

    /// The stage counters of type `T`: made at the first call, which also places them
    /// last on `/metrics` (the agent asks for each kind at start, in a fixed order);
    /// the same instance afterwards. Takes a lock: ask once, keep the `Arc`.
    pub fn stage<T: Counters>(&self) -> Arc<T> {
        let mut stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = stages.iter().find_map(|s| s.any.clone().downcast::<T>().ok()) {
            return t;
        }
        let t = Arc::new(T::default());
        let render = |any: &(dyn Any + Send + Sync), s: &mut String| {
            if let Some(t) = any.downcast_ref::<T>() {
                t.render(s);
            }
        };
        stages.push(Stage { any: t.clone(), render });
        t
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, v: u64| single(&mut s, "counter", name, help, v);
        counter("raylog_lines_read_total", "Lines read from Ray log files.", self.lines_read.load(Relaxed));
        counter("raylog_bytes_read_total", "Bytes read from Ray log files.", self.bytes_read.load(Relaxed));
        counter("raylog_records_read_total", "Records parsed.", self.records_read.load(Relaxed));
        counter(
            "raylog_invalid_utf8_records_total",
            "Records with invalid UTF-8 (kept, decoded lossily).",
            self.invalid_utf8.load(Relaxed),
        );
        counter("raylog_truncated_lines_total", "Lines cut at max_line_bytes.", self.truncated_lines.load(Relaxed));
        counter("raylog_read_errors_total", "Errors reading files.", self.read_errors.load(Relaxed));
        counter(
            "raylog_files_lost_total",
            "Files deleted (or moved out of the logs dirs) while closed, before they were read to their end (each named in a warning).",
            self.files_lost.load(Relaxed),
        );
        counter(
            "raylog_bytes_lost_total",
            "Bytes of those files known to be unread when they went.",
            self.bytes_lost.load(Relaxed),
        );
        counter(
            "raylog_task_prints_untagged_total",
            "Task worker prints that waited for the event giving their task attempt's byte range and went out without a task_id (the event never came within source.actor_hold).",
            self.task_prints_untagged.load(Relaxed),
        );
        counter(
            "raylog_checkpoints_written_total",
            "Checkpoint files written.",
            self.checkpoints_written.load(Relaxed),
        );
        let mut gauge = |name: &str, help: &str, v: i64| single(&mut s, "gauge", name, help, v);
        gauge("raylog_files_watched", "Files tracked (open or not).", self.files_watched.load(Relaxed));
        gauge(
            "raylog_checkpoints_load_cpu_milliseconds",
            "CPU time the start spent loading the checkpoints (snapshot and journal).",
            self.checkpoints_load_cpu_ms.load(Relaxed),
        );
        gauge(
            "raylog_files_open",
            "Files with a descriptor (at most source.max_open_files).",
            self.files_open.load(Relaxed),
        );
        gauge(
            "raylog_bytes_behind",
            "Bytes between what was read and the end of the files.",
            self.bytes_behind.load(Relaxed),
        );
        gauge(
            "raylog_records_held",
            "Worker records waiting for their actor id or their task attempt's event.",
            self.records_held.load(Relaxed),
        );
        gauge(
            "raylog_task_log_files",
            "Worker files with task attempt byte ranges known from Ray's task events.",
            self.task_ranges_files.load(Relaxed),
        );
        gauge(
            "raylog_workers_known",
            "Workers the correlator keeps (forgotten 10 minutes after their files are all read, unless they host an actor).",
            self.workers_known.load(Relaxed),
        );
        let t = *self.traces.lock().unwrap_or_else(|e| e.into_inner());
        let name = "raylog_trace_spans_total";
        let _ = writeln!(s, "# HELP {name} Task spans by outcome: built (put in a batch), resent (unchanged, their events came again), over_job_limit (not sent), timed_out (closed by traces_span_timeout, included in built).\n# TYPE {name} counter");
        for (outcome, v) in
            [("built", t.built), ("resent", t.resent), ("over_job_limit", t.over_job_limit), ("timed_out", t.timed_out)]
        {
            let _ = writeln!(s, "{name}{{outcome=\"{outcome}\"}} {v}");
        }
        single(
            &mut s,
            "counter",
            "raylog_trace_attempts_untracked_total",
            "Task attempts not traced: traces_max_open_spans were under way.",
            t.over_open_limit,
        );
        single(
            &mut s,
            "counter",
            "raylog_trace_events_unreadable_total",
            "Task events whose payload did not read (the first is logged with its file and offset).",
            t.unreadable,
        );
        single(
            &mut s,
            "gauge",
            "raylog_trace_open_attempts",
            "Task attempts under way (a span not sent yet).",
            self.trace_open_attempts.load(Relaxed),
        );
        self.render_sinks(&mut s);
        for stage in self.stages.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            (stage.render)(&*stage.any, &mut s);
        }
        s
    }

    fn render_sinks(&self, s: &mut String) {
        type Getter = fn(&SinkMetrics) -> u64;
        let per_sink: [(&str, &str, Getter); 9] = [
            ("raylog_sink_records_sent_total", "Records acknowledged by the sink.", |m| m.records_sent.load(Relaxed)),
            ("raylog_sink_batches_sent_total", "Batches acknowledged by the sink.", |m| m.batches_sent.load(Relaxed)),
            ("raylog_sink_bytes_sent_total", "Request body bytes sent.", |m| m.bytes_sent.load(Relaxed)),
            ("raylog_sink_retries_total", "Sends retried after a transient failure.", |m| m.retries.load(Relaxed)),
            (
                "raylog_sink_records_duplicate_total",
                "Records the sink already had (Elasticsearch 409), included in records sent.",
                |m| m.duplicates.load(Relaxed),
            ),
            (
                "raylog_sink_records_parked_total",
                "Records not delivered when the shutdown grace ended, kept in state_dir/parked for the next start.",
                |m| m.parked.load(Relaxed),
            ),
            (
                "raylog_sink_records_unparked_total",
                "Records parked at an earlier stop and delivered since this start (included in records sent).",
                |m| m.unparked.load(Relaxed),
            ),
            ("raylog_sink_spans_sent_total", "Task spans the trace backend stored (traces = true).", |m| {
                m.spans_sent.load(Relaxed)
            }),
            (
                "raylog_sink_spans_refused_total",
                "Task spans the trace backend refused for good (400, 413, partial success).",
                |m| m.spans_refused.load(Relaxed),
            ),
        ];
        for (name, help, get) in per_sink {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for m in &self.sinks {
                let _ = writeln!(s, "{name}{{sink=\"{}\"}} {}", m.name, get(m));
            }
        }
        let d = "raylog_sink_dead_letters_total";
        let _ = writeln!(
            s,
            "# HELP {d} Records refused for good and written to the dead-letter file, by reason.\n# TYPE {d} counter"
        );
        for m in &self.sinks {
            for r in DeadReason::ALL {
                let _ = writeln!(s, "{d}{{sink=\"{}\",reason=\"{}\"}} {}", m.name, r.as_str(), m.dead_letter_count(r));
            }
        }
        let h = "raylog_sink_batch_latency_seconds";
        let _ =
            writeln!(s, "# HELP {h} Time from a batch being made to the sink acknowledging it.\n# TYPE {h} histogram");
        for m in &self.sinks {
            for (b, le) in m.latency_buckets.iter().zip(LATENCY_BUCKETS) {
                let _ = writeln!(s, "{h}_bucket{{sink=\"{}\",le=\"{le}\"}} {}", m.name, b.load(Relaxed));
            }
            let count = m.latency_count.load(Relaxed);
            let _ = writeln!(s, "{h}_bucket{{sink=\"{}\",le=\"+Inf\"}} {count}", m.name);
            let _ = writeln!(s, "{h}_sum{{sink=\"{}\"}} {}", m.name, m.latency_sum_us.load(Relaxed) as f64 / 1e6);
            let _ = writeln!(s, "{h}_count{{sink=\"{}\"}} {count}", m.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new(&["loki"]);
        m.lines_read.fetch_add(3, Relaxed);
        m.sinks[0].records_sent.fetch_add(2, Relaxed);
        m.sinks[0].observe_latency(0.02);
        m.sinks[0].dead_letters[DeadReason::TooOld as usize].fetch_add(4, Relaxed);
        let t = m.render();
        assert!(t.contains("raylog_sink_dead_letters_total{sink=\"loki\",reason=\"too_old\"} 4"), "{t}");
        assert!(t.contains("raylog_sink_dead_letters_total{sink=\"loki\",reason=\"too_far_behind\"} 0"));
        assert!(t.contains("raylog_lines_read_total 3"));
        assert!(t.contains("raylog_sink_records_sent_total{sink=\"loki\"} 2"));
        assert!(t.contains("raylog_sink_batch_latency_seconds_bucket{sink=\"loki\",le=\"0.025\"} 1"));
        assert!(t.contains("raylog_sink_batch_latency_seconds_count{sink=\"loki\"} 1"));
    }

    #[derive(Debug, Default)]
    struct First(AtomicU64);
    impl Counters for First {
        fn render(&self, s: &mut String) {
            let _ = writeln!(s, "first {}", self.0.load(Relaxed));
        }
    }

    #[derive(Debug, Default)]
    struct Second;
    impl Counters for Second {
        fn render(&self, s: &mut String) {
            s.push_str("second\n");
        }
    }

    #[test]
    fn a_stage_is_made_once_and_rendered_last_in_the_order_first_asked_for() {
        let m = Metrics::new(&["s"]);
        m.stage::<Second>();
        let first = m.stage::<First>();
        first.0.fetch_add(2, Relaxed);
        assert!(Arc::ptr_eq(&first, &m.stage::<First>()));
        assert!(m.render().ends_with("_count{sink=\"s\"} 0\nsecond\nfirst 2\n"), "{}", m.render());
    }
}
