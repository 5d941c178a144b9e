//! An in-process Elasticsearch `_bulk` server for tests.
//!
//! It answers the way Elasticsearch 8 does, so the sink is tested against the real
//! protocol rather than against itself: NDJSON (gzip when `Content-Encoding: gzip`),
//! `create` and `index` actions, documents stored by (index, `_id`), `create` of an
//! existing `_id` → item 409 `version_conflict_engine_exception`, dynamic mappings
//! with field type conflicts (`pid` a number, then `"abc"`) → item 400
//! `document_parsing_exception`, data streams (`logs-*-*`) that need `create` and
//! `@timestamp`, malformed NDJSON → whole-request 400, wrong content type → 406,
//! `filter_path` honoured. Faults: [`EsServer::fail_next`], [`EsServer::fail_after`],
//! [`EsServer::fail_items`], [`EsServer::set_down`], canned answers
//! ([`EsServer::answer_next`]), credentials, and a body size limit (413).
//! Use: `let es = start().await;`, point a sink at `es.url()`, read `es.docs()`.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::http::{header, HeaderMap, Method};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::net::{TcpListener, TcpStream};

use mapping::{parse_source, Checker, FieldType};

mod mapping;

/// A stored document.
#[derive(Clone, Debug, PartialEq)]
pub struct Doc {
    /// The index or data stream named in the request.
    pub index: String,
    pub id: String,
    pub source: Value,
}

/// One request the server saw.
#[derive(Clone, Debug, Default)]
pub struct BulkRequest {
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub authorization: Option<String>,
    pub user_agent: Option<String>,
    /// Body size as received (compressed when gzip).
    pub body_bytes: usize,
    /// HTTP status of the answer.
    pub status: u16,
    /// Status of each item (empty when the whole request failed).
    pub item_statuses: Vec<u16>,
}

#[derive(Default)]
struct State {
    docs: Vec<Doc>,
    /// (index, id) → position in `docs` and version.
    by_id: HashMap<(String, String), (usize, u64)>,
    /// index → field path → type.
    mappings: HashMap<String, HashMap<String, FieldType>>,
    requests: Vec<BulkRequest>,
    fail_next: (usize, u16),
    /// Requests still served, then the status every later one gets.
    fail_after: Option<(usize, u16)>,
    /// Raw answers (status, body) for the next requests, before anything else.
    canned: Vec<(u16, String)>,
    fail_items: (usize, u16),
    down: bool,
    /// The `Authorization` value required, if any.
    auth: Option<String>,
    max_content_length: Option<usize>,
    seq_no: u64,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running server; stops when dropped.
pub struct EsServer {
    addr: SocketAddr,
    state: Shared,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a server on `127.0.0.1` with a free port.
pub async fn start() -> EsServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let state = Shared::default();
    let app = Router::new().fallback(handle).with_state(state.clone());
    let listener = DownAware { inner: listener, state: state.clone() };
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    EsServer { addr, state, task }
}

impl Drop for EsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EsServer {
    /// `http://127.0.0.1:<port>` (append `/_bulk`, or use it as the sink endpoint).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every stored document, in the order first written.
    pub fn docs(&self) -> Vec<Doc> {
        lock(&self.state).docs.clone()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<BulkRequest> {
        lock(&self.state).requests.clone()
    }

    /// Answers the next `n` bulk requests with `status` (e.g. 503, 429) as a whole.
    pub fn fail_next(&self, n: usize, status: u16) {
        lock(&self.state).fail_next = (n, status);
    }

    /// Serves the next `ok` bulk requests, then answers all later ones with `status`
    /// as a whole (a node that goes bad mid-run); `None` heals it.
    pub fn fail_after(&self, after: Option<(usize, u16)>) {
        lock(&self.state).fail_after = after;
    }

    /// Answers the next `n` requests with `status` and exactly `body` (e.g. garbage).
    pub fn answer_next(&self, n: usize, status: u16, body: &str) {
        lock(&self.state).canned = vec![(status, body.to_string()); n];
    }

    /// Fails every `every_nth` item of each request (1-based) with `status`; 0 stops.
    pub fn fail_items(&self, every_nth: usize, status: u16) {
        lock(&self.state).fail_items = (every_nth, status);
    }

    /// Down: new connections are closed at once and requests on open ones get 503.
    pub fn set_down(&self, down: bool) {
        lock(&self.state).down = down;
    }

    /// Requires `Authorization: ApiKey <key>`; anything else gets 401.
    pub fn require_api_key(&self, key: &str) {
        lock(&self.state).auth = Some(format!("ApiKey {key}"));
    }

    /// Requires HTTP basic auth with these credentials; anything else gets 401.
    pub fn require_basic_auth(&self, user: &str, password: &str) {
        lock(&self.state).auth = Some(basic_header(user, password));
    }

    /// Answers 413 to bodies larger than `bytes` (decompressed), like `http.max_content_length`.
    pub fn set_max_content_length(&self, bytes: Option<usize>) {
        lock(&self.state).max_content_length = bytes;
    }
}

/// `Basic <base64(user:password)>`.
pub fn basic_header(user: &str, password: &str) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}");
    let mut out = String::from("Basic ");
    for chunk in raw.as_bytes().chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() { B64[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' };
            out.push(c);
        }
    }
    out
}

/// A listener that drops new connections while the server is down, so clients see
/// a connection error as they would from a stopped node.
struct DownAware {
    inner: TcpListener,
    state: Shared,
}

impl axum::serve::Listener for DownAware {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((s, _)) if lock(&self.state).down => drop(s),
                Ok(x) => return x,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

fn reply(status: u16, body: &Value) -> Response {
    // Like Elasticsearch's HTTP layer, a 413 comes without a body.
    let text = if body.is_null() { String::new() } else { body.to_string() };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-elastic-product", "Elasticsearch")
        .body(Body::from(text))
        .unwrap_or_default()
}

/// Elasticsearch's shape for a whole-request error.
fn error_body(status: u16, kind: &str, reason: &str) -> Value {
    json!({"error": {"root_cause": [{"type": kind, "reason": reason}], "type": kind, "reason": reason}, "status": status})
}

/// A whole-request 400.
fn invalid(kind: &str, reason: &str) -> (u16, Value) {
    (400, error_body(400, kind, reason))
}

async fn handle(AxState(state): AxState<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let Some(default_index) = bulk_path(&parts.method, &path) else {
        let reason = format!("no handler found for uri [{path}] and method [{}]", parts.method);
        return reply(404, &json!({"error": reason, "status": 404}));
    };
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let hdr = |h: header::HeaderName| parts.headers.get(h).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut log = BulkRequest {
        path: path.clone(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        content_type: hdr(header::CONTENT_TYPE),
        content_encoding: hdr(header::CONTENT_ENCODING),
        authorization: hdr(header::AUTHORIZATION),
        user_agent: hdr(header::USER_AGENT),
        body_bytes: body.len(),
        ..BulkRequest::default()
    };
    let mut st = lock(&state);
    if let Some((status, text)) = st.canned.pop() {
        log.status = status;
        st.requests.push(log);
        return Response::builder().status(status).body(Body::from(text)).unwrap_or_default();
    }
    let (status, answer) = match gate(&mut st, &parts.headers, &body) {
        Err(e) => e,
        Ok(ndjson) => match bulk(&mut st, default_index.as_deref(), &ndjson) {
            Ok(resp) => (200, resp),
            Err(e) => e,
        },
    };
    if let Some(items) = answer.get("items").and_then(Value::as_array) {
        log.item_statuses = items.iter().map(item_status).collect();
    }
    log.status = status;
    st.requests.push(log);
    drop(st);
    let answer = match filter_path_of(parts.uri.query()) {
        Some(paths) if status == 200 => filter(&answer, &paths),
        _ => answer,
    };
    let mut resp = reply(status, &answer);
    if status == 503 && lock(&state).down {
        resp.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    resp
}

/// `None` unless this is a bulk request; else the index named in the path, if any.
fn bulk_path(method: &Method, path: &str) -> Option<Option<String>> {
    let prefix = path.strip_suffix("/_bulk").filter(|_| *method == Method::POST || *method == Method::PUT)?;
    Some(prefix.strip_prefix('/').filter(|s| !s.is_empty()).map(str::to_string))
}

fn item_status(item: &Value) -> u16 {
    let inner = item.as_object().and_then(|o| o.values().next());
    inner.and_then(|v| v.get("status")).and_then(Value::as_u64).unwrap_or(0) as u16
}

/// Everything before the documents: outage, credentials, injected failures,
/// content type, decompression and size. Returns the NDJSON.
fn gate(st: &mut State, h: &HeaderMap, body: &[u8]) -> Result<Vec<u8>, (u16, Value)> {
    if st.down {
        return Err((503, error_body(503, "master_not_discovered_exception", "the node is down")));
    }
    if let Some(want) = &st.auth {
        if h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) != Some(want.as_str()) {
            let reason = "unable to authenticate with provided credentials for REST request [/_bulk]";
            return Err((401, error_body(401, "security_exception", reason)));
        }
    }
    if let Some(status) = injected_status(st) {
        let kind = if status == 429 { "es_rejected_execution_exception" } else { "unavailable_shards_exception" };
        return Err((status, error_body(status, kind, "injected failure")));
    }
    let ct = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let ok = ["application/json", "application/x-ndjson", "application/vnd.elasticsearch+x-ndjson"];
    if !ok.contains(&media.as_str()) {
        let reason = format!("Content-Type header [{ct}] is not supported");
        return Err((406, json!({"error": reason, "status": 406})));
    }
    let gz =
        h.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    let mut ndjson = Vec::new();
    if gz {
        if let Err(e) = flate2::read::MultiGzDecoder::new(body).read_to_end(&mut ndjson) {
            return Err(invalid("illegal_argument_exception", &format!("bad gzip body: {e}")));
        }
    } else {
        ndjson.extend_from_slice(body);
    }
    if st.max_content_length.is_some_and(|max| ndjson.len() > max) {
        return Err((413, Value::Null));
    }
    Ok(ndjson)
}

/// The status [`EsServer::fail_after`] or [`EsServer::fail_next`] answers this
/// request with, if any.
fn injected_status(st: &mut State) -> Option<u16> {
    match &mut st.fail_after {
        Some((0, status)) => return Some(*status),
        Some((ok, _)) => *ok -= 1,
        None => {}
    }
    (st.fail_next.0 > 0).then(|| {
        st.fail_next.0 -= 1;
        st.fail_next.1
    })
}

/// One parsed action of a bulk request.
struct Op<'a> {
    action: String,
    index: String,
    id: Option<String>,
    source: &'a [u8],
}

/// Parses every action line first, as Elasticsearch does: a bad one fails the
/// whole request, while a bad document only fails its item.
fn parse_ops<'a>(default_index: Option<&str>, body: &'a [u8]) -> Result<Vec<Op<'a>>, (u16, Value)> {
    let bad = |reason: String| invalid("illegal_argument_exception", &reason);
    if body.is_empty() {
        return Err(invalid("action_request_validation_exception", "Validation Failed: 1: no requests added;"));
    }
    if !body.ends_with(b"\n") {
        return Err(bad("The bulk request must be terminated by a newline [\\n]".into()));
    }
    let mut lines = body[..body.len() - 1].split(|&b| b == b'\n').enumerate();
    let mut ops = Vec::new();
    while let Some((n, line)) = lines.next() {
        let line_no = n + 1;
        let meta: Map<String, Value> = serde_json::from_slice(line)
            .map_err(|e| bad(format!("Malformed action/metadata line [{line_no}], expected START_OBJECT: {e}")))?;
        let (action, params) = match meta.iter().next() {
            Some((a, Value::Object(p))) if meta.len() == 1 => (a.clone(), p),
            _ => {
                return Err(bad(format!("Malformed action/metadata line [{line_no}], expected a single action object")))
            }
        };
        if action != "create" && action != "index" {
            let reason = format!("Malformed action/metadata line [{line_no}], expected field [create or index] but found [{action}] (update and delete are not in the test server)");
            return Err(bad(reason));
        }
        let index =
            params.get("_index").and_then(Value::as_str).map(str::to_string).or(default_index.map(str::to_string));
        let Some(index) = index else {
            return Err(invalid("action_request_validation_exception", "Validation Failed: 1: index is missing;"));
        };
        let id = params.get("_id").and_then(Value::as_str).map(str::to_string);
        let missing = || bad(format!("The bulk request is missing the source of line [{line_no}]"));
        let source = lines.next().map(|(_, s)| s).ok_or_else(missing)?;
        ops.push(Op { action, index, id, source });
    }
    Ok(ops)
}

/// Executes a bulk body; `Ok` is the 200 answer, `Err` a whole-request failure.
fn bulk(st: &mut State, default_index: Option<&str>, body: &[u8]) -> Result<Value, (u16, Value)> {
    let started = Instant::now();
    let ops = parse_ops(default_index, body)?;
    let mut items = Vec::with_capacity(ops.len());
    let mut errors = false;
    for (k, op) in ops.into_iter().enumerate() {
        let action = op.action.clone();
        let item = match injected(st, k + 1) {
            Some(item) => item,
            None => execute(st, op),
        };
        errors |= item.get("error").is_some();
        items.push(json!({ action: item }));
    }
    let took = started.elapsed().as_millis() as u64;
    Ok(json!({"took": took, "errors": errors, "items": items}))
}

/// The `fail_items` fault for item number `k` (1-based), if it applies.
fn injected(st: &State, k: usize) -> Option<Value> {
    let (every, status) = st.fail_items;
    if every == 0 || k % every != 0 {
        return None;
    }
    let kind = if status == 429 { "es_rejected_execution_exception" } else { "unavailable_shards_exception" };
    Some(json!({"status": status, "error": {"type": kind, "reason": "injected item failure"}}))
}

fn item_error(index: &str, id: &str, status: u16, kind: &str, reason: &str) -> Value {
    let error = json!({"type": kind, "reason": reason, "index_uuid": "testkit", "shard": "0", "index": index});
    json!({"_index": index, "_id": id, "status": status, "error": error})
}

/// Data streams are what the built-in `logs-*-*` template makes of a name.
fn is_data_stream(index: &str) -> bool {
    index.strip_prefix("logs-").is_some_and(|rest| rest.contains('-'))
}

/// Runs one `create`/`index` action against the store.
fn execute(st: &mut State, op: Op<'_>) -> Value {
    st.seq_no += 1;
    let id = op.id.clone().unwrap_or_else(|| format!("auto-{:016x}", st.seq_no));
    let ds = is_data_stream(&op.index);
    let shown = if ds { format!(".ds-{}-2026.01.01-000001", op.index) } else { op.index.clone() };
    if ds && op.action != "create" {
        let reason = "only write ops with an op_type of create are allowed in data streams";
        return item_error(&shown, &id, 400, "illegal_argument_exception", reason);
    }
    let source = match parse_source(op.source, &id, ds) {
        Ok(s) => s,
        Err((kind, reason)) => return item_error(&shown, &id, 400, kind, &reason),
    };
    let key = (op.index.clone(), id.clone());
    let existing = st.by_id.get(&key).copied();
    if let (Some((_, version)), "create") = (existing, op.action.as_str()) {
        let reason = format!("[{id}]: version conflict, document already exists (current version [{version}])");
        return item_error(&shown, &id, 409, "version_conflict_engine_exception", &reason);
    }
    let mapping = st.mappings.entry(op.index.clone()).or_default();
    let mut check = Checker { mapping, added: Vec::new(), id: &id };
    if let Err(reason) = check.object("", &source) {
        return item_error(&shown, &id, 400, "document_parsing_exception", &reason);
    }
    let added = std::mem::take(&mut check.added);
    mapping.extend(added);
    let doc = Doc { index: op.index, id: id.clone(), source: Value::Object(source) };
    let (pos, version, status, result) = match existing {
        Some((pos, v)) => {
            st.docs[pos] = doc;
            (pos, v + 1, 200, "updated")
        }
        None => {
            st.docs.push(doc);
            (st.docs.len() - 1, 1, 201, "created")
        }
    };
    st.by_id.insert(key, (pos, version));
    json!({"_index": shown, "_id": id, "_version": version, "result": result,
        "_shards": {"total": 2, "successful": 1, "failed": 0}, "_seq_no": st.seq_no - 1, "_primary_term": 1, "status": status})
}

/// The `filter_path` parameter, split into dotted paths.
fn filter_path_of(query: Option<&str>) -> Option<Vec<Vec<String>>> {
    let q = query?;
    let raw = q.split('&').find_map(|kv| kv.strip_prefix("filter_path="))?;
    let decoded = raw.replace("%2C", ",").replace("%2c", ",").replace("%2A", "*").replace("%2a", "*");
    Some(decoded.split(',').map(|p| p.split('.').map(str::to_string).collect()).collect())
}

/// Keeps only what `paths` select (`*` matches any key; arrays are transparent),
/// as Elasticsearch's response filtering does.
fn filter(v: &Value, paths: &[Vec<String>]) -> Value {
    match v {
        Value::Array(a) => Value::Array(a.iter().map(|x| filter(x, paths)).collect()),
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, val) in o {
                let matching: Vec<&Vec<String>> = paths.iter().filter(|p| p[0] == "*" || p[0] == *k).collect();
                if matching.iter().any(|p| p.len() == 1) {
                    out.insert(k.clone(), val.clone());
                } else if !matching.is_empty() {
                    let rest: Vec<Vec<String>> = matching.iter().map(|p| p[1..].to_vec()).collect();
                    out.insert(k.clone(), filter(val, &rest));
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}
