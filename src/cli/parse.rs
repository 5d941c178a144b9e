//! `raylog parse`: archived Ray logs in, filtered records out (NDJSON or pretty).
//!
//! Exit codes: 0 when records were written, 1 when filters matched nothing, 2 when
//! any input could not be read (the rest is still processed, and each failure is
//! named with its path on stderr).

use std::io::{self, IsTerminal, Write};
use std::sync::Mutex;

use anyhow::Result;
use clap::Args;
use raylog_parsers::ndjson::write_record;
use raylog_parsers::Record;

use super::{FilterArgs, Format, InputArgs};
use crate::discover::discover;
use crate::filter::Filter;
use crate::scan::parallel::Fold;
use crate::scan::{scan, ScanReport};

#[derive(Args, Debug)]
#[command(
    about = "Parse Ray logs into records tagged with node, job, worker, actor and task ids",
    long_about = "Parse Ray logs into records tagged with node, job, worker, actor and task ids.\n\n\
Reads Ray temp roots, session dirs, logs dirs, single files, .gz files and \
.tar/.tar.gz/.tgz archives (default: /tmp/ray). Every record is one JSON object \
per line (see docs/records.md, \"Record schema\"), or aligned text with --format pretty.",
    after_help = "Examples:\n  \
raylog parse /tmp/ray --actor-id 750d0826 --format pretty\n  \
raylog parse node1.tar.gz node2.tar.gz --job-id 01000000 --level WARNING\n  \
raylog parse session_latest/logs --component raylet,gcs_server --grep 'exit_type=SYSTEM_ERROR'\n  \
cat raylet.out | raylog parse - --stdin-name raylet.out\n\n\
Exit status: 0 records written, 1 filters matched nothing, 2 an input could not be read."
)]
pub struct ParseArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Ndjson)]
    pub format: Format,
    /// Do not print warnings and the summary on stderr (failures are still printed).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Bytes of NDJSON a worker writes into one buffer before taking the next. A
/// segment's output is up to ~13x its bytes (short lines, every id): pieces that each
/// grew to the largest output seen cost copies and page faults (20,000 of them on the
/// 256 MiB tree), where buffers of this size, given back after writing, are reused.
const CHUNK: usize = 256 << 10;

/// How a parse worker turns records into output.
struct Printer<'a> {
    filter: &'a Filter,
    all: bool,
    format: Format,
    colour: bool,
    /// Emptied [`CHUNK`] buffers, given back by the calling thread.
    spare: Mutex<Vec<Vec<u8>>>,
}

/// Output of one segment, written in order by the calling thread.
#[derive(Default)]
struct Piece {
    /// Filled buffers, then the one being filled.
    full: Vec<Vec<u8>>,
    bytes: Vec<u8>,
    text: String,
    written: u64,
}

impl Fold for Printer<'_> {
    type Piece = Piece;

    fn add(&self, p: &mut Piece, r: &Record<'_>) {
        if !(self.all || self.filter.matches(r)) {
            return;
        }
        p.written += 1;
        match self.format {
            Format::Ndjson => {
                write_record(&mut p.bytes, r);
                if p.bytes.len() >= CHUNK {
                    let next = self.spare.lock().unwrap().pop().unwrap_or_else(|| Vec::with_capacity(CHUNK * 5 / 4));
                    p.full.push(std::mem::replace(&mut p.bytes, next));
                }
            }
            Format::Pretty => crate::pretty::write_pretty(&mut p.text, r, self.colour),
        }
    }

    fn reset(&self, p: &mut Piece) {
        let mut spare = self.spare.lock().unwrap();
        for mut b in p.full.drain(..) {
            b.clear();
            spare.push(b);
        }
        p.bytes.clear();
        p.text.clear();
        p.written = 0;
    }
}

/// Writes records to stdout in big chunks; stops quietly when the reader goes away.
struct Output {
    buf: Vec<u8>,
    text: String,
    out: io::StdoutLock<'static>,
    format: Format,
    colour: bool,
    closed: bool,
    written: u64,
}

impl Output {
    fn write(&mut self, r: &Record<'_>) {
        if self.closed {
            return;
        }
        self.written += 1;
        match self.format {
            Format::Ndjson => write_record(&mut self.buf, r),
            Format::Pretty => {
                self.text.clear();
                crate::pretty::write_pretty(&mut self.text, r, self.colour);
                self.buf.extend_from_slice(self.text.as_bytes());
            }
        }
        if self.buf.len() >= 1 << 20 {
            self.flush();
        }
    }

    /// Writes a worker's piece (already in order).
    fn piece(&mut self, p: &Piece) {
        if self.closed {
            return;
        }
        self.written += p.written;
        let parts = p.full.iter().map(|b| &b[..]);
        for bytes in parts.chain([&p.bytes[..], p.text.as_bytes()]) {
            if !self.closed && !bytes.is_empty() && self.out.write_all(bytes).is_err() {
                self.closed = true;
            }
        }
    }

    fn flush(&mut self) {
        if !self.closed && (self.out.write_all(&self.buf).is_err() || self.out.flush().is_err()) {
            // Broken pipe (`| head`): stop writing, finish quietly.
            self.closed = true;
        }
        self.buf.clear();
    }
}

/// Runs `raylog parse`.
pub fn run(a: ParseArgs) -> Result<u8> {
    let cfg = a.input.scan_config()?;
    let filter = a.filter.build(&cfg.opts.zone)?;
    let disc = discover(&a.input.paths);
    let stdout = io::stdout();
    let mut out = Output {
        buf: Vec::with_capacity(1 << 20),
        text: String::new(),
        colour: stdout.is_terminal(),
        out: stdout.lock(),
        format: a.format,
        closed: false,
        written: 0,
    };
    let bar = crate::progress::bar(disc.total_bytes());
    let mut progress = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    };
    // Without filters every record passes: skip asking per record.
    let all = filter.is_empty();
    let report = if cfg.threads > 1 {
        // Records become output on the workers: no copy of them travels.
        let spare = Mutex::new(Vec::new());
        let printer = Printer { filter: &filter, all, format: a.format, colour: out.colour, spare };
        crate::scan::parallel::scan(&disc, &cfg, cfg.threads, &printer, &mut progress, &mut |p| out.piece(p))
    } else {
        scan(&disc, &cfg, &mut progress, &mut |r| {
            if all || filter.matches(r) {
                out.write(r)
            }
        })
    };
    out.flush();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    print_report(&report, a.quiet, out.written);
    Ok(exit_code(&report, out.written, filter.is_empty()))
}

fn print_report(report: &ScanReport, quiet: bool, written: u64) {
    let mut err = io::stderr().lock();
    for (path, why) in &report.failures {
        let _ = writeln!(err, "raylog: error: {path}: {why}");
    }
    if quiet {
        return;
    }
    for w in &report.warnings {
        let _ = writeln!(err, "raylog: warning: {w}");
    }
    if io::stderr().is_terminal() {
        let t = &report.totals;
        let _ = writeln!(
            err,
            "raylog: {} files, {} lines, {} records parsed, {} written",
            report.files, t.lines, t.records, written
        );
    }
}

/// 2 beats 1 beats 0: an unreadable input matters more than an empty result.
pub fn exit_code(report: &ScanReport, written: u64, unfiltered: bool) -> u8 {
    if !report.failures.is_empty() {
        2
    } else if written == 0 && !unfiltered {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use raylog_parsers::Options;

    use super::*;
    use crate::scan::ScanConfig;

    #[test]
    fn a_piece_in_chunks_holds_the_records_written_one_after_another() {
        let disc = discover(&[PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")]);
        let cfg = ScanConfig { opts: Options::default(), stdin_name: None, fixed_mtime: None, threads: 1 };
        let filter = Filter::default();
        let printer = Printer {
            filter: &filter,
            all: true,
            format: Format::Ndjson,
            colour: false,
            spare: Mutex::new(Vec::new()),
        };
        let (mut piece, mut want) = (Piece::default(), Vec::new());
        for round in 0..2 {
            want.clear();
            scan(&disc, &cfg, &mut |_| {}, &mut |r| {
                write_record(&mut want, r);
                printer.add(&mut piece, r);
            });
            assert!(piece.full.len() >= 2, "{} bytes in {} chunks", want.len(), piece.full.len());
            assert!(piece.full.iter().all(|c| c.len() >= CHUNK) && piece.bytes.len() < CHUNK);
            let got: Vec<u8> = piece.full.iter().flatten().chain(&piece.bytes).copied().collect();
            assert!(got == want, "round {round}: the chunks joined are the records in order");
            let chunks = piece.full.len();
            printer.reset(&mut piece);
            // Given back, and taken again in the second round rather than made anew.
            assert_eq!(printer.spare.lock().unwrap().len(), chunks, "round {round}");
        }
    }
}
