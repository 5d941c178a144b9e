//! The Loki sink against the in-process Loki ([`crate::testkit::loki`]), which decodes
//! pushes independently of the encoder: labels, structured metadata, lines and
//! timestamps as Loki would store them, in both encodings; headers; and how each kind
//! of failure is classified.

use std::collections::BTreeMap;
use std::sync::Arc;

use raylog_parsers::{classify, Correlator, FileParser, Id, Options};

use super::config::{LokiConfig, LokiRaw};
use super::service::LokiSink;
use crate::agent::batch::{doc_id, Batch, NodeIdentity};
use crate::agent::config::values::{DurationValue, Problems, Secret, SizeValue};
use crate::agent::sinks::http::BasicAuthRaw;
use crate::agent::sinks::{DeadReason, SendError};
use crate::testkit::loki::{self, parse_labels, LokiServer, ReceivedEntry};

const SESSION: &str = "session_2026-11-30_09-31-29_637100_6988";
const NODE_ID: &str = "6ba31c7f3b6d3e6b67842237a3fd0e501d70ed73d834f47f88387831";
const WORKER: &str = "b05dee30f19aedb89a3480044f69be298e155d554023d859c1a3c1ee";
const ACTOR: &str = "679cb010f4ca357ec14d9a0003000000";
const ACTOR_OUT: &str = "worker-b05dee30f19aedb89a3480044f69be298e155d554023d859c1a3c1ee-03000000-8429.out";
const SUPERVISOR_ERR: &str = "worker-c16b0517244fb39136270405dc900c803d864f847dd4b87db4406975-01000000-7360.err";
/// When records without a time of their own were read.
const NOW_NS: i64 = 1_796_031_200_123_456_789;

const RAYLET: &str = "\
[2026-11-30 09:31:42,357 W 7303 7314] (raylet) store.cc:366: Disconnecting client due to connection error with code 2: End of file
[2026-11-30 09:31:32,630 I 7303 7303] (raylet) main.cc:711: Setting node ID node_id=6ba31c7f3b6d3e6b67842237a3fd0e501d70ed73d834f47f88387831
[2026-11-30 09:31:32,619 I 7303 7303] (raylet) main.cc:283: Setting cluster ID to: 5291400a0757838c3de34efc4091f4749f35afbda958c173335f5c7b
";
const ACTOR_PRINTS: &str = ":job_id:03000000\n:actor_name:Counter\ncounter at 1\ncounter at 2\n";
const SUPERVISOR: &str = "2026-11-30 09:31:41,569\tINFO job_supervisor.py:375 -- Submitting job with RAY_ADDRESS = 192.0.2.2:6379 job_id=01000000 worker_id=c16b0517244fb39136270405dc900c803d864f847dd4b87db4406975 node_id=6ba31c7f3b6d3e6b67842237a3fd0e501d70ed73d834f47f88387831 actor_id=ffd3b03c02a40c8c7861c09d01000000 task_id=16310a0f0a45af5cffd3b03c02a40c8c7861c09d01000000 task_name=JobSupervisor.run task_func_name=ray.dashboard.modules.job.job_supervisor.JobSupervisor.run actor_name=_ray_internal_job_actor_raysubmit_etl_001 timestamp_ns=1796031101569595817\n";
const GCS_ERROR: &str = "[2026-11-30 09:31:45,101 E 6998 6998] (gcs_server) gcs_actor_manager.cc:1083: Actor creation failed actor_id=679cb010f4ca357ec14d9a0003000000\n";

fn parse_into(batch: &mut Batch, corr: &mut Correlator, rel_path: &str, text: &str) {
    let mut p = FileParser::new(classify(rel_path, Some(SESSION)), Id::parse(NODE_ID.as_bytes()), None);
    let opts = Options::default();
    p.push(text.as_bytes(), corr, &opts, &mut |r| batch.push(r, NOW_NS, doc_id(rel_path, r.offset, r.message)));
    p.finish(corr, &opts, &mut |r| batch.push(r, NOW_NS, doc_id(rel_path, r.offset, r.message)));
}

/// Seven records: raylet (a WARNING, then two INFO lines in reverse time order), two
/// prints of an actor (its worker linked to the actor as the core-worker log would),
/// a job supervisor's structured line with every id, and a GCS ERROR.
fn ray_batch(node: &str, cluster: Option<&str>) -> Batch {
    let node = Arc::new(NodeIdentity::new(node.into(), cluster.map(String::from), BTreeMap::new()));
    let mut b = Batch::new(1, node);
    let mut corr = Correlator::new();
    assert!(corr.link(Id::parse(WORKER.as_bytes()).unwrap(), Id::parse(ACTOR.as_bytes()).unwrap()));
    parse_into(&mut b, &mut corr, "raylet.out", RAYLET);
    parse_into(&mut b, &mut corr, ACTOR_OUT, ACTOR_PRINTS);
    parse_into(&mut b, &mut corr, SUPERVISOR_ERR, SUPERVISOR);
    parse_into(&mut b, &mut corr, "gcs_server.out", GCS_ERROR);
    assert_eq!(b.len(), 7);
    b
}

fn config(server: &LokiServer, edit: impl FnOnce(&mut LokiRaw)) -> LokiConfig {
    config_for(server.url(), edit)
}

/// The sink's config for `endpoint`, as `edit` leaves the defaults.
fn config_for(endpoint: String, edit: impl FnOnce(&mut LokiRaw)) -> LokiConfig {
    // The records here are from 2026-11-30: keep them inside the age limit for good.
    let mut raw = LokiRaw {
        endpoint: Some(endpoint),
        reject_old_after: Some(DurationValue::Text("3650d".into())),
        ..LokiRaw::default()
    };
    edit(&mut raw);
    let mut p = Problems::default();
    let cfg = raw.validate("sinks[0]", &mut p);
    assert!(p.is_empty(), "{p}");
    cfg
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn find<'a>(entries: &'a [ReceivedEntry], line_start: &str) -> &'a ReceivedEntry {
    entries.iter().find(|e| e.line.starts_with(line_start)).unwrap_or_else(|| panic!("no line {line_start:?}"))
}

fn ns(rfc3339: &str) -> i64 {
    rfc3339.parse::<jiff::Timestamp>().unwrap().as_nanosecond() as i64
}

/// The millisecond of a Loki entry time (below it, the sink adds its tie-breaker).
fn ms(ns: i64) -> i64 {
    ns.div_euclid(1_000_000)
}

fn default_labels(component: &str, level: Option<&str>) -> BTreeMap<String, String> {
    let mut m = map(&[("service_name", "ray"), ("cluster", "c1"), ("node", "node-a"), ("component", component)]);
    if let Some(l) = level {
        m.insert("level".into(), l.into());
    }
    m
}

/// Sends the whole batch with `edit`ed config; returns what the server stored.
async fn push_all(edit: impl FnOnce(&mut LokiRaw)) -> (Vec<ReceivedEntry>, LokiServer, Batch) {
    let server = loki::start().await;
    let batch = ray_batch("node-a", Some("c1"));
    let mut sink = LokiSink::new(config(&server, edit));
    let (delivery, bytes) = sink.send(&batch, None).await.expect("push accepted");
    assert!(delivery.retry.is_empty() && delivery.rejected.is_empty());
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!((reqs[0].status, reqs[0].body_bytes), (204, bytes));
    (server.entries(), server, batch)
}

fn assert_ray_entries(got: &[ReceivedEntry]) {
    assert_eq!(got.len(), 7);
    let warn = find(got, "Disconnecting client");
    assert_eq!(warn.labels, default_labels("raylet", Some("WARNING")));
    assert_eq!(ms(warn.timestamp_ns), ms(ns("2026-11-30T09:31:42.357Z")));
    assert_eq!(warn.line, "Disconnecting client due to connection error with code 2: End of file");
    assert_eq!(
        warn.metadata,
        map(&[("node_id", NODE_ID), ("file", "raylet.out"), ("pid", "7303"), ("session", SESSION)])
    );

    let print = find(got, "counter at 1");
    assert_eq!(print.labels, default_labels("worker", None), "a print has no level: no level label");
    assert_eq!(print.line, "counter at 1");
    assert!((NOW_NS..NOW_NS + 1_000_000_000).contains(&print.timestamp_ns), "now, then the file's order");
    let actor_meta = map(&[
        ("node_id", NODE_ID),
        ("job_id", "03000000"),
        ("worker_id", WORKER),
        ("actor_id", ACTOR),
        ("file", ACTOR_OUT),
        ("pid", "8429"),
        ("session", SESSION),
        ("actor_name", "Counter"),
    ]);
    assert_eq!(print.metadata, actor_meta);

    let sup = find(got, "Submitting job");
    assert_eq!(sup.labels, default_labels("worker", Some("INFO")));
    assert_eq!(sup.timestamp_ns, 1_796_031_101_569_595_817, "exact to the nanosecond");
    assert_eq!(
        sup.metadata,
        map(&[
            ("node_id", NODE_ID),
            ("job_id", "01000000"),
            ("worker_id", "c16b0517244fb39136270405dc900c803d864f847dd4b87db4406975"),
            ("actor_id", "ffd3b03c02a40c8c7861c09d01000000"),
            ("task_id", "16310a0f0a45af5cffd3b03c02a40c8c7861c09d01000000"),
            ("file", SUPERVISOR_ERR),
            ("pid", "7360"),
            ("session", SESSION),
            ("task_name", "JobSupervisor.run"),
            ("actor_name", "_ray_internal_job_actor_raysubmit_etl_001"),
        ])
    );

    let err = find(got, "Actor creation failed");
    assert_eq!(err.labels, default_labels("gcs_server", Some("ERROR")));
    assert_eq!(err.metadata["actor_id"], ACTOR);
    assert!(got.iter().all(|e| e.tenant.is_none()));
}

/// Entries of each stream in the order the server stored them (arrival order).
fn lines_of_stream(got: &[ReceivedEntry], labels: &BTreeMap<String, String>) -> Vec<(i64, String)> {
    got.iter().filter(|e| &e.labels == labels).map(|e| (e.timestamp_ns, e.line.clone())).collect()
}

#[tokio::test]
async fn protobuf_push_carries_labels_metadata_lines_and_times() {
    let (got, server, _) = push_all(|_| {}).await;
    assert_ray_entries(&got);
    let req = &server.requests()[0];
    assert_eq!(req.content_type.as_deref(), Some("application/x-protobuf"));
    assert_eq!(req.content_encoding, None);
    assert_eq!(req.user_agent.as_deref(), Some(concat!("raylog/", env!("CARGO_PKG_VERSION"))));
    assert_eq!((req.streams, req.entries), (5, 7), "raylet WARNING, raylet INFO, print, worker INFO, gcs ERROR");
}

#[tokio::test]
async fn json_push_decodes_the_same_with_and_without_gzip() {
    let (proto, _, _) = push_all(|_| {}).await;
    let key = |e: &ReceivedEntry| (e.line.clone(), e.timestamp_ns);
    let mut proto = proto;
    proto.sort_by_key(key);
    for compression in ["gzip", "none"] {
        let (mut got, server, _) = push_all(|r| {
            r.encoding = Some("json".into());
            r.compression = Some(compression.into());
        })
        .await;
        assert_ray_entries(&got);
        got.sort_by_key(key);
        assert_eq!(got, proto, "{compression}");
        let req = &server.requests()[0];
        assert_eq!(req.content_type.as_deref(), Some("application/json"));
        assert_eq!(req.content_encoding.as_deref(), (compression == "gzip").then_some("gzip"));
    }
}

#[tokio::test]
async fn entries_of_a_stream_arrive_in_time_order() {
    for encoding in ["protobuf", "json"] {
        let (got, _, _) = push_all(|r| r.encoding = Some(encoding.into())).await;
        let info = lines_of_stream(&got, &default_labels("raylet", Some("INFO")));
        assert_eq!(info.len(), 2);
        assert_eq!(ms(info[0].0), ms(ns("2026-11-30T09:31:32.619Z")), "{encoding}: read second, sent first");
        assert!(info[1].1.starts_with("Setting node ID"));
        // Both dated "now": the file's order is kept, within the second after it.
        let prints = lines_of_stream(&got, &default_labels("worker", None));
        assert_eq!(prints.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(), ["counter at 1", "counter at 2"]);
        assert!(NOW_NS <= prints[0].0 && prints[0].0 < prints[1].0 && prints[1].0 < NOW_NS + 1_000_000_000);
    }
}

#[tokio::test]
async fn line_format_json_sends_the_whole_record() {
    for encoding in ["protobuf", "json"] {
        let (got, _, batch) = push_all(|r| {
            r.encoding = Some(encoding.into());
            r.line_format = Some("json".into());
        })
        .await;
        let print = got.iter().find(|e| e.line.contains("counter at 1")).unwrap();
        let record = batch.entries.iter().find(|e| batch.str(e.message) == "counter at 1").unwrap();
        assert_eq!(print.line, batch.json_of(record));
        let v: serde_json::Value = serde_json::from_str(&print.line).unwrap();
        assert_eq!((v["actor_id"].as_str(), v["node"].as_str()), (Some(ACTOR), Some("node-a")));
        assert_eq!(print.metadata["actor_id"], ACTOR, "metadata is sent too");
    }
}

#[tokio::test]
async fn custom_label_templates_and_metadata() {
    let server = loki::start().await;
    let batch = ray_batch("node-a", None);
    let labels = map(&[("app", "ray-{component}"), ("stream", "{stream}"), ("job", "{job_id}"), ("k8s", "{cluster}")]);
    let cfg = config(&server, |r| {
        r.labels = Some(labels);
        r.allow_high_cardinality_labels = true;
        r.structured_metadata = Some(vec!["actor_id".into(), "stream".into()]);
    });
    LokiSink::new(cfg).send(&batch, None).await.unwrap();
    let got = server.entries();
    // No cluster: the `k8s` label renders empty and is left out.
    let print = find(&got, "counter at 1");
    assert_eq!(print.labels, map(&[("app", "ray-worker"), ("stream", "stdout"), ("job", "03000000")]));
    assert_eq!(print.metadata, map(&[("actor_id", ACTOR), ("stream", "stdout")]));
    let sup = find(&got, "Submitting job");
    assert_eq!(sup.labels, map(&[("app", "ray-worker"), ("stream", "stderr"), ("job", "01000000")]));
    let raylet = find(&got, "Disconnecting");
    assert_eq!(raylet.labels, map(&[("app", "ray-raylet"), ("stream", "stdout")]), "raylet lines have no job");
    assert_eq!(raylet.metadata, map(&[("stream", "stdout")]));
}

#[tokio::test]
async fn labels_rendering_empty_fall_back_to_service_name() {
    let server = loki::start().await;
    let batch = ray_batch("node-a", None);
    let cfg = config(&server, |r| r.labels = Some(map(&[("cluster", "{cluster}")])));
    LokiSink::new(cfg).send(&batch, None).await.unwrap();
    // Every entry, not a vacuous `all` over none: the batch has 7 records.
    assert_eq!(server.entries().len(), 7);
    assert!(server.entries().iter().all(|e| e.labels == map(&[("service_name", "ray")])));
}

#[tokio::test]
async fn label_values_are_escaped() {
    let node = "node \"7\" \\ x";
    for encoding in ["protobuf", "json"] {
        let server = loki::start().await;
        let batch = ray_batch(node, Some("c1"));
        LokiSink::new(config(&server, |r| r.encoding = Some(encoding.into()))).send(&batch, None).await.unwrap();
        let got = server.entries();
        assert_eq!(got.len(), 7, "{encoding}: {:?}", server.requests());
        assert!(got.iter().all(|e| e.labels["node"] == node), "{encoding}");
    }
}

#[tokio::test]
async fn tenant_and_bearer_token_arrive() {
    let server = loki::start().await;
    let cfg = config(&server, |r| {
        r.tenant_id = Some("team-a".into());
        r.bearer_token = Some(Secret::Literal("t0ken".into()));
    });
    LokiSink::new(cfg).send(&ray_batch("node-a", Some("c1")), None).await.unwrap();
    let req = &server.requests()[0];
    assert_eq!(req.tenant.as_deref(), Some("team-a"));
    assert_eq!(req.authorization.as_deref(), Some("Bearer t0ken"));
    assert_eq!(server.entries().len(), 7, "the `all` below must see every record");
    assert!(server.entries().iter().all(|e| e.tenant.as_deref() == Some("team-a")));
}

#[tokio::test]
async fn basic_auth_arrives() {
    let server = loki::start().await;
    let cfg = config(&server, |r| {
        r.basic_auth = Some(BasicAuthRaw { username: "ray".into(), password: Secret::Literal("s3cret".into()) })
    });
    LokiSink::new(cfg).send(&ray_batch("node-a", Some("c1")), None).await.unwrap();
    // base64("ray:s3cret")
    assert_eq!(server.requests()[0].authorization.as_deref(), Some("Basic cmF5OnMzY3JldA=="));
}

#[tokio::test]
async fn retryable_statuses_are_transient_and_nothing_is_stored() {
    let server = loki::start().await;
    let batch = ray_batch("node-a", Some("c1"));
    let mut sink = LokiSink::new(config(&server, |_| {}));
    for status in [503, 429, 500, 502, 408, 401, 403, 404] {
        server.fail_next(1, status);
        match sink.send(&batch, None).await {
            Err(SendError::Transient(m)) => assert!(m.contains(&status.to_string()), "{m}"),
            other => panic!("{status}: {other:?}"),
        }
    }
    assert!(server.entries().is_empty());
    sink.send(&batch, None).await.unwrap();
    assert_eq!(server.entries().len(), 7, "stored once, after the failures");
}

#[tokio::test]
async fn auth_failure_message_names_the_settings() {
    let server = loki::start().await;
    server.reject_next(1, 401, "no org id");
    let err = LokiSink::new(config(&server, |_| {})).send(&ray_batch("n", None), None).await.unwrap_err();
    let SendError::Transient(m) = err else { panic!("{err:?}") };
    assert!(m.contains("bearer_token") && m.contains("no org id"), "{m}");
}

#[tokio::test]
async fn a_refusal_naming_no_entry_is_settled_by_halving() {
    // One 400 that names no entry (the in-process server then stored nothing): the
    // halves go again and are stored.
    let server = loki::start().await;
    let reason = "1 errors like: entry for stream '{service_name=\"ray\"}' has timestamp too old: 2020-01-01T00:00:00Z";
    server.reject_next(1, 400, reason);
    let (d, _) = LokiSink::new(config(&server, |_| {})).send(&ray_batch("n", None), None).await.unwrap();
    assert_eq!(d.rejected, vec![]);
    assert_eq!(server.entries().len(), 7);
    assert_eq!(server.requests().len(), 3, "the push, then its two halves");
    // Refused every time: each entry ends alone, dead-lettered with Loki's reason.
    let server = loki::start().await;
    server.reject_next(100, 400, "invalid entry");
    let (d, _) = LokiSink::new(config(&server, |_| {})).send(&ray_batch("n", None), None).await.unwrap();
    let mut refused: Vec<u32> = d.rejected.iter().map(|r| r.0).collect();
    refused.sort();
    assert_eq!(refused, (0..7).collect::<Vec<_>>());
    assert!(d.rejected.iter().all(|r| r.1 == DeadReason::Rejected && r.2.contains("invalid entry")), "{d:?}");
    assert!(server.requests().len() <= 13, "{} requests", server.requests().len());
}

#[tokio::test]
async fn a_distributor_refusal_counting_every_entry_refuses_them_at_once() {
    let server = loki::start().await;
    server.reject_next(100, 400, "7 errors like: error parsing labels");
    let (d, _) = LokiSink::new(config(&server, |_| {})).send(&ray_batch("n", None), None).await.unwrap();
    assert_eq!(d.rejected.len(), 7);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_ingesters_refusal_names_one_streams_oldest_entries() {
    // Loki's out-of-order window refused the older raylet INFO line; it names that
    // stream only, so the other streams are sent again (Loki stores a repeat once).
    let server = loki::start().await;
    let stream = "{component=\"raylet\", level=\"INFO\", node=\"n\", service_name=\"ray\"}";
    let ingester = format!(
        "entry with timestamp 2026-11-30 09:31:32.619 +0000 UTC ignored, reason: 'entry too far behind, entry timestamp is: 2026-11-30T09:31:32Z, oldest acceptable timestamp is: 2026-11-30T09:31:40Z',\nuser 'fake', total ignored: 1 out of 2 for stream: {stream}"
    );
    server.reject_next(1, 400, &ingester);
    let batch = ray_batch("n", None);
    let (d, _) = LokiSink::new(config(&server, |_| {})).send(&batch, None).await.unwrap();
    assert_eq!(d.rejected.len(), 1, "{d:?}");
    let (i, kind, why) = &d.rejected[0];
    assert!(batch.str(batch.entries[*i as usize].message).starts_with("Setting cluster ID"), "the older of the two");
    assert_eq!(*kind, DeadReason::TooFarBehind);
    assert!(why.contains("out-of-order window") && why.contains("oldest acceptable"), "{why}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].entries, 5, "the push again without the stream Loki named");
    assert!(d.retry.is_empty());
}

#[tokio::test]
async fn entries_loki_would_refuse_for_age_are_not_sent() {
    let server = loki::start().await;
    let batch = ray_batch("n", None);
    // Everything but the print (dated "now", in 2026-11-30) is older than a day...
    let cfg = config(&server, |r| r.reject_old_after = Some(DurationValue::Text("1d".into())));
    let (d, _) = LokiSink::new(cfg).send(&batch, None).await.unwrap();
    let old: Vec<&(u32, DeadReason, String)> = d.rejected.iter().filter(|r| r.1 == DeadReason::TooOld).collect();
    assert_eq!(old.len(), 7, "all of 2026-11-30 is more than a day old by now: {d:?}");
    assert!(old[0].2.contains("reject_old_samples_max_age") && old[0].2.contains("reject_old_after (1d)"));
    assert!(server.requests().is_empty(), "nothing left to send");
}

#[tokio::test]
async fn lines_past_max_line_bytes_are_cut_and_flagged() {
    let server = loki::start().await;
    let node = Arc::new(NodeIdentity::new("n".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let long = format!("{}é{}\n", "x".repeat(1023), "y".repeat(2000));
    parse_into(&mut batch, &mut Correlator::new(), ACTOR_OUT, &format!("short\n{long}"));
    for encoding in ["protobuf", "json"] {
        server.clear();
        let cfg = config(&server, |r| {
            r.encoding = Some(encoding.into());
            r.max_line_bytes = Some(crate::agent::config::values::SizeValue::Bytes(1024));
        });
        let (d, _) = LokiSink::new(cfg).send(&batch, None).await.unwrap();
        assert!(d.rejected.is_empty());
        let got = server.entries();
        let cut = find(&got, "xxx");
        assert_eq!(cut.line, "x".repeat(1023), "{encoding}: cut before the 2-byte character that would pass 1024");
        assert_eq!(cut.metadata.get("truncated").map(String::as_str), Some("true"));
        assert_eq!(find(&got, "short").metadata.get("truncated"), None);
    }
}

#[tokio::test]
async fn records_alike_in_stream_time_and_line_stay_two_entries() {
    // Loki keeps one entry per (stream, time, line): two identical lines written in
    // the same millisecond must not become one.
    let server = loki::start().await;
    let node = Arc::new(NodeIdentity::new("n".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let line = "[2026-11-30 09:31:42,357 W 7303 7314] (raylet) store.cc:366: Report event failed, retrying\n";
    parse_into(&mut batch, &mut Correlator::new(), "raylet.out", &line.repeat(3));
    let mut sink = LokiSink::new(config(&server, |_| {}));
    sink.send(&batch, None).await.unwrap();
    let mut times: Vec<i64> = server.entries().iter().map(|e| e.timestamp_ns).collect();
    assert_eq!(times.len(), 3, "one entry per line");
    assert!(times.iter().all(|&t| ms(t) == ms(ns("2026-11-30T09:31:42.357Z"))), "{times:?}");
    times.dedup();
    assert_eq!(times.len(), 3, "three distinct times within the millisecond");
    // The same records sent again get the same times: a replay Loki stores once.
    let first = server.entries();
    server.clear();
    sink.send(&batch, None).await.unwrap();
    assert_eq!(server.entries(), first);
}

#[tokio::test]
async fn prints_dated_alike_stay_distinct_and_in_file_order() {
    // A worker printing the same line over and over: every print gets the same
    // estimated time, and Loki would keep one of each text per time.
    let server = loki::start().await;
    let node = Arc::new(NodeIdentity::new("n".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let text = format!(":job_id:03000000\n{}", "heartbeat\n".repeat(5000));
    parse_into(&mut batch, &mut Correlator::new(), ACTOR_OUT, &text);
    LokiSink::new(config(&server, |_| {})).send(&batch, None).await.unwrap();
    let times: Vec<i64> = server.entries().iter().map(|e| e.timestamp_ns).collect();
    assert_eq!(times.len(), 5000);
    assert!(times.windows(2).all(|w| w[0] < w[1]), "distinct, in the order printed");
    assert!(times[4999] - times[0] < 1_000_000_000, "within the second after the estimate");
}

#[test]
fn retry_after_is_read_in_seconds_or_as_a_date() {
    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
    let mut h = HeaderMap::new();
    assert_eq!(crate::agent::sinks::retry_after(&h), None);
    h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
    assert_eq!(crate::agent::sinks::retry_after(&h), Some(std::time::Duration::from_secs(7)));
    h.insert(RETRY_AFTER, HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
    assert_eq!(crate::agent::sinks::retry_after(&h), Some(std::time::Duration::ZERO), "in the past: at once");
    let e = super::service::loki_status_error(
        reqwest::StatusCode::TOO_MANY_REQUESTS,
        "slow down",
        Some(std::time::Duration::from_secs(7)),
    );
    assert_eq!(
        e,
        SendError::Throttled("HTTP 429 Too Many Requests: slow down".into(), std::time::Duration::from_secs(7))
    );
}

#[tokio::test]
async fn a_line_over_a_stricter_lokis_limit_is_refused_alone() {
    // A Loki stricter than max_line_bytes: the long lines are dead-lettered with its
    // reason, the two short prints stored.
    let server = loki::start().await;
    server.set_max_line_bytes(20);
    let batch = ray_batch("n", None);
    let (d, _) = LokiSink::new(config(&server, |_| {})).send(&batch, None).await.unwrap();
    assert_eq!(d.rejected.len(), 5, "{d:?}");
    assert!(d
        .rejected
        .iter()
        .all(|r| r.2.contains("Max entry size '20' bytes exceeded") && r.2.contains("max_line_size")));
    // The halves carrying a print were sent more than once: identical entries, which
    // Loki stores once.
    let mut stored: Vec<(String, i64)> = server.entries().into_iter().map(|e| (e.line, e.timestamp_ns)).collect();
    stored.sort();
    stored.dedup();
    assert_eq!(stored.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), ["counter at 1", "counter at 2"]);
}

#[tokio::test]
async fn connection_refused_and_outages_are_transient() {
    let server = loki::start().await;
    let batch = ray_batch("node-a", Some("c1"));
    let mut sink = LokiSink::new(config(&server, |_| {}));
    server.set_down(true).await;
    let err = sink.send(&batch, None).await.unwrap_err();
    assert!(matches!(&err, SendError::Transient(m) if m.contains("request failed")), "{err:?}");
    server.set_down(false).await;
    sink.send(&batch, None).await.unwrap();
    // Down again with the client's connection pooled: still transient, then delivered.
    server.set_down(true).await;
    assert!(matches!(sink.send(&batch, None).await, Err(SendError::Transient(_))));
    server.set_down(false).await;
    sink.send(&batch, None).await.unwrap();
    assert_eq!(server.entries().len(), 14);
}

#[tokio::test]
async fn only_sends_the_selected_entries() {
    let server = loki::start().await;
    let batch = ray_batch("node-a", Some("c1"));
    let mut sink = LokiSink::new(config(&server, |_| {}));
    let (_, bytes) = sink.send(&batch, Some(&[3, 6])).await.unwrap();
    assert!(bytes > 0);
    let mut lines: Vec<String> = server.entries().into_iter().map(|e| e.line).collect();
    lines.sort();
    assert_eq!(lines, ["Actor creation failed actor_id=679cb010f4ca357ec14d9a0003000000", "counter at 1"]);
    assert_eq!(sink.send(&batch, Some(&[])).await.unwrap().1, 0);
    assert_eq!(server.requests().len(), 1, "an empty selection sends nothing");
}

#[tokio::test]
async fn every_length_size_decodes() {
    // Lengths are written in 1 to 4 bytes: a tiny entry, a 20 KB line, a 2.4 MB stream.
    let mut text = String::from("x\n");
    text.push_str(&"y".repeat(20_000));
    text.push('\n');
    for i in 0..300 {
        text.push_str(&format!("{i:05}{}\n", "z".repeat(8_000)));
    }
    let node = Arc::new(NodeIdentity::new("n".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    parse_into(&mut batch, &mut Correlator::new(), ACTOR_OUT, &text);
    assert_eq!(batch.len(), 302);
    for encoding in ["protobuf", "json"] {
        let server = loki::start().await;
        let cfg = config(&server, |r| {
            r.encoding = Some(encoding.into());
            r.structured_metadata = Some(vec![]);
        });
        LokiSink::new(cfg).send(&batch, None).await.unwrap();
        let got = server.entries();
        let lines: Vec<&str> = got.iter().map(|e| e.line.as_str()).collect();
        let want: Vec<&str> = text.lines().collect();
        assert_eq!(lines, want, "{encoding}");
        assert_eq!(got.len(), batch.len(), "{encoding}: the `all` below must see every record");
        assert!(got.iter().all(|e| e.metadata.is_empty()));
    }
}

#[test]
fn test_server_parses_labels_like_loki() {
    assert_eq!(parse_labels(r#"{a="x", b_2="y\"z\\"}"#).unwrap(), map(&[("a", "x"), ("b_2", "y\"z\\")]));
    assert_eq!(parse_labels("{a=`raw\\`}").unwrap(), map(&[("a", "raw\\")]));
    for bad in ["{}", r#"{a=""}"#, r#"{1a="x"}"#, r#"{a="x",a="y"}"#, r#"{a="x""#, "{a=\"x\ny\"}", r#"a="x""#] {
        assert!(parse_labels(bad).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn test_server_refuses_what_loki_refuses() {
    let server = loki::start().await;
    let client = reqwest::Client::new();
    let post = |ct: &str, body: &'static str| client.post(server.push_url()).header("content-type", ct).body(body);
    let bad = r#"{"streams":[{"stream":{"a":""},"values":[["1","x"]]},{"stream":{"a":"b"},"values":[["2","y"]]}]}"#;
    let resp = post("application/json", bad).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().starts_with("error parsing labels '{a=\"\"}'"));
    assert_eq!(server.entries().len(), 1, "the valid stream is kept, as Loki does");
    let resp = post("application/json", r#"{"streams":[{"stream":{"a":"b"},"values":[[2,"y"]]}]}"#).send().await;
    assert_eq!(resp.unwrap().status(), 400, "a timestamp must be a string");
    assert_eq!(post("text/plain", "x").send().await.unwrap().status(), 415);
    let ready = client.get(format!("{}/ready", server.url())).send().await.unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn each_stream_is_paced_and_split_under_lokis_shard_rate() {
    let server = loki::start().await;
    let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let mut corr = Correlator::new();
    let text: String = (0..80)
        .map(|i| {
            format!(
                "[2026-11-30 09:31:42,{i:03} I 7303 7314] (raylet) node_manager.cc:1: tick {i} {}\n",
                "x".repeat(60)
            )
        })
        .collect();
    parse_into(&mut batch, &mut corr, "raylet.out", &text);
    parse_into(&mut batch, &mut corr, "gcs_server.out", GCS_ERROR);
    // 8 KiB/s per stream: at most 1 KiB of a stream per push, and about a second
    // for the raylet stream's ~9 KiB.
    let edit =
        |r: &mut LokiRaw| r.max_stream_bytes_per_second = Some(crate::agent::config::values::SizeValue::Bytes(8192));
    let mut sink = LokiSink::new(config(&server, edit));
    let start = std::time::Instant::now();
    let (d, _) = sink.send(&batch, None).await.expect("accepted");
    assert!(d.retry.is_empty() && d.rejected.is_empty());
    let took = start.elapsed();
    assert_eq!(server.entries().len(), 81, "every entry stored once");
    let reqs = server.requests();
    assert!(reqs.len() >= 9, "split into pushes of at most 1 KiB per stream: {} requests", reqs.len());
    assert!(reqs.iter().all(|r| r.entries <= 12), "{:?}", reqs.iter().map(|r| r.entries).collect::<Vec<_>>());
    assert!(took > std::time::Duration::from_millis(700), "paced: {took:?}");
    // Unpaced (0), the same batch goes in one push.
    let server = loki::start().await;
    let edit =
        |r: &mut LokiRaw| r.max_stream_bytes_per_second = Some(crate::agent::config::values::SizeValue::Bytes(0));
    LokiSink::new(config(&server, edit)).send(&batch, None).await.expect("accepted");
    assert_eq!(server.requests().len(), 1);
}

/// The protobuf push bodies (before snappy) of a real session, in four configurations,
/// are byte for byte the ones the encoder made before it reused a stream's repeated
/// metadata (#23): the golden file was written by the code of 6 December 2026
/// (commit 058e98e). `RAYLOG_BLESS=1` rewrites it after an intended change.
#[test]
fn push_bodies_of_a_real_session_match_the_golden_file() {
    use super::encode::LokiEncoder;
    let now = ns("2026-12-01T00:00:05Z");
    let b = crate::agent::sinks::tests::fixture_batch(now);
    let configs: [fn(&mut LokiRaw); 4] = [
        |_| {},
        // Many lines cut: entries with the `truncated` pair after their metadata.
        |r| r.max_line_bytes = Some(SizeValue::Bytes(1024)),
        |r| {
            r.line_format = Some("json".into());
            r.structured_metadata = Some(vec!["stream".into(), "pid".into(), "task_id".into(), "file".into()]);
        },
        // A stream per file and level: long runs of one file's entries.
        |r| {
            r.allow_high_cardinality_labels = true;
            r.labels = Some(map(&[("file", "{file}"), ("level", "{level}")]));
        },
    ];
    let mut bodies = vec![];
    for (k, edit) in configs.into_iter().enumerate() {
        // Encoded only: nothing listens there.
        let cfg = config_for("http://127.0.0.1:9".into(), edit);
        let push = LokiEncoder::new(&cfg).encode(&b, None).unwrap();
        assert_eq!(push.entries, b.len());
        let body = snap::raw::Decoder::new().decompress_vec(&push.body).unwrap();
        assert_eq!(body.len(), push.raw_bytes);
        let cut = body.windows(9).filter(|w| w == b"truncated").count();
        assert_eq!(cut > 0, k == 1, "config {k}: {cut} lines cut");
        bodies.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bodies.extend_from_slice(&body);
    }
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/loki/push-jobs-serve.pb.gz");
    if std::env::var_os("RAYLOG_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        let mut gz = flate2::write::GzEncoder::new(vec![], flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &bodies).unwrap();
        std::fs::write(&golden, gz.finish().unwrap()).unwrap();
    }
    let want = crate::agent::sinks::gzip::tests::gunzip(&std::fs::read(&golden).unwrap());
    assert!(b.len() > 1000, "a real session's worth: {}", b.len());
    if bodies != want {
        let at = bodies.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(bodies.len().min(want.len()));
        panic!("the bodies differ from the golden file from byte {at} of {} (got {} bytes)", want.len(), bodies.len());
    }
}

/// A field's place among an entry's text spans holds its value, for every field of a
/// real session's entries that has one.
#[test]
fn text_slots_read_each_fields_value() {
    use super::fields::{text_spans, Field};
    use crate::agent::batch::IdField;
    let b = crate::agent::sinks::tests::fixture_batch(0);
    let mut fields = vec![Field::Component, Field::File, Field::Session, Field::SubmissionId, Field::TaskName];
    fields.extend([Field::ActorName, Field::Pid, Field::Level]);
    fields.extend(IdField::ALL.map(Field::Id));
    let mut seen = [0usize; 13];
    for e in &b.entries {
        for (n, f) in fields.iter().enumerate() {
            match f.text_slot() {
                Some(k) => assert_eq!(b.str(text_spans(e)[k]), f.text(&b, e), "{f:?}"),
                None => assert!(matches!(f, Field::Pid | Field::Level), "{f:?} has a span"),
            }
            seen[n] += usize::from(!f.text(&b, e).is_empty());
        }
    }
    // Every text field has values to compare in this session (a job was submitted).
    let empty: Vec<_> = fields.iter().zip(seen).filter(|(f, n)| *n == 0 && f.text_slot().is_some()).collect();
    assert!(empty.is_empty(), "{empty:?}");
}

/// Lines of megabytes (the lengths take four bytes), one of them cut with the
/// `truncated` pair, with every metadata field filled: the entry writer's room holds
/// the longest entry `max_line_bytes` allows.
#[tokio::test]
async fn lines_of_megabytes_decode_whole_or_cut() {
    let server = loki::start().await;
    server.set_max_line_bytes(16 << 20);
    let node = Arc::new(NodeIdentity::new("n".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let (fits, cut) = ("f".repeat(3 << 20), "c".repeat(5 << 20));
    let text = format!("{SUPERVISOR}{fits}\n{cut}\n");
    let mut p = FileParser::new(classify(SUPERVISOR_ERR, Some(SESSION)), Id::parse(NODE_ID.as_bytes()), None);
    let opts = Options { max_line_bytes: 8 << 20, ..Options::default() };
    let mut corr = Correlator::new();
    let rel = SUPERVISOR_ERR;
    p.push(text.as_bytes(), &mut corr, &opts, &mut |r| batch.push(r, NOW_NS, doc_id(rel, r.offset, r.message)));
    p.finish(&mut corr, &opts, &mut |r| batch.push(r, NOW_NS, doc_id(rel, r.offset, r.message)));
    assert_eq!(batch.len(), 3);
    let cfg = config(&server, |r| r.max_line_bytes = Some(SizeValue::Bytes(4 << 20)));
    let (d, _) = LokiSink::new(cfg).send(&batch, None).await.unwrap();
    assert!(d.rejected.is_empty() && d.retry.is_empty());
    let got = server.entries();
    assert_eq!(got.len(), 3);
    let whole = find(&got, "fff");
    assert_eq!((whole.line.len(), whole.metadata.get("truncated")), (3 << 20, None));
    let short = find(&got, "ccc");
    assert_eq!(short.line.len(), 4 << 20);
    assert_eq!(short.metadata.get("truncated").map(String::as_str), Some("true"));
    for m in [&whole.metadata, &short.metadata] {
        assert_eq!((m["file"].as_str(), m["pid"].as_str()), (SUPERVISOR_ERR, "7360"), "{m:?}");
        assert_eq!(m["worker_id"], "c16b0517244fb39136270405dc900c803d864f847dd4b87db4406975");
    }
}

/// A batch paced into many pushes reports, after each push, that every entry before
/// the next one to push is settled; that must hold whatever the order of the entries
/// it is asked to send again (a retry list ends with the parts still stacked, the
/// latest first). Each report is checked against what the server stored.
#[tokio::test]
async fn progress_never_passes_an_entry_not_stored() {
    use crate::agent::sinks::{Ack, Progress};
    let server = loki::start().await;
    let node = Arc::new(NodeIdentity::new("node-a".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let mut corr = Correlator::new();
    let text: String = (0..120)
        .map(|i| {
            format!(
                "[2026-11-30 09:31:42,{i:03} I 7303 7314] (raylet) node_manager.cc:1: tick {i}; {}\n",
                "x".repeat(60)
            )
        })
        .collect();
    parse_into(&mut batch, &mut corr, "raylet.out", &text);
    assert_eq!(batch.len(), 120);
    // 64 KiB/s per stream: at most 8 KiB of it per push, so the batch takes pushes.
    let edit = |r: &mut LokiRaw| r.max_stream_bytes_per_second = Some(SizeValue::Bytes(8 << 10));
    let mut sink = LokiSink::new(config(&server, edit));
    let stored = |server: &LokiServer| -> std::collections::HashSet<usize> {
        let tick = |l: &str| l.split("tick ").nth(1)?.split(';').next()?.parse().ok();
        server.entries().iter().filter_map(|e| tick(&e.line)).collect()
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Ack>(1024);
    let mut only: Option<Vec<u32>> = None;
    let (mut rounds, mut reports) = (0, 0);
    for ok_pushes in [2, 1, 3, 0, 2, 100] {
        server.fail_after(ok_pushes, 1, 429);
        let mut progress = Progress::to(&tx, 1, 0);
        let sent = sink.send_reporting(&batch, only.as_deref(), &mut progress).await;
        let have = stored(&server);
        while let Ok(a) = rx.try_recv() {
            reports += 1;
            let n = a.upto.expect("progress") as usize;
            let missing: Vec<usize> = (0..n).filter(|i| !have.contains(i)).collect();
            assert!(missing.is_empty(), "round {rounds}: reported {n} settled, yet not stored: {missing:?}");
        }
        rounds += 1;
        match sent {
            Ok((d, _)) if d.retry.is_empty() => break,
            Ok((d, _)) => only = Some(d.retry),
            Err(_) => {}
        }
    }
    assert_eq!(stored(&server).len(), 120, "everything stored in the end");
    assert!(reports >= 4, "progress was reported ({reports} reports in {rounds} rounds)");
}

/// A batch larger than `max_push_bytes` goes in pushes of about that size, in batch
/// order, each entry once: what a SIGKILL finds in flight (and the next start sends
/// again) is one such push, not the batch.
#[tokio::test]
async fn a_batch_goes_in_pushes_of_max_push_bytes() {
    let server = loki::start().await;
    let node = Arc::new(NodeIdentity::new("node-a".into(), None, BTreeMap::new()));
    let mut batch = Batch::new(1, node);
    let mut corr = Correlator::new();
    // 120 lines of about 150 bytes: 18 KiB of messages, over four 4 KiB pushes' worth.
    let text: String = (0..120)
        .map(|i| format!("[2026-11-30 09:31:42,{i:03} I 7303 7314] (raylet) a.cc:1: tick {i}; {}\n", "x".repeat(90)))
        .collect();
    parse_into(&mut batch, &mut corr, "raylet.out", &text);
    assert_eq!(batch.len(), 120);
    let mut sink = LokiSink::new(config(&server, |r| r.max_push_bytes = Some(SizeValue::Text("4KiB".into()))));
    let (d, _) = sink.send(&batch, None).await.expect("stored");
    assert!(d.retry.is_empty() && d.rejected.is_empty());
    let reqs = server.requests();
    assert!(reqs.len() >= 4, "{} pushes", reqs.len());
    assert!(
        reqs.iter().all(|r| r.entries <= 4096 / 150 + 1),
        "{:?}",
        reqs.iter().map(|r| r.entries).collect::<Vec<_>>()
    );
    let ticks: Vec<usize> =
        server.entries().iter().filter_map(|e| e.line.split("tick ").nth(1)?.split(';').next()?.parse().ok()).collect();
    assert_eq!(ticks, (0..120).collect::<Vec<_>>(), "each entry once, in batch order");
    // Whole records as lines (`line_format = "json"`): the cut counts the JSON.
    let server = loki::start().await;
    let edit = |r: &mut LokiRaw| {
        r.max_push_bytes = Some(SizeValue::Text("4KiB".into()));
        r.line_format = Some("json".into());
    };
    LokiSink::new(config(&server, edit)).send(&batch, None).await.expect("stored");
    let shortest = server.entries().iter().map(|e| e.line.len()).min().unwrap();
    assert!(shortest > 300, "a JSON line holds the record: {shortest} bytes");
    let reqs = server.requests();
    assert!(
        reqs.iter().all(|r| r.entries <= 4096 / shortest + 1),
        "{:?}",
        reqs.iter().map(|r| r.entries).collect::<Vec<_>>()
    );
    assert_eq!(server.entries().len(), 120);
    // The default pushes the same batch at once.
    let server = loki::start().await;
    LokiSink::new(config(&server, |_| {})).send(&batch, None).await.expect("stored");
    assert_eq!(server.requests().len(), 1);
}
