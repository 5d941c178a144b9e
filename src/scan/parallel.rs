//! Pass two on every core, with the serial scan's exact output.
//!
//! One thread reads ([`super::segments`]): files and archive entries in the serial
//! order, cut into segments of about half a MiB. `threads - 1` workers, and the
//! reader whenever the segments in flight are at their bound ([`Helper`]), each parse
//! a segment on its own, with a parser resumed at the segment's offset and a copy of
//! the correlator, and turn its records into a piece of output ([`Fold`]). The
//! calling thread merges the pieces in order, and checks each segment's parse
//! against what the serial parser would have had at that point:
//! - the marker context the reader guessed is the one the previous segment ended
//!   with, and the time of the file's last record was not needed, or was the same;
//! - the previous segment's last record really ended where the segment starts
//!   (its parser saw the next line and said so);
//! - the correlator copy was the current one and the parse taught it nothing.
//!
//! A segment that fails a check is parsed again on the calling thread, by a serial
//! parser that carries on into the next segments until a boundary is clean, and
//! whose learning goes into the correlator (a new copy for the workers). On Ray's
//! logs the checks almost always pass, so the workers do nearly all the parsing.
//!
//! Memory is bounded: the reader holds a permit for each segment in flight, at most
//! [`IN_FLIGHT`] per thread and 32 in all, given back once the piece is written.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use raylog_parsers::parser::FileContext;
use raylog_parsers::{Correlator, FileParser, FileStats, Options, Record};

use super::flow::{CloseOnDrop, InOrder, Permits};
use super::pass_one::{pass_one_parallel, PassOne};
use super::report::{read_error, ScanConfig, ScanReport};
use super::segments::{cut, Segment, Unit};
use super::{archive, mtime_of, open, source_label};
use crate::discover::Discovered;

/// The reader thread's name (it parses too: see [`Helper`]).
const READER: &str = "raylog-reader";

/// Segments in flight for each thread.
pub const IN_FLIGHT: usize = 4;

/// Segments in flight at most, however many workers: `--threads 500` must not mean
/// a GiB of segments and pieces.
const MAX_IN_FLIGHT: usize = 32;

/// The default `--threads`: one per core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Turns records into a piece of output on a worker thread.
pub trait Fold: Sync {
    type Piece: Send + Default;
    fn add(&self, piece: &mut Self::Piece, r: &Record<'_>);
    /// Empties a piece that was taken, keeping its buffers for the next segment.
    fn reset(&self, piece: &mut Self::Piece);
}

/// Buffers given back after use: a fresh half-MiB buffer per segment costs page
/// faults (the allocator maps big blocks anew), and growing one costs copies.
struct Pool<T>(Mutex<Vec<T>>);

impl<T: Default> Pool<T> {
    fn get(&self) -> T {
        self.0.lock().unwrap().pop().unwrap_or_default()
    }

    fn put(&self, t: T) {
        self.0.lock().unwrap().push(t);
    }
}

/// What the reader sends, in order.
// One per half MiB of input, moved through a channel once: boxing would save nothing.
#[allow(clippy::large_enum_variant)]
enum Job {
    Segment(Segment),
    /// An archive that could not be read (to the end).
    Failure(String, String),
}

/// A worker's parse of a segment.
struct Parsed<P> {
    piece: P,
    /// The context the parser ended with (after its last record).
    end: FileContext,
    stats: FileStats,
    took_time: bool,
    /// The last record ends at the segment's end.
    clean_end: bool,
    /// The correlator copy learned something.
    learned: bool,
    /// The correlator version parsed with.
    version: u64,
}

#[allow(clippy::large_enum_variant)]
enum Done<P> {
    Segment(Segment, Option<Parsed<P>>),
    Failure(String, String),
}

/// The correlator the workers parse with, and its version.
struct Snapshot {
    version: AtomicU64,
    corr: Mutex<(u64, Arc<Correlator>)>,
    /// Set when learning comes too often for copies to pay: workers stop parsing
    /// and the merging thread parses the rest.
    serial: AtomicBool,
}

/// Copies of the correlator made for the workers before the scan goes serial: each
/// costs a copy of everything known (52 bytes a worker), and a learning segment also
/// sends the segments in flight back to be parsed again. Ray's logs, whose links
/// the prescan finds, need none; a tree where every worker file teaches something
/// (an archive of worker files without their core-worker logs) would need one per file.
const MAX_COPIES: u64 = 32;

/// Like [`super::scan`], on `threads` workers: `take` gets the pieces in order.
pub fn scan<F: Fold>(
    disc: &Discovered,
    cfg: &ScanConfig,
    threads: usize,
    fold: &F,
    progress: &mut dyn FnMut(u64),
    take: &mut dyn FnMut(&F::Piece),
) -> ScanReport {
    let mut report = ScanReport { failures: disc.failures.clone(), ..ScanReport::default() };
    let one = pass_one_parallel(disc, cfg, threads.max(1), &mut report);
    let corr = Mutex::new((0, Arc::new(one.corr.clone())));
    let snapshot = Snapshot { version: AtomicU64::new(0), corr, serial: AtomicBool::new(false) };
    let in_flight = (threads.max(1) * IN_FLIGHT).min(MAX_IN_FLIGHT);
    let permits = Permits::new(in_flight);
    let (job_tx, job_rx) = sync_channel::<(usize, Job)>(in_flight);
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = channel::<(usize, Done<F::Piece>)>();
    let (buffers, pieces) = (Pool(Mutex::new(Vec::new())), Pool(Mutex::new(Vec::new())));
    std::thread::scope(|s| {
        let (one, permits, snapshot, job_rx, buffers, pieces) = (&one, &permits, &snapshot, &job_rx, &buffers, &pieces);
        let parser = |done| Parser { snapshot, opts: &cfg.opts, fold, pieces, local: None, done };
        let helper = Helper { jobs: job_rx, parser: parser(done_tx.clone()) };
        std::thread::Builder::new()
            .name(READER.into())
            .spawn_scoped(s, move || read(disc, cfg, one, (permits, helper), buffers, job_tx))
            .expect("a thread for the reader");
        // The reader parses too: it is one of the `threads`.
        for _ in 1..threads.max(2) {
            let parser = parser(done_tx.clone());
            s.spawn(move || work(job_rx, parser));
        }
        drop(done_tx);
        let _close = CloseOnDrop(permits);
        let mut merge = Merge::new(one.corr.clone(), &cfg.opts, fold, snapshot, &mut report);
        merge.run(done_rx, permits, (buffers, pieces), progress, take);
    });
    report
}

/// The reader: every unit, in the serial order.
fn read<F: Fold>(
    disc: &Discovered,
    cfg: &ScanConfig,
    one: &PassOne,
    (permits, mut helper): (&Permits, Helper<'_, F>),
    buffers: &Pool<Vec<u8>>,
    tx: std::sync::mpsc::SyncSender<(usize, Job)>,
) {
    let buffer = || {
        let mut b = buffers.get();
        b.clear();
        b
    };
    let (mut seq, stopped) = (0usize, std::cell::Cell::new(false));
    let mut send = |job: Job| {
        if stopped.get() || !helper.permit(permits) || tx.send((seq, job)).is_err() {
            stopped.set(true);
            return false;
        }
        seq += 1;
        true
    };
    let max_line = cfg.opts.max_line_bytes;
    for (i, f) in disc.files.iter().enumerate() {
        let unit = Arc::new(Unit {
            label: source_label(f),
            meta: one.metas[i].clone(),
            node: one.nodes[f.dir],
            mtime: cfg.fixed_mtime.or_else(|| mtime_of(f)),
            hint: one.hints[i],
        });
        let mut to_job = |s: Segment| send(Job::Segment(s));
        let stop = match open(&f.origin) {
            Ok(r) => cut(r, &unit, max_line, &buffer, &mut to_job),
            Err(e) => !to_job(Segment {
                unit: unit.clone(),
                offset: 0,
                bytes: Vec::new(),
                next_line: None,
                last: true,
                guess: FileContext::default(),
                fit: false,
                error: Some(e),
            }),
        };
        if stop && stopped.get() {
            return;
        }
    }
    for a in &disc.archives {
        let result = archive::segments(a, cfg, &one.archive_facts, &buffer, &mut |s| send(Job::Segment(s)));
        if let Err(e) = result {
            send(Job::Failure(a.path.display().to_string(), e.to_string()));
        }
        if stopped.get() {
            return;
        }
    }
}

/// What a thread that parses segments holds: each worker's, and the reader's.
struct Parser<'a, F: Fold> {
    snapshot: &'a Snapshot,
    opts: &'a Options,
    fold: &'a F,
    pieces: &'a Pool<F::Piece>,
    /// This thread's copy of the correlator, and its version.
    local: Option<(u64, Correlator)>,
    done: Sender<(usize, Done<F::Piece>)>,
}

impl<F: Fold> Parser<'_, F> {
    /// Parses job `seq` for the merge; false once the merge is gone.
    fn job(&mut self, seq: usize, job: Job) -> bool {
        let out = match job {
            Job::Failure(p, why) => Done::Failure(p, why),
            Job::Segment(seg) if !seg.fit || self.snapshot.serial.load(Ordering::Relaxed) => Done::Segment(seg, None),
            Job::Segment(seg) => {
                let current = self.snapshot.version.load(Ordering::Acquire);
                if self.local.as_ref().is_none_or(|(v, _)| *v != current) {
                    let (v, c) = self.snapshot.corr.lock().unwrap().clone();
                    self.local = Some((v, (*c).clone()));
                }
                let (version, corr) = self.local.as_mut().expect("set above");
                let (opts, fold, piece) = (self.opts, self.fold, self.pieces.get());
                // A parser bug must not leave the merge waiting for this segment: it
                // is parsed again there, where a panic ends the scan.
                let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    parse(&seg, corr, *version, opts, fold, piece)
                }))
                .ok();
                if parsed.as_ref().is_none_or(|p| p.learned) {
                    // The copy knows more than its version (or is half-updated): a fresh one next time.
                    self.local = None;
                }
                Done::Segment(seg, parsed)
            }
        };
        self.done.send((seq, out)).is_ok()
    }
}

/// A worker: parses segments with its copy of the correlator.
fn work<F: Fold>(jobs: &Mutex<Receiver<(usize, Job)>>, mut parser: Parser<'_, F>) {
    loop {
        let Ok((seq, job)) = jobs.lock().unwrap().recv() else { return };
        if !parser.job(seq, job) {
            return;
        }
    }
}

/// The reader's side of parsing: while every permit is out, it parses the queued
/// segments itself rather than wait. Giving it its own core beside `threads`
/// workers had three threads share two cores, the reader put off while workers
/// waited for it; as one of the `threads`, pass two took ~10 % less time on two
/// cores (the 256 MiB tree), ~17 % on 40 archives.
struct Helper<'a, F: Fold> {
    jobs: &'a Mutex<Receiver<(usize, Job)>>,
    parser: Parser<'a, F>,
}

impl<F: Fold> Helper<'_, F> {
    /// Takes a permit, parsing queued segments until one is free; false once closed.
    fn permit(&mut self, permits: &Permits) -> bool {
        while !permits.try_take() {
            // A worker waiting for a job holds the lock: then there is none to take.
            let next = self.jobs.try_lock().ok().and_then(|jobs| jobs.try_recv().ok());
            match next {
                // Whether the merge is gone is for `take` to say.
                Some((seq, job)) => drop(self.parser.job(seq, job)),
                None => return permits.take(),
            }
        }
        true
    }
}

/// Parses a segment on its own, as if resumed there with the reader's guess.
fn parse<F: Fold>(
    seg: &Segment,
    corr: &mut Correlator,
    version: u64,
    opts: &Options,
    fold: &F,
    mut piece: F::Piece,
) -> Parsed<F::Piece> {
    let before = corr.changes();
    let mut p = parser_at(&seg.unit, seg.offset, seg.guess.clone());
    p.push(&seg.bytes, corr, opts, &mut |r| fold.add(&mut piece, r));
    let clean_end = seg.last || seg.next_line.as_deref().is_some_and(|l| p.breaks_before(l, opts));
    if clean_end {
        p.finish(corr, opts, &mut |r| fold.add(&mut piece, r));
    }
    Parsed {
        piece,
        end: p.context().clone(),
        stats: *p.stats(),
        took_time: p.took_time_from_context(),
        clean_end,
        learned: corr.changes() != before,
        version,
    }
}

fn parser_at(unit: &Unit, offset: u64, ctx: FileContext) -> FileParser {
    let mut p = FileParser::new(unit.meta.clone(), unit.node, unit.mtime);
    p.set_time_hint(unit.hint);
    p.resume_at(offset, ctx);
    p
}

/// The calling thread's side: pieces in order, checked, or parsed again.
struct Merge<'a, F: Fold> {
    corr: Correlator,
    version: u64,
    opts: &'a Options,
    fold: &'a F,
    snapshot: &'a Snapshot,
    report: &'a mut ScanReport,
    /// The true context where the next segment of the current unit starts.
    truth: FileContext,
    /// The serial parser, while it carries on across segments.
    serial: Option<FileParser>,
    /// The current unit's counters so far.
    stats: FileStats,
}

impl<'a, F: Fold> Merge<'a, F> {
    fn new(
        corr: Correlator,
        opts: &'a Options,
        fold: &'a F,
        snapshot: &'a Snapshot,
        report: &'a mut ScanReport,
    ) -> Self {
        let (truth, stats) = (FileContext::default(), FileStats::default());
        Merge { corr, version: 0, opts, fold, snapshot, report, truth, serial: None, stats }
    }

    fn run(
        &mut self,
        done: Receiver<(usize, Done<F::Piece>)>,
        permits: &Permits,
        (buffers, pieces): (&Pool<Vec<u8>>, &Pool<F::Piece>),
        progress: &mut dyn FnMut(u64),
        take: &mut dyn FnMut(&F::Piece),
    ) {
        let mut order = InOrder::default();
        for (seq, d) in done {
            order.put(seq, d, |d| {
                match d {
                    Done::Failure(p, why) => self.report.failures.push((p, why)),
                    Done::Segment(seg, parsed) => {
                        progress(seg.bytes.len() as u64);
                        if let Some(mut piece) = self.segment(&seg, parsed, take) {
                            self.fold.reset(&mut piece);
                            pieces.put(piece);
                        }
                        buffers.put(seg.bytes);
                    }
                }
                permits.give();
            });
        }
    }

    /// Merges a segment; returns the worker's piece for reuse.
    fn segment(
        &mut self,
        seg: &Segment,
        parsed: Option<Parsed<F::Piece>>,
        take: &mut dyn FnMut(&F::Piece),
    ) -> Option<F::Piece> {
        let mut used = None;
        if self.serial.is_none() {
            match parsed {
                Some(p) if self.holds(seg, &p) => {
                    take(&p.piece);
                    self.stats.add(&p.stats);
                    let mut end = p.end;
                    end.last_timestamp = end.last_timestamp.or(self.truth.last_timestamp);
                    self.truth = end;
                    used = Some(p.piece);
                }
                other => {
                    used = other.map(|p| p.piece);
                    self.serial = Some(parser_at(&seg.unit, seg.offset, self.truth.clone()));
                }
            }
        }
        if let Some(p) = self.serial.as_mut() {
            let before = self.corr.changes();
            let (fold, opts) = (self.fold, self.opts);
            let mut piece = used.take().unwrap_or_default();
            fold.reset(&mut piece);
            p.push(&seg.bytes, &mut self.corr, opts, &mut |r| fold.add(&mut piece, r));
            if seg.last || seg.next_line.as_deref().is_some_and(|l| p.breaks_before(l, opts)) {
                p.finish(&mut self.corr, opts, &mut |r| fold.add(&mut piece, r));
                self.truth = p.context().clone();
                self.stats.add(p.stats());
                self.serial = None;
            }
            take(&piece);
            used = Some(piece);
            if self.corr.changes() != before {
                self.publish();
            }
        }
        if seg.last {
            let label = &seg.unit.label;
            if let Some(e) = &seg.error {
                let at = seg.offset + seg.bytes.len() as u64;
                self.report.failures.push((label.clone(), read_error(e, at)));
            }
            self.report.add(label, &self.stats);
            (self.truth, self.stats) = (FileContext::default(), FileStats::default());
        }
        used
    }

    /// Whether a worker's parse is what the serial parser gives here.
    fn holds(&self, seg: &Segment, p: &Parsed<F::Piece>) -> bool {
        p.clean_end
            && !p.learned
            && p.version == self.version
            && seg.guess.same_markers(&self.truth)
            && (!p.took_time || seg.guess.last_timestamp == self.truth.last_timestamp)
    }

    /// Gives the workers a copy of what the correlator knows now.
    fn publish(&mut self) {
        self.version += 1;
        if self.version > MAX_COPIES {
            // Parses made with older copies stay rejected: their version is behind.
            self.snapshot.serial.store(true, Ordering::Relaxed);
            return;
        }
        *self.snapshot.corr.lock().unwrap() = (self.version, Arc::new(self.corr.clone()));
        self.snapshot.version.store(self.version, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;
    use std::sync::atomic::AtomicUsize;

    use raylog_parsers::ndjson::write_record;
    use raylog_parsers::Timestamp;

    use super::super::segments::SEGMENT;
    use super::*;
    use crate::discover::discover;

    /// NDJSON of every record, and how many segments the reader parsed; slow on the
    /// workers so that the reader fills every permit and has to help.
    struct Slow {
        by_reader: AtomicUsize,
    }

    impl Fold for Slow {
        type Piece = Vec<u8>;

        fn add(&self, piece: &mut Vec<u8>, r: &Record<'_>) {
            if piece.is_empty() {
                if std::thread::current().name() == Some(READER) {
                    self.by_reader.fetch_add(1, Ordering::Relaxed);
                } else {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            write_record(piece, r);
        }

        fn reset(&self, piece: &mut Vec<u8>) {
            piece.clear();
        }
    }

    #[test]
    fn the_reader_parses_while_the_window_is_full_and_the_output_stays_serial() {
        let dir = std::env::temp_dir().join(format!("raylog-helper-{}", std::process::id()));
        let logs = dir.join("session_2026-01-15_10-00-00_000000_1/logs");
        std::fs::create_dir_all(&logs).unwrap();
        let mut raylet = Vec::new();
        for i in 0..120_000 {
            writeln!(
                raylet,
                "[2026-01-15 10:00:{:02},{:03} I 42 42] node_manager.cc:{i}: record {i}",
                i / 1000 % 60,
                i % 1000
            )
            .unwrap();
        }
        std::fs::write(logs.join("raylet.out"), &raylet).unwrap();
        let mut err = b":job_id:01000000\n".to_vec();
        for i in 0..80_000 {
            writeln!(err, "print {i}").unwrap();
        }
        std::fs::write(logs.join(format!("worker-{}-01000000-42.err", "a".repeat(56))), &err).unwrap();
        let disc = discover(&[PathBuf::from(&dir)]);
        let cfg = ScanConfig {
            opts: Options::default(),
            stdin_name: None,
            fixed_mtime: Some(Timestamp::from_secs(1_767_225_600)),
            threads: 2,
        };
        let mut serial = Vec::new();
        crate::scan::scan(&disc, &cfg, &mut |_| {}, &mut |r| write_record(&mut serial, r));
        let slow = Slow { by_reader: AtomicUsize::new(0) };
        let mut parallel = Vec::new();
        scan(&disc, &cfg, 2, &slow, &mut |_| {}, &mut |p: &Vec<u8>| parallel.extend_from_slice(p));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(raylet.len() + err.len() > 12 * SEGMENT, "more segments than permits");
        assert!(slow.by_reader.load(Ordering::Relaxed) > 0, "the reader parsed some segments");
        assert!(serial.len() > raylet.len(), "records written");
        assert!(serial == parallel, "the same records in the same order");
    }
}
