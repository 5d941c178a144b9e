//! The sink driver ([`run_sink`]) against the in-process Elasticsearch: the order of
//! a batch's dead letters and its acknowledgement, and a request that never ends
//! cut short by the grace period.

use std::sync::Arc;
use std::time::Duration;

use raylog_parsers::{classify, Correlator, FileParser, Options};
use tokio::sync::{mpsc, watch, Notify};

use super::elasticsearch::config::EsRaw;
use super::elasticsearch::service::EsSink;
use super::*;
use crate::agent::batch::{doc_id, NodeIdentity, Recycler};
use crate::agent::config::values::{DurationValue, Problems};
use crate::agent::metrics::Metrics;
use crate::testkit::elasticsearch as testes;

const FIXTURE_SESSION: &str = "session_2026-11-30_09-31-29_637100_6988";

/// `n` raylet records, `seq=0..n`, in one batch.
fn batch(n: u64) -> Arc<Batch> {
    batch_from(1, 0, n)
}

/// Raylet records `seq=from..to` in batch number `seq`.
fn batch_from(seq: u64, from: u64, to: u64) -> Arc<Batch> {
    let n = to - from;
    let node = Arc::new(NodeIdentity::new("node-a".into(), None, Default::default()));
    let mut b = Batch::new(seq, node);
    let text: String = (from..to)
        .map(|i| format!("[2026-11-30 09:05:33,150 I 4214 4214] (raylet) node_manager.cc:1: item seq={i}\n"))
        .collect();
    let mut p = FileParser::new(classify("raylet.out", Some("session_2026-11-30_09-00-00_000000_1")), None, None);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let now = 1_796_000_000_000_000_000;
    p.push(text.as_bytes(), &mut corr, &opts, &mut |r| b.push(r, now, doc_id("1:raylet.out", r.offset, r.message)));
    p.finish(&mut corr, &opts, &mut |r| b.push(r, now, doc_id("1:raylet.out", r.offset, r.message)));
    assert_eq!(b.len() as u64, n);
    Arc::new(b)
}

/// A sink task on an Elasticsearch sink at `endpoint`, fed by the returned sender,
/// acknowledging on the returned receiver; `give_up` ends the grace period.
struct Rig {
    batches: mpsc::Sender<(Arc<Batch>, std::time::Instant)>,
    acks: mpsc::Receiver<Ack>,
    give_up: watch::Sender<bool>,
    dead: DeadLetter,
    metrics: Arc<Metrics>,
    dir: Scratch,
    task: tokio::task::JoinHandle<()>,
}

/// A state dir, removed at the end.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Rig {
    fn new(tag: &str, endpoint: &str) -> Rig {
        let dir = std::env::temp_dir().join(format!("raylog-sinks-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Rig::open(dir, endpoint, false)
    }

    /// A sink task on the state dir `dir` as it is; `park`: it keeps what the
    /// grace cuts short (as the agent's network sinks do).
    fn open(dir: std::path::PathBuf, endpoint: &str, park: bool) -> Rig {
        let raw = EsRaw {
            endpoint: Some(endpoint.into()),
            timeout: Some(DurationValue::Text("1h".into())),
            ..EsRaw::default()
        };
        let mut p = Problems::default();
        let cfg = raw.validate("sinks[0]", &mut p);
        assert!(p.is_empty(), "{p}");
        let (batches, rx) = mpsc::channel(4);
        let (ack_tx, acks) = mpsc::channel(4);
        let (give_up, give_up_rx) = watch::channel(false);
        let dead = DeadLetter::new(&dir, 1 << 30);
        let retry = RetryConfig {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            shutdown_grace: Duration::from_secs(1),
        };
        let metrics = Arc::new(Metrics::new(&["es"]));
        let task = tokio::spawn(run_sink(SinkTask {
            index: 0,
            name: "es".into(),
            sink: SinkImpl::Elasticsearch(EsSink::new(cfg)),
            batches: rx,
            acks: ack_tx,
            dead: dead.clone(),
            retry,
            metrics: metrics.clone(),
            give_up: give_up_rx,
            recycler: Recycler::new(1 << 20),
            dead_logged: Default::default(),
            stop: Arc::new(Notify::new()),
            parking: park.then(|| parked::Parking::new(&dir, "es")),
            needs: crate::agent::batch::Needs::ALL,
        }));
        Rig { batches, acks, give_up, dead, metrics, dir: Scratch(dir), task }
    }

    async fn send(&self, b: Arc<Batch>) {
        self.batches.send((b, std::time::Instant::now())).await.unwrap();
    }

    /// The dead-letter file's lines.
    fn dead_lines(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dead.path()).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

/// A batch half refused by Elasticsearch (every second item 400) is acknowledged
/// only after its dead letters were fsynced: at the ack, everything in the file was
/// made durable, by one fsync for the batch's lines, not one per line.
#[tokio::test]
async fn dead_letters_are_fsynced_before_their_batch_is_acknowledged() {
    let es = testes::start().await;
    es.fail_items(2, 400);
    let mut rig = Rig::new("dead-fsync", &es.url());
    rig.send(batch(10)).await;
    let ack = tokio::time::timeout(Duration::from_secs(30), rig.acks.recv()).await.expect("no ack").unwrap();
    // Read at the ack, before anything else can happen: the sink's next step would
    // be the next batch, and there is none.
    let (durable, fsyncs) = rig.dead.durable();
    let on_disk = std::fs::metadata(rig.dead.path()).map_or(0, |m| m.len());
    assert_eq!(ack.seq, 1);
    assert_eq!(rig.dead_lines().len(), 5, "every second of 10 items refused");
    assert!(on_disk > 0);
    assert_eq!(durable, on_disk, "acknowledged with dead letters not fsynced");
    assert_eq!(fsyncs, 1, "one fsync for the batch's five lines");
    assert_eq!(es.docs().len(), 5);
}

/// A request that never gets an answer (its timeout is an hour) is abandoned when
/// the grace period ends: a sink that does not park (stdout, a file) stops
/// without acknowledging the batch.
#[tokio::test]
async fn a_request_without_answer_is_cut_short_when_the_grace_period_ends() {
    let (url, mut conn) = hung_server().await;
    let rig = Rig::new("hung", &url);
    rig.send(batch(3)).await;
    tokio::time::timeout(Duration::from_secs(30), conn.recv()).await.expect("no connection").unwrap();
    rig.give_up.send(true).unwrap();
    let Rig { task, mut acks, .. } = rig;
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("the sink did not stop").unwrap();
    assert!(acks.recv().await.is_none(), "a batch never delivered was acknowledged");
}

/// Accepts and holds connections, never answering; says when one came.
async fn hung_server() -> (String, mpsc::Receiver<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let (conn_tx, conn) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
            let _ = conn_tx.try_send(());
        }
    });
    (url, conn)
}

/// #57 item 5: what the grace cuts short (a request without answer, and a batch
/// queued behind it) is parked in `state_dir`, and acknowledged only then; the
/// next start sends it first, as it was (the same document ids), and deletes it.
#[tokio::test]
async fn what_the_grace_cuts_short_is_parked_and_sent_first_at_the_next_start() {
    let (url, mut conn) = hung_server().await;
    let dir = std::env::temp_dir().join(format!("raylog-sink-park-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rig = Rig::open(dir.clone(), &url, true);
    let (first, second) = (batch_from(1, 0, 3), batch_from(2, 3, 5));
    let want: std::collections::BTreeSet<String> =
        first.entries.iter().chain(&second.entries).map(|e| format!("{:032x}", e.doc_id)).collect();
    rig.send(first).await;
    rig.send(second).await;
    tokio::time::timeout(Duration::from_secs(30), conn.recv()).await.expect("no connection").unwrap();
    rig.give_up.send(true).unwrap();
    let Rig { task, mut acks, metrics, dir: scratch, batches, .. } = rig;
    drop(batches);
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("the sink did not stop").unwrap();
    let mut acked = vec![];
    while let Some(a) = acks.recv().await {
        acked.push((a.seq, a.upto));
    }
    assert_eq!(acked, [(1, None), (2, None)], "both batches acknowledged once parked");
    assert_eq!(metrics.sinks[0].parked.load(std::sync::atomic::Ordering::Relaxed), 5);
    let parking = parked::Parking::new(&dir, "es");
    assert_eq!(parking.list().unwrap().len(), 2, "one file per batch");

    let es = testes::start().await;
    let next = Rig::open(dir.clone(), &es.url(), true);
    std::mem::forget(scratch); // the same state dir: `next` removes it
    let Rig { task, batches, metrics, .. } = next;
    drop(batches);
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("the next start did not finish").unwrap();
    let got: std::collections::BTreeSet<String> = es.docs().iter().map(|d| d.id.clone()).collect();
    assert_eq!(got, want, "the parked records, with the ids they were first sent with");
    assert_eq!(es.docs().len(), 5, "each once");
    assert_eq!(metrics.sinks[0].unparked.load(std::sync::atomic::Ordering::Relaxed), 5);
    assert!(parking.list().unwrap().is_empty(), "delivered parked batches are deleted");
}

/// A parked batch that is damaged is set aside as `.bad`, never sent in part, and
/// what follows it is still sent.
#[tokio::test]
async fn a_damaged_parked_batch_is_set_aside_and_the_rest_sent() {
    let dir = std::env::temp_dir().join(format!("raylog-sink-badpark-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let parking = parked::Parking::new(&dir, "es");
    let mut torn = crate::agent::batch::park::park(&batch_from(1, 0, 4), None);
    torn.truncate(torn.len() - 3);
    let bad = parking.put(&torn).unwrap();
    parking.put(&crate::agent::batch::park::park(&batch_from(2, 4, 6), None)).unwrap();
    let es = testes::start().await;
    let Rig { task, batches, dir: _scratch, .. } = Rig::open(dir.clone(), &es.url(), true);
    drop(batches);
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("did not finish").unwrap();
    assert_eq!(es.docs().len(), 2, "only the good batch's records");
    assert!(bad.with_extension("bad").exists(), "the damaged one is kept aside");
    assert!(parking.list().unwrap().is_empty());
}

/// Every file of a real Ray session (fixture `ray-2.60-jobs-serve`), parsed as the
/// agent does, into one batch; `now_ns` is when records without a time were read.
pub(super) fn fixture_batch(now_ns: i64) -> Batch {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let logs = root.join("fixtures/ray-2.60-jobs-serve").join(FIXTURE_SESSION).join("logs");
    let (mut rels, mut dirs) = (vec![], vec![logs.clone()]);
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                rels.push(p.strip_prefix(&logs).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    rels.sort();
    let labels = [("ray.io/node-type".to_string(), "head".to_string())].into();
    let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), labels));
    let mut b = Batch::new(1, node);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    for rel in &rels {
        let text = std::fs::read(logs.join(rel)).unwrap();
        let mut p = FileParser::new(classify(rel, Some(FIXTURE_SESSION)), None, None);
        let identity = format!("2049:{rel}");
        p.push(&text, &mut corr, &opts, &mut |r| b.push(r, now_ns, doc_id(&identity, r.offset, r.message)));
        p.finish(&mut corr, &opts, &mut |r| b.push(r, now_ns, doc_id(&identity, r.offset, r.message)));
    }
    b
}

/// A sink that answers each send with the next scripted [`Delivery`] (then: all
/// stored) and notes which entries each send was asked for.
pub(super) struct Scripted {
    answers: std::collections::VecDeque<Delivery>,
    asked: Arc<std::sync::Mutex<Vec<Option<Vec<u32>>>>>,
}

impl Scripted {
    pub(super) fn send(&mut self, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        self.asked.lock().unwrap().push(only.map(<[u32]>::to_vec));
        Ok((self.answers.pop_front().unwrap_or_default(), 0))
    }
}

/// A sink that names a record twice in one answer (twice to retry; to retry and
/// refused at once; refused twice) neither underflows the driver's count of what
/// was sent nor gets a record twice in its next request. Of the 4 records: #0
/// refused (once, though named twice), #1 stored, #2 and #3 retried once each (#3
/// is sent again rather than dead-lettered: a retry loses nothing), then stored.
#[tokio::test]
async fn a_sink_naming_a_record_twice_is_counted_once_and_retried_once() {
    let dir = Scratch(std::env::temp_dir().join(format!("raylog-sinks-twice-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let bad = |i| (i, DeadReason::Rejected, "bad".to_string());
    let first = Delivery {
        retry: vec![2, 3, 2],
        retry_why: Some(("busy".into(), None)),
        rejected: vec![bad(3), bad(0), bad(0)],
        ..Delivery::default()
    };
    let asked = Arc::new(std::sync::Mutex::new(vec![]));
    let (_batches, rx) = mpsc::channel(1);
    let (acks, _ack_rx) = mpsc::channel(1);
    let (_give_up, give_up_rx) = watch::channel(false);
    let metrics = Arc::new(Metrics::new(&["scripted"]));
    let dead = DeadLetter::new(&dir.0, 1 << 30);
    let mut t = SinkTask {
        index: 0,
        name: "scripted".into(),
        sink: SinkImpl::Scripted(Scripted { answers: [first].into(), asked: asked.clone() }),
        batches: rx,
        acks,
        dead: dead.clone(),
        retry: RetryConfig {
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            shutdown_grace: Duration::from_secs(1),
        },
        metrics: metrics.clone(),
        give_up: give_up_rx,
        recycler: Recycler::new(1 << 20),
        dead_logged: Default::default(),
        stop: Arc::new(Notify::new()),
        parking: None,
        needs: crate::agent::batch::Needs::ALL,
    };
    assert!(deliver(&mut t, &batch(4), Progress::none()).await.is_ok(), "delivered");
    assert_eq!(*asked.lock().unwrap(), [None, Some(vec![2, 3])], "#2 and #3 sent again, once each");
    let m = &metrics.sinks[0];
    assert_eq!(m.records_sent.load(std::sync::atomic::Ordering::Relaxed), 3, "#1, then #2 and #3");
    assert_eq!(m.dead_letter_count(DeadReason::Rejected), 1, "#0");
    let text = std::fs::read_to_string(dead.path()).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0]["record"]["message"].as_str().unwrap().ends_with("item seq=0"), "{text}");
}

/// Batches parked by a sink since renamed or removed are found (the start warns of
/// them with their directory); a configured sink's, an empty directory's and files
/// that are not batches are not.
#[test]
fn parked_batches_of_a_sink_no_longer_configured_are_found() {
    let dir = std::env::temp_dir().join(format!("raylog-sink-orphans-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(parked::orphans(&dir, ["es"]).is_empty(), "no state dir yet");
    let batch = crate::agent::batch::park::park(&batch_from(1, 0, 2), None);
    for (sink, n) in [("es", 1), ("old loki", 2), ("gone", 0)] {
        let p = parked::Parking::new(&dir, sink);
        std::fs::create_dir_all(p.dir()).unwrap();
        (0..n).for_each(|_| drop(p.put(&batch).unwrap()));
    }
    std::fs::write(parked::Parking::new(&dir, "gone").dir().join("notes.txt"), "x").unwrap();
    let found = parked::orphans(&dir, ["es"]);
    assert_eq!(found, vec![(dir.join("parked").join("old_loki"), 2)]);
    assert!(parked::orphans(&dir, ["es", "old loki"]).is_empty(), "the same name, as configured");
    std::fs::remove_dir_all(&dir).unwrap();
}
