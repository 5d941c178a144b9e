//! Ray log trees with recent times, for the tests against a real Loki (which refuses
//! entries older than 7 days, so fixed times would start failing as they age):
//! - [`shifted_copy`]: a recorded fixture moved forward by whole days, so its last
//!   record is within the last day;
//! - [`hours_tree`]: a synthetic session whose files each span hours (raylet, GCS,
//!   core-worker logs, workers' structured stderr and untimed stdout), the shape of a
//!   catch-up or backfill, with the records of every file interleaved in time.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use raylog::discover::discover;
use raylog::scan::{scan, ScanConfig};
use regex::Regex;

/// Unix seconds now.
pub fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Records in `paths` that `raylog ship` sends with its default `source.exclude`:
/// what `raylog parse` finds outside `debug_state*.txt` (state dumps, not logs).
pub fn record_count(paths: &[PathBuf]) -> u64 {
    let mut disc = discover(paths);
    disc.files.retain(|f| !(f.rel.starts_with("debug_state") && f.rel.ends_with(".txt")));
    let report = scan(&disc, &ScanConfig::default(), &mut |_| {}, &mut |_| {});
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    report.totals.records
}

/// The newest record time in `dir`, in Unix seconds.
fn newest_secs(dir: &Path) -> i64 {
    let mut newest = i64::MIN;
    scan(&discover(&[dir.to_path_buf()]), &ScanConfig::default(), &mut |_| {}, &mut |r| {
        if let (Some(t), false) = (r.timestamp, r.timestamp_inferred) {
            newest = newest.max(t.0 / 1_000_000_000);
        }
    });
    newest
}

/// Copies fixture `src` to `dst` with every date and epoch time moved forward by the
/// whole number of days that brings its newest record closest to now (not past it).
/// Returns the shift in days.
pub fn shifted_copy(src: &Path, dst: &Path) -> i64 {
    let days = (now_secs() - newest_secs(src)).div_euclid(86_400).max(0);
    let date = Regex::new(r"\b(20[2-3]\d)-(\d\d)-(\d\d)").unwrap();
    // Epoch seconds, milliseconds, microseconds and nanoseconds of 2026-2031.
    let epoch = Regex::new(r"\b1[78]\d{8}(\d{3}){0,3}\b").unwrap();
    copy_shifted(src, dst, &|text: &str| {
        let text = date.replace_all(text, |c: &regex::Captures<'_>| {
            let d = jiff::civil::date(c[1].parse().unwrap(), c[2].parse().unwrap(), c[3].parse().unwrap());
            d.checked_add(jiff::Span::new().days(days)).unwrap().to_string()
        });
        epoch
            .replace_all(&text, |c: &regex::Captures<'_>| {
                let n: i128 = c[0].parse().unwrap();
                let unit = 10i128.pow(c[0].len() as u32 - 10);
                (n + days as i128 * 86_400 * unit).to_string()
            })
            .into_owned()
    });
    days
}

fn copy_shifted(src: &Path, dst: &Path, shift: &dyn Fn(&str) -> String) {
    let name = src.file_name().unwrap().to_string_lossy().into_owned();
    let dst_name = shift(&name);
    if src.is_dir() {
        let to = dst.join(&dst_name);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(src).unwrap().flatten() {
            copy_shifted(&e.path(), &to, shift);
        }
    } else {
        let bytes = std::fs::read(src).unwrap();
        let out = match std::str::from_utf8(&bytes) {
            Ok(text) => shift(text).into_bytes(),
            Err(_) => bytes, // not text: as it is
        };
        std::fs::write(dst.join(dst_name), out).unwrap();
    }
}

/// `[YYYY-MM-DD HH:MM:SS,mmm` for Unix milliseconds.
fn civil(ms: i64) -> String {
    let t = jiff::Timestamp::from_millisecond(ms).unwrap().to_zoned(jiff::tz::TimeZone::UTC);
    format!("{}", t.strftime("%Y-%m-%d %H:%M:%S,%3f"))
}

/// A tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn hex(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from_digit((self.next() % 16) as u32, 16).unwrap()).collect()
    }
}

/// A synthetic session: each file's lines with the time (Unix ms) they are written
/// at, so a test can write part of it, then the rest, as a running Ray would.
pub struct HoursTree {
    pub logs: PathBuf,
    /// Per file: its name and its lines, oldest first.
    pub files: Vec<(String, Vec<(i64, String)>)>,
}

impl HoursTree {
    /// The records among the lines written in `[from, to)`, as this generator wrote
    /// them: one a line, less Ray's `:job_id:` markers (context, not records). What a
    /// test expects a sink to store comes from here, not from raylog's parser.
    pub fn records(&self, from: i64, to: i64) -> u64 {
        let lines = self.files.iter().flat_map(|(_, lines)| lines);
        lines.filter(|l| l.0 >= from && l.0 < to && !l.1.starts_with(":job_id:")).count() as u64
    }

    /// Writes (appends) every line written in `[from, to)`.
    pub fn write(&self, from: i64, to: i64) {
        std::fs::create_dir_all(&self.logs).unwrap();
        for (name, lines) in &self.files {
            let text: String = lines.iter().filter(|l| l.0 >= from && l.0 < to).map(|l| l.1.as_str()).collect();
            if text.is_empty() && self.logs.join(name).exists() {
                continue;
            }
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.logs.join(name)).unwrap();
            std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        }
    }
}

/// A session in `root` whose `workers` workers (and raylet and GCS) each log
/// `per_file` records spread over `[from, to]` (Unix ms), stdout prints included
/// (their write times spread over the same span). Messages repeat across files and
/// within a millisecond, as real logs do.
pub fn hours_tree(root: &Path, seed: u64, workers: usize, per_file: usize, from: i64, to: i64) -> HoursTree {
    let start = civil(from);
    let logs = root.join(format!("session_{}_{}_000000_4211/logs", &start[..10], start[11..19].replace(':', "-")));
    let mut rng = Rng(seed | 1);
    let node = rng.hex(56);
    let mut files = vec![];
    let times = |rng: &mut Rng, n: usize| -> Vec<i64> {
        let step = ((to - from) / n as i64).max(1);
        (0..n as i64).map(|i| from + i * step + (rng.next() % step as u64) as i64).collect()
    };
    for (component, pid) in [("raylet", 4214), ("gcs_server", 4001)] {
        let lines = times(&mut rng, per_file)
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let msg = if i % 7 == 0 {
                    "Report event failed, retrying".to_string()
                } else {
                    format!("tick {i} node_id={node}")
                };
                (t, format!("[{} I {pid} {pid}] ({component}) node_manager.cc:{}: {msg}\n", civil(t), 100 + i % 50))
            })
            .collect();
        files.push((format!("{component}.out"), lines));
    }
    for w in 0..workers {
        let (wid, pid) = (rng.hex(56), 10_000 + w);
        let cw = times(&mut rng, per_file)
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let msg = if i % 5 == 0 {
                    "Event stats:".to_string()
                } else {
                    format!("Finished task step={i} worker_id={wid}")
                };
                (t, format!("[{} I {pid} {pid}] core_worker.cc:{}: {msg}\n", civil(t), 200 + i % 30))
            })
            .collect();
        files.push((format!("python-core-worker-{wid}_{pid}.log"), cw));
        let mut err = vec![(i64::MIN, ":job_id:01000000\n".to_string())];
        err.extend(times(&mut rng, per_file).into_iter().enumerate().map(|(i, t)| {
            let level = if i % 11 == 0 { "WARNING" } else { "INFO" };
            let loss = rng.next() % 1000;
            (
                t,
                format!(
                    "{}\t{level} train.py:{} -- step {i} loss={loss} job_id=01000000 worker_id={wid} node_id={node}\n",
                    civil(t),
                    10 + i % 9
                ),
            )
        }));
        files.push((format!("worker-{wid}-01000000-{pid}.err"), err));
        let mut out = vec![(i64::MIN, ":job_id:01000000\n".to_string())];
        out.extend(
            times(&mut rng, per_file / 4).into_iter().enumerate().map(|(i, t)| {
                (t, if i % 3 == 0 { "heartbeat\n".to_string() } else { format!("epoch {w} batch {i}\n") })
            }),
        );
        files.push((format!("worker-{wid}-01000000-{pid}.out"), out));
    }
    HoursTree { logs, files }
}

/// Unix milliseconds `d` ago.
pub fn ago(d: Duration) -> i64 {
    (SystemTime::now() - d).duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// raylog reads in an hours tree the records its generator counts, whole or in two
/// parts: the count the tests against Loki expect is the writer's, and this is
/// where it is checked against what raylog reads, without a Loki.
#[test]
fn an_hours_tree_holds_the_records_its_writer_counts() {
    let tmp = crate::ship_loki::Scratch::new("hours-tree-count");
    let ray = tmp.0.join("ray");
    let (from, to) = (ago(Duration::from_secs(2 * 3600)), ago(Duration::from_secs(60)));
    let tree = hours_tree(&ray, 5, 3, 400, from, to);
    let mid = from + (to - from) / 2;
    tree.write(i64::MIN, mid);
    let first = tree.records(i64::MIN, mid);
    assert!(first > 1000, "{first} records by mid-span");
    assert_eq!(record_count(std::slice::from_ref(&ray)), first, "records read by mid-span");
    tree.write(mid, i64::MAX);
    let all = tree.records(i64::MIN, i64::MAX);
    // 2 + 2 × 3 files of 400 lines, and 3 stdouts of 100 prints.
    assert_eq!(all, 8 * 400 + 3 * 100);
    assert_eq!(record_count(std::slice::from_ref(&ray)), all, "records read in all");
}
