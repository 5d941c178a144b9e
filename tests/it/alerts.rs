//! The alert rules in `examples/prometheus/` and `examples/loki/`, checked the way
//! Prometheus and Loki would read them.
//!
//! Every PromQL expression is parsed by `promql-parser` and may name only metrics the
//! agent exports (raylog's own, read from `src/agent/metrics.rs`, and the Ray health
//! metrics of issue #14); the PrometheusRule object holds exactly the plain file's
//! groups. Every LogQL expression runs as an instant query against a real Loki: a
//! syntax error is Loki's 400 and fails the test (`#[ignore]`d: it needs
//! `RAYLOG_LOKI_BIN`, see `loki_real`; the checks of the Loki rules that need no Loki
//! are a test of their own).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::loki_real::RealLoki;

/// The Ray health metrics the agent exports (issue #14, part 3).
const RAY_METRICS: &[&str] = &[
    "raylog_ray_worker_deaths_total",
    "raylog_ray_oom_kills_total",
    "raylog_ray_actor_failures_total",
    "raylog_ray_actor_restarts_total",
    "raylog_ray_node_deaths_total",
    "raylog_ray_gcs_health_failures_total",
    "raylog_ray_task_failures_total",
    "raylog_ray_records_total",
    // Issue #25: from Ray's Event stats: blocks and node liveness.
    "raylog_ray_handler_calls_total",
    "raylog_ray_handler_execution_seconds_total",
    "raylog_ray_handler_queueing_seconds_total",
    "raylog_ray_event_loop_lag_seconds",
    "raylog_ray_nodes_alive",
];

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn yaml(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    Value::deserialize(serde_yaml_ng::Deserializer::from_str(&text)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `(group, alert, expr)` of every rule in a rules document's `groups`.
fn rules(groups: &Value) -> Vec<(String, String, String)> {
    let mut out = vec![];
    for g in groups.as_array().expect("groups is a list") {
        for r in g["rules"].as_array().expect("rules is a list") {
            let alert = r["alert"].as_str().expect("an alerting rule").to_string();
            assert_eq!(r["labels"]["severity"].as_str().map(|s| !s.is_empty()), Some(true), "{alert}: severity");
            assert!(r["annotations"]["summary"].is_string(), "{alert}: summary");
            out.push((g["name"].as_str().unwrap().to_string(), alert, r["expr"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// The metric names raylog's own `/metrics` renders, from the source.
fn own_metrics() -> BTreeSet<String> {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent/metrics.rs")).unwrap();
    let names: BTreeSet<String> =
        Regex::new(r#""(raylog_[a-z_]+)""#).unwrap().captures_iter(&src).map(|c| c[1].to_string()).collect();
    assert!(names.contains("raylog_bytes_behind"), "metrics.rs moved? {names:?}");
    names
}

#[test]
fn prometheus_rules_parse_and_name_only_exported_metrics() {
    let dir = examples().join("prometheus");
    let plain = yaml(&dir.join("raylog-alerts.rules.yaml"));
    let object = yaml(&dir.join("raylog-prometheusrule.yaml"));
    assert_eq!(object["kind"], "PrometheusRule");
    assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(object["spec"]["groups"], plain["groups"], "the PrometheusRule must hold the plain file's groups");

    let mut known = own_metrics();
    let src =
        |f: &str| std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent").join(f)).unwrap();
    let ray_src = src("ray_metrics.rs") + &src("ray_latency.rs");
    for m in RAY_METRICS {
        assert!(ray_src.contains(&format!("\"{m}\"")), "{m} is rendered by neither ray_metrics.rs nor ray_latency.rs");
    }
    known.extend(RAY_METRICS.iter().map(|s| s.to_string()));
    let metric = Regex::new(r"\braylog_[a-z_]+").unwrap();
    let all = rules(&plain["groups"]);
    let alerts: BTreeSet<&str> = all.iter().map(|(_, a, _)| a.as_str()).collect();
    for need in [
        "RayOOMKills",
        "RayWorkerDeaths",
        "RayNodeDeath",
        "RayGcsHealthFailures",
        "RayErrorRateSpike",
        "RayGcsEventLoopLag",
        "RayGcsHandlerSlower",
        "RayRayletLagRising",
        "RayGcsLagHeadingForOneSecond",
        "RayLiveNodesDropping",
    ] {
        assert!(alerts.contains(need), "no {need}: {alerts:?}");
    }
    let mut used = BTreeSet::new();
    for (_, alert, expr) in &all {
        promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{alert}: PromQL does not parse: {e}\n{expr}"));
        for m in metric.find_iter(expr) {
            assert!(known.contains(m.as_str()), "{alert}: {} is not a metric raylog exports", m.as_str());
            used.insert(m.as_str().to_string());
        }
    }
    for own in ["raylog_bytes_behind", "raylog_sink_dead_letters_total", "raylog_sink_retries_total"] {
        assert!(used.contains(own), "no alert on {own}");
    }
    // The parser does refuse what Prometheus refuses.
    assert!(promql_parser::parser::parse("sum by (node) (rate(raylog_ray_oom_kills_total[5m])").is_err());
}

/// Loki's answer to an instant query: status and body.
fn loki_query(base: &str, query: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(format!("{base}/loki/api/v1/query"))
            .query(&[("query", query)])
            .send()
            .await
            .expect("Loki answers");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    })
}

/// The Loki rules: `(group, alert, expression)`.
fn loki_rules() -> Vec<(String, String, String)> {
    rules(&yaml(&examples().join("loki/raylog-alerts.rules.yaml"))["groups"])
}

/// What needs no Loki: the Loki rules cover the Prometheus ones' `ray-health` alerts
/// and select streams only by labels raylog sends.
#[test]
fn loki_rules_cover_the_ray_health_alerts_and_select_by_raylog_labels() {
    let all = loki_rules();
    let names: BTreeSet<&str> = all.iter().map(|(_, a, _)| a.as_str()).collect();
    let prom = rules(&yaml(&examples().join("prometheus/raylog-alerts.rules.yaml"))["groups"]);
    for (_, alert, _) in prom.iter().filter(|(g, _, _)| g == "ray-health") {
        assert!(names.contains(alert.as_str()), "the Loki rules lack {alert}");
    }
    // Streams are selected only by the labels raylog sends by default.
    let selector = Regex::new(r"\{([^}]*)\}").unwrap();
    let label = Regex::new(r"([a-z_]+)\s*(=~|!~|!=|=)").unwrap();
    for (_, alert, expr) in &all {
        for sel in selector.captures_iter(expr).filter(|c| c[1].contains('"')) {
            for l in label.captures_iter(&sel[1]) {
                assert!(
                    ["service_name", "cluster", "node", "component", "level"].contains(&&l[1]),
                    "{alert}: {} is not a label raylog sends",
                    &l[1]
                );
            }
        }
    }
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn loki_rules_are_valid_logql_for_a_real_loki() {
    let all = loki_rules();
    let loki = RealLoki::start("alerts_logql", "");
    for (_, alert, expr) in &all {
        let (status, body) = loki_query(&loki.url(), expr);
        assert_eq!(status, 200, "{alert}: Loki refused the expression:\n{expr}\n{body}");
    }
    let (status, _) = loki_query(&loki.url(), r#"sum(count_over_time({service_name="ray"} |~ [5m]))"#);
    assert_eq!(status, 400, "a syntax error must be refused");
    gcs_lag_rule_reads_a_real_block(&loki, &all);
}

/// The latency rules over a real Ray log shipped into the real Loki read what Ray
/// printed: `RayGcsEventLoopLag` GCS's `event_loop_lag_probe … Queueing time: mean =
/// 2.24ms` in fixtures/ray-2.60-text's `Main service` block (moved to recent days),
/// `RayRayletLagRising` the raylet's 3.06 ms, `RayLiveNodesDropping` GCS's removal.
fn gcs_lag_rule_reads_a_real_block(loki: &RealLoki, all: &[(String, String, String)]) {
    let expr = &all.iter().find(|(_, a, _)| a == "RayGcsEventLoopLag").expect("RayGcsEventLoopLag").2;
    let tmp = crate::ship_loki::Scratch::new("alerts-lag");
    let fixture = crate::util::fixture_dirs().into_iter().find(|d| d.ends_with("ray-2.60-text")).unwrap();
    crate::tree::shifted_copy(crate::util::logs_dir(&fixture).parent().unwrap(), &tmp.0.join("ray"));
    let cfg = tmp.0.join("c.toml");
    let text = format!(
        "[source]\npaths = [{:?}]\nstate_dir = {:?}\n[node]\nname = \"n1\"\ncluster = \"c1\"\n[api]\naddress = \"\"\n\
         [[sinks]]\ntype = \"loki\"\nendpoint = \"{}\"\n",
        tmp.0.join("ray"),
        tmp.0.join("state"),
        loki.url()
    );
    std::fs::write(&cfg, text).unwrap();
    crate::ship_loki::ship_once(&cfg);
    loki.flush();
    // The rule with its window widened to the fixture's and no threshold.
    let probe = expr.replace("[10m]", "[7d]").replace("> 100", ">= 0");
    assert_ne!(&probe, expr, "the rule's window or threshold changed: update this test");
    assert_eq!(instant_value(loki, &probe), "2.24");
    // The raylet's block: `[state-dump] \tevent_loop_lag_probe … Queueing time: mean
    // = 3.06ms`; the rule's first operand, over the fixture's days.
    let rising = &all.iter().find(|(_, a, _)| a == "RayRayletLagRising").expect("RayRayletLagRising").2;
    let (now, _) = rising.split_once("\n> 1.5 *").expect("RayRayletLagRising: `max_over_time(…) > 1.5 * …`");
    assert_eq!(instant_value(loki, &now.replace("[30m]", "[7d]")), "3.06");
    // GCS's one removal of the node at `ray stop`: `, death reason = EXPECTED_TERMINATION`.
    let dropping = &all.iter().find(|(_, a, _)| a == "RayLiveNodesDropping").expect("RayLiveNodesDropping").2;
    let probe = dropping.replace("[10m]", "[7d]");
    assert_ne!(&probe, dropping, "the rule's window changed: update this test");
    assert_eq!(instant_value(loki, &probe), "1");
}

/// The one value of an instant query that must find exactly one series.
fn instant_value(loki: &RealLoki, query: &str) -> String {
    let (status, body) = loki_query(&loki.url(), query);
    assert_eq!(status, 200, "{query}\n{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let result = v["data"]["result"].as_array().unwrap_or_else(|| panic!("{query}\n{body}"));
    assert_eq!(result.len(), 1, "{query}\n{body}");
    result[0]["value"][1].as_str().unwrap_or_default().to_string()
}
