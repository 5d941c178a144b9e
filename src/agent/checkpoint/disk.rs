//! The checkpoint files: reading them whole (at start), appending to the journal,
//! and merging journal and snapshot into the next generation (see the parent module).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use super::flat::{Entry, Flat};
use super::resume::Resume;
use super::{unix_now, CheckpointError, Contexts, FileCheckpoint, FileKey, SavedContext, SNAPSHOT, VERSION};

/// The journal is merged into a new snapshot past this size, or past half the
/// snapshot's, whichever is larger.
const JOURNAL_MIN_COMPACT: u64 = 1 << 20;

/// Where the files on disk stand.
#[derive(Clone, Debug, Default)]
pub struct Saved {
    pub generation: u64,
    pub snapshot_bytes: u64,
    pub snapshot_entries: u64,
    pub journal_bytes: u64,
    pub journal_entries: u64,
    /// The snapshot is in the old format: rewrite it at the next save.
    pub must_compact: bool,
    /// This process fsynced the journal's directory after appending to it. False
    /// for a new generation, whose first save creates the journal, and at start: a
    /// journal found on disk may be one a crash left before its directory was
    /// fsynced (the first save fsyncs it then; one fsync per start).
    pub journal_dir_synced: bool,
}

#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
    generation: u64,
}

/// Version 1: one document.
#[derive(Deserialize)]
struct V1 {
    files: Vec<FileCheckpoint>,
}

/// An empty `context` object (as version 1 wrote) is no context.
pub fn context<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::sync::Arc<SavedContext>>, D::Error> {
    let c: Option<SavedContext> = Option::deserialize(d)?;
    Ok(c.filter(|c| *c != SavedContext::default()).map(std::sync::Arc::new))
}

fn io(path: &Path, source: std::io::Error) -> CheckpointError {
    CheckpointError::Io { path: path.display().to_string(), source }
}

fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("checkpoints.{generation}.journal"))
}

/// What the snapshot file is: its version and generation (`None`: no file).
fn header(path: &Path) -> Result<Option<Header>, CheckpointError> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
    };
    let mut first = String::new();
    BufReader::new(f).read_line(&mut first).map_err(|e| io(path, e))?;
    let corrupt = |message: String| CheckpointError::Corrupt { path: path.display().to_string(), message };
    if let Ok(h) = serde_json::from_str::<Header>(&first) {
        if h.version > VERSION {
            return Err(CheckpointError::Version { path: path.display().to_string(), found: h.version });
        }
        return Ok(Some(h));
    }
    // Version 1 is one document over many lines: read it whole.
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    match v.get("version").and_then(|v| v.as_u64()) {
        Some(1) => Ok(Some(Header { version: 1, generation: 0 })),
        Some(found) => Err(CheckpointError::Version { path: path.display().to_string(), found: found as u32 }),
        None => Err(corrupt("no version".into())),
    }
}

/// Every checkpoint in `dir` (the snapshot, then its journal on top), and where
/// the files stand, in one read of each (creating `dir` if needed).
pub fn read(dir: &Path) -> Result<(Resume, Saved), CheckpointError> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let snap = dir.join(SNAPSHOT);
    // No snapshot yet: generation 0, whose journal may hold the first saves.
    let h = header(&snap)?.unwrap_or(Header { version: VERSION, generation: 0 });
    let journal = journal_path(dir, h.generation);
    let (mut entries, journal_entries) = read_journal(&journal)?;
    // One copy of each context the files end in: files alike sit apart in a
    // snapshot (by inode), so sharing only with the line before kept a copy per
    // file, freed only as a restart's listing took them: 87 MiB of heap at a
    // million files that never went back.
    let mut pool = Contexts::default();
    entries.iter_mut().for_each(|cp| cp.context = pool.intern(cp.context.take()));
    // The journal's files, to leave their older snapshot lines out as they stream
    // by: the snapshot's million entries are never held twice.
    let mut newer: Vec<FileKey> = entries.iter().map(|c| c.key).collect();
    newer.sort_unstable();
    let mut snapshot_entries = 0;
    if snap.exists() {
        each_snapshot_entry(&snap, h.version, &mut |mut cp| {
            snapshot_entries += 1;
            if newer.binary_search(&cp.key).is_err() {
                cp.context = pool.intern(cp.context.take());
                entries.push(cp);
            }
        })?;
    }
    drop((newer, pool));
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let saved = Saved {
        generation: h.generation,
        snapshot_bytes: size(&snap),
        snapshot_entries,
        journal_bytes: size(&journal),
        journal_entries,
        must_compact: h.version < VERSION,
        journal_dir_synced: false,
    };
    // The journal's entries come first, in order, so among them the last counts.
    Ok((Resume::from_entries(entries), saved))
}

/// Every checkpoint in `dir`.
pub fn load(dir: &Path) -> Result<HashMap<FileKey, FileCheckpoint>, CheckpointError> {
    read(dir).map(|(files, _)| files.into_map())
}

/// Calls `f` for each entry of the snapshot at `path`, streaming it (versions 2
/// and 3: a header line, then one entry per line).
fn each_snapshot_entry(path: &Path, version: u32, f: &mut dyn FnMut(FileCheckpoint)) -> Result<(), CheckpointError> {
    let corrupt = |message: String| CheckpointError::Corrupt { path: path.display().to_string(), message };
    if version < 2 {
        let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
        let v1: V1 = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
        v1.files.into_iter().for_each(f);
        return Ok(());
    }
    let mut r = BufReader::with_capacity(1 << 16, File::open(path).map_err(|e| io(path, e))?);
    // One line buffer for the whole file: a million checkpoints load without a
    // million allocations.
    let mut line = Vec::with_capacity(256);
    let mut n = 0u64;
    // Neighbouring files mostly end in the same context (a job's workers): they
    // share one copy, so a load holds a handful rather than one per file.
    let mut last: Option<std::sync::Arc<SavedContext>> = None;
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).map_err(|e| io(path, e))? == 0 {
            break;
        }
        n += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if n == 1 || text.is_empty() {
            continue;
        }
        let Entry(mut cp) = serde_json::from_slice(text).map_err(|e| corrupt(format!("line {n}: {e}")))?;
        match (&cp.context, &last) {
            (Some(c), Some(l)) if c == l => cp.context = last.clone(),
            (Some(_), _) => last = cp.context.clone(),
            _ => {}
        }
        f(cp);
    }
    Ok(())
}

/// The journal's entries in order, and its line count (what the merge threshold
/// weighs). A line that does not parse is the torn end of a save a crash cut short:
/// that save never completed, so it is left out.
fn read_journal(path: &Path) -> Result<(Vec<FileCheckpoint>, u64), CheckpointError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], 0)),
        Err(e) => return Err(io(path, e)),
    };
    let lines = memchr::memchr_iter(b'\n', &bytes).count() as u64;
    let entries = bytes.split(|&b| b == b'\n').filter_map(|l| serde_json::from_slice::<Entry>(l).ok());
    Ok((entries.map(|e| e.0).collect(), lines))
}

/// Where each file's last line in a journal is, sorted by file: what a merge keeps
/// in memory (16 bytes a file, deduplicated in place: a merge after a million-file
/// catch-up holds hundreds of thousands, while the file table is at its largest)
/// instead of the entries themselves. A line is read again, by position, when the
/// merge writes it. A file is its inode and the index of its device among the
/// journal's (one, nearly always), kept in the high bits beside the line's offset.
struct JournalIndex {
    path: PathBuf,
    file: Option<File>,
    devs: Vec<u64>,
    /// `(inode, device index << OFFSET_BITS | offset)`; an offset of [`WRITTEN`]
    /// once written.
    at: Vec<(u64, u64)>,
    line: Vec<u8>,
}

const OFFSET_BITS: u32 = 48;
const WRITTEN: u64 = (1 << OFFSET_BITS) - 1;

impl JournalIndex {
    /// Indexes the journal at `path` (none: empty). Torn lines are skipped, as
    /// [`read_journal`] does.
    fn read(path: &Path) -> Result<JournalIndex, CheckpointError> {
        let mut index = JournalIndex { path: path.to_path_buf(), file: None, devs: vec![], at: vec![], line: vec![] };
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(index),
            Err(e) => return Err(io(path, e)),
        };
        let mut r = BufReader::with_capacity(1 << 16, f.try_clone().map_err(|e| io(path, e))?);
        let mut offset = 0u64;
        loop {
            index.line.clear();
            let n = r.read_until(b'\n', &mut index.line).map_err(|e| io(path, e))?;
            if n == 0 {
                break;
            }
            let text = index.line.strip_suffix(b"\n").unwrap_or(&index.line);
            if let Ok(e) = serde_json::from_slice::<Entry>(text) {
                let dev = index.dev_index(e.0.key.dev);
                if offset >= WRITTEN || dev >> (64 - OFFSET_BITS) != 0 {
                    let message = "over 256 TiB, or files on over 65,535 devices".to_string();
                    return Err(CheckpointError::Corrupt { path: path.display().to_string(), message });
                }
                index.at.push((e.0.key.ino, dev << OFFSET_BITS | offset));
            }
            offset += n as u64;
        }
        // By file, then by position: of one file's lines, the last stays last, and is
        // the one kept (`dedup_by` drops the later of two equal neighbours: it is
        // copied back first). Positions are distinct, so an unstable sort orders them
        // the same, without the scratch half as large as the index that a stable sort
        // takes (mid-catch-up, when the merge runs beside the full file table).
        index.at.sort_unstable();
        index.at.dedup_by(|later, kept| {
            let same = later.0 == kept.0 && later.1 >> OFFSET_BITS == kept.1 >> OFFSET_BITS;
            if same {
                *kept = *later;
            }
            same
        });
        index.file = Some(f);
        Ok(index)
    }

    /// The index of device `dev` in `devs` (added if new).
    fn dev_index(&mut self, dev: u64) -> u64 {
        let i = self.devs.iter().position(|&d| d == dev).unwrap_or_else(|| {
            self.devs.push(dev);
            self.devs.len() - 1
        });
        i as u64
    }

    /// The journal's entry for `key`, if it has one not yet taken.
    fn take(&mut self, key: &FileKey) -> Result<Option<FileCheckpoint>, CheckpointError> {
        let Some(dev) = self.devs.iter().position(|&d| d == key.dev) else { return Ok(None) };
        let want = (key.ino, dev as u64);
        let Ok(i) = self.at.binary_search_by_key(&want, |e| (e.0, e.1 >> OFFSET_BITS)) else { return Ok(None) };
        self.entry(i)
    }

    fn entry(&mut self, i: usize) -> Result<Option<FileCheckpoint>, CheckpointError> {
        let offset = self.at[i].1 & WRITTEN;
        if offset == WRITTEN {
            return Ok(None);
        }
        self.at[i].1 |= WRITTEN;
        self.read_line(offset)?;
        let corrupt = |m: String| CheckpointError::Corrupt { path: self.path.display().to_string(), message: m };
        let e: Entry = serde_json::from_slice(&self.line).map_err(|e| corrupt(e.to_string()))?;
        Ok(Some(e.0))
    }

    /// Reads the line at `offset` (without its newline) into `self.line`.
    fn read_line(&mut self, offset: u64) -> Result<(), CheckpointError> {
        use std::os::unix::fs::FileExt;
        let f = self.file.as_ref().expect("an entry came from the file");
        self.line.clear();
        let mut chunk = [0u8; 256];
        loop {
            let n = f.read_at(&mut chunk, offset + self.line.len() as u64).map_err(|e| io(&self.path, e))?;
            let got = &chunk[..n];
            if let Some(end) = memchr::memchr(b'\n', got) {
                self.line.extend_from_slice(&got[..end]);
                return Ok(());
            }
            self.line.extend_from_slice(got);
            if n == 0 {
                // Indexed lines parsed whole; the last may lack its newline.
                return Ok(());
            }
        }
    }

    /// Calls `f` with every entry not taken, by inode (then device).
    fn rest(&mut self, mut f: impl FnMut(&FileCheckpoint)) -> Result<(), CheckpointError> {
        for i in 0..self.at.len() {
            if let Some(cp) = self.entry(i)? {
                f(&cp);
            }
        }
        Ok(())
    }
}

/// One save: the changed entries and where the files stand.
pub struct SaveBatch {
    dir: PathBuf,
    state: Saved,
    entries: Vec<FileCheckpoint>,
    forget_after_secs: u64,
}

impl SaveBatch {
    pub fn new(dir: PathBuf, state: Saved, entries: Vec<FileCheckpoint>, forget_after_secs: u64) -> SaveBatch {
        SaveBatch { dir, state, entries, forget_after_secs }
    }

    /// Appends the entries to the journal (fsynced), then merges journal and
    /// snapshot when the journal has grown enough. On failure, returns the entries
    /// that were not saved, to be tried again.
    #[allow(clippy::result_large_err)]
    pub fn write(self) -> Result<Saved, (CheckpointError, Vec<FileCheckpoint>)> {
        let SaveBatch { dir, mut state, entries, forget_after_secs } = self;
        if !entries.is_empty() {
            let sync = (!state.journal_dir_synced).then_some(dir.as_path());
            match append(&journal_path(&dir, state.generation), &entries, sync) {
                Ok(n) => {
                    state.journal_bytes += n;
                    state.journal_entries += entries.len() as u64;
                    state.journal_dir_synced = true;
                }
                Err(e) => return Err((e, entries)),
            }
        }
        if state.must_compact || state.journal_bytes > JOURNAL_MIN_COMPACT.max(state.snapshot_bytes / 2) {
            // The entries are in the journal already: a failed merge loses nothing.
            compact(&dir, &state, forget_after_secs).map(Ok).unwrap_or_else(|e| Err((e, vec![])))
        } else {
            Ok(state)
        }
    }
}

/// Appends one line per entry to `path` and fsyncs it, then `dir` if given, the
/// directory of a journal the append may have created: its lines are durable only
/// once its directory entry is. Returns the bytes written.
fn append(path: &Path, entries: &[FileCheckpoint], dir: Option<&Path>) -> Result<u64, CheckpointError> {
    use std::os::unix::fs::FileExt;
    let mut body = Vec::with_capacity(entries.len() * 64);
    let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(path).map_err(|e| io(path, e))?;
    let len = f.metadata().map_err(|e| io(path, e))?.len();
    let mut last = [0u8];
    if len > 0 && f.read_at(&mut last, len - 1).map_err(|e| io(path, e))? == 1 && last[0] != b'\n' {
        // A save cut short by a crash: end its torn line so the next one stands alone.
        body.push(b'\n');
    }
    for cp in entries {
        serde_json::to_writer(&mut body, &Flat(cp)).map_err(|e| io(path, std::io::Error::other(e)))?;
        body.push(b'\n');
    }
    f.write_all(&body).and_then(|_| f.sync_data()).map_err(|e| io(path, e))?;
    if let Some(dir) = dir {
        // On failure the save fails and is tried again, with the directory.
        sync_dir(dir).map_err(|e| io(dir, e))?;
    }
    Ok(body.len() as u64)
}

/// Merges the snapshot and its journal into the next generation's snapshot.
fn compact(dir: &Path, state: &Saved, forget_after_secs: u64) -> Result<Saved, CheckpointError> {
    let snap = dir.join(SNAPSHOT);
    let old_journal = journal_path(dir, state.generation);
    let mut changed = JournalIndex::read(&old_journal)?;
    let generation = state.generation + 1;
    let tmp = dir.join(format!("{SNAPSHOT}.tmp"));
    let mut out = BufWriter::new(File::create(&tmp).map_err(|e| io(&tmp, e))?);
    let head = Header { version: VERSION, generation };
    let now = unix_now();
    let forgotten = |cp: &FileCheckpoint| cp.gone_since != 0 && now.saturating_sub(cp.gone_since) > forget_after_secs;
    let mut entries = 0u64;
    let mut werr = None;
    let mut put = |out: &mut BufWriter<File>, cp: &FileCheckpoint| {
        if forgotten(cp) || werr.is_some() {
            return;
        }
        entries += 1;
        if let Err(e) = serde_json::to_writer(&mut *out, &Flat(cp))
            .map_err(std::io::Error::other)
            .and_then(|_| out.write_all(b"\n"))
        {
            werr = Some(e);
        }
    };
    serde_json::to_writer(&mut out, &head).map_err(|e| io(&tmp, std::io::Error::other(e)))?;
    out.write_all(b"\n").map_err(|e| io(&tmp, e))?;
    if let Some(h) = header(&snap)? {
        let mut jerr = None;
        each_snapshot_entry(&snap, h.version, &mut |cp| match changed.take(&cp.key) {
            Ok(newer) => put(&mut out, newer.as_ref().unwrap_or(&cp)),
            Err(e) => jerr = Some(e),
        })?;
        if let Some(e) = jerr {
            return Err(e);
        }
    }
    changed.rest(|cp| put(&mut out, cp))?;
    if let Some(e) = werr {
        return Err(io(&tmp, e));
    }
    let f = out.into_inner().map_err(|e| io(&tmp, e.into_error()))?;
    f.sync_all().map_err(|e| io(&tmp, e))?;
    let snapshot_bytes = f.metadata().map_err(|e| io(&tmp, e))?.len();
    std::fs::rename(&tmp, &snap).map_err(|e| io(&snap, e))?;
    let _ = sync_dir(dir);
    // The new snapshot holds everything: older journals are garbage now.
    let _ = std::fs::remove_file(&old_journal);
    Ok(Saved { generation, snapshot_bytes, snapshot_entries: entries, ..Saved::default() })
}

/// Makes the entries of `dir` durable: a file created or renamed in it can vanish
/// in a power loss, even with its data fsynced, until its directory is fsynced too.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()?;
    #[cfg(test)]
    DIR_SYNCS.with(|s| s.borrow_mut().push(dir.to_path_buf()));
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// The directories [`sync_dir`] fsynced on this thread: what tests see of a
    /// durability that only a power loss would show.
    pub static DIR_SYNCS: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}
