//! Scan: read discovered files through the parsers, in two passes.
//!
//! Pass one ([`crate::prescan`]) reads only the files that say which actor a worker hosts
//! (core-worker, GCS and raylet logs) and which node a logs dir belongs to, with a
//! substring search; pass two parses every file and hands each record to the caller.
//! Splitting it this way makes the output independent of file order: a worker's
//! stdout gets its `actor_id` even when it is read before the core-worker log that
//! names the actor. Both passes stream, so memory does not grow with input size.
//! Plain and gzipped files are read here, tarballs in [`archive`]; both report
//! through [`report`]. [`pass_one`] holds pass one, serial and on many threads;
//! [`parallel`] runs pass two on many threads ([`segments`] cuts the input) with
//! the serial output; [`batch`] carries the records of `health` and `trace` from
//! its workers.

mod archive;
mod batch;
pub use batch::{Keep, Kept, Note, Seen};
mod flow;
pub mod parallel;
mod pass_one;
mod report;
mod segments;

use std::fs::File;
use std::io::{self, Read};
use std::time::SystemTime;

use raylog_parsers::{classify, FileMeta, FileParser, Record, Timestamp};

use self::pass_one::{pass_one, PassOne};
pub use self::report::{read_error, ScanConfig, ScanReport};
use crate::discover::{Discovered, LogFile, Origin};
use crate::lines::for_each_line_chunk;

fn open(source: &Origin) -> io::Result<Box<dyn Read>> {
    Ok(match source {
        Origin::File(p) => Box::new(File::open(p)?),
        Origin::Gzip(p) => Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(File::open(p)?))),
        Origin::Stdin => Box::new(io::stdin().lock()),
    })
}

fn source_label(f: &LogFile) -> String {
    match &f.origin {
        Origin::File(p) | Origin::Gzip(p) => p.display().to_string(),
        Origin::Stdin => "<stdin>".into(),
    }
}

fn mtime_of(f: &LogFile) -> Option<Timestamp> {
    let (Origin::File(p) | Origin::Gzip(p)) = &f.origin else {
        return None;
    };
    let m = std::fs::metadata(p).ok()?.modified().ok()?;
    let d = m.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_nanos()).ok().map(Timestamp)
}

/// Reads and parses everything in `disc`, calling `on_record` for each record and
/// `progress` with bytes consumed; on `cfg.threads` threads, with the same records
/// in the same order.
pub fn scan(
    disc: &Discovered,
    cfg: &ScanConfig,
    progress: &mut dyn FnMut(u64),
    on_record: &mut dyn FnMut(&Record<'_>),
) -> ScanReport {
    scan_where(disc, cfg, &|_, _| true, progress, on_record)
}

/// [`scan`], for a caller that ignores the records `keep` says no to: on many
/// threads those are left on the workers (read on one thread, all are handed over).
pub fn scan_where(
    disc: &Discovered,
    cfg: &ScanConfig,
    keep: &(dyn Fn(&Record<'_>, &mut Seen) -> bool + Sync),
    progress: &mut dyn FnMut(u64),
    on_record: &mut dyn FnMut(&Record<'_>),
) -> ScanReport {
    let keep = |r: &Record<'_>, seen: &mut Seen| if keep(r, seen) { Kept::Whole } else { Kept::No };
    scan_noted(disc, cfg, &keep, None, progress, &mut |r, _, _| on_record(r))
}

/// [`scan_where`], where `keep` may ask for a record's facts only and on many
/// threads the workers also work out `note` for each record kept whole, handed to
/// `on_record` with it and what was kept; on one thread every record comes whole
/// and every note is `None` (the caller works it out, the same way).
pub fn scan_noted(
    disc: &Discovered,
    cfg: &ScanConfig,
    keep: batch::Keep<'_>,
    note: Option<batch::Note<'_>>,
    progress: &mut dyn FnMut(u64),
    on_record: &mut dyn FnMut(&Record<'_>, Option<&str>, Kept),
) -> ScanReport {
    if cfg.threads > 1 {
        let copy = batch::Copy { keep, note };
        return parallel::scan(disc, cfg, cfg.threads, &copy, progress, &mut |b| b.replay(on_record));
    }
    let on_record = &mut |r: &Record<'_>| on_record(r, None, Kept::Whole);
    let mut report = ScanReport { failures: disc.failures.clone(), ..ScanReport::default() };
    let PassOne { mut corr, nodes, hints, metas, archive_facts } = pass_one(disc, cfg, &mut report);
    for ((f, meta), hint) in disc.files.iter().zip(metas).zip(hints) {
        let label = source_label(f);
        let mtime = cfg.fixed_mtime.or_else(|| mtime_of(f));
        let mut parser = FileParser::new(meta, nodes[f.dir], mtime);
        parser.set_time_hint(hint);
        let result = open(&f.origin).and_then(|r| {
            for_each_line_chunk(r, |c| {
                progress(c.len() as u64);
                parser.push(c, &mut corr, &cfg.opts, on_record);
            })
        });
        parser.finish(&mut corr, &cfg.opts, on_record);
        if let Err(e) = result {
            report.failures.push((label.clone(), read_error(&e, parser.offset())));
        }
        report.add(&label, parser.stats());
    }
    for a in &disc.archives {
        if let Err(e) = archive::parse(a, cfg, &mut corr, &archive_facts, &mut report, progress, on_record) {
            report.failures.push((a.path.display().to_string(), e.to_string()));
        }
    }
    report
}

fn meta_of(disc: &Discovered, f: &LogFile, cfg: &ScanConfig) -> FileMeta {
    let dir = &disc.dirs[f.dir];
    if f.origin == Origin::Stdin {
        let name = cfg.stdin_name.as_deref().unwrap_or("stdin");
        return classify(name, dir.session.as_deref());
    }
    classify(&f.rel, dir.session.as_deref())
}
