//! The deployment examples in `examples/` checked against the code they configure.
//!
//! Every YAML, JSON and NDJSON file must parse; every Kubernetes object must have
//! `apiVersion`, `kind` and `metadata.name`; every raylog config (the `.toml` files
//! and the TOML embedded in ConfigMaps) must pass `raylog check-config` as the built
//! binary runs it; the Grafana dashboard's LogQL may use only the Loki labels and
//! structured metadata raylog emits (read from the Loki sink's defaults, not listed
//! here); the Elasticsearch template and the Kibana saved searches may name only
//! fields that `raylog ship` writes (collected by shipping every fixture). Schema
//! validation of the Kubernetes manifests themselves runs in `.ci/validate_k8s.py`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use raylog::agent::config::{self, SinkConfig};
use serde::Deserialize;
use serde_json::Value;

use crate::util::fixture_dirs;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Every file under `examples/`, sorted.
fn example_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut v = vec![];
    walk(&examples_dir(), &mut v);
    v.sort();
    v
}

fn ext(p: &Path) -> &str {
    p.extension().and_then(|e| e.to_str()).unwrap_or("")
}

fn shown(p: &Path) -> String {
    p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(p).display().to_string()
}

/// The documents of a YAML, JSON or NDJSON file; None for other files.
fn documents(p: &Path) -> Option<Vec<Value>> {
    let text = std::fs::read_to_string(p).unwrap();
    let name = shown(p);
    Some(match ext(p) {
        "yaml" | "yml" => serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{name}: not valid YAML: {e}")))
            .filter(|v| !v.is_null())
            .collect(),
        "json" => vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not valid JSON: {e}"))],
        "ndjson" => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}:{}: not valid JSON: {e}", i + 1)))
            .collect(),
        _ => return None,
    })
}

/// Every parsed document of every data file, with its file.
fn all_documents() -> Vec<(PathBuf, Value)> {
    example_files()
        .into_iter()
        .filter_map(|p| Some((documents(&p)?, p)))
        .flat_map(|(docs, p)| docs.into_iter().map(move |d| (p.clone(), d)))
        .collect()
}

fn in_dir(p: &Path, dir: &str) -> bool {
    p.starts_with(examples_dir().join(dir))
}

#[test]
fn every_data_file_parses_and_every_kubernetes_object_is_complete() {
    let docs = all_documents();
    assert!(docs.len() >= 15, "examples/ has too few documents: {}", docs.len());
    let mut kinds = BTreeSet::new();
    for (p, d) in &docs {
        let k8s_dir = in_dir(p, "kubernetes") || in_dir(p, "kuberay");
        // Grafana provisioning files have a numeric apiVersion and no kind.
        let looks_k8s = d.get("kind").is_some() && d.get("apiVersion").is_some_and(Value::is_string);
        if !(k8s_dir || looks_k8s) {
            continue;
        }
        let what = format!("{}: {}", shown(p), d.get("kind").unwrap_or(&Value::Null));
        assert!(d["apiVersion"].as_str().is_some_and(|s| !s.is_empty()), "{what}: no apiVersion");
        let kind = d["kind"].as_str().unwrap_or_else(|| panic!("{what}: no kind"));
        assert!(d["metadata"]["name"].as_str().is_some_and(|s| !s.is_empty()), "{what}: no metadata.name");
        kinds.insert(kind.to_string());
    }
    for needed in ["DaemonSet", "ConfigMap", "Secret", "ServiceAccount", "RayCluster"] {
        assert!(kinds.contains(needed), "no {needed} in examples/: {kinds:?}");
    }
}

/// Writes a sample downward-API labels file, as the kubelet does for `metadata.labels`.
fn sample_pod_labels(dir: &Path) -> PathBuf {
    let p = dir.join("podinfo-labels");
    std::fs::write(&p, "app.kubernetes.io/created-by=\"kuberay-operator\"\nray.io/cluster=\"raycluster-demo\"\nray.io/node-type=\"worker\"\n").unwrap();
    p
}

/// Runs `raylog check-config` on `toml_text` as the pod would see it: every
/// `{ env = "X" }` secret set, a `labels_file` pointed at a sample labels file.
/// Returns the effective config printed, and whether a labels file was given.
fn check_config(toml_text: &str, name: &str, tmp: &Path) -> (String, bool) {
    let parsed: toml::Table = toml::from_str(toml_text).unwrap_or_else(|e| panic!("{name}: not TOML: {e}"));
    let mut text = toml_text.to_string();
    let mut envs = vec![];
    let mut labels_file = false;
    let mut stack: Vec<&toml::Value> = parsed.values().collect();
    while let Some(v) = stack.pop() {
        match v {
            toml::Value::Table(t) => {
                if let (1, Some(toml::Value::String(e))) = (t.len(), t.get("env")) {
                    envs.push(e.clone());
                }
                if let Some(toml::Value::String(f)) = t.get("labels_file") {
                    labels_file = true;
                    let sample = sample_pod_labels(tmp);
                    text = text.replace(&format!("\"{f}\""), &format!("{:?}", sample.display().to_string()));
                }
                stack.extend(t.values());
            }
            toml::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    let file = tmp.join(name.replace(['/', ' ', ':'], "_"));
    std::fs::write(&file, &text).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_raylog"));
    cmd.arg("check-config").arg(&file).env_remove("NODE_NAME").env_remove("RAY_CLUSTER_NAME");
    for e in &envs {
        cmd.env(e, "placeholder-secret");
    }
    let out = cmd.output().expect("run raylog check-config");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "raylog check-config refused {name}:\n{}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("placeholder-secret"), "{name}: check-config printed a secret:\n{stdout}");
    (stdout, labels_file)
}

struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("raylog-it-examples-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every raylog config in `examples/`: `.toml` files and ConfigMap `*.toml` keys.
fn example_configs() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = example_files()
        .into_iter()
        .filter(|p| ext(p) == "toml")
        .map(|p| (shown(&p), std::fs::read_to_string(&p).unwrap()))
        .collect();
    for (p, d) in all_documents() {
        if d["kind"] == "ConfigMap" {
            for (key, val) in d["data"].as_object().into_iter().flatten() {
                if key.ends_with(".toml") {
                    v.push((
                        format!("{} ConfigMap {} key {key}", shown(&p), d["metadata"]["name"]),
                        val.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    v
}

#[test]
fn check_config_accepts_every_config_in_examples() {
    let tmp = Tmp::new("configs");
    let configs = example_configs();
    assert!(configs.len() >= 5, "too few configs found: {:?}", configs.iter().map(|c| &c.0).collect::<Vec<_>>());
    for (name, text) in &configs {
        let (effective, labels_file) = check_config(text, name, &tmp.0);
        // The sidecar takes its cluster from the pod label ray.io/cluster.
        if labels_file {
            assert!(
                effective.contains("cluster = \"raycluster-demo\""),
                "{name}: no cluster from the pod labels:\n{effective}"
            );
        }
    }
    // And the check can fail: a key that does not exist is refused.
    let refused = std::panic::catch_unwind(|| check_config("[source]\npathz = []\n", "bad.toml", &tmp.0));
    assert!(refused.is_err(), "check-config accepted an unknown key");
}

/// The Loki labels and structured metadata raylog sends with the default sink
/// settings (which every Loki sink in examples/ keeps), read from the validated config.
fn loki_emits() -> (BTreeSet<String>, BTreeSet<String>) {
    let (_, cfg) = config::parse("[[sinks]]\ntype = \"loki\"\nendpoint = \"http://loki:3100\"\n", "t").unwrap();
    let SinkConfig::Loki(l) = &cfg.sinks[0] else { panic!("not a Loki sink") };
    (l.labels.keys().cloned().collect(), l.structured_metadata.iter().cloned().collect())
}

/// Every LogQL expression in a Grafana dashboard: panel targets and variable queries.
/// Panels and targets on the Prometheus datasource (the Ray health row) hold PromQL,
/// checked in `alerts.rs`'s way by `dashboard_promql_parses` below.
fn logql_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if m.get("datasource").is_some_and(|d| d["type"] == "prometheus") => {}
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "stream", Value::String(s)) => out.push(s.clone()),
                    _ => logql_of(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| logql_of(x, out)),
        _ => {}
    }
}

/// The label names a LogQL expression uses: in `{…}` stream selectors, in `| name op`
/// label filters, and in `by (…)` / `without (…)` groupings. Quoted strings (line
/// filters, values) are skipped; Grafana's `${var}` is not a selector.
fn logql_names(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let b = expr.as_bytes();
    let (mut selector, mut filters) = (BTreeSet::new(), BTreeSet::new());
    let ident = |i: usize| {
        let end = (i..b.len()).find(|&j| !(b[j].is_ascii_alphanumeric() || b[j] == b'_')).unwrap_or(b.len());
        (expr[i..end].to_string(), end)
    };
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        i
    };
    let (mut i, mut in_sel) = (0, false);
    while i < b.len() {
        match b[i] {
            b'"' | b'`' => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'{' if i == 0 || b[i - 1] != b'$' => {
                in_sel = true;
                i += 1;
            }
            b'}' => {
                in_sel = false;
                i += 1;
            }
            c if in_sel && (c.is_ascii_alphabetic() || c == b'_') => {
                let (name, end) = ident(i);
                selector.insert(name);
                i = end;
            }
            b'|' if !in_sel => {
                let j = skip_ws(i + 1);
                let (name, end) = ident(j);
                let k = skip_ws(end);
                if !name.is_empty() && k < b.len() && matches!(b[k], b'=' | b'!' | b'>' | b'<') {
                    filters.insert(name);
                }
                i = end.max(i + 1);
            }
            c if c.is_ascii_alphabetic() && !in_sel => {
                let (word, end) = ident(i);
                let j = skip_ws(end);
                if (word == "by" || word == "without") && b.get(j) == Some(&b'(') {
                    let close = expr[j..].find(')').map_or(b.len(), |c| j + c);
                    for n in expr[j + 1..close].split(',').map(str::trim).filter(|n| !n.is_empty()) {
                        filters.insert(n.to_string());
                    }
                    i = close;
                } else {
                    i = end;
                }
            }
            _ => i += 1,
        }
    }
    (selector, filters)
}

#[test]
fn logql_names_are_found() {
    let (s, f) = logql_names(
        r#"sum by (component, actor_id) (count_over_time({service_name="ray", node=~"$node"} |= "a | b=1" | job_id=~"${job_id}.*" |~ "x" [5m]))"#,
    );
    assert_eq!(s, BTreeSet::from(["service_name".into(), "node".into()]));
    assert_eq!(f, BTreeSet::from(["component".into(), "actor_id".into(), "job_id".into()]));
}

#[test]
fn dashboard_queries_use_only_what_raylog_emits() {
    let (labels, metadata) = loki_emits();
    let dashboards: Vec<(PathBuf, Value)> =
        all_documents().into_iter().filter(|(p, d)| in_dir(p, "grafana") && d.get("panels").is_some()).collect();
    assert!(!dashboards.is_empty(), "no Grafana dashboard in examples/grafana");
    for (p, d) in dashboards {
        let mut exprs = vec![];
        logql_of(&d, &mut exprs);
        assert!(exprs.len() >= 5, "{}: too few queries: {exprs:?}", shown(&p));
        let mut filtered = BTreeSet::new();
        for e in &exprs {
            let (sel, filters) = logql_names(e);
            for l in &sel {
                assert!(
                    labels.contains(l),
                    "{}: stream selector label {l:?} is not one raylog sends ({labels:?}) in {e}",
                    shown(&p)
                );
            }
            for f in &filters {
                assert!(
                    labels.contains(f) || metadata.contains(f),
                    "{}: {f:?} is neither a label nor structured metadata raylog sends in {e}",
                    shown(&p)
                );
            }
            filtered.extend(filters);
        }
        assert!(filtered.contains("actor_id"), "{}: no query filters on actor_id", shown(&p));
        let vars: BTreeSet<&str> =
            d["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
        for v in ["cluster", "node", "job_id", "actor_id"] {
            assert!(vars.contains(v), "{}: no ${v} variable: {vars:?}", shown(&p));
        }
    }
}

/// Every top-level field of the records `raylog ship` writes, shipping every fixture
/// with a cluster and a label set (the members the agent adds) and short lines (so
/// some are `truncated`).
fn shipped_fields() -> BTreeSet<String> {
    let tmp = Tmp::new("ship");
    let out = tmp.0.join("records.ndjson");
    let cfg = tmp.0.join("raylog.toml");
    let mut paths: Vec<String> = fixture_dirs().iter().map(|d| format!("{:?}", d.display().to_string())).collect();
    // Ray's posted events beside the logs, as bare events in a spool segment: their
    // task ranges give the prints `task_attempt`.
    let spool = tmp.0.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let mut events = String::new();
    let posts = crate::util::fixtures().join("ray-2.60-events/posts");
    let mut bodies: Vec<_> = std::fs::read_dir(&posts).unwrap().flatten().map(|e| e.path()).collect();
    bodies.sort();
    for b in bodies.iter().filter(|p| p.extension().is_some_and(|x| x == "json")) {
        for e in serde_json::from_slice::<Vec<Value>>(&std::fs::read(b).unwrap()).unwrap() {
            events.push_str(&format!("{e}\n"));
        }
    }
    std::fs::write(spool.join("ray_events-000000000001.ndjson"), events).unwrap();
    paths.push(format!("{:?}", spool.display().to_string()));
    std::fs::write(
        &cfg,
        format!(
            "[source]\npaths = [{}]\nstate_dir = {:?}\nmax_line_bytes = 256\n[node]\nname = \"n1\"\ncluster = \"c1\"\nlabels = {{ team = \"ml\" }}\n[[sinks]]\ntype = \"file\"\npath = {:?}\n[api]\naddress = \"\"\n",
            paths.join(", "),
            tmp.0.join("state").display().to_string(),
            out.display().to_string()
        ),
    )
    .unwrap();
    let st =
        Command::new(env!("CARGO_BIN_EXE_raylog")).args(["ship", "--once", "--config"]).arg(&cfg).output().unwrap();
    assert!(st.status.success(), "raylog ship --once failed: {}", String::from_utf8_lossy(&st.stderr));
    let mut fields = BTreeSet::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        fields.extend(v.as_object().unwrap().keys().cloned());
    }
    assert!(fields.len() > 15, "too few fields shipped: {fields:?}");
    fields
}

#[test]
fn elasticsearch_and_kibana_name_only_record_fields() {
    let fields = shipped_fields();
    let es = examples_dir().join("elasticsearch");
    let template = &documents(&es.join("index-template.json")).unwrap()[0];
    let props = template["template"]["mappings"]["properties"].as_object().unwrap();
    // The sink adds @timestamp to each document (sinks/elasticsearch/encode.rs).
    let mapped: BTreeSet<String> = props.keys().cloned().collect();
    for name in &mapped {
        assert!(
            name == "@timestamp" || fields.contains(name),
            "index-template.json maps {name:?}, which no record has; fields: {fields:?}"
        );
    }
    for f in &fields {
        assert!(
            mapped.contains(f),
            "index-template.json does not map the record field {f:?}: dynamic mapping would guess its type"
        );
    }
    for id in ["node_id", "job_id", "worker_id", "actor_id", "task_id"] {
        assert_eq!(props[id]["type"], "keyword", "{id} must be a keyword");
    }
    assert_eq!(props["message"]["type"], "text");
    assert_eq!(props["@timestamp"]["type"], "date");
    for obj in documents(&es.join("kibana-saved-objects.ndjson")).unwrap() {
        if obj["type"] == "search" {
            for c in obj["attributes"]["columns"].as_array().unwrap() {
                let c = c.as_str().unwrap();
                assert!(fields.contains(c), "saved search {} shows {c:?}, not a record field", obj["id"]);
            }
        }
    }
}

/// The files the examples point at exist: the compose file's bind mounts and build
/// context, the Dockerfile's `COPY` sources (and `.dockerignore` does not hide them),
/// the saved searches' data view, and the ILM policy the template names.
#[test]
fn examples_refer_to_files_and_objects_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compose_dir = examples_dir().join("compose");
    let compose = &documents(&compose_dir.join("docker-compose.yaml")).unwrap()[0];
    let mut mounts = 0;
    for (name, svc) in compose["services"].as_object().unwrap() {
        for v in svc["volumes"].as_array().into_iter().flatten() {
            let src = v.as_str().unwrap().split(':').next().unwrap();
            if src.starts_with('.') {
                assert!(compose_dir.join(src).exists(), "compose service {name} mounts {src}, which does not exist");
                mounts += 1;
            }
        }
        if let Some(ctx) = svc["build"]["context"].as_str() {
            let df = svc["build"]["dockerfile"].as_str().unwrap_or("Dockerfile");
            assert!(compose_dir.join(ctx).join(df).is_file(), "compose service {name} builds a missing {ctx}/{df}");
        }
    }
    assert!(mounts >= 5, "too few bind mounts checked: {mounts}");

    let ignored: Vec<String> = std::fs::read_to_string(root.join(".dockerignore"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().trim_end_matches('/').to_string())
        .collect();
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    for line in dockerfile.lines().filter(|l| l.starts_with("COPY ") && !l.contains("--from")) {
        let words: Vec<&str> = line.split_whitespace().filter(|w| !w.starts_with("--")).collect();
        for src in &words[1..words.len() - 1] {
            assert!(root.join(src).exists(), "Dockerfile copies {src}, which does not exist");
            assert!(
                !ignored.iter().any(|i| src.starts_with(i.as_str())),
                "Dockerfile copies {src}, which .dockerignore leaves out"
            );
        }
    }

    let es = examples_dir().join("elasticsearch");
    let objects = documents(&es.join("kibana-saved-objects.ndjson")).unwrap();
    let ids: BTreeSet<&str> = objects.iter().filter_map(|o| o["id"].as_str()).collect();
    for o in objects.iter().filter(|o| o["type"] == "search") {
        for r in o["references"].as_array().unwrap() {
            assert!(
                ids.contains(r["id"].as_str().unwrap()),
                "saved search {} refers to a missing {}",
                o["id"],
                r["id"]
            );
        }
        let source: Value =
            serde_json::from_str(o["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"].as_str().unwrap())
                .unwrap();
        assert_eq!(source["query"]["language"], "kuery", "saved search {}", o["id"]);
    }
    let template = &documents(&es.join("index-template.json")).unwrap()[0];
    let policy = template["template"]["settings"]["index"]["lifecycle"]["name"].as_str().unwrap();
    let compose_text = std::fs::read_to_string(compose_dir.join("docker-compose.yaml")).unwrap();
    assert!(
        compose_text.split_whitespace().any(|w| w == format!("http://elasticsearch:9200/_ilm/policy/{policy}")),
        "the compose demo does not install the ILM policy {policy}"
    );
}

/// The dashboard's Ray health row: PromQL that parses, on the Prometheus datasource
/// variable, naming the agent's metrics, each panel linking to its Loki records.
#[test]
fn dashboard_promql_parses() {
    let p = examples_dir().join("grafana/dashboards/ray-logs.json");
    let d = &documents(&p).unwrap()[0];
    let panels: Vec<&Value> =
        d["panels"].as_array().unwrap().iter().filter(|x| x["datasource"]["type"] == "prometheus").collect();
    assert!(panels.len() >= 6, "no Ray health row: {} Prometheus panels", panels.len());
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(panel["datasource"]["uid"], "${prometheus}", "{title}");
        assert!(
            panel["links"][0]["url"].as_str().is_some_and(|u| u.contains("var-filter=")),
            "{title}: no link to Loki"
        );
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap().replace("$__rate_interval", "5m").replace("$node", ".*");
            promql_parser::parser::parse(&expr).unwrap_or_else(|e| panic!("{title}: {e}: {expr}"));
            assert!(expr.contains("raylog_"), "{title}: {expr}");
        }
    }
}

/// The OpenTelemetry Collector example: every component a pipeline (or
/// `service.extensions`) names is defined, every defined receiver, processor, exporter
/// and extension is used, every authenticator is a started extension, `memory_limiter`
/// comes first, and raylog's config beside it sends to the Collector's OTLP/HTTP
/// receiver port. Its keys are checked against the components' schemas by
/// `.ci/validate_otelcol.py`; `raylog check-config` runs on its `raylog.toml` above.
#[test]
fn otel_collector_example_is_wired() {
    let dir = examples_dir().join("otel-collector");
    let c = &documents(&dir.join("collector.yaml")).unwrap()[0];
    let names = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().map(|x| x.as_str().unwrap().to_string()).collect()
    };
    let defined = |kind: &str| -> BTreeSet<String> {
        c[kind].as_object().into_iter().flatten().map(|(k, _)| k.clone()).collect()
    };
    let service = &c["service"];
    let mut used: std::collections::BTreeMap<&str, BTreeSet<String>> = Default::default();
    used.entry("extensions").or_default().extend(names(&service["extensions"]));
    let pipelines = service["pipelines"].as_object().expect("service.pipelines");
    assert!(pipelines.contains_key("logs"), "no logs pipeline: {:?}", pipelines.keys());
    for (name, p) in pipelines {
        for kind in ["receivers", "processors", "exporters"] {
            for id in names(&p[kind]) {
                assert!(defined(kind).contains(&id), "pipeline {name}: {kind} {id:?} is not defined");
                used.entry(kind).or_default().insert(id);
            }
        }
        let procs = names(&p["processors"]);
        assert_eq!(procs.first().map(String::as_str), Some("memory_limiter"), "pipeline {name}: memory_limiter first");
        assert!(procs.iter().any(|x| x == "batch"), "pipeline {name}: no batch processor");
    }
    for kind in ["receivers", "processors", "exporters", "extensions"] {
        for id in defined(kind) {
            assert!(used.get(kind).is_some_and(|u| u.contains(&id)), "{kind}.{id} is defined but never used");
        }
    }
    for (id, e) in c["exporters"].as_object().unwrap() {
        if let Some(a) = e["auth"]["authenticator"].as_str() {
            assert!(used["extensions"].contains(a), "exporter {id}: authenticator {a:?} is not in service.extensions");
        }
    }
    assert_eq!(c["exporters"]["otlphttp/loki"]["endpoint"], "http://loki:3100/otlp", "Loki's native OTLP endpoint");

    // raylog.toml's otlp sink points at the receiver's HTTP port.
    let http = c["receivers"]["otlp"]["protocols"]["http"]["endpoint"].as_str().expect("an OTLP/HTTP receiver");
    let port = http.rsplit(':').next().unwrap();
    let raylog: toml::Table = toml::from_str(&std::fs::read_to_string(dir.join("raylog.toml")).unwrap()).unwrap();
    let sinks = raylog["sinks"].as_array().unwrap();
    let otlp = sinks.iter().find(|s| s["type"].as_str() == Some("otlp")).expect("raylog.toml has no otlp sink");
    let endpoint = otlp["endpoint"].as_str().unwrap();
    let authority = endpoint.split("://").nth(1).unwrap().split('/').next().unwrap();
    assert_eq!(
        authority.rsplit(':').next(),
        Some(port),
        "raylog.toml sends to {endpoint}, the Collector listens on {http}"
    );
}

/// The Tempo data source and the Loki one link both ways on fields the sinks send:
/// trace to logs by the `span_id` the Loki sink puts in structured metadata by
/// default, logs to trace by `trace_id`; each names the other's uid.
#[test]
fn tempo_and_loki_link_on_the_ids_raylog_sends() {
    let docs = all_documents();
    let source = |ty: &str| {
        docs.iter()
            .filter(|(p, _)| in_dir(p, "grafana"))
            .flat_map(|(_, d)| d["datasources"].as_array().cloned().unwrap_or_default())
            .find(|d| d["type"] == ty)
            .unwrap_or_else(|| panic!("no {ty} datasource in examples/grafana"))
    };
    let (tempo, loki) = (source("tempo"), source("loki"));
    let logs = &tempo["jsonData"]["tracesToLogsV2"];
    assert_eq!(logs["datasourceUid"], loki["uid"]);
    let query = logs["query"].as_str().unwrap();
    assert!(query.contains(r#"span_id="${__span.spanId}""#), "{query}");
    // The stream selector matches the Loki sink's default labels.
    assert!(query.starts_with(r#"{service_name="ray"}"#), "{query}");
    let derived = loki["jsonData"]["derivedFields"].as_array().unwrap();
    let to_trace = derived.iter().find(|f| f["datasourceUid"] == tempo["uid"]).expect("a derived field to Tempo");
    assert_eq!(
        (to_trace["matcherType"].as_str(), to_trace["matcherRegex"].as_str()),
        (Some("label"), Some("trace_id"))
    );
    // Both names are structured metadata the Loki sink sends by default.
    let cfg: raylog::agent::sinks::loki::config::LokiRaw = toml::from_str("endpoint = \"http://l:3100\"").unwrap();
    let mut p = raylog::agent::config::values::Problems::default();
    let c = cfg.validate("sinks[0]", &mut p);
    for f in ["trace_id", "span_id"] {
        assert!(c.structured_metadata.iter().any(|m| m == f), "{f} not in {:?}", c.structured_metadata);
    }
}
