//! An in-process Loki push API for tests: decodes what arrives the way Loki does and
//! keeps it for assertions, with fault injection (failures, rejections, outages).
//!
//! `POST /loki/api/v1/push` takes `application/x-protobuf` (snappy block) or
//! `application/json`, either optionally `Content-Encoding: gzip`. The protobuf
//! `logproto.PushRequest` is decoded here by hand, independently of the agent's
//! encoder, so a mistake in one is not mirrored in the other. As in Loki, a stream
//! whose labels do not parse (or have an empty value) or an entry over the line size
//! limit is refused with 400 and the reason, while the rest of the push is kept.
//! `set_down(true)` drops the listener (new connections are refused) and answers 503
//! with `Connection: close` on connections still open.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One stored log entry. Equal entries are equal whenever they arrived.
#[derive(Clone, Debug)]
pub struct ReceivedEntry {
    pub labels: BTreeMap<String, String>,
    pub timestamp_ns: i64,
    pub line: String,
    pub metadata: BTreeMap<String, String>,
    /// `X-Scope-OrgID` of the request.
    pub tenant: Option<String>,
    /// When the push carrying it arrived (Unix ns), for delivery latency.
    pub received_ns: i64,
}

impl PartialEq for ReceivedEntry {
    fn eq(&self, o: &Self) -> bool {
        (&self.labels, self.timestamp_ns, &self.line, &self.metadata, &self.tenant)
            == (&o.labels, o.timestamp_ns, &o.line, &o.metadata, &o.tenant)
    }
}

impl Eq for ReceivedEntry {}

/// One push request, whatever its outcome.
#[derive(Clone, Debug, Default)]
pub struct ReceivedRequest {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub tenant: Option<String>,
    pub authorization: Option<String>,
    pub user_agent: Option<String>,
    /// Body size as received (compressed).
    pub body_bytes: usize,
    pub status: u16,
    /// Streams and entries decoded (0 when the request was failed before decoding).
    pub streams: usize,
    pub entries: usize,
}

/// A stream as decoded from a push, before validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushStream {
    /// The label string (protobuf) or `{k="v", …}` rendered from the JSON object.
    pub labels: String,
    pub entries: Vec<(i64, String, BTreeMap<String, String>)>,
}

struct Fault {
    /// Pushes stored normally before this fault starts.
    after: usize,
    left: usize,
    status: u16,
    message: String,
}

struct Inner {
    entries: Vec<ReceivedEntry>,
    requests: Vec<ReceivedRequest>,
    faults: VecDeque<Fault>,
    down: bool,
    max_line_bytes: usize,
}

type Shared = Arc<Mutex<Inner>>;

struct Serving {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A running test Loki. Dropping it stops the server.
pub struct LokiServer {
    inner: Shared,
    addr: SocketAddr,
    serving: Mutex<Option<Serving>>,
}

/// Starts a server on `127.0.0.1` and an ephemeral port.
pub async fn start() -> LokiServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let inner = Inner {
        entries: Vec::new(),
        requests: Vec::new(),
        faults: VecDeque::new(),
        down: false,
        // Loki's default `max_line_size`.
        max_line_bytes: 256 * 1024,
    };
    let server = LokiServer { inner: Arc::new(Mutex::new(inner)), addr, serving: Mutex::new(None) };
    server.serve(listener);
    server
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LokiServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL, `http://127.0.0.1:<port>` (what a sink's `endpoint` takes).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn push_url(&self) -> String {
        format!("http://{}/loki/api/v1/push", self.addr)
    }

    /// Every entry stored so far, in arrival order.
    pub fn entries(&self) -> Vec<ReceivedEntry> {
        lock(&self.inner).entries.clone()
    }

    /// Every push request received so far, failed ones included.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        lock(&self.inner).requests.clone()
    }

    /// Forgets stored entries and requests.
    pub fn clear(&self) {
        let mut g = lock(&self.inner);
        g.entries.clear();
        g.requests.clear();
    }

    /// Answers the next `n` pushes with `status` (e.g. 429, 500, 503) and stores nothing.
    pub fn fail_next(&self, n: usize, status: u16) {
        self.reject_next(n, status, "simulated failure");
    }

    /// Answers the next `n` pushes with `status` and `message` (e.g. 400 and Loki's text).
    pub fn reject_next(&self, n: usize, status: u16, message: &str) {
        if n > 0 {
            lock(&self.inner).faults.push_back(Fault { after: 0, left: n, status, message: message.to_string() });
        }
    }

    /// Stores the next `ok` pushes, then answers `n` with `status` (a 429 in the
    /// middle of a batch sent in several pushes).
    pub fn fail_after(&self, ok: usize, n: usize, status: u16) {
        if n > 0 {
            let message = "simulated failure".to_string();
            lock(&self.inner).faults.push_back(Fault { after: ok, left: n, status, message });
        }
    }

    /// Lines longer than this are refused like Loki's `max_line_size` does.
    pub fn set_max_line_bytes(&self, n: usize) {
        lock(&self.inner).max_line_bytes = n;
    }

    /// Outage: `true` closes the listener (connections refused), `false` listens again
    /// on the same port.
    pub async fn set_down(&self, down: bool) {
        lock(&self.inner).down = down;
        if down {
            let serving = self.serving.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(s) = serving {
                let _ = s.stop.send(());
                let abort = s.task.abort_handle();
                // Graceful shutdown drops the listener at once, then waits for open
                // connections; do not wait forever on a client that keeps one busy.
                if tokio::time::timeout(Duration::from_secs(2), s.task).await.is_err() {
                    abort.abort();
                }
            }
        } else if self.serving.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            let mut tries = 0;
            let listener = loop {
                match tokio::net::TcpListener::bind(self.addr).await {
                    Ok(l) => break l,
                    Err(_) if tries < 50 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("cannot listen on {} again: {e}", self.addr),
                }
            };
            self.serve(listener);
        }
    }

    /// Waits until at least `n` entries are stored; false on timeout.
    pub async fn wait_entries(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while lock(&self.inner).entries.len() < n {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = Router::new()
            .route("/loki/api/v1/push", post(push))
            .route("/ready", get(|| async { "ready" }))
            // Loki's default `grpc_server_max_recv_msg_size`.
            .layer(DefaultBodyLimit::max(100 << 20))
            .with_state(self.inner.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        *self.serving.lock().unwrap_or_else(|e| e.into_inner()) = Some(Serving { stop, task });
    }
}

impl Drop for LokiServer {
    fn drop(&mut self) {
        if let Some(s) = self.serving.lock().unwrap_or_else(|e| e.into_inner()).take() {
            s.task.abort();
        }
    }
}

fn header_str(h: &HeaderMap, name: impl axum::http::header::AsHeaderName) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

async fn push(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut req = ReceivedRequest {
        content_type: header_str(&headers, header::CONTENT_TYPE),
        content_encoding: header_str(&headers, header::CONTENT_ENCODING),
        tenant: header_str(&headers, "x-scope-orgid"),
        authorization: header_str(&headers, header::AUTHORIZATION),
        user_agent: header_str(&headers, header::USER_AGENT),
        body_bytes: body.len(),
        ..ReceivedRequest::default()
    };
    let mut g = lock(&inner);
    let (status, message, close) = if g.down {
        (503, "simulated outage".to_string(), true)
    } else if let Some(f) = g.faults.front_mut().filter(|f| f.after == 0) {
        f.left -= 1;
        let out = (f.status, f.message.clone(), false);
        if f.left == 0 {
            g.faults.pop_front();
        }
        out
    } else {
        if let Some(f) = g.faults.front_mut() {
            f.after -= 1;
        }
        match decode(&req, &body) {
            Ok(streams) => {
                let (status, message) = store(&mut g, &mut req, streams);
                (status, message, false)
            }
            Err((status, message)) => (status, message, false),
        }
    };
    req.status = status;
    g.requests.push(req);
    drop(g);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status == StatusCode::NO_CONTENT {
        return status.into_response();
    }
    // Loki answers errors as text with a trailing newline.
    let mut resp = (status, format!("{message}\n")).into_response();
    if close {
        resp.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    resp
}

/// Validates and keeps what Loki would keep. Returns the status and error text.
fn store(g: &mut Inner, req: &mut ReceivedRequest, streams: Vec<PushStream>) -> (u16, String) {
    let mut errors = Vec::new();
    let received_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    req.streams = streams.len();
    for s in streams {
        req.entries += s.entries.len();
        let labels = match parse_labels(&s.labels) {
            Ok(l) => l,
            Err(e) => {
                errors.push(format!("error parsing labels '{}' with error: {e}", s.labels));
                continue;
            }
        };
        for (timestamp_ns, line, metadata) in s.entries {
            if line.len() > g.max_line_bytes {
                errors.push(format!(
                    "Max entry size '{}' bytes exceeded for stream '{}' while adding an entry with length '{}' bytes",
                    g.max_line_bytes,
                    s.labels,
                    line.len()
                ));
                continue;
            }
            let tenant = req.tenant.clone();
            g.entries.push(ReceivedEntry { labels: labels.clone(), timestamp_ns, line, metadata, tenant, received_ns });
        }
    }
    if errors.is_empty() {
        (204, String::new())
    } else {
        (400, errors.join("\n"))
    }
}

/// Decodes a push body by its Content-Encoding and Content-Type.
fn decode(req: &ReceivedRequest, body: &[u8]) -> Result<Vec<PushStream>, (u16, String)> {
    let inflated;
    let body = match req.content_encoding.as_deref().unwrap_or("") {
        "" => body,
        enc if enc.eq_ignore_ascii_case("gzip") => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(body).read_to_end(&mut out).map_err(|e| (400, format!("gzip: {e}")))?;
            inflated = out;
            &inflated
        }
        other => return Err((415, format!("Content-Encoding {other:?} not supported"))),
    };
    let ct = req.content_type.as_deref().unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        // Loki reads a push without a Content-Type as protobuf.
        "" | "application/x-protobuf" => {
            let raw = snap::raw::Decoder::new().decompress_vec(body).map_err(|e| (400, format!("snappy: {e}")))?;
            decode_protobuf(&raw).map_err(|e| (400, e))
        }
        "application/json" => decode_json(body).map_err(|e| (400, e)),
        _ => Err((415, format!("unsupported Content-Type {ct:?}"))),
    }
}

/// Decodes the JSON push body: `{"streams":[{"stream":{…},"values":[["<ns>","<line>",{…}?]]}]}`.
pub fn decode_json(body: &[u8]) -> Result<Vec<PushStream>, String> {
    use serde_json::Value;
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("decoding JSON: {e}"))?;
    let streams = v.get("streams").and_then(Value::as_array).ok_or("\"streams\" must be an array")?;
    let strings = |v: Option<&Value>, what: &str| -> Result<BTreeMap<String, String>, String> {
        let Some(v) = v else { return Ok(BTreeMap::new()) };
        let obj = v.as_object().ok_or(format!("{what} must be an object"))?;
        obj.iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or(format!("{what} values must be strings"))?.to_string())))
            .collect()
    };
    let mut out = Vec::new();
    for s in streams {
        let labels = strings(s.get("stream"), "stream")?;
        let rendered: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        let mut entries = Vec::new();
        for value in s.get("values").and_then(Value::as_array).ok_or("\"values\" must be an array")? {
            let a =
                value.as_array().filter(|a| a.len() == 2 || a.len() == 3).ok_or("a value is [ts, line, {meta}?]")?;
            let ts = a[0].as_str().ok_or("timestamp must be a string of nanoseconds")?;
            let ts: i64 = ts.parse().map_err(|_| format!("timestamp {ts:?} is not an integer"))?;
            let line = a[1].as_str().ok_or("line must be a string")?.to_string();
            entries.push((ts, line, strings(a.get(2), "structured metadata")?));
        }
        out.push(PushStream { labels: format!("{{{}}}", rendered.join(", ")), entries });
    }
    Ok(out)
}

/// Protobuf wire reader.
struct Pb<'a> {
    b: &'a [u8],
    pos: usize,
}

enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

impl<'a> Pb<'a> {
    fn new(b: &'a [u8]) -> Pb<'a> {
        Pb { b, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let c = *self.b.get(self.pos).ok_or("proto: unexpected EOF")?;
            self.pos += 1;
            v |= ((c & 0x7f) as u64) << shift;
            if c < 0x80 {
                return Ok(v);
            }
        }
        Err("proto: integer overflow".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len()).ok_or("proto: unexpected EOF")?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next `(field number, value)`, or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.pos >= self.b.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err("proto: illegal tag 0".into());
        }
        let v = match wire {
            0 => Wire::Varint(self.varint()?),
            1 => self.take(8).map(|_| Wire::Fixed)?,
            2 => {
                let n = self.varint()? as usize;
                Wire::Len(self.take(n)?)
            }
            5 => self.take(4).map(|_| Wire::Fixed)?,
            w => return Err(format!("proto: illegal wireType {w}")),
        };
        Ok(Some((field, v)))
    }
}

fn wrong(msg: &str, field: u64) -> String {
    format!("proto: {msg}: wrong wireType for field {field}")
}

fn utf8(b: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| format!("proto: {what}: invalid UTF-8"))
}

/// Decodes a `logproto.PushRequest` (already snappy-decompressed).
pub fn decode_protobuf(b: &[u8]) -> Result<Vec<PushStream>, String> {
    let mut out = Vec::new();
    let mut r = Pb::new(b);
    while let Some((field, v)) = r.next()? {
        match (field, v) {
            (1, Wire::Len(s)) => out.push(decode_stream(s)?),
            (1, _) => return Err(wrong("PushRequest", 1)),
            _ => {} // unknown fields are skipped, as protobuf requires
        }
    }
    Ok(out)
}

fn decode_stream(b: &[u8]) -> Result<PushStream, String> {
    let mut s = PushStream { labels: String::new(), entries: Vec::new() };
    let mut r = Pb::new(b);
    while let Some((field, v)) = r.next()? {
        match (field, v) {
            (1, Wire::Len(l)) => s.labels = utf8(l, "StreamAdapter.labels")?,
            (2, Wire::Len(e)) => s.entries.push(decode_entry(e)?),
            (3, Wire::Varint(_)) => {}
            (1..=3, _) => return Err(wrong("StreamAdapter", field)),
            _ => {}
        }
    }
    Ok(s)
}

fn decode_entry(b: &[u8]) -> Result<(i64, String, BTreeMap<String, String>), String> {
    let (mut ts, mut line, mut meta) = (0i64, String::new(), BTreeMap::new());
    let mut r = Pb::new(b);
    while let Some((field, v)) = r.next()? {
        match (field, v) {
            (1, Wire::Len(t)) => ts = decode_timestamp(t)?,
            // Loki does not check that a line is UTF-8; neither do its queries.
            (2, Wire::Len(l)) => line = String::from_utf8_lossy(l).into_owned(),
            (3, Wire::Len(p)) => {
                let (name, value) = decode_pair(p)?;
                meta.insert(name, value);
            }
            (1..=3, _) => return Err(wrong("EntryAdapter", field)),
            _ => {}
        }
    }
    Ok((ts, line, meta))
}

fn decode_timestamp(b: &[u8]) -> Result<i64, String> {
    let (mut secs, mut nanos) = (0i64, 0i64);
    let mut r = Pb::new(b);
    while let Some((field, v)) = r.next()? {
        match (field, v) {
            (1, Wire::Varint(s)) => secs = s as i64,
            (2, Wire::Varint(n)) => nanos = n as i64 as i32 as i64,
            (1 | 2, _) => return Err(wrong("Timestamp", field)),
            _ => {}
        }
    }
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(format!("timestamp: nanos {nanos} out of range"));
    }
    secs.checked_mul(1_000_000_000).and_then(|s| s.checked_add(nanos)).ok_or_else(|| "timestamp out of range".into())
}

fn decode_pair(b: &[u8]) -> Result<(String, String), String> {
    let (mut name, mut value) = (String::new(), String::new());
    let mut r = Pb::new(b);
    while let Some((field, v)) = r.next()? {
        match (field, v) {
            (1, Wire::Len(n)) => name = utf8(n, "LabelPairAdapter.name")?,
            (2, Wire::Len(v)) => value = utf8(v, "LabelPairAdapter.value")?,
            (1 | 2, _) => return Err(wrong("LabelPairAdapter", field)),
            _ => {}
        }
    }
    Ok((name, value))
}

/// Parses a Loki label string, `{name="value", …}`, as Loki's push path does: names
/// `[a-zA-Z_][a-zA-Z0-9_]*`, values Go string literals (or backquoted), at least one
/// label, no duplicates, no empty values.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let b = s.as_bytes();
    let ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return Err(format!("parse error at offset {i}: expected '{{'"));
    }
    let mut out = BTreeMap::new();
    loop {
        i = ws(i + 1);
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i == start || b[start].is_ascii_digit() {
            return Err(format!("parse error at offset {start}: expected a label name"));
        }
        let name = &s[start..i];
        i = ws(i);
        if b.get(i) != Some(&b'=') {
            return Err(format!("parse error at offset {i}: expected '=' after {name}"));
        }
        let (value, end) = unquote(b, ws(i + 1))?;
        if value.is_empty() {
            return Err(format!("label {name} has an empty value"));
        }
        if out.insert(name.to_string(), value).is_some() {
            return Err(format!("duplicate label name {name}"));
        }
        i = ws(end);
        match b.get(i) {
            Some(b',') => continue,
            Some(b'}') => break,
            _ => return Err(format!("parse error at offset {i}: expected ',' or '}}'")),
        }
    }
    if ws(i + 1) != b.len() {
        return Err(format!("parse error at offset {}: unexpected text after '}}'", i + 1));
    }
    Ok(out)
}

/// A Go string literal at `b[i..]`: its value and the offset just past it.
fn unquote(b: &[u8], mut i: usize) -> Result<(String, usize), String> {
    let quote = *b.get(i).ok_or("parse error: expected a string")?;
    if quote != b'"' && quote != b'`' {
        return Err(format!("parse error at offset {i}: expected a string"));
    }
    i += 1;
    let mut v = Vec::new();
    loop {
        let c = *b.get(i).ok_or("literal not terminated")?;
        i += 1;
        match c {
            _ if c == quote => break,
            b'\n' if quote == b'"' => return Err("literal not terminated".into()),
            b'\\' if quote == b'"' => {
                let e = *b.get(i).ok_or("literal not terminated")?;
                i += 1;
                let hex = |n: usize, i: usize| {
                    std::str::from_utf8(b.get(i..i + n).unwrap_or_default())
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .ok_or_else(|| "invalid escape sequence".to_string())
                };
                match e {
                    b'\\' | b'"' | b'\'' => v.push(e),
                    b'n' => v.push(b'\n'),
                    b't' => v.push(b'\t'),
                    b'r' => v.push(b'\r'),
                    b'a' => v.push(7),
                    b'b' => v.push(8),
                    b'f' => v.push(12),
                    b'v' => v.push(11),
                    b'x' => {
                        v.push(hex(2, i)? as u8);
                        i += 2;
                    }
                    b'u' | b'U' => {
                        let n = if e == b'u' { 4 } else { 8 };
                        let ch = char::from_u32(hex(n, i)?).ok_or("invalid Unicode escape")?;
                        v.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        i += n;
                    }
                    _ => return Err(format!("unknown escape sequence \\{}", e as char)),
                }
            }
            _ => v.push(c),
        }
    }
    String::from_utf8(v).map(|s| (s, i)).map_err(|_| "invalid UTF-8 in a label value".into())
}
