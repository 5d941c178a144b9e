//! The agent's own counters, rendered in the Prometheus text format on `/metrics`.
//!
//! Plain atomics: every pipeline stage bumps its counters without locks, and the
//! API handler reads them when scraped.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::agent::sinks::DeadReason;

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
    pub dead_letters: [AtomicU64; crate::agent::sinks::DeadReason::ALL.len()],
    pub duplicates: AtomicU64,
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
    pub records_held: AtomicI64,
    pub sinks: Vec<SinkMetrics>,
    /// What the records read say about Ray (see [`crate::agent::ray_metrics`]).
    pub ray: crate::agent::ray_metrics::RayMetrics,
    /// Ray's handler timings (see [`crate::agent::ray_latency`]).
    pub latency: crate::agent::ray_latency::RayLatency,
    pub events: crate::agent::events::EventMetrics,
}

impl Metrics {
    pub fn new(sink_names: &[&str]) -> Metrics {
        Metrics { sinks: sink_names.iter().map(|n| SinkMetrics::new(n)).collect(), ..Metrics::default() }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
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
            "raylog_checkpoints_written_total",
            "Checkpoint files written.",
            self.checkpoints_written.load(Relaxed),
        );
        let mut gauge = |name: &str, help: &str, v: i64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge("raylog_files_watched", "Files tracked (open or not).", self.files_watched.load(Relaxed));
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
            "Actor-worker records waiting for their actor id.",
            self.records_held.load(Relaxed),
        );
        self.render_sinks(&mut s);
        self.ray.render(&mut s);
        self.latency.render(&mut s);
        self.events.render(&mut s);
        s
    }

    fn render_sinks(&self, s: &mut String) {
        type Getter = fn(&SinkMetrics) -> u64;
        let per_sink: [(&str, &str, Getter); 5] = [
            ("raylog_sink_records_sent_total", "Records acknowledged by the sink.", |m| m.records_sent.load(Relaxed)),
            ("raylog_sink_batches_sent_total", "Batches acknowledged by the sink.", |m| m.batches_sent.load(Relaxed)),
            ("raylog_sink_bytes_sent_total", "Request body bytes sent.", |m| m.bytes_sent.load(Relaxed)),
            ("raylog_sink_retries_total", "Sends retried after a transient failure.", |m| m.retries.load(Relaxed)),
            (
                "raylog_sink_records_duplicate_total",
                "Records the sink already had (Elasticsearch 409), included in records sent.",
                |m| m.duplicates.load(Relaxed),
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
}
