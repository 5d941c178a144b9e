//! `parse` as a stream for an embedding caller: the scan runs on a thread of its own
//! and hands records over in chunks through a bounded channel, so memory holds at
//! most [`DEPTH`] chunks whatever the input's size, and the caller (Python, holding
//! no lock while it waits) takes them at its own pace.
//!
//! A chunk is NDJSON, byte for byte what `raylog parse` prints, or Arrow columns
//! ([`super::columns`]). When the caller stops taking chunks the scan still runs to
//! its end, but encodes nothing more: the parsers have no way to stop mid-file.

use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use raylog_parsers::ndjson::write_record;

use super::columns::Columns;
use super::Query;
use crate::cli::Command;
use crate::discover::discover;
use crate::scan::{scan_where, ScanReport};

/// Chunks waiting for the caller. Two keep the scan busy while one is converted.
const DEPTH: usize = 2;

/// NDJSON bytes per chunk.
const NDJSON_BYTES: usize = 1 << 20;

/// What the chunks hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Ndjson,
    /// Arrow columns, at most this many rows per chunk.
    Columns(usize),
}

/// Why a parse could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A keyword (flag) or its value is invalid: the message names it.
    #[error("{0}")]
    Argument(String),
    /// An input path does not exist.
    #[error("{0}: no such file or directory")]
    Missing(String),
    /// Anything else: fetching a bucket, starting the thread.
    #[error("{0}")]
    Other(String),
}

/// One piece of the output.
pub enum Chunk {
    Ndjson(Vec<u8>),
    Columns(Box<Columns>),
}

/// How the scan ended: what `raylog parse` prints on stderr.
#[derive(Debug, Default)]
pub struct End {
    /// `(path, reason)` for every input that could not be (fully) read.
    pub failures: Vec<(String, String)>,
    pub warnings: Vec<String>,
    pub files: u64,
    pub written: u64,
}

enum Msg {
    Chunk(Chunk),
    End(End),
}

/// A running `parse`; dropping it lets the scan finish without encoding.
pub struct Records {
    rx: Receiver<Msg>,
    thread: Option<JoinHandle<()>>,
    end: Option<End>,
}

impl Records {
    /// Validates `query` as `raylog parse` would, checks that every path exists
    /// (naming the first that does not), and starts the scan.
    pub fn start(query: &Query, kind: Kind) -> Result<Records, StartError> {
        let Command::Parse(mut a) = query.parse_args("parse").map_err(StartError::Argument)? else {
            unreachable!("`parse` parses into Command::Parse")
        };
        let argument = |e: anyhow::Error| StartError::Argument(super::keyword_names(&format!("{e:#}")));
        let cfg = a.input.scan_config().map_err(argument)?;
        let filter = a.filter.build(&cfg.opts.zone).map_err(argument)?;
        let fetched =
            crate::cli::remote::localize(&mut a.input.paths).map_err(|e| StartError::Other(format!("{e:#}")))?;
        let paths: Vec<PathBuf> = a.input.paths;
        if let Some(p) = paths.iter().find(|p| p.as_os_str() != "-" && !p.exists()) {
            return Err(StartError::Missing(p.display().to_string()));
        }
        let (tx, rx) = sync_channel(DEPTH);
        let thread = std::thread::Builder::new()
            .name("raylog-parse".into())
            .spawn(move || {
                let _fetched = fetched;
                let disc = discover(&paths);
                let all = filter.is_empty();
                let keep = |r: &raylog_parsers::Record<'_>, _: &mut _| all || filter.matches(r);
                let mut out = Out { tx: &tx, kind, ndjson: Vec::new(), columns: None, gone: false, written: 0 };
                // On many threads the workers hand over only what `keep` took; on one,
                // every record comes here and is matched here, once either way.
                let already_matched = all || cfg.threads > 1;
                let report = scan_where(&disc, &cfg, &keep, &mut |_| {}, &mut |r| {
                    if already_matched || filter.matches(r) {
                        out.add(r)
                    }
                });
                out.flush();
                let end = end_of(report, out.written);
                let _ = tx.send(Msg::End(end));
            })
            .map_err(|e| StartError::Other(format!("cannot start the parse thread: {e}")))?;
        Ok(Records { rx, thread: Some(thread), end: None })
    }

    /// The next chunk, waiting for it; `None` at the end (then see [`Records::end`]).
    pub fn next_chunk(&mut self) -> Option<Chunk> {
        if self.end.is_some() {
            return None;
        }
        match self.rx.recv() {
            Ok(Msg::Chunk(c)) => Some(c),
            Ok(Msg::End(e)) => {
                self.end = Some(e);
                None
            }
            // The thread ended without its report: it panicked.
            Err(_) => {
                let why = self.thread.take().map(|t| t.join()).and_then(Result::err);
                let why = why.and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "it panicked".into());
                self.end = Some(End { failures: vec![("<parse thread>".into(), why)], ..End::default() });
                None
            }
        }
    }

    /// How the scan ended, once [`Records::next_chunk`] returned `None`.
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }
}

fn end_of(report: ScanReport, written: u64) -> End {
    End { failures: report.failures, warnings: report.warnings, files: report.files, written }
}

/// The scan's side: encodes records into chunks and sends each when full.
struct Out<'a> {
    tx: &'a SyncSender<Msg>,
    kind: Kind,
    ndjson: Vec<u8>,
    columns: Option<Box<Columns>>,
    /// The caller went away: nothing more is encoded.
    gone: bool,
    written: u64,
}

impl Out<'_> {
    fn add(&mut self, r: &raylog_parsers::Record<'_>) {
        if self.gone {
            return;
        }
        self.written += 1;
        let full = match self.kind {
            Kind::Ndjson => {
                write_record(&mut self.ndjson, r);
                self.ndjson.len() >= NDJSON_BYTES
            }
            Kind::Columns(rows) => {
                let c = self.columns.get_or_insert_with(|| Box::new(Columns::with_capacity(rows)));
                c.push(r);
                // The text's size is summed every 1,024 rows, not per record: a chunk
                // may pass MAX_BYTES by a thousand records, far below 2 GiB.
                c.len() >= rows || (c.len() % 1024 == 0 && c.bytes() >= super::columns::MAX_BYTES)
            }
        };
        if full {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let chunk = match self.kind {
            Kind::Ndjson if !self.ndjson.is_empty() => {
                Chunk::Ndjson(std::mem::replace(&mut self.ndjson, Vec::with_capacity(NDJSON_BYTES + (64 << 10))))
            }
            Kind::Columns(_) => match self.columns.take() {
                Some(c) if !c.is_empty() => Chunk::Columns(c),
                _ => return,
            },
            _ => return,
        };
        if self.tx.send(Msg::Chunk(chunk)).is_err() {
            self.gone = true;
        }
    }
}
