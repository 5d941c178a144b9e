//! The watches: inotify on every directory under the configured paths, so the
//! reader hears of new lines at once (see [`crate::agent::source::wake`]).
//!
//! notify's recursive mode finds the directories to watch by walking the tree and
//! `lstat`ing every entry, a million of them on a node with a million worker files:
//! seconds of a restart spent before the reader may stat anything. Here the walk
//! reads each directory's entry types as listed (`d_type`, no `stat`) and watches
//! each directory on its own (notify's non-recursive mode). What notify's recursive
//! mode did for directories made later (a new session, its `logs`), a thread of
//! ours does: the event callback hands it the directories created or moved in, it
//! watches them (and what they already hold), then wakes the reader to list them
//! (files made before the watch are found by that listing).
//!
//! Dropping the [`Watches`] stops that thread and the watcher with it.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use notify::event::{CreateKind, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::agent::config::Config;
use crate::agent::source::Wake;

/// What the watch thread is told.
enum Msg {
    /// Directories created or moved in.
    New(Vec<PathBuf>),
    Stop,
}

/// The watch thread: sets up the watches, then keeps them up as directories come.
pub struct Watches {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Watches {
    /// Starts the thread. `wake` hears when the first watches are set up
    /// ([`Wake::set_up`]; false when none could be: the reader then polls).
    pub fn start(cfg: &Config, wake: Arc<Wake>) -> Watches {
        let (tx, rx) = mpsc::channel();
        let paths = cfg.source.paths.clone();
        let to_thread = tx.clone();
        wake.setting_up();
        let theirs = wake.clone();
        let thread = std::thread::Builder::new()
            .name("raylog-watch".into())
            .spawn(move || run(&paths, theirs, to_thread, rx))
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot start the watch thread; polling only");
                wake.set_up(false);
            })
            .ok();
        Watches { tx, thread }
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(paths: &[PathBuf], wake: Arc<Wake>, tx: mpsc::Sender<Msg>, rx: mpsc::Receiver<Msg>) {
    let Some(mut w) = watcher(wake.clone(), tx) else {
        wake.set_up(false);
        return;
    };
    let mut any = false;
    for p in paths {
        match watch_tree(&mut w, p) {
            Ok(()) => any = true,
            Err(e) => tracing::warn!(path = %p.display(), error = %e, "cannot watch; polling it instead"),
        }
    }
    wake.set_up(any);
    if !any {
        return;
    }
    let mut warned = false;
    while let Ok(Msg::New(dirs)) = rx.recv() {
        for d in &dirs {
            match watch_tree(&mut w, d) {
                Ok(()) => {}
                Err(e) if gone(&e) => {}
                // Its files are still found, by the listings (every 2 minutes per
                // 100,000 files) and the stat poll: late, not lost. Said once.
                Err(e) if !warned => {
                    warned = true;
                    tracing::warn!(path = %d.display(), error = %e, "cannot watch a new directory: its files are found by the periodic listings, minutes late (at the inotify watch limit? raise fs.inotify.max_user_watches)");
                }
                Err(_) => {}
            }
        }
        if !dirs.is_empty() {
            // A directory path makes the reader list again: what was written into
            // it before its watch is found then.
            wake.paths(dirs);
        }
    }
}

/// The watcher, whose events go to `wake`; new directories also to `tx`.
fn watcher(wake: Arc<Wake>, tx: mpsc::Sender<Msg>) -> Option<notify::RecommendedWatcher> {
    notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
        Ok(e) if e.need_rescan() => wake.everything(),
        // inotify also reports opens, reads and closes, among them the agent's own
        // (a listing opens the dir, which would ask for another listing): only
        // writes, creations, renames and deletions say something changed.
        Ok(e) if e.kind.is_access() => {}
        Ok(e) => {
            let dirs = new_dirs(&e);
            if !dirs.is_empty() {
                let _ = tx.send(Msg::New(dirs));
            }
            wake.paths(e.paths)
        }
        Err(_) => wake.everything(),
    })
    .map_err(|e| tracing::warn!(error = %e, "file events unavailable; polling only"))
    .ok()
}

/// The directories an event says were made or moved in. A rename's kind does not
/// say whether it moved a directory: its destination is looked at here, on notify's
/// thread (rotation renames thousands of files a second; waking the watch thread for
/// each of them tripled the agent's CPU in a rotation storm).
fn new_dirs(e: &notify::Event) -> Vec<PathBuf> {
    let is_dir = |p: &PathBuf| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    match e.kind {
        EventKind::Create(CreateKind::Folder) => e.paths.clone(),
        // inotify reports a rename's destination as `To` (then, paired with its
        // source, as `Both`, which would look a second time).
        EventKind::Create(CreateKind::Any) | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Any)) => {
            e.paths.iter().filter(|p| is_dir(p)).cloned().collect()
        }
        _ => Vec::new(),
    }
}

/// Watches `root` and every directory under it, each on its own. A `root` that is
/// a file is watched alone.
pub fn watch_tree(w: &mut impl Watcher, root: &Path) -> notify::Result<()> {
    w.watch(root, RecursiveMode::NonRecursive)?;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        // Not a directory (a file root), or gone since: nothing under it.
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            // The type the listing gave (no `stat`), except on file systems that
            // give none, where std looks. A symlink is not followed: Ray's
            // `session_latest` would put a session's events under a second path.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let path = entry.path();
                match w.watch(&path, RecursiveMode::NonRecursive) {
                    Ok(()) => stack.push(path),
                    // Removed since it was listed: nothing to watch.
                    Err(e) if gone(&e) => {}
                    // Over the watch limit, say: the caller says so, and polls.
                    Err(e) => return Err(e.add_path(path)),
                }
            }
        }
    }
    Ok(())
}

/// Whether `e` says the path is not there (any more).
fn gone(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::PathNotFound => true,
        notify::ErrorKind::Io(io) => io.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Waits until `wake` has named `want` (other paths may come first); no path
    /// named may run through the `session_latest` symlink.
    fn hears(wake: &Wake, want: &Path) -> bool {
        hears_within(wake, want, Duration::from_secs(10))
    }

    fn hears_within(wake: &Wake, want: &Path, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let paths = wake.wait(Duration::from_millis(100)).paths;
            assert!(!paths.iter().any(|p| p.to_string_lossy().contains("session_latest")), "{paths:?}");
            if paths.iter().any(|p| p == want) {
                return true;
            }
        }
        false
    }

    fn config(root: &Path) -> Config {
        let toml = format!(
            "[source]\npaths = [{:?}]\nstate_dir = {:?}\n[[sinks]]\ntype = \"file\"\npath = {:?}\n",
            root.display().to_string(),
            root.join("state").display().to_string(),
            root.join("out").display().to_string()
        );
        crate::agent::config::parse(&toml, "test.toml").expect("test config").1
    }

    /// Every directory is watched, those made after the start too (a new session and
    /// its `logs`, made in one go before the watch thread gets to them), and a
    /// symlinked directory is not followed: its files are heard under their own path.
    #[test]
    fn new_dirs_are_watched_and_symlinks_are_not_followed() {
        let root = std::env::temp_dir().join(format!("raylog-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let logs = root.join("session_1/logs");
        std::fs::create_dir_all(logs.join("events")).unwrap();
        std::os::unix::fs::symlink(root.join("session_1"), root.join("session_latest")).unwrap();
        let wake = Arc::new(Wake::default());
        let watches = Watches::start(&config(&root), wake.clone());
        assert_eq!(wake.wait_set_up(Duration::from_secs(10)), Some(true), "set up");
        let nested = logs.join("events/event_GCS.log");
        std::fs::write(&nested, "x\n").unwrap();
        assert!(hears(&wake, &nested), "a file two levels down is heard under its own path");

        let new_logs = root.join("session_2/logs");
        std::fs::create_dir_all(&new_logs).unwrap();
        // The watch thread gets to the new dirs a moment later: write until heard.
        let later = new_logs.join("raylet.out");
        let heard = (0..50).any(|_| {
            std::fs::write(&later, "y\n").unwrap();
            hears_within(&wake, &later, Duration::from_millis(200))
        });
        assert!(heard, "a file in a dir made after the start (two levels down) is heard");

        // A session made elsewhere and moved in (a rename names no type: looked at).
        let outside = root.with_extension("outside");
        let _ = std::fs::remove_dir_all(&outside);
        std::fs::create_dir_all(outside.join("logs")).unwrap();
        std::fs::rename(&outside, root.join("session_3")).unwrap();
        let moved = root.join("session_3/logs/gcs_server.out");
        let heard = (0..50).any(|_| {
            std::fs::write(&moved, "m\n").unwrap();
            hears_within(&wake, &moved, Duration::from_millis(200))
        });
        assert!(heard, "a file in a dir moved in after the start is heard");
        drop(watches);
        // notify's own thread may still hand over events of the writes above (it is
        // told to stop, not waited for): let them land, then forget them.
        std::thread::sleep(Duration::from_millis(200));
        wake.take();
        let after = logs.join("after.log");
        std::fs::write(&after, "z\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let late = wake.take().paths;
        assert!(!late.contains(&after), "dropping the watches stops them: {late:?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
