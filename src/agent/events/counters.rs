//! The event receiver's and forwarder's counters: owned by this stage, rendered on
//! `/metrics` as a [`Metrics::stage`](crate::agent::metrics::Metrics::stage).

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::agent::metrics::{single, Counters};

/// The receiver's counters, on `/metrics` when it runs.
#[derive(Debug, Default)]
pub struct EventMetrics {
    pub enabled: AtomicBool,
    pub posts: AtomicU64,
    pub events_accepted: AtomicU64,
    /// By reason: malformed (400/415), spool_full (503), io (500),
    /// event_too_large (413: an event over `source.max_line_bytes`).
    pub refused: [AtomicU64; 4],
    pub spool_bytes: AtomicI64,
    pub forwarded: AtomicU64,
    pub forward_retries: AtomicU64,
    pub forward_dropped: AtomicU64,
    /// A spool write failure was logged (once per run).
    pub io_error_logged: AtomicBool,
    /// An event over `source.max_line_bytes` was logged (once per run).
    pub too_long_logged: AtomicBool,
}

const REFUSED: [&str; 4] = ["malformed", "spool_full", "io", "event_too_large"];

impl EventMetrics {
    pub fn count_refused(&self, reason: &str) {
        let i = REFUSED.iter().position(|r| *r == reason).unwrap_or(0);
        self.refused[i].fetch_add(1, Relaxed);
    }
}

impl Counters for EventMetrics {
    fn render(&self, s: &mut String) {
        if !self.enabled.load(Relaxed) {
            return;
        }
        let mut counter = |name: &str, help: &str, v: u64| single(s, "counter", name, help, v);
        counter("raylog_events_posts_total", "POSTs Ray made to the event receiver.", self.posts.load(Relaxed));
        counter(
            "raylog_events_accepted_total",
            "Ray events spooled (answered 2xx).",
            self.events_accepted.load(Relaxed),
        );
        counter(
            "raylog_events_forwarded_total",
            "Events forwarded to events.forward_to.",
            self.forwarded.load(Relaxed),
        );
        counter(
            "raylog_events_forward_retries_total",
            "Forwards retried after a transient failure.",
            self.forward_retries.load(Relaxed),
        );
        counter(
            "raylog_events_forward_dropped_total",
            "Events events.forward_to refused for good (4xx).",
            self.forward_dropped.load(Relaxed),
        );
        let r = "raylog_events_posts_refused_total";
        let _ = writeln!(s, "# HELP {r} POSTs refused, by reason.\n# TYPE {r} counter");
        for (name, v) in REFUSED.iter().zip(&self.refused) {
            let _ = writeln!(s, "{r}{{reason=\"{name}\"}} {}", v.load(Relaxed));
        }
        let g = "raylog_events_spool_bytes";
        let _ = writeln!(
            s,
            "# HELP {g} Spooled event bytes not yet delivered everywhere.\n# TYPE {g} gauge\n{g} {}",
            self.spool_bytes.load(Relaxed)
        );
    }
}
