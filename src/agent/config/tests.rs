//! Parsing and validation (every problem named by its key, defaults filled in) and
//! the effective configuration read back.

use super::*;

#[test]
fn minimal_config_from_the_issue() {
    let text = r#"
        [source]
        paths = ["/tmp/ray"]
        state_dir = "/var/lib/raylog"
        start_at = "beginning"
        [[sinks]]
        type = "loki"
        endpoint = "http://127.0.0.1:3100"
        [api]
        address = "127.0.0.1:9095"
    "#;
    let (_, cfg) = parse(text, "t.toml").unwrap();
    assert_eq!(cfg.sinks.len(), 1);
    assert_eq!(cfg.sinks[0].name(), "loki");
    assert_eq!(cfg.api_address.unwrap().port(), 9095);
}

#[test]
fn batches_build_what_the_sinks_read() {
    use crate::agent::batch::Needs;
    let needs =
        |sinks: &str| parse(&format!("[source]\npaths = [\"/tmp/ray\"]\n{sinks}"), "t.toml").unwrap().1.batch_needs();
    let loki = "[[sinks]]\ntype = \"loki\"\nendpoint = \"http://l:3100\"\n";
    let es = "[[sinks]]\ntype = \"elasticsearch\"\nendpoint = \"http://e:9200\"\n";
    assert_eq!(needs(loki), Needs { json: false, fields: true, extra: false });
    let otlp = "[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://c:4318\"\n";
    let json_loki = Needs { json: true, fields: true, extra: false };
    assert_eq!(needs(&format!("{loki}line_format = \"json\"\n")), json_loki);
    assert_eq!(needs(es), Needs { json: true, fields: false, extra: false });
    assert_eq!(needs(&format!("{loki}{es}")), json_loki);
    assert_eq!(needs(otlp), Needs { json: false, fields: true, extra: true });
    assert_eq!(needs(&format!("{otlp}{es}")), Needs::ALL);
    assert_eq!(needs(""), Needs { json: true, fields: false, extra: false }, "stdout when no sink is configured");
}

#[test]
fn batch_sizes_default_by_sink_and_the_buffer_follows_the_batch() {
    let sizes = |rest: &str| {
        let b = parse(&format!("[source]\npaths = [\"/tmp/ray\"]\n{rest}"), "t.toml").unwrap().1.batch;
        (b.max_bytes, b.max_buffer_bytes)
    };
    let loki = "[[sinks]]\ntype = \"loki\"\nendpoint = \"http://l:3100\"\n";
    let es = "[[sinks]]\ntype = \"elasticsearch\"\nendpoint = \"http://e:9200\"\n";
    assert_eq!(sizes(loki), (1 << 20, 8 << 20));
    assert_eq!(sizes(""), (1 << 20, 8 << 20), "stdout");
    assert_eq!(sizes(es), (2 << 20, 16 << 20));
    assert_eq!(sizes(&format!("{loki}{es}")), (2 << 20, 16 << 20));
    // A batch size set alone keeps a valid buffer (it was 16 MiB whatever the size).
    assert_eq!(sizes(&format!("[batch]\nmax_bytes = \"5MiB\"\n{loki}")), (5 << 20, 40 << 20));
    assert_eq!(sizes(&format!("[batch]\nmax_bytes = \"1KiB\"\n{loki}")), (1 << 10, 8 << 10));
    assert_eq!(sizes(&format!("[batch]\nmax_buffer_bytes = \"5MiB\"\n{es}")), (2 << 20, 5 << 20));
}

#[test]
fn every_problem_is_reported_with_its_key() {
    let text = r#"
        [source]
        start_at = "middle"
        poll_interval = "soon"
        [batch]
        max_records = 0
        [api]
        address = "nowhere"
    "#;
    let err = parse(text, "t.toml").unwrap_err().to_string();
    for key in ["source.start_at", "source.poll_interval", "batch.max_records", "api.address"] {
        assert!(err.contains(key), "{key} missing from:\n{err}");
    }
}

#[test]
fn values_beyond_their_range_are_refused_with_the_range() {
    let text = r#"
        [source]
        max_line_bytes = "2GiB"
        forget_after = "99999999999999999999d"
        close_inactive = 0
        [batch]
        max_bytes = "8GiB"
        max_buffer_bytes = "99999999999999GiB"
        [retry]
        max_backoff = 18446744073709551615
        [dead_letter]
        max_bytes = 100
    "#;
    let err = parse(text, "t.toml").unwrap_err().to_string();
    for want in [
        "source.max_line_bytes: 2GiB is out of range: 16B to 1GiB",
        "source.forget_after: \"99999999999999999999d\" is too long a duration",
        "source.close_inactive: 0s is out of range: 100ms to 30d",
        "batch.max_bytes: 8GiB is out of range: 1KiB to 1GiB",
        "batch.max_buffer_bytes: \"99999999999999GiB\" is too large",
        "retry.max_backoff: 18446744073709551615s is out of range: 1ms to 1d",
        "dead_letter.max_bytes: 100B is out of range: 4KiB to 1TiB",
    ] {
        assert!(err.contains(want), "{want:?} missing from:\n{err}");
    }
}

#[test]
fn unknown_keys_are_refused() {
    let err = parse("[source]\npathz = []\n", "t.toml").unwrap_err().to_string();
    assert!(err.contains("pathz"), "{err}");
    let err = parse("[[sinks]]\ntype = \"kafka\"\n", "t.toml").unwrap_err().to_string();
    assert!(err.contains("kafka"), "{err}");
}

#[test]
fn effective_config_round_trips() {
    let text = "[[sinks]]\ntype = \"loki\"\nendpoint = \"http://l:3100\"\nbearer_token = \"s3cret\"\n[[sinks]]\ntype = \"elasticsearch\"\nendpoint = \"http://es:9200\"\n";
    let (raw, cfg) = parse(text, "t.toml").unwrap();
    let eff = effective_toml(&raw, &cfg);
    assert!(!eff.contains("s3cret"), "{eff}");
    let (_, again) = parse(&eff, "effective").unwrap_or_else(|e| panic!("{e}\n{eff}"));
    assert_eq!(again.sinks.len(), 2);
}

#[test]
fn pod_labels_file_gives_labels_and_cluster() {
    // What the kubelet writes for a downwardAPI `metadata.labels` item.
    let f = std::env::temp_dir().join(format!("raylog-labels-{}", std::process::id()));
    std::fs::write(&f, "ray.io/cluster=\"rc-1\"\nray.io/node-type=\"head\"\nteam=\"from-file\"\n").unwrap();
    let text = format!("[node]\nlabels = {{ team = \"ml\" }}\nlabels_file = {:?}\n", f.display().to_string());
    let (raw, cfg) = parse(&text, "t.toml").unwrap();
    std::fs::remove_file(&f).unwrap();
    if std::env::var_os("RAY_CLUSTER_NAME").is_none() {
        assert_eq!(cfg.node.cluster.as_deref(), Some("rc-1"));
    }
    assert_eq!(cfg.node.labels["ray.io/node-type"], "head");
    assert_eq!(cfg.node.labels["team"], "ml", "the config's table wins over the file");
    // check-config shows the merged labels, and its output reads back the same.
    let eff = effective_toml(&raw, &cfg);
    assert!(eff.contains(r#""ray.io/node-type" = "head""#), "{eff}");
    let (_, again) = parse(&eff, "effective").unwrap_or_else(|e| panic!("{e}\n{eff}"));
    assert_eq!(again.node.labels, cfg.node.labels);
    let err = parse("[node]\nlabels_file = \"/nonexistent/labels\"\n", "t.toml").unwrap_err().to_string();
    assert!(err.contains("node.labels_file"), "{err}");
}

#[test]
fn no_sink_means_stdout() {
    let (_, cfg) = parse("", "t.toml").unwrap();
    assert!(matches!(cfg.sinks[..], [SinkConfig::Stdout { .. }]));
}
