//! Tar archives (`.tar`, `.tar.gz`, `.tgz`) of Ray temp dirs or logs dirs.
//!
//! A tarball can only be read front to back, so it is read twice, like a directory:
//! once for correlation and node ids ([`prescan`]), once to parse ([`parse`]).
//! Entries are grouped into logs dirs by their path inside the archive
//! ([`crate::discover::split_archive_path`]). A truncated or corrupt archive keeps
//! every record read before the damage and is reported with its path.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::PathBuf;

use raylog_parsers::{classify, Correlator, FileParser, Id, Record, Timestamp};

use super::report::{read_error, ScanConfig, ScanReport};
use super::segments::Unit;
use crate::discover::{split_archive_path, Archive};
use crate::lines::for_each_line_chunk;
use crate::prescan::{prescan_bytes, wanted_by_prescan, Prescanned};

/// What pass one learned about an archive's entries.
#[derive(Debug, Default)]
pub struct ArchiveFacts {
    /// (archive, logs-dir prefix inside it) → node id.
    pub nodes: HashMap<(PathBuf, String), Id>,
    /// (archive, entry path) → the entry's time hint (see `FileParser::set_time_hint`).
    pub hints: HashMap<(PathBuf, String), Timestamp>,
}

fn open(a: &Archive) -> io::Result<tar::Archive<Box<dyn Read>>> {
    let f = BufReader::new(File::open(&a.path)?);
    let r: Box<dyn Read> = if a.gzip { Box::new(flate2::read::MultiGzDecoder::new(f)) } else { Box::new(f) };
    Ok(tar::Archive::new(r))
}

/// Pass one over an archive: correlation and node ids.
pub fn prescan(a: &Archive, corr: &mut Correlator, facts: &mut ArchiveFacts) -> io::Result<()> {
    let mut ar = open(a)?;
    for entry in ar.entries()? {
        let entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        let (prefix, rel, session) = split_archive_path(&path);
        let meta = classify(rel.strip_suffix(".gz").unwrap_or(&rel), session.as_deref());
        if !wanted_by_prescan(&meta) {
            continue;
        }
        let node = facts.nodes.get(&(a.path.clone(), prefix.clone())).copied();
        let mut found = Prescanned { node, ..Prescanned::default() };
        for_each_line_chunk(decompressed(entry, &rel), |c| prescan_bytes(&meta, c, corr, &mut found))?;
        if let Some(n) = found.node {
            facts.nodes.insert((a.path.clone(), prefix), n);
        }
        if let Some(t) = found.time_hint {
            facts.hints.insert((a.path.clone(), path), t);
        }
    }
    Ok(())
}

fn decompressed<'a>(entry: impl Read + 'a, rel: &str) -> Box<dyn Read + 'a> {
    if rel.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(entry))
    } else {
        Box::new(entry)
    }
}

/// What pass two needs to know of a file entry (its label, class, node, times),
/// and its path within its logs dir (which says whether it is gzipped).
fn describe<R: Read>(
    a: &Archive,
    cfg: &ScanConfig,
    facts: &ArchiveFacts,
    entry: &tar::Entry<'_, R>,
) -> io::Result<(Unit, String)> {
    let path = entry.path()?.to_string_lossy().into_owned();
    let mtime = cfg.fixed_mtime.or_else(|| entry.header().mtime().ok().map(|s| Timestamp::from_secs(s as i64)));
    let (prefix, rel, session) = split_archive_path(&path);
    let meta = classify(rel.strip_suffix(".gz").unwrap_or(&rel), session.as_deref());
    let node = facts.nodes.get(&(a.path.clone(), prefix)).copied();
    let hint = facts.hints.get(&(a.path.clone(), path.clone())).copied();
    let label = format!("{}:{}", a.path.display(), path);
    Ok((Unit { label, meta, node, mtime, hint }, rel))
}

/// Pass two: parses every file entry.
pub fn parse(
    a: &Archive,
    cfg: &ScanConfig,
    corr: &mut Correlator,
    facts: &ArchiveFacts,
    report: &mut ScanReport,
    progress: &mut dyn FnMut(u64),
    on_record: &mut dyn FnMut(&Record<'_>),
) -> io::Result<()> {
    let mut ar = open(a)?;
    for entry in ar.entries()? {
        let entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let (Unit { label, meta, node, mtime, hint }, rel) = describe(a, cfg, facts, &entry)?;
        let mut parser = FileParser::new(meta, node, mtime);
        parser.set_time_hint(hint);
        let result = for_each_line_chunk(decompressed(entry, &rel), |c| {
            progress(c.len() as u64);
            parser.push(c, corr, &cfg.opts, on_record);
        });
        parser.finish(corr, &cfg.opts, on_record);
        report.add(&label, parser.stats());
        if let Err(e) = result {
            // The tar stream itself is damaged: nothing after this entry can be read.
            report.failures.push((label, read_error(&e, parser.offset())));
            return Ok(());
        }
    }
    Ok(())
}

/// Pass two for many threads: cuts every file entry into segments
/// ([`super::segments::cut`]), with the same labels, times and ids as [`parse`].
pub fn segments(
    a: &Archive,
    cfg: &ScanConfig,
    facts: &ArchiveFacts,
    buffer: &dyn Fn() -> Vec<u8>,
    send: &mut dyn FnMut(super::segments::Segment) -> bool,
) -> io::Result<()> {
    let mut ar = open(a)?;
    for entry in ar.entries()? {
        let entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let (unit, rel) = describe(a, cfg, facts, &entry)?;
        let unit = std::sync::Arc::new(unit);
        if super::segments::cut(decompressed(entry, &rel), &unit, cfg.opts.max_line_bytes, buffer, send) {
            // The tar stream itself is damaged (nothing after this entry can be
            // read), or the scan stopped.
            return Ok(());
        }
    }
    Ok(())
}
