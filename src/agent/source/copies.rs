//! logrotate's `copytruncate`: `cp x x.1; truncate x`. The copy is a new file whose
//! bytes the reader has already read as `x`'s (or some of them): sent whole it would
//! send them twice. So a new file named like a rotated copy of a tracked one
//! (`x.1`, `x-20261207`, `x.2026-12-07`) whose first bytes are those `x` had when
//! it was read is taken as that copy: it resumes where reading of `x` had got to,
//! with `x`'s context there, and only its unread tail (if any) is read.
//!
//! Both orders are met: the truncation seen first (its file's state before it is
//! kept for [`KEEP`]), or the copy found first (then `x` is as the reader left it:
//! truncated right after, or, a plain `cp`, not at all, and then what `x` had not
//! been read to yet is read from both; never more).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::names::Name;
use super::table::Tracked;
use super::Source;
use crate::agent::checkpoint::{FileKey, Fingerprint, SavedContext};

/// How long the state of a file before its truncation is kept for its copy.
const KEEP: Duration = Duration::from_secs(60);

/// Where a file stood when it was truncated in place.
#[derive(Debug, Clone)]
pub(super) struct Truncated {
    key: FileKey,
    /// Its first bytes' fingerprint before.
    head: Fingerprint,
    /// What had been read of it (every byte before this went out).
    read: u64,
    context: Option<Arc<SavedContext>>,
    last_time: Option<i64>,
    at: Instant,
}

impl Truncated {
    pub(super) fn new(
        key: FileKey,
        head: Fingerprint,
        read: u64,
        context: Option<Arc<SavedContext>>,
        last_time: Option<i64>,
    ) -> Truncated {
        Truncated { key, head, read, context, last_time, at: Instant::now() }
    }
}

/// `x` for `x.1`, `x-20261207`, `x.2026-12-07`, `x_3`: a name with a rotation
/// suffix (a separator, then digits with separators), else `None`.
pub(super) fn rotation_base(rel: &str) -> Option<&str> {
    let tail = rel.len() - rel.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | '-' | '_')).len();
    let suffix = &rel[rel.len() - tail..];
    // The suffix starts at its first separator (digits before it belong to the base).
    let start = suffix.find(['.', '-', '_'])?;
    let (base, suffix) = rel.split_at(rel.len() - tail + start);
    (suffix.bytes().any(|b| b.is_ascii_digit()) && !base.is_empty() && !base.ends_with('/')).then_some(base)
}

impl Source {
    /// Open file `key` was found truncated: what its old content still held goes
    /// out under its own identity, and where it stood is kept for its copy, should
    /// one turn up.
    pub(super) fn truncated_in_place(&mut self, key: FileKey) {
        let Some(o) = self.open_file(key) else { return };
        let ctx = o.parser.context();
        let last = ctx.last_timestamp.map(|t| t.0);
        let read = o.parser.complete_offset();
        let before = Truncated::new(key, o.fingerprint, read, SavedContext::from_parser(ctx), last);
        self.note_truncated(before);
        self.parse_open(key, |open, corr, opts, emit| open.start_over(corr, opts, emit));
    }

    /// Notes that file `key` was truncated in place, from where it stood.
    pub(super) fn note_truncated(&mut self, t: Truncated) {
        if t.head.len == 0 || t.head.len == u64::MAX {
            // Nothing it started with is known (it was truncated already, or is
            // read whole): no copy can be told by it, and an earlier note stays.
            return;
        }
        self.truncations.retain(|x| x.at.elapsed() < KEEP && x.key != t.key);
        self.truncations.push(t);
    }

    /// If new file `name` of dir `dir` (`md` its metadata) is a copy of a tracked file made as it
    /// was truncated, resumes `t` where reading of that file had got to. True if so.
    pub(super) fn resume_copy(&mut self, (dir, name): (u32, Name), t: &mut Tracked, md: &std::fs::Metadata) -> bool {
        if self.first_scan {
            // A first listing's backups: nothing was read of their originals yet in
            // this process (a copy made while the agent was down is read whole).
            return false;
        }
        let rel = self.table.names.get(name);
        let Some(base) = rotation_base(&rel) else { return false };
        let moved = match base.strip_prefix("old/") {
            Some(rest) => rest.to_string(),
            None => format!("old/{base}"),
        };
        // The original is `x` itself, or (renamed by a rotation since) `x.N`, where
        // the copy is or (Ray moves a dead worker's files there, and the reader
        // may not have seen the move yet) on the other side of `old/`.
        let family: Vec<FileKey> = [base.to_string(), moved]
            .into_iter()
            .flat_map(|b| std::iter::once(b.clone()).chain((1..=9).map(move |n| format!("{b}.{n}"))))
            .filter(|name| *name != *rel)
            .filter_map(|name| self.table.by_path(dir, &name))
            .collect();
        if family.is_empty() && !self.truncations.iter().any(|t| t.at.elapsed() < KEEP) {
            // Nothing it could be a copy of (a first scan's backups: not opened).
            return false;
        }
        let path = self.dirs[dir as usize].root.join(&*rel);
        let Ok(file) = std::fs::File::open(&path) else { return false };
        let starts_as = |from: &Truncated| {
            from.head.len > 0
                && from.head.len <= md.len()
                && Fingerprint::read_at(&file, from.head.len).is_ok_and(|fp| fp == from.head)
        };
        // A truncation seen already, wherever its file is now (a rename rotation
        // may have moved it since); else the file the copy's name comes from.
        let noted = self.truncations.iter().filter(|t| t.at.elapsed() < KEEP).find(|t| starts_as(t)).cloned();
        let was_noted = noted.is_some();
        let Some(mut from) = noted.or_else(|| family.into_iter().find_map(|key| self.as_left(key).filter(starts_as)))
        else {
            return false;
        };
        let open = self.table.view(&from.key).and_then(|v| v.open).map(|o| o.parser.complete_offset());
        if let Some(read) = open.filter(|_| !was_noted) {
            // Records of the original still held (waiting for an actor or node id)
            // are read again from the copy, as the copy's: held as the original's,
            // their checkpoint would be the original's, whose bytes the truncation
            // takes, while the copy's checkpoint passed them.
            let held =
                self.enrich.hold.resume_point(&from.key).filter(|(h, _)| *h < read).map(|(h, at)| (h, at.clone()));
            if let Some((h, at)) = held {
                self.enrich.hold.drop_from(&from.key, h);
                // With the context there (markers, last own time), as a checkpoint would.
                (from.read, from.context, from.last_time) = (h, at.context, at.last_time_ns);
            } else if read > from.read {
                // Found before the truncation, from an open file whose parser still
                // holds records: they go out now, as that file's (a truncation, or
                // the idle flush, would send them so, and its copy too otherwise).
                // A line still being written stays: the copy has it from its start
                // (and the truncation drops it from the file, see `start_over`).
                self.parse_open(from.key, |open, corr, opts, emit| open.parser.flush_now(corr, opts, emit));
                self.dirty.insert(from.key);
                from.read = read;
            }
        }
        let resume = from.read.min(md.len());
        let Ok(fp) = Fingerprint::read_at(&file, resume) else { return false };
        tracing::info!(path = %path.display(), of = base, offset = resume, "a copy of a file truncated in place (copy-truncate): reading only what was not read of it");
        t.set_resume(resume);
        t.ctx = self.table.contexts.set(t.ctx, from.context);
        t.set_unverified(true);
        t.set_fingerprint(fp);
        let _ = t.set_times(from.last_time, from.last_time.unwrap_or(i64::MIN));
        true
    }

    /// Where tracked file `key` stands as the reader left it (a copy found before
    /// its truncation is seen; truncations seen are in `truncations`).
    fn as_left(&self, key: FileKey) -> Option<Truncated> {
        // Wherever it is now: deleted or renamed since, it was still the file the
        // copy was made of (the copy's first bytes say so).
        let v = self.table.view(&key)?;
        Some(match v.open {
            Some(o) => {
                // What went out (as a checkpoint has it), not what was parsed: a
                // record the parser still holds may never go out as this file's.
                let ctx = o.parser.context();
                let last = ctx.last_timestamp.map(|t| t.0);
                Truncated::new(key, o.fingerprint, o.parser.unemitted_offset(), SavedContext::from_parser(ctx), last)
            }
            None => Truncated::new(key, v.fingerprint(), v.resume(), self.table.context_of(&v).cloned(), v.last_time()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::rotation_base;

    #[test]
    fn rotated_names_give_their_base() {
        for (name, base) in [
            ("raylet.out.1", Some("raylet.out")),
            ("raylet.out-20261207", Some("raylet.out")),
            ("raylet.out.2026-12-07", Some("raylet.out")),
            ("old/gcs_server.err_3", Some("old/gcs_server.err")),
            ("worker-b05dee30-03000000-8429.out", None),
            ("python-core-worker-21dc_4356.log", None),
            ("raylet.out", None),
            ("events/event_GCS.log", None),
            ("x.", None),
            ("1.2", Some("1")),
        ] {
            assert_eq!(rotation_base(name), base, "{name}");
        }
    }
}
