//! What this node put in the bucket: `<state_dir>/object_store/<sink>.json`, written
//! temp → fsync → rename after each round of uploads, so a restart uploads only
//! what changed since.
//!
//! A multipart upload's id is written here before its first part goes out and
//! removed once it is completed: an id found at start is an upload a SIGKILL left
//! behind, and is aborted (its parts cost storage and are never visible as an
//! object). A simple upload or a copy is atomic in every store: an object is the
//! old bytes or the new, never a part.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::events::spool::Cursor;

const VERSION: u32 = 1;

/// One file as uploaded: the object holds its first `size` bytes, written when the
/// file had that size and `mtime_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Held {
    pub dev: u64,
    pub ino: u64,
    /// The file's incarnation (`checkpoint::born`): a reused inode is another file.
    pub born: u32,
    pub size: u64,
    pub mtime_ns: i64,
}

impl Held {
    /// The same file (not the same bytes).
    pub fn same_file(&self, o: &Held) -> bool {
        (self.dev, self.ino, self.born) == (o.dev, o.ino, o.born)
    }
}

/// A multipart upload under way.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pending {
    pub key: String,
    pub id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    #[serde(default)]
    version: u32,
    /// Key → the file it holds.
    #[serde(default)]
    pub objects: BTreeMap<String, Held>,
    #[serde(default)]
    pub uploads: BTreeSet<Pending>,
    /// Sessions whose marker is written (head only).
    #[serde(default)]
    pub markers: BTreeSet<String>,
    /// Session → its node id (hex), as raylet announced it: kept, since a long
    /// session's first raylet log may be rotated away.
    #[serde(default)]
    pub nodes: BTreeMap<String, String>,
    /// Events of the spool before this point are in the bucket.
    #[serde(default)]
    pub events: Option<(u64, u64)>,
    #[serde(skip)]
    path: PathBuf,
    /// A hash of what was last written: a round that changed nothing writes nothing.
    #[serde(skip)]
    saved: Option<u64>,
}

impl State {
    /// Loads the state of sink `name` (a fresh one when there is none yet, or when
    /// it cannot be read: then everything is uploaded again, nothing skipped).
    pub fn load(state_dir: &Path, name: &str) -> State {
        let path = state_dir.join("object_store").join(format!("{name}.json"));
        let mut s = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<State>(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the object store's state; uploading every file again");
                State::default()
            }),
            Err(_) => State::default(),
        };
        if s.version > VERSION {
            tracing::warn!(path = %path.display(), version = s.version, "the object store's state is of a newer raylog; uploading every file again");
            s = State::default();
        }
        s.path = path;
        s
    }

    pub fn events_cursor(&self) -> Cursor {
        self.events.map_or(Cursor { seq: 0, offset: 0 }, |(seq, offset)| Cursor { seq, offset })
    }

    /// Writes the state durably, unless it is what was last written.
    pub fn save(&mut self) -> std::io::Result<()> {
        self.version = VERSION;
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        let hash = crate::agent::fnv::hash64(&bytes);
        if self.saved == Some(hash) {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        std::fs::File::open(dir)?.sync_all()?;
        self.saved = Some(hash);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
