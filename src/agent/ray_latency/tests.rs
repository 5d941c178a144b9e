//! The latency counters from consecutive blocks: deltas, restarts, the lag gauge,
//! the label caps.

use std::sync::Arc;

use raylog_parsers::{classify, Correlator, FileParser, Options};

use super::*;
use crate::agent::metrics::Metrics;
use crate::agent::ray_metrics::RayCounter;

/// A GCS `Main service` block at second `sec` of pid `pid`: `put` calls of
/// GcsInMemoryStore.Put (2 ms each, 1 ms queued), `probes` lag probes queued
/// `lag_total_ms` in all.
fn block(sec: u32, pid: u32, put: u64, probes: u64, lag_total_ms: f64) -> String {
    let lag_mean = if probes > 0 { lag_total_ms / probes as f64 } else { 0.0 };
    format!(
        "[2026-11-30 10:21:{sec:02},080 I {pid} {pid}] (gcs_server) gcs_server.cc:1322: Main service Event stats:\n\n\n\
         Global stats: {t} total (1 active)\n\
         Queueing time: mean = 1.00ms, max = 19.24ms, min = 0.00ms, total = 25.08ms\n\
         Execution time:  mean = 2.30ms, total = 39.03ms\n\
         Event stats:\n\
         \tGcsInMemoryStore.Put - {put} total (0 active), Execution time: mean = 2.00ms, total = {e:.2}ms, Queueing time: mean = 1.00ms, max = 1.00ms, min = 1.00ms, total = {q:.2}ms\n\
         \tevent_loop_lag_probe - {probes} total (0 active), Execution time: mean = 0.01ms, total = 0.03ms, Queueing time: mean = {lag_mean:.2}ms, max = 9.00ms, min = 0.10ms, total = {lag_total_ms:.2}ms\n\
         \tRayletLoadPulled - 1 total (1 active), Execution time: mean = 0.00ms, total = 0.00ms, Queueing time: mean = 0.00ms, max = -0.00ms, min = 9223372036854.78ms, total = 0.00ms\n",
        t = put + probes + 1,
        e = put as f64 * 2.0,
        q = put as f64,
    )
}

/// Feeds `text` (a gcs_server.out) through the parser into a counter; returns the
/// `/metrics` text.
fn metrics_of(text: &str) -> String {
    let metrics = Arc::new(Metrics::new(&[]));
    let mut counter = RayCounter::new(metrics.clone(), "node-a");
    let mut p = FileParser::new(classify("gcs_server.out", None), None, None);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let comp = counter.component("gcs_server");
    p.push(text.as_bytes(), &mut corr, &opts, &mut |r| counter.count(comp, r));
    p.finish(&mut corr, &opts, &mut |r| counter.count(comp, r));
    metrics.render()
}

fn value(text: &str, series: &str) -> f64 {
    let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

const PUT: &str =
    "{node=\"node-a\",component=\"gcs_server\",io_context=\"Main service\",handler=\"GcsInMemoryStore.Put\"}";
const LAG: &str =
    "raylog_ray_event_loop_lag_seconds{node=\"node-a\",component=\"gcs_server\",io_context=\"Main service\"}";

#[test]
fn counters_grow_by_the_difference_between_blocks() {
    // 10 calls, then 25 (15 more), then 40 (15 more): the counter is the last total.
    let text = [block(1, 4034, 10, 2, 4.0), block(2, 4034, 25, 4, 8.0), block(3, 4034, 40, 6, 12.0)].concat();
    let m = metrics_of(&text);
    assert_eq!(value(&m, &format!("raylog_ray_handler_calls_total{PUT}")), 40.0);
    assert!((value(&m, &format!("raylog_ray_handler_execution_seconds_total{PUT}")) - 0.080).abs() < 1e-9, "{m}");
    assert!((value(&m, &format!("raylog_ray_handler_queueing_seconds_total{PUT}")) - 0.040).abs() < 1e-9, "{m}");
    // Lag over the last interval: 2 probes queued 4 ms, so 2 ms each.
    assert!((value(&m, LAG) - 0.002).abs() < 1e-9, "{m}");
    assert!(m.contains("# TYPE raylog_ray_event_loop_lag_seconds gauge"));
}

#[test]
fn a_restart_starts_a_new_base_and_never_goes_back() {
    // GCS restarts (new pid) and counts from 3; later the same pid's totals drop
    // (a reused pid): each new base counts from zero.
    let text = [
        block(1, 4034, 30, 2, 4.0),
        block(2, 5001, 3, 1, 50.0),
        block(3, 5001, 7, 3, 250.0),
        block(4, 5001, 2, 1, 1.0),
    ]
    .concat();
    let m = metrics_of(&text);
    assert_eq!(value(&m, &format!("raylog_ray_handler_calls_total{PUT}")), 30.0 + 7.0 + 2.0);
    // The reset block is the process's new first: its printed mean (1 ms).
    assert!((value(&m, LAG) - 0.001).abs() < 1e-9, "{m}");
}

#[test]
fn an_older_block_read_after_a_newer_one_adds_nothing() {
    // A rotated file's last block (second 2) read after its successor's first
    // (second 3): the totals at second 3 already hold everything. Counted as a restart
    // it would add 25 more calls.
    let text = [block(1, 4034, 10, 2, 4.0), block(3, 4034, 40, 6, 12.0), block(2, 4034, 25, 4, 8.0)].concat();
    let m = metrics_of(&text);
    assert_eq!(value(&m, &format!("raylog_ray_handler_calls_total{PUT}")), 40.0);
    // The lag stays the newest interval's: 4 probes queued 8 ms, 2 ms each.
    assert!((value(&m, LAG) - 0.002).abs() < 1e-9, "{m}");
    // A later block still counts from the newest totals.
    let text = [text, block(4, 4034, 50, 8, 20.0)].concat();
    assert_eq!(value(&metrics_of(&text), &format!("raylog_ray_handler_calls_total{PUT}")), 50.0);
}

#[test]
fn the_lag_of_a_loop_that_just_got_slow_shows_at_once() {
    // 100 quick probes, then 2 more that queued 400 ms each: Ray's printed mean
    // barely moves (7.8 ms), the interval's is 400 ms.
    let text = [block(1, 4034, 1, 100, 10.0), block(2, 4034, 1, 102, 810.0)].concat();
    let m = metrics_of(&text);
    assert!((value(&m, LAG) - 0.4).abs() < 1e-9, "{m}");
}

#[test]
fn handler_names_past_the_cap_count_as_other() {
    let mut st = State::default();
    for i in 0..HANDLERS + 10 {
        let l = st.handler_label("gcs_server", &format!("H{i}"));
        assert_eq!(l, if i < HANDLERS { format!("H{i}") } else { "other".into() });
    }
    assert_eq!(st.handler_label("gcs_server", "H3"), "H3", "a name keeps its label");
    assert_eq!(st.handler_label("raylet", "H70"), "H70", "the cap is per component");
    for i in 0..COMPONENTS + 3 {
        st.component(&format!("c{i}"));
    }
    assert!(st.handlers.len() <= COMPONENTS);
    assert_eq!(st.component("c-late"), "other");
}

#[test]
fn sentinels_are_no_numbers_and_untouched_handlers_keep_zero() {
    let m = metrics_of(&block(1, 4034, 10, 2, 4.0));
    let pulled = "{node=\"node-a\",component=\"gcs_server\",io_context=\"Main service\",handler=\"RayletLoadPulled\"}";
    assert_eq!(value(&m, &format!("raylog_ray_handler_calls_total{pulled}")), 1.0);
    assert_eq!(value(&m, &format!("raylog_ray_handler_queueing_seconds_total{pulled}")), 0.0);
    assert!(!m.contains("9223372036"), "{m}");
}

/// Feeds one fixture file through a counter; returns the `/metrics` text.
fn metrics_of_fixture(run: &str, name: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(run);
    let session =
        std::fs::read_dir(&dir).unwrap().flatten().find(|e| e.file_name().to_string_lossy().starts_with("session_"));
    let text = std::fs::read(session.unwrap().path().join("logs").join(name)).unwrap();
    let metrics = Arc::new(Metrics::new(&[]));
    let mut counter = RayCounter::new(metrics.clone(), "node-a");
    let meta = classify(name, None);
    let comp = counter.component(&meta.component);
    let mut p = FileParser::new(meta, None, None);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    p.push(&text, &mut corr, &opts, &mut |r| counter.count(comp, r));
    p.finish(&mut corr, &opts, &mut |r| counter.count(comp, r));
    metrics.render()
}

#[test]
fn live_nodes_follow_what_gcs_tells_the_raylet() {
    // Each run's raylet hears of its one node coming up, in the three versions' words.
    for run in ["ray-2.9-plain", "ray-2.40-text", "ray-2.60-text"] {
        let m = metrics_of_fixture(run, "raylet.out");
        assert_eq!(value(&m, "raylog_ray_nodes_alive"), 1.0, "{run}");
    }
    // GCS registers the node, then removes it at `ray stop`.
    for run in ["ray-2.9-plain", "ray-2.40-text"] {
        let m = metrics_of_fixture(run, "gcs_server.out");
        assert_eq!(value(&m, "raylog_ray_nodes_alive"), 0.0, "{run}: registered, then removed");
    }
    // No word about nodes (a worker's stdout): no gauge at all.
    let m = metrics_of("");
    assert!(!m.contains("raylog_ray_nodes_alive"), "{m}");
}

#[test]
fn a_real_gcs_log_counts_its_handlers() {
    // Ray 2.60's GCS prints a block per io_context; the latest Main service block's
    // GcsInMemoryStore.Put total is what the counter ends at (one GCS process).
    let run = "ray-2.60-text";
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(run);
    let session =
        std::fs::read_dir(&dir).unwrap().flatten().find(|e| e.file_name().to_string_lossy().starts_with("session_"));
    let text = std::fs::read_to_string(session.unwrap().path().join("logs/gcs_server.out")).unwrap();
    let last = text.split("Main service Event stats:").last().unwrap();
    let line = last.lines().find(|l| l.starts_with("\tGcsInMemoryStore.Put - ")).expect("a Put line");
    let want: f64 = line["\tGcsInMemoryStore.Put - ".len()..].split(' ').next().unwrap().parse().unwrap();
    let m = metrics_of_fixture(run, "gcs_server.out");
    assert_eq!(value(&m, &format!("raylog_ray_handler_calls_total{PUT}")), want);
    assert!(value(&m, LAG) >= 0.0);
}
