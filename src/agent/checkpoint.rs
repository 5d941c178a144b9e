//! Checkpoints: how far each file has been delivered, surviving restarts.
//!
//! A file is known by its identity, `(device, inode)`, plus a fingerprint of its first
//! bytes (so a recycled inode is not mistaken for the old file). The fingerprint grows
//! with the file up to [`FINGERPRINT_MAX`] bytes and is always checked against bytes
//! before the saved offset. The offset saved is the first byte not yet acknowledged by
//! every sink, with the parser context (markers) in force there, so a restart resumes
//! exactly: nothing acknowledged is re-sent except the batch in flight when the agent
//! died. The file is written to a temp file, fsynced, renamed over the old one, and the
//! directory fsynced, with a version tag so a future format is refused, not misread.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Bytes of a file's start that identify it.
pub const FINGERPRINT_MAX: u64 = 1024;
const VERSION: u32 = 1;
const FILE_NAME: &str = "checkpoints.json";

/// `(device, inode)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
}

impl FileKey {
    pub fn of(meta: &std::fs::Metadata) -> FileKey {
        use std::os::unix::fs::MetadataExt;
        FileKey { dev: meta.dev(), ino: meta.ino() }
    }

    /// A stable text form, used in document ids.
    pub fn label(&self) -> String {
        format!("{}:{}", self.dev, self.ino)
    }
}

/// A hash of a file's first `len` bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub len: u64,
    pub hash: u64,
}

impl Fingerprint {
    /// Fingerprints the first `min(limit, FINGERPRINT_MAX)` bytes of `f`.
    pub fn read(f: &mut std::fs::File, limit: u64) -> std::io::Result<Fingerprint> {
        use std::io::Seek;
        let want = limit.min(FINGERPRINT_MAX);
        let mut buf = vec![0u8; want as usize];
        f.seek(std::io::SeekFrom::Start(0))?;
        let mut got = 0;
        while got < buf.len() {
            let n = f.read(&mut buf[got..])?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(Fingerprint { len: got as u64, hash: fnv(&buf[..got]) })
    }
}

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &c in b {
        h ^= c as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Marker context in force at the saved offset (see `raylog_parsers::parser::FileContext`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Nanoseconds of the last record before the offset that had a time of its own:
    /// the time of the time-less records right after it, so a resumed file dates
    /// them as the first read did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_timestamp_ns: Option<i64>,
}

impl SavedContext {
    pub fn from_parser(c: &raylog_parsers::parser::FileContext) -> SavedContext {
        SavedContext {
            job_id: c.job_id.map(|i| i.as_str().to_string()),
            actor_name: c.actor_name.clone(),
            task_name: c.task_name.clone(),
            task_id: c.task_id.map(|i| i.as_str().to_string()),
            last_timestamp_ns: c.last_timestamp.map(|t| t.0),
        }
    }

    pub fn to_parser(&self) -> raylog_parsers::parser::FileContext {
        let id = |s: &Option<String>| s.as_deref().and_then(|s| raylog_parsers::Id::parse(s.as_bytes()));
        raylog_parsers::parser::FileContext {
            job_id: id(&self.job_id),
            actor_name: self.actor_name.clone(),
            task_name: self.task_name.clone(),
            task_id: id(&self.task_id),
            last_timestamp: self.last_timestamp_ns.map(raylog_parsers::Timestamp),
        }
    }
}

/// One file's checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCheckpoint {
    pub key: FileKey,
    pub fingerprint: Fingerprint,
    /// First byte not yet delivered everywhere.
    pub offset: u64,
    /// Last path the file was seen at (for people reading the file).
    pub path: String,
    #[serde(default)]
    pub context: SavedContext,
    /// Unix seconds of the last update, to forget files long gone.
    pub updated: u64,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    files: Vec<FileCheckpoint>,
}

/// Why checkpoints could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}; check that source.state_dir exists and is writable by raylog")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a raylog checkpoint file ({message}); move it aside to start over (files will be re-read from source.start_at)")]
    Corrupt { path: String, message: String },
    #[error("{path}: written by a newer raylog (format version {found}, this one reads {VERSION}); upgrade raylog or move the file aside")]
    Version { path: String, found: u32 },
}

/// All checkpoints, in memory; [`CheckpointStore::save`] persists them.
#[derive(Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
    files: HashMap<FileKey, FileCheckpoint>,
}

impl CheckpointStore {
    /// Loads `state_dir/checkpoints.json` (creating `state_dir` if needed).
    pub fn load(state_dir: &Path) -> Result<CheckpointStore, CheckpointError> {
        let io = |path: &Path, source| CheckpointError::Io { path: path.display().to_string(), source };
        std::fs::create_dir_all(state_dir).map_err(|e| io(state_dir, e))?;
        let path = state_dir.join(FILE_NAME);
        let mut store = CheckpointStore { dir: state_dir.to_path_buf(), files: HashMap::new() };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(store),
            Err(e) => return Err(io(&path, e)),
        };
        let shown = path.display().to_string();
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| CheckpointError::Corrupt { path: shown.clone(), message: e.to_string() })?;
        let found = v.get("version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        if found != VERSION {
            return Err(CheckpointError::Version { path: shown, found });
        }
        let disk: OnDisk =
            serde_json::from_value(v).map_err(|e| CheckpointError::Corrupt { path: shown, message: e.to_string() })?;
        store.files = disk.files.into_iter().map(|f| (f.key, f)).collect();
        Ok(store)
    }

    pub fn get(&self, key: &FileKey) -> Option<&FileCheckpoint> {
        self.files.get(key)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Records a delivered position (only ever forward for the same fingerprint).
    pub fn update(&mut self, cp: FileCheckpoint) {
        match self.files.get(&cp.key) {
            Some(old)
                if old.fingerprint.hash == cp.fingerprint.hash
                    && old.offset > cp.offset
                    && old.fingerprint.len == cp.fingerprint.len => {}
            _ => {
                self.files.insert(cp.key, cp);
            }
        }
    }

    /// Forgets a file (its inode was reused by another file).
    pub fn remove(&mut self, key: &FileKey) {
        self.files.remove(key);
    }

    /// Drops checkpoints not updated for `max_age_secs` whose files are gone.
    pub fn forget_older_than(&mut self, now: u64, max_age_secs: u64, still_present: impl Fn(&FileKey) -> bool) {
        self.files.retain(|k, f| still_present(k) || now.saturating_sub(f.updated) < max_age_secs);
    }

    /// Writes the checkpoints atomically: temp file, fsync, rename, fsync of the dir.
    pub fn save(&self) -> Result<(), CheckpointError> {
        self.snapshot().write()
    }

    /// The checkpoints as they are now, ready to be written by [`Snapshot::write`]
    /// on another thread while this store keeps advancing.
    pub fn snapshot(&self) -> Snapshot {
        let mut files: Vec<&FileCheckpoint> = self.files.values().collect();
        files.sort_by_key(|f| f.key);
        #[derive(Serialize)]
        struct Disk<'a> {
            version: u32,
            files: Vec<&'a FileCheckpoint>,
        }
        let body = serde_json::to_vec_pretty(&Disk { version: VERSION, files });
        Snapshot { dir: self.dir.clone(), body: body.map_err(|e| e.to_string()) }
    }
}

/// Serialised checkpoints and the directory they belong in.
pub struct Snapshot {
    dir: PathBuf,
    body: Result<Vec<u8>, String>,
}

impl Snapshot {
    /// Temp file, fsync, rename over `checkpoints.json`, fsync of the directory.
    pub fn write(self) -> Result<(), CheckpointError> {
        let path = self.dir.join(FILE_NAME);
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        let io = |p: &Path, source| CheckpointError::Io { path: p.display().to_string(), source };
        let body = self.body.map_err(|e| io(&tmp, std::io::Error::other(e)))?;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(&body).and_then(|_| f.sync_all()).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("raylog-cp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_version_check() {
        let dir = tmpdir("rt");
        let mut s = CheckpointStore::load(&dir).unwrap();
        assert!(s.is_empty());
        let cp = FileCheckpoint {
            key: FileKey { dev: 1, ino: 2 },
            fingerprint: Fingerprint { len: 10, hash: 99 },
            offset: 1234,
            path: "/tmp/ray/x".into(),
            context: SavedContext { job_id: Some("01000000".into()), ..Default::default() },
            updated: 5,
        };
        s.update(cp.clone());
        s.save().unwrap();
        let again = CheckpointStore::load(&dir).unwrap();
        assert_eq!(again.get(&cp.key), Some(&cp));
        std::fs::write(dir.join(FILE_NAME), r#"{"version": 9, "files": []}"#).unwrap();
        let e = CheckpointStore::load(&dir).unwrap_err().to_string();
        assert!(e.contains("version 9") && e.contains("checkpoints.json"), "{e}");
        std::fs::write(dir.join(FILE_NAME), "garbage").unwrap();
        assert!(CheckpointStore::load(&dir).unwrap_err().to_string().contains("move it aside"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn offsets_never_go_back_for_the_same_file() {
        let dir = tmpdir("fwd");
        let mut s = CheckpointStore::load(&dir).unwrap();
        let mut cp = FileCheckpoint {
            key: FileKey { dev: 1, ino: 2 },
            fingerprint: Fingerprint { len: 10, hash: 99 },
            offset: 100,
            path: "x".into(),
            context: SavedContext::default(),
            updated: 0,
        };
        s.update(cp.clone());
        cp.offset = 50;
        s.update(cp.clone());
        assert_eq!(s.get(&cp.key).unwrap().offset, 100);
        cp.fingerprint.hash = 7; // a different file on the same inode
        s.update(cp.clone());
        assert_eq!(s.get(&cp.key).unwrap().offset, 50);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
