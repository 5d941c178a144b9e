//! The OTLP sink against a scripted OTLP/HTTP receiver on port 0: what arrives
//! (headers, encodings), partial success, 429 with `Retry-After`, refusals isolated
//! by halving, credentials and wrong URLs, and the driver's dead letters.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use tokio::sync::{mpsc, watch, Notify};

use super::encode::tests::{config_at, decode_json, decode_pb, sample_batch, Req};
use super::service::OtlpSink;
use crate::agent::batch::{Batch, Recycler};
use crate::agent::config::RetryConfig;
use crate::agent::metrics::Metrics;
use crate::agent::sinks::{run_sink, DeadLetter, DeadReason, SendError, SinkImpl, SinkTask};

/// An answer: status, content type, body, `Retry-After`.
#[derive(Clone)]
struct Answer(u16, &'static str, Vec<u8>, Option<&'static str>);

/// One request as received.
struct Got {
    headers: HeaderMap,
    req: Req,
}

#[derive(Default)]
struct State {
    answers: VecDeque<Answer>,
    /// Requests holding a record whose body contains this are refused with 400.
    refuse_text: Option<&'static str>,
    got: Vec<Got>,
}

struct Receiver {
    url: String,
    state: Arc<Mutex<State>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let app = axum::Router::new()
            .route("/v1/logs", axum::routing::post(move |h: HeaderMap, body: Bytes| answer(s.clone(), h, body)));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        Receiver { url, state }
    }

    fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.lock().unwrap().answers.extend(answers);
    }

    fn records(&self) -> usize {
        self.state.lock().unwrap().got.iter().map(|g| g.req.records.len()).sum()
    }

    fn sink(&self, extra: &str) -> OtlpSink {
        OtlpSink::new(config_at(&self.url, extra))
    }
}

async fn answer(state: Arc<Mutex<State>>, h: HeaderMap, body: Bytes) -> axum::response::Response {
    let raw = if h.get("content-encoding").is_some_and(|v| v == "gzip") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut out).unwrap();
        out
    } else {
        body.to_vec()
    };
    let json = h["content-type"] == "application/json";
    let req = if json { decode_json(&raw) } else { decode_pb(&raw) };
    let mut s = state.lock().unwrap();
    let refused =
        s.refuse_text.is_some_and(|t| req.records.iter().any(|r| r.body.as_str().is_some_and(|b| b.contains(t))));
    s.got.push(Got { headers: h, req });
    if refused {
        return (StatusCode::BAD_REQUEST, "a record is bad").into_response();
    }
    let Some(Answer(status, ctype, body, retry)) = s.answers.pop_front() else {
        return (StatusCode::OK, [("content-type", "application/x-protobuf")], Vec::new()).into_response();
    };
    let mut r = (StatusCode::from_u16(status).unwrap(), [("content-type", ctype)], body).into_response();
    if let Some(after) = retry {
        r.headers_mut().insert("retry-after", after.parse().unwrap());
    }
    r
}

/// `ExportLogsServiceResponse { partial_success { rejected_log_records: n, error_message: msg } }`.
fn partial_pb(n: u8, msg: &str) -> Vec<u8> {
    let mut inner = vec![0x08, n, 0x12, msg.len() as u8];
    inner.extend_from_slice(msg.as_bytes());
    let mut out = vec![0x0a, inner.len() as u8];
    out.extend(inner);
    out
}

#[tokio::test]
async fn a_batch_arrives_whole_with_its_headers() {
    let rx = Receiver::start().await;
    let b = sample_batch();
    let mut sink = rx.sink("headers = { \"DD-API-KEY\" = \"k\" }\nbearer_token = \"t\"");
    let (d, bytes) = sink.send(&b, None).await.unwrap();
    assert!(d.retry.is_empty() && d.rejected.is_empty(), "{d:?}");
    {
        let s = rx.state.lock().unwrap();
        let g = &s.got[0];
        assert_eq!(g.req.records.len(), b.len());
        assert_eq!(g.headers["content-type"], "application/x-protobuf");
        assert_eq!(g.headers["content-encoding"], "gzip");
        assert_eq!(g.headers["dd-api-key"], "k");
        assert_eq!(g.headers["authorization"], "Bearer t");
        assert!(g.headers["user-agent"].to_str().unwrap().starts_with("raylog/"));
        assert!(bytes > 0);
    }
    let mut sink = rx.sink("encoding = \"json\"\ncompression = \"none\"");
    sink.send(&b, None).await.unwrap();
    let s = rx.state.lock().unwrap();
    assert_eq!(s.got[1].headers["content-type"], "application/json");
    assert!(s.got[1].headers.get("content-encoding").is_none());
    assert_eq!(s.got[1].req, s.got[0].req, "the same records in OTLP/JSON");
}

#[tokio::test]
async fn a_partial_success_flags_the_request_and_counts_only_the_refused() {
    let rx = Receiver::start().await;
    let b = sample_batch();
    let n = b.len();
    rx.script([Answer(200, "application/x-protobuf", partial_pb(2, "too old"), None)]);
    let (d, _) = rx.sink("").send(&b, None).await.unwrap();
    assert_eq!(d.rejected.len(), n, "every record of the request is a suspect");
    assert!(d.rejected.iter().all(|r| r.1 == DeadReason::Partial && r.2.contains("refused 2 of the")));
    assert!(d.rejected[0].2.ends_with("too old"), "{}", d.rejected[0].2);
    assert_eq!(d.stored_anyway, n as u64 - 2);
    assert!(d.retry.is_empty(), "a partial success is not retried");
    // The same in JSON, with a count as a string; all refused is plainly rejected.
    let json = format!(r#"{{"partialSuccess":{{"rejectedLogRecords":"{n}","errorMessage":"no"}}}}"#);
    rx.script([Answer(200, "application/json", json.into_bytes(), None)]);
    let (d, _) = rx.sink("encoding = \"json\"").send(&b, None).await.unwrap();
    assert!(d.rejected.iter().all(|r| r.1 == DeadReason::Rejected), "{d:?}");
    assert_eq!(d.stored_anyway, 0);
    // A partial success of 0 is a full success with a warning.
    rx.script([Answer(200, "application/x-protobuf", partial_pb(0, "fyi"), None)]);
    let (d, _) = rx.sink("").send(&b, None).await.unwrap();
    assert!(d.rejected.is_empty());
}

#[tokio::test]
async fn throttling_and_overload_are_retried_after_what_the_receiver_says() {
    let rx = Receiver::start().await;
    let b = sample_batch();
    let mut sink = rx.sink("");
    for (status, after) in [(429, Some("7")), (503, Some("2")), (502, None), (504, None), (500, None)] {
        rx.script([Answer(status, "text/plain", b"busy".to_vec(), after)]);
        match (sink.send(&b, None).await, after) {
            (Err(SendError::Throttled(why, wait)), Some(a)) => {
                assert_eq!(wait, Duration::from_secs(a.parse().unwrap()));
                assert!(why.contains(&status.to_string()) && why.contains("busy"), "{why}");
            }
            (Err(SendError::Transient(_)), None) => {}
            (other, _) => panic!("{status}: {other:?}"),
        }
    }
    let (d, _) = sink.send(&b, None).await.unwrap();
    assert!(d.rejected.is_empty() && d.retry.is_empty());
}

#[tokio::test]
async fn a_refused_record_is_isolated_by_halving_and_the_rest_stored() {
    let rx = Receiver::start().await;
    let b = sample_batch();
    let bad = b.entries.iter().position(|e| b.str(e.message).contains("Actor died")).unwrap() as u32;
    rx.state.lock().unwrap().refuse_text = Some("Actor died");
    let (d, _) = rx.sink("").send(&b, None).await.unwrap();
    assert_eq!(d.rejected.len(), 1, "{d:?}");
    assert_eq!((d.rejected[0].0, d.rejected[0].1), (bad, DeadReason::Rejected));
    assert!(d.rejected[0].2.contains("400") && d.rejected[0].2.contains("a record is bad"));
    let s = rx.state.lock().unwrap();
    let stored: usize = s
        .got
        .iter()
        .filter(|g| !g.req.records.iter().any(|r| r.body.as_str().unwrap().contains("Actor died")))
        .map(|g| g.req.records.len())
        .sum();
    assert_eq!(stored, b.len() - 1, "every other record stored once");
}

#[tokio::test]
async fn credentials_and_wrong_urls_are_retried_other_4xx_refused() {
    let rx = Receiver::start().await;
    let b = sample_batch();
    let mut sink = rx.sink("");
    for (status, says) in [(401, "check headers, basic_auth"), (403, "check headers"), (404, "check endpoint")] {
        rx.script([Answer(status, "text/plain", b"nope".to_vec(), None)]);
        match sink.send(&b, None).await {
            Err(SendError::Transient(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{status}: {other:?}"),
        }
    }
    // A google.rpc.Status body's message is the reason.
    rx.script([Answer(422, "application/x-protobuf", vec![0x08, 0x03, 0x12, 0x03, b'b', b'a', b'd'], None)]);
    match sink.send(&b, None).await {
        Err(SendError::Permanent(why)) => assert!(why.contains("422") && why.ends_with("bad"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A 200 that is not an OTLP answer (a proxy's page) keeps the records.
    rx.script([Answer(200, "text/html", b"<html>maintenance</html>".to_vec(), None)]);
    assert!(matches!(sink.send(&b, None).await, Err(SendError::Transient(_))));
}

/// Through the driver: the partial request's records land in the dead-letter file
/// flagged `partial` with the receiver's message, the batch is acknowledged, and
/// the counters say K dead letters and N − K sent.
#[tokio::test]
async fn the_driver_writes_partial_dead_letters_and_counts_them_right() {
    let rx = Receiver::start().await;
    rx.script([Answer(200, "application/x-protobuf", partial_pb(3, "attribute limit"), None)]);
    let dir = std::env::temp_dir().join(format!("raylog-otlp-driver-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (batches, brx) = mpsc::channel(2);
    let (ack_tx, mut acks) = mpsc::channel(2);
    let (_give_up, give_up_rx) = watch::channel(false);
    let dead = DeadLetter::new(&dir, 1 << 30);
    let metrics = Arc::new(Metrics::new(&["otlp"]));
    let retry = RetryConfig {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        shutdown_grace: Duration::from_secs(1),
    };
    tokio::spawn(run_sink(SinkTask {
        index: 0,
        name: "otlp".into(),
        sink: SinkImpl::Otlp(rx.sink("")),
        batches: brx,
        acks: ack_tx,
        dead: dead.clone(),
        retry,
        metrics: metrics.clone(),
        give_up: give_up_rx,
        recycler: Recycler::new(1 << 20),
        dead_logged: Default::default(),
        stop: Arc::new(Notify::new()),
        parking: None,
        needs: crate::agent::batch::Needs::ALL,
    }));
    let b: Arc<Batch> = Arc::new(sample_batch());
    let n = b.len() as u64;
    batches.send((b, std::time::Instant::now())).await.unwrap();
    let ack = tokio::time::timeout(Duration::from_secs(30), acks.recv()).await.expect("no ack").unwrap();
    assert_eq!(ack.seq, 1);
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(dead.path()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len() as u64, n);
    assert!(lines.iter().all(|l| l["kind"] == "partial" && l["reason"].as_str().unwrap().ends_with("attribute limit")));
    assert!(lines.iter().all(|l| l["record"]["message"].is_string()), "the record itself is kept");
    let m = &metrics.sinks[0];
    assert_eq!(m.dead_letter_count(DeadReason::Partial), 3);
    assert_eq!(m.records_sent.load(std::sync::atomic::Ordering::Relaxed), n - 3);
    assert_eq!(rx.records() as u64, n);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `n` raylet records in one batch.
fn raylet_batch(n: usize) -> Batch {
    use raylog_parsers::{classify, Correlator, FileParser, Options};
    let node = Arc::new(crate::agent::batch::NodeIdentity::new("node-a".into(), None, Default::default()));
    let mut b = Batch::new(1, node);
    let text: String = (0..n)
        .map(|i| format!("[2026-11-30 09:05:33,150 I 4214 4214] (raylet) node_manager.cc:1: item seq={i}\n"))
        .collect();
    let mut p = FileParser::new(classify("raylet.out", Some("session_2026-11-30_09-00-00_000000_1")), None, None);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let doc = |r: &raylog_parsers::Record<'_>| crate::agent::batch::doc_id("1:raylet.out", r.offset, r.message);
    p.push(text.as_bytes(), &mut corr, &opts, &mut |r| b.push(r, 1, doc(r)));
    p.finish(&mut corr, &opts, &mut |r| b.push(r, 1, doc(r)));
    assert_eq!(b.len(), n);
    b
}

/// A batch larger than `max_request_bytes` goes as several requests, each under it
/// once the size per record is known, every record once and in order.
#[tokio::test]
async fn a_large_batch_is_cut_into_requests_under_the_size_bound() {
    let rx = Receiver::start().await;
    let b = raylet_batch(3000);
    let mut sink = rx.sink("max_request_bytes = \"64KiB\"\ncompression = \"none\"");
    for round in 0..2 {
        let (d, _) = sink.send(&b, None).await.unwrap();
        assert!(d.rejected.is_empty() && d.retry.is_empty());
        let s = rx.state.lock().unwrap();
        let got: Vec<&str> =
            s.got.iter().flat_map(|g| g.req.records.iter().map(|r| r.body.as_str().unwrap())).collect();
        let want: Vec<String> = (0..3000).map(|i| format!("item seq={i}")).collect();
        assert_eq!(got.len(), 3000 * (round + 1));
        assert_eq!(got[3000 * round..], want.iter().map(String::as_str).collect::<Vec<_>>()[..], "once, in order");
        assert!(s.got.len() >= 3000 * 400 / (64 << 10) * (round + 1), "{} requests", s.got.len());
    }
}

/// A refusal for good of one request of a cut batch dead-letters that request's
/// records only; the others are sent and stored.
#[tokio::test]
async fn a_refusal_of_one_request_of_several_takes_only_its_records() {
    let rx = Receiver::start().await;
    let b = raylet_batch(3000);
    let mut sink = rx.sink("max_request_bytes = \"64KiB\"\ncompression = \"none\"");
    sink.send(&b, None).await.unwrap();
    let first = rx.state.lock().unwrap().got.len();
    rx.script([Answer(422, "text/plain", b"no".to_vec(), None)]);
    let (d, _) = sink.send(&b, None).await.unwrap();
    let s = rx.state.lock().unwrap();
    let refused = s.got[first].req.records.len();
    assert!(refused > 0 && refused < 3000, "{refused}");
    assert_eq!(d.rejected.len(), refused, "only the refused request's records");
    assert!(d.rejected.iter().all(|r| r.2.contains("422")));
    let stored: usize = s.got[first + 1..].iter().map(|g| g.req.records.len()).sum();
    assert_eq!(stored + refused, 3000);
}

/// Reads one HTTP/1.1 request whole (head, then `Content-Length` bytes of body), so
/// that an answer written after it is not mistaken for a request cut short.
async fn read_request(s: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 8192]);
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client hung up mid-request");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
        if buf.len() >= end + 4 + len {
            return;
        }
    }
}

/// A receiver that answers each request (one per connection) with the next of
/// `answers`, written raw, then closes the connection: an answer can end before the
/// body its `Content-Length` announced.
async fn raw_receiver(answers: Vec<Vec<u8>>) -> String {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        for answer in answers {
            let (mut s, _) = l.accept().await.unwrap();
            read_request(&mut s).await;
            s.write_all(&answer).await.unwrap();
            let _ = s.shutdown().await;
        }
    });
    url
}

/// `HTTP/1.1 200` announcing `announced` bytes of protobuf, carrying `body`.
fn ok_answer(announced: usize, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {announced}\r\nconnection: close\r\n\r\n"
    );
    [head.as_bytes(), body].concat()
}

/// A 200 whose body is cut short (the connection drops after 4 of its 15 bytes: a
/// partial success refusing 2 records) says nothing of what was stored: the request
/// is retried, not counted as stored whole. A 200 with an empty body (Content-Length
/// 0) is a full success.
#[tokio::test]
async fn a_2xx_whose_body_is_cut_short_is_retried_not_taken_as_stored() {
    let partial = partial_pb(2, "too old");
    let url = raw_receiver(vec![ok_answer(partial.len(), &partial[..4]), ok_answer(0, b"")]).await;
    let b = sample_batch();
    let mut sink = OtlpSink::new(config_at(&url, ""));
    match sink.send(&b, None).await {
        Err(SendError::Transient(why)) => assert!(why.contains("200") && why.contains("body"), "{why}"),
        other => panic!("a 2xx with its body cut short taken as {other:?}"),
    }
    let (d, _) = sink.send(&b, None).await.unwrap();
    assert!(d.retry.is_empty() && d.rejected.is_empty() && d.stored_anyway == 0, "an empty 200: {d:?}");
}

/// A 2xx body that does not decode as the `ExportLogsServiceResponse` its
/// Content-Type announces (a field of the wrong wire type, `partialSuccess` not an
/// object) may have meant a partial success: the request is retried.
#[tokio::test]
async fn a_2xx_whose_body_does_not_decode_as_announced_is_retried() {
    let rx = Receiver::start().await;
    let b = sample_batch();
    let mut sink = rx.sink("");
    // partial_success (field 1, a message) as a varint; then rejected_log_records
    // (field 1 of the partial success, an int64) as a length-delimited field.
    for body in [vec![0x08, 0x02], vec![0x0a, 0x03, 0x0a, 0x01, 0x02]] {
        rx.script([Answer(200, "application/x-protobuf", body.clone(), None)]);
        let got = sink.send(&b, None).await;
        assert!(matches!(got, Err(SendError::Transient(_))), "{body:x?}: {got:?}");
    }
    let mut json = rx.sink("encoding = \"json\"");
    for body in [r#"{"partialSuccess":3}"#, r#"{"partialSuccess":{"errorMessage":7}}"#] {
        rx.script([Answer(200, "application/json", body.as_bytes().to_vec(), None)]);
        let got = json.send(&b, None).await;
        assert!(matches!(got, Err(SendError::Transient(_))), "{body}: {got:?}");
    }
    rx.script([Answer(200, "application/x-protobuf", vec![], None)]);
    let (d, _) = sink.send(&b, None).await.unwrap();
    assert!(d.retry.is_empty() && d.rejected.is_empty(), "an empty 200 is a full success: {d:?}");
}

/// A batch cut into several requests reports, after each one stored, that every
/// record before the next request is settled, never one not stored yet, even when
/// asked to send again a retry list whose parts are out of batch order.
#[tokio::test]
async fn progress_counts_only_requests_stored_in_batch_order() {
    use crate::agent::sinks::{Ack, Progress};
    let rx = Receiver::start().await;
    let b = raylet_batch(3000);
    let mut sink = rx.sink("max_request_bytes = \"64KiB\"\ncompression = \"none\"");
    let ok = || Answer(200, "application/x-protobuf", Vec::new(), None);
    let busy = || Answer(429, "text/plain", b"slow down".to_vec(), None);
    let (tx, mut rx_acks) = mpsc::channel::<Ack>(1024);
    let seq_of = |body: &str| body.strip_prefix("item seq=").and_then(|n| n.parse::<usize>().ok());
    let mut only: Option<Vec<u32>> = None;
    let mut refused_requests = std::collections::HashSet::new();
    for round in 0..4 {
        let before = rx.state.lock().unwrap().got.len();
        rx.script([ok(), busy()]);
        refused_requests.insert(before + 1);
        let mut progress = Progress::to(&tx, 1, 0);
        let sent = sink.send_reporting(&b, only.as_deref(), &mut progress).await;
        let s = rx.state.lock().unwrap();
        let stored: std::collections::HashSet<usize> = s
            .got
            .iter()
            .enumerate()
            .filter(|(i, _)| !refused_requests.contains(i))
            .flat_map(|(_, g)| g.req.records.iter().filter_map(|r| seq_of(r.body.as_str()?)))
            .collect();
        while let Ok(a) = rx_acks.try_recv() {
            let n = a.upto.expect("progress") as usize;
            let missing: Vec<usize> = (0..n).filter(|i| !stored.contains(i)).take(5).collect();
            assert!(missing.is_empty(), "round {round}: reported {n} settled, yet {missing:?}… not stored");
        }
        match sent {
            Ok((d, _)) if d.retry.is_empty() => break,
            Ok((mut d, _)) => {
                // As a driver might hand it back: the parts in any order.
                d.retry.reverse();
                only = Some(d.retry);
            }
            Err(_) => {}
        }
    }
    assert!(only.is_some(), "the 429s left records to retry");
}
