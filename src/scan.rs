//! Scan: read discovered files through the parsers, in two passes.
//!
//! Pass one ([`prescan`]) reads only the files that say which actor a worker hosts
//! (core-worker, GCS and raylet logs) and which node a logs dir belongs to, with a
//! substring search; pass two parses every file and hands each record to the caller.
//! Splitting it this way makes the output independent of file order: a worker's
//! stdout gets its `actor_id` even when it is read before the core-worker log that
//! names the actor. Both passes stream, so memory does not grow with input size.

use std::fs::File;
use std::io::{self, Read};
use std::time::SystemTime;

use raylog_parsers::correlate::node_id_from_raylet;
use raylog_parsers::{classify, Correlator, FileMeta, FileParser, FileStats, Id, Options, Record, Timestamp};

use crate::discover::{Discovered, LogFile, Source};

const CHUNK: usize = 256 * 1024;

/// How to scan.
#[derive(Clone, Debug, Default)]
pub struct ScanConfig {
    pub opts: Options,
    /// Classify stdin as if it were a file of this name (`raylet.out`...).
    pub stdin_name: Option<String>,
    /// Use this instead of file mtimes for records without a time (golden tests).
    pub fixed_mtime: Option<Timestamp>,
}

/// What happened, for the exit code and the closing summary.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// `(path, reason)` for every input that could not be (fully) read.
    pub failures: Vec<(String, String)>,
    pub files: u64,
    pub totals: FileStats,
    /// One line per file with invalid UTF-8 or cut lines.
    pub warnings: Vec<String>,
}

impl ScanReport {
    pub(crate) fn add(&mut self, label: &str, s: &FileStats) {
        self.files += 1;
        let t = &mut self.totals;
        t.bytes += s.bytes;
        t.lines += s.lines;
        t.markers += s.markers;
        t.records += s.records;
        t.invalid_utf8 += s.invalid_utf8;
        t.truncated_lines += s.truncated_lines;
        if s.invalid_utf8 > 0 {
            self.warnings.push(format!(
                "{label}: {} record(s) had invalid UTF-8; kept with U+FFFD replacement characters",
                s.invalid_utf8
            ));
        }
        if s.truncated_lines > 0 {
            self.warnings.push(format!(
                "{label}: {} line(s) longer than --max-line-bytes were cut (records flagged \"truncated\": true)",
                s.truncated_lines
            ));
        }
    }
}

/// Feeds `reader` to `f` in chunks that end on a line boundary (the last chunk may not).
pub(crate) fn for_each_line_chunk(reader: impl Read, f: impl FnMut(&[u8])) -> io::Result<()> {
    thread_local! {
        /// The read buffer, kept between files: allocating and zeroing a fresh one
        /// per file costs more than parsing a small file.
        static BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    // Taken, not borrowed, so a nested call just gets a buffer of its own.
    let mut buf = BUF.take();
    buf.resize(CHUNK, 0);
    let result = line_chunks(reader, &mut buf, f);
    BUF.set(buf);
    result
}

fn line_chunks(mut reader: impl Read, buf: &mut [u8], mut f: impl FnMut(&[u8])) -> io::Result<()> {
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            // One line longer than the buffer: hand it over as is.
            f(&buf[..filled]);
            filled = 0;
        }
        let n = match reader.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                f(&buf[..filled]);
                return Err(e);
            }
        };
        if n == 0 {
            f(&buf[..filled]);
            return Ok(());
        }
        filled += n;
        if let Some(last) = memchr::memrchr(b'\n', &buf[..filled]) {
            f(&buf[..=last]);
            buf.copy_within(last + 1..filled, 0);
            filled -= last + 1;
        }
    }
}

/// What pass one learns about a file besides correlation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prescanned {
    /// The node id a raylet log announces.
    pub node: Option<Id>,
    /// The time of a worker file's first line that has one, within its first
    /// [`TIME_HINT_WINDOW`] bytes (see `FileParser::set_time_hint`).
    pub time_hint: Option<Timestamp>,
    /// Bytes of the file seen so far.
    pub seen: u64,
}

/// How far into a worker file its first timed line is looked for: a fixed window,
/// so the hint is the same however the file is read.
pub const TIME_HINT_WINDOW: u64 = 64 << 10;

pub(crate) fn prescan_bytes(meta: &FileMeta, chunk: &[u8], corr: &mut Correlator, found: &mut Prescanned) {
    corr.prescan(meta, chunk);
    if meta.component == "raylet" && found.node.is_none() {
        found.node = node_id_from_raylet(chunk);
    }
    if meta.component == "worker" && found.time_hint.is_none() && found.seen < TIME_HINT_WINDOW {
        let window = &chunk[..chunk.len().min((TIME_HINT_WINDOW - found.seen) as usize)];
        // Only whole lines: one cut by the window's end is not looked at.
        let whole = memchr::memrchr(b'\n', window).map_or(&window[..0], |nl| &window[..nl]);
        found.time_hint = whole
            .split(|&b| b == b'\n')
            .find_map(|line| raylog_parsers::formats::line_time(meta.kind, line, corr.zone()));
    }
    found.seen += chunk.len() as u64;
}

/// Whether pass one needs this file.
pub(crate) fn wanted_by_prescan(meta: &FileMeta) -> bool {
    matches!(meta.component.as_str(), "core_worker" | "gcs_server" | "raylet" | "worker")
}

/// How much of a file pass one reads: worker files carry their markers at the top
/// (and the first 64 KiB are searched for a time, see [`Prescanned::time_hint`]),
/// raylet announces its node id at start-up; core-worker and GCS logs are read whole
/// because the lines naming actors can be anywhere.
pub(crate) fn prescan_limit(meta: &FileMeta) -> u64 {
    match meta.component.as_str() {
        "worker" => TIME_HINT_WINDOW,
        "raylet" => 1 << 20,
        _ => u64::MAX,
    }
}

fn open(source: &Source) -> io::Result<Box<dyn Read>> {
    Ok(match source {
        Source::File(p) => Box::new(File::open(p)?),
        Source::Gzip(p) => Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(File::open(p)?))),
        Source::Stdin => Box::new(io::stdin().lock()),
    })
}

fn source_label(f: &LogFile) -> String {
    match &f.source {
        Source::File(p) | Source::Gzip(p) => p.display().to_string(),
        Source::Stdin => "<stdin>".into(),
    }
}

fn mtime_of(f: &LogFile) -> Option<Timestamp> {
    let (Source::File(p) | Source::Gzip(p)) = &f.source else {
        return None;
    };
    let m = std::fs::metadata(p).ok()?.modified().ok()?;
    let d = m.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_nanos()).ok().map(Timestamp)
}

/// Reads and parses everything in `disc`, calling `on_record` for each record and
/// `progress` with bytes consumed.
pub fn scan(
    disc: &Discovered,
    cfg: &ScanConfig,
    progress: &mut dyn FnMut(u64),
    on_record: &mut dyn FnMut(&Record<'_>),
) -> ScanReport {
    let mut report = ScanReport { failures: disc.failures.clone(), ..ScanReport::default() };
    let mut corr = Correlator::with_zone(cfg.opts.zone.clone());
    let mut nodes: Vec<Option<Id>> = vec![None; disc.dirs.len()];
    let mut hints: Vec<Option<Timestamp>> = vec![None; disc.files.len()];
    let metas: Vec<FileMeta> = disc.files.iter().map(|f| meta_of(disc, f, cfg)).collect();
    for (i, (f, meta)) in disc.files.iter().zip(&metas).enumerate() {
        if !wanted_by_prescan(meta) || f.source == Source::Stdin {
            continue;
        }
        if let Ok(r) = open(&f.source) {
            let mut found = Prescanned { node: nodes[f.dir], ..Prescanned::default() };
            let _ = for_each_line_chunk(r.take(prescan_limit(meta)), |c| prescan_bytes(meta, c, &mut corr, &mut found));
            (nodes[f.dir], hints[i]) = (found.node, found.time_hint);
        }
    }
    let mut archive_facts = crate::archive::ArchiveFacts::default();
    for a in &disc.archives {
        if let Err(e) = crate::archive::prescan(a, &mut corr, &mut archive_facts) {
            report.failures.push((a.path.display().to_string(), e.to_string()));
        }
    }
    for ((f, meta), hint) in disc.files.iter().zip(metas).zip(hints) {
        let label = source_label(f);
        let mtime = cfg.fixed_mtime.or_else(|| mtime_of(f));
        let mut parser = FileParser::new(meta, nodes[f.dir], mtime);
        parser.set_time_hint(hint);
        let result = open(&f.source).and_then(|r| {
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
        if let Err(e) = crate::archive::parse(a, cfg, &mut corr, &archive_facts, &mut report, progress, on_record) {
            report.failures.push((a.path.display().to_string(), e.to_string()));
        }
    }
    report
}

/// Phrases an I/O error for a user, naming truncated compressed input as such.
pub fn read_error(e: &io::Error, offset: u64) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            format!("truncated compressed data after {offset} bytes; the records before that point were kept")
        }
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => {
            format!("corrupt data after {offset} bytes ({e}); the records before that point were kept")
        }
        _ => format!("read failed after {offset} bytes: {e}"),
    }
}

fn meta_of(disc: &Discovered, f: &LogFile, cfg: &ScanConfig) -> FileMeta {
    let dir = &disc.dirs[f.dir];
    if f.source == Source::Stdin {
        let name = cfg.stdin_name.as_deref().unwrap_or("stdin");
        return classify(name, dir.session.as_deref());
    }
    classify(&f.rel, dir.session.as_deref())
}
