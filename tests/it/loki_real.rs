//! A real Grafana Loki for the tests that need one: started from `RAYLOG_LOKI_BIN` on
//! free ports with a temp dir and its own config (a single process, filesystem
//! storage, every limit at Loki's default unless a test changes one), queried back
//! after `POST /flush` and stopped when dropped.
//!
//! `.ci/run` sets `RAYLOG_LOKI_BIN` to what `../shared/loki/start-loki.sh --path`
//! prints. The tests that need it are `#[ignore]`d (cargo's summary counts them; see
//! docs/testing.md); run with `--include-ignored` and without it, they fail naming
//! the variable and the command that sets it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Loki 3.x config; `__PORT__`, `__GRPC__`, `__DATA__` and `__LIMITS__` filled in.
const CONFIG: &str = "\
auth_enabled: false
server:
  http_listen_address: 127.0.0.1
  http_listen_port: __PORT__
  grpc_listen_address: 127.0.0.1
  grpc_listen_port: __GRPC__
  log_level: warn
common:
  instance_addr: 127.0.0.1
  path_prefix: __DATA__
  storage:
    filesystem:
      chunks_directory: __DATA__/chunks
      rules_directory: __DATA__/rules
  replication_factor: 1
  ring:
    kvstore:
      store: inmemory
schema_config:
  configs:
    - from: 2020-10-24
      store: tsdb
      object_store: filesystem
      schema: v13
      index:
        prefix: index_
        period: 24h
ingester:
  lifecycler:
    min_ready_duration: 0s
    final_sleep: 0s
limits_config:
  allow_structured_metadata: true
__LIMITS__
analytics:
  reporting_enabled: false
";

/// A running Loki, killed on drop (its data dir removed after a passing test).
pub struct RealLoki {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for RealLoki {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The Loki binary from `RAYLOG_LOKI_BIN`. Panics when it is unset: a test that
/// needs a real Loki runs only with `--include-ignored`, and then must not pass
/// without one.
pub fn loki_bin(test: &str) -> PathBuf {
    let Some(p) = std::env::var_os("RAYLOG_LOKI_BIN") else {
        panic!("{test} needs a real Loki: RAYLOG_LOKI_BIN=$(../shared/loki/start-loki.sh --path) (.ci/run sets it)")
    };
    let p = PathBuf::from(p);
    assert!(p.is_file(), "RAYLOG_LOKI_BIN={} is not a file", p.display());
    p
}

impl RealLoki {
    /// Starts Loki with `limits` (YAML lines under `limits_config`, two-space indented)
    /// added to its defaults. Panics without `RAYLOG_LOKI_BIN` ([`loki_bin`]).
    pub fn start(test: &str, limits: &str) -> RealLoki {
        let bin = loki_bin(test);
        let dir = std::env::temp_dir().join(format!("raylog-loki-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (port, grpc) = (free_port(), free_port());
        let cfg = CONFIG
            .replace("__PORT__", &port.to_string())
            .replace("__GRPC__", &grpc.to_string())
            .replace("__DATA__", &dir.display().to_string())
            .replace("__LIMITS__", limits);
        std::fs::write(dir.join("loki.yaml"), cfg).unwrap();
        let log = std::fs::File::create(dir.join("loki.log")).unwrap();
        let child = Command::new(&bin)
            .arg(format!("-config.file={}", dir.join("loki.yaml").display()))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut loki = RealLoki { child, port, dir };
        let start = Instant::now();
        while get(&format!("{}/ready", loki.url())).map(|b| b.trim() != "ready").unwrap_or(true) {
            if let Some(st) = loki.child.try_wait().unwrap() {
                panic!("Loki exited ({st}); see {}", loki.dir.join("loki.log").display());
            }
            assert!(start.elapsed() < Duration::from_secs(90), "Loki not ready in 90 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        loki
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Makes everything pushed queryable (Loki reads ranges older than 3 h from
    /// flushed chunks only).
    pub fn flush(&self) {
        post(&format!("{}/flush", self.url())).expect("POST /flush");
    }

    /// Entries stored for `selector` over the last 7 days, by the `by` label (one key,
    /// `""`, when `by` is empty).
    pub fn counts(&self, selector: &str, by: &str) -> BTreeMap<String, u64> {
        let query = format!("sum by ({by}) (count_over_time({selector}[7d]))");
        let url = format!("{}/loki/api/v1/query?query={}", self.url(), encode(&query));
        let body = get(&url).expect("query");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        let mut out = BTreeMap::new();
        for r in v["data"]["result"].as_array().unwrap_or_else(|| panic!("no result: {body}")) {
            let key = if by.is_empty() { String::new() } else { r["metric"][by].as_str().unwrap_or("").to_string() };
            out.insert(key, r["value"][1].as_str().unwrap().parse().unwrap());
        }
        out
    }

    /// Entries stored for `selector` after a flush, when `want` are expected. Loki
    /// writes flushed chunks in the background, and ranges older than 3 h are read
    /// from them only, so the count is polled until it reaches `want` (then checked
    /// once more for extras) or stops moving for 20 s.
    pub fn stored(&self, selector: &str, want: u64) -> u64 {
        self.flush();
        let (mut last, mut since) = (u64::MAX, Instant::now());
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let n = self.counts(selector, "").values().sum::<u64>();
            if n >= want {
                std::thread::sleep(Duration::from_secs(1));
                return self.counts(selector, "").values().sum::<u64>();
            }
            if n != last {
                (last, since) = (n, Instant::now());
            } else if since.elapsed() > Duration::from_secs(20) {
                return n;
            }
        }
    }

    /// The streams Loki split by its automatic stream sharding (the series with a
    /// `__stream_shard__` label): an entry sent again may land in another shard and
    /// be stored twice, so a shipper must keep each stream under the shard rate.
    pub fn sharded_streams(&self) -> Vec<String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let url = format!(
            "{}/loki/api/v1/series?match[]={}&start={}&end={}",
            self.url(),
            encode("{__stream_shard__=~\".+\"}"),
            now - 7 * 86_400,
            now + 600
        );
        let body = get(&url).expect("series");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        v["data"].as_array().unwrap_or_else(|| panic!("no data: {body}")).iter().map(|s| s.to_string()).collect()
    }

    /// `loki_discarded_samples_total` by reason.
    pub fn discarded(&self) -> BTreeMap<String, u64> {
        let text = get(&format!("{}/metrics", self.url())).expect("metrics");
        let mut out = BTreeMap::new();
        for line in text.lines().filter(|l| l.starts_with("loki_discarded_samples_total{")) {
            let reason = line.split("reason=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?");
            let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            *out.entry(reason.to_string()).or_default() += n as u64;
        }
        out
    }

    /// The entries `query` returns over the last 7 days (at most 5000): their line
    /// and their stream labels with the structured metadata merged in (as Loki
    /// answers without `categorize-labels`).
    pub fn entries(&self, query: &str) -> Vec<(String, BTreeMap<String, String>)> {
        let (start, end) = last_week();
        self.page(query, start, end, 5000).into_iter().map(|e| (e.1, e.2)).collect()
    }

    /// Every entry of `selector` over the last 7 days: `(time ns, line, labels with
    /// metadata)`.
    ///
    /// Pages are time windows, never "the next `limit` after the last time seen":
    /// Loki 3.4 splits a log query by hour and shards it, and a limited answer over
    /// more than an hour is not the earliest `limit` entries (some shards' earlier
    /// entries are left out), so paging from its last time skips entries. An answer
    /// with fewer than `limit` entries is the whole window, so a window that fills
    /// the limit is halved until none does.
    pub fn all_entries(&self, selector: &str) -> Vec<(i64, String, BTreeMap<String, String>)> {
        self.all_entries_by(selector, 5000)
    }

    /// [`Self::all_entries`] with answers of at most `limit` entries: entries with many
    /// structured-metadata pairs (OTLP's attributes) make a 5000-entry answer larger
    /// than the 4 MiB Loki's querier may pass its frontend (the query then times out).
    pub fn all_entries_by(&self, selector: &str, limit: usize) -> Vec<(i64, String, BTreeMap<String, String>)> {
        let (start, end) = last_week();
        let mut windows = vec![(start, end, limit)];
        let mut out = vec![];
        while let Some((start, end, limit)) = windows.pop() {
            let page = self.page(selector, start, end, limit);
            if page.len() < limit {
                out.extend(page);
            } else if end - start > 1 {
                let mid = start + (end - start) / 2;
                windows.extend([(mid, end, limit), (start, mid, limit)]);
            } else {
                windows.push((start, end, limit * 2)); // one nanosecond holds `limit`
            }
        }
        out.sort();
        out
    }

    /// At most `limit` entries of `query` in `[start, end)` (Unix ns), the earliest
    /// first when the window is within an hour.
    fn page(&self, query: &str, start: i64, end: i64, limit: usize) -> Vec<(i64, String, BTreeMap<String, String>)> {
        let url = format!(
            "{}/loki/api/v1/query_range?query={}&start={start}&end={end}&limit={limit}&direction=forward",
            self.url(),
            encode(query)
        );
        let body = get(&url).expect("query_range");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        let mut out = vec![];
        for s in v["data"]["result"].as_array().unwrap_or_else(|| panic!("no result: {body}")) {
            let labels: BTreeMap<String, String> = serde_json::from_value(s["stream"].clone()).unwrap();
            for e in s["values"].as_array().unwrap() {
                let ts = e[0].as_str().unwrap().parse().unwrap();
                out.push((ts, e[1].as_str().unwrap().to_string(), labels.clone()));
            }
        }
        out
    }
}

/// The queries' window (Unix ns): seven days ago to ten minutes ahead.
fn last_week() -> (i64, i64) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    (now - 7 * 86_400 * 1_000_000_000, now + 600 * 1_000_000_000)
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn get(url: &str) -> Result<String, String> {
    runtime().block_on(async {
        let r = reqwest::get(url).await.map_err(|e| e.to_string())?;
        r.text().await.map_err(|e| e.to_string())
    })
}

fn post(url: &str) -> Result<String, String> {
    runtime().block_on(async {
        let r = reqwest::Client::new().post(url).send().await.map_err(|e| e.to_string())?;
        let status = r.status();
        let text = r.text().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("{status}: {text}"))
        }
    })
}
