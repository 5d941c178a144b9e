//! Line formats: one module per shape of line Ray writes, dispatched by [`LineFormat`].
//!
//! Each parser reads the text of one assembled record (its first line plus any
//! continuation lines joined with `\n`) and fills a [`Draft`]. They are hand-written
//! byte scanners, not regexes, because they run once per record on the hot path.
//! A parser that does not recognise its input returns `false` and the record falls
//! back to [`plain`], so malformed lines are kept, never dropped.

pub mod cpp;
pub mod event;
pub mod export_event;
pub mod json_log;
pub mod plain;
pub mod python;
pub mod ray_event;
pub mod serve;

use crate::classify::FileKind;
use crate::id::Id;
use crate::ids_in_text::IdKind;
use crate::record::{FieldValue, Fields, Ids, Level};
use crate::time::{Civil, EpochUnit, OutOfRange, Timestamp, Zone};

/// What a format parser extracts from one record.
#[derive(Debug, Default)]
pub struct Draft<'a> {
    pub timestamp: Option<Timestamp>,
    pub level: Option<Level>,
    pub message: &'a str,
    pub ids: Ids,
    pub pid: Option<u32>,
    pub task_name: Option<&'a str>,
    pub actor_name: Option<&'a str>,
    pub fields: Fields<'a>,
    /// A time written on the record was dropped because no [`Timestamp`] can hold
    /// it (see [`crate::time::OutOfRange`]).
    pub time_out_of_range: bool,
    /// Worker → actor links the record states outright (a Ray event naming an
    /// actor's worker), for the correlator; empty, so unallocated, for log lines.
    pub links: Vec<(Id, Id)>,
}

impl<'a> Draft<'a> {
    /// Takes the time a record writes as a civil time; one the zone cannot turn into
    /// a [`Timestamp`] (out of range) is dropped and flagged, never wrapped.
    pub fn civil_time(&mut self, zone: &Zone, civil: Civil) {
        match zone.to_utc(civil) {
            Some(t) => self.timestamp = Some(t),
            None => self.time_out_of_range = true,
        }
    }

    /// Takes a time written as a number of `unit`s since the epoch (quoted or not);
    /// text that is not a number is ignored, a number out of range is flagged.
    pub fn epoch_time(&mut self, raw: &str, unit: EpochUnit) {
        match Timestamp::parse_epoch(raw.trim_matches('"'), unit) {
            Some(Ok(t)) => self.timestamp = Some(t),
            Some(Err(OutOfRange)) => self.time_out_of_range = true,
            None => {}
        }
    }

    /// Notes under `fields` what the record lacks: the header its file's format
    /// has (`headerless`), or a time of its own it wrote out of range.
    pub fn flag_problems(&mut self, headerless: bool) {
        if headerless {
            self.fields.push("headerless", FieldValue::Json("true"));
        }
        if self.time_out_of_range && self.timestamp.is_none() {
            self.fields.push("time_out_of_range", FieldValue::Json("true"));
        }
    }

    /// Routes a structured `key=value` or JSON member: ids to their slots, known
    /// names to their fields, anything else to `fields`.
    pub fn put_pair(&mut self, key: &'a str, value: &'a str) {
        if let Some(kind) = IdKind::from_key(key) {
            if value.len() == kind.hex_len() {
                kind.store(&mut self.ids, Id::parse(value.as_bytes()));
                return;
            }
            if Id::parse(value.as_bytes()).is_none() && value.bytes().all(|c| c == b'f' || c == b'F') {
                return; // a nil id is absent, not a field
            }
        }
        if value.is_empty() {
            return; // an empty value says nothing; absent fields are omitted
        }
        match key {
            "task_name" => self.task_name = self.task_name.or(Some(value)),
            "actor_name" => self.actor_name = self.actor_name.or(Some(value)),
            "NIL_ID" => {}
            _ if value == "NIL_ID" => {}
            _ => self.fields.push(key, FieldValue::Str(value)),
        }
    }
}

/// The per-record format, chosen from the file kind and the record's first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineFormat {
    /// `[date L pid tid] (component) file.cc:N: msg` (C++ spdlog).
    Cpp,
    /// `date\tLEVEL file.py:N -- msg` (Python components, structured TEXT).
    Python,
    /// A JSON object from structured logging or C++ JSON logging.
    JsonLog,
    /// `events/*.log` JSON.
    Event,
    /// `export_events/*.log` JSON with base64 ids.
    ExportEvent,
    /// raylog's spool of Ray's exported events (`RayEvent`, base64 ids).
    RayEvent,
    /// Ray Serve's `LEVEL date time name replica [request] -- msg`.
    Serve,
    /// Anything else: the text is the message.
    Plain,
}

/// Index of the first ` -- ` (the separator after a Python source location).
///
/// Searched for via its dashes with `memchr`: `memmem::find` would build a searcher
/// per call, which costs more than the short search itself.
#[inline]
pub fn find_separator(b: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'-', b)
        .find(|&p| p > 0 && b[p - 1] == b' ' && b.get(p + 1) == Some(&b'-') && b.get(p + 2) == Some(&b' '))
        .map(|p| p - 1)
}

/// True when `b` starts with `YYYY-MM-DD HH:MM:SS`.
#[inline]
pub fn starts_with_date(b: &[u8]) -> bool {
    b.len() >= 19
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b' '
        && b[13] == b':'
        && b[0].is_ascii_digit()
        && b[3].is_ascii_digit()
        && b[11].is_ascii_digit()
}

/// True when `b` starts like a C++ header: `[YYYY-`.
#[inline]
pub fn starts_cpp_header(b: &[u8]) -> bool {
    b.len() > 6 && b[0] == b'[' && b[5] == b'-' && b[1].is_ascii_digit() && b[4].is_ascii_digit()
}

impl LineFormat {
    /// Picks the format for a record whose first line is `first`.
    #[inline]
    pub fn detect(kind: FileKind, first: &[u8]) -> LineFormat {
        match first.first() {
            Some(b'[') if starts_cpp_header(first) => LineFormat::Cpp,
            Some(b'{') => match kind {
                FileKind::Event => LineFormat::Event,
                FileKind::ExportEvent => LineFormat::ExportEvent,
                FileKind::RayEvent => LineFormat::RayEvent,
                _ => LineFormat::JsonLog,
            },
            Some(b'0'..=b'9') if starts_with_date(first) => LineFormat::Python,
            Some(b'A'..=b'Z') if kind == FileKind::Serve => LineFormat::Serve,
            _ => LineFormat::Plain,
        }
    }

    /// True when a line of this shape opens a new record in a headered file.
    #[inline]
    pub fn is_header(kind: FileKind, line: &[u8]) -> bool {
        match line.first() {
            Some(b'[') => starts_cpp_header(line),
            Some(b'{') => true,
            Some(b'0'..=b'9') => starts_with_date(line),
            Some(b'A'..=b'Z') if kind == FileKind::Serve => serve::is_header(line),
            _ => false,
        }
    }
}

/// The time a record whose first line is `line` would carry, without parsing the
/// rest of it: the fast path of the C++ header (the same checks as [`cpp::parse`]),
/// else a full parse of the line. `None` for lines without a time of their own.
pub fn line_time(kind: FileKind, line: &[u8], zone: &Zone) -> Option<Timestamp> {
    match LineFormat::detect(kind, line) {
        LineFormat::Cpp => cpp::header_time(line, zone),
        LineFormat::Plain => None,
        fmt => {
            let text = std::str::from_utf8(line).ok()?;
            let (mut scratch, mut d) = (String::new(), Draft::default());
            parse(fmt, text, &mut scratch, &ParseCtx { zone, kind }, &mut d);
            d.timestamp
        }
    }
}

/// Inputs a format parser may need besides the text.
pub struct ParseCtx<'s> {
    pub zone: &'s Zone,
    pub kind: FileKind,
}

/// Parses `text` (one record) in format `fmt` into `d`; falls back to plain text when
/// the specific parser does not recognise it. `scratch` receives decoded text when the
/// message has to be unescaped (JSON), and `d.message` may then point into it.
pub fn parse<'a>(fmt: LineFormat, text: &'a str, scratch: &'a mut String, cx: &ParseCtx<'_>, d: &mut Draft<'a>) {
    let ok = match fmt {
        LineFormat::Cpp => cpp::parse(text, scratch, cx, d),
        LineFormat::Python => python::parse(text, cx, d),
        LineFormat::Serve => serve::parse(text, cx, d),
        LineFormat::JsonLog => json_log::parse(text, scratch, cx, d),
        LineFormat::Event => event::parse(text, scratch, cx, d),
        LineFormat::ExportEvent => export_event::parse(text, scratch, d),
        LineFormat::RayEvent => ray_event::parse(text, scratch, d),
        LineFormat::Plain => false,
    };
    if !ok {
        *d = Draft::default();
        plain::parse(text, cx, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `line` as a record of a file of `kind`, flags included.
    fn draft(kind: FileKind, line: &str) -> (Option<Timestamp>, bool, String) {
        let (zone, mut scratch, mut d) = (Zone::Utc, String::new(), Draft::default());
        parse(LineFormat::detect(kind, line.as_bytes()), line, &mut scratch, &ParseCtx { zone: &zone, kind }, &mut d);
        d.flag_problems(false);
        let flagged = d.fields.get("time_out_of_range") == Some(FieldValue::Json("true"));
        (d.timestamp, flagged, d.message.to_string())
    }

    #[test]
    fn times_out_of_range_are_dropped_and_flagged_in_every_format() {
        // 2300-01-01 and 1600-01-01, as civil times and as epoch seconds.
        for (year, secs) in [("2300", "10413792000"), ("1600", "-11676096000")] {
            let ns = format!("{secs}000000000");
            let lines = [
                (FileKind::Cpp, format!("[{year}-01-01 00:00:00,000 I 1 1] (raylet) x.cc:1: far")),
                (FileKind::PythonComponent, format!("{year}-01-01 00:00:00,000\tINFO x.py:1 -- far")),
                (FileKind::Serve, format!("INFO {year}-01-01 00:00:00,000 app r1 -- far")),
                (FileKind::Worker, format!(r#"{{"asctime":"{year}-01-01 00:00:00,000","message":"far"}}"#)),
                (FileKind::Worker, format!(r#"{{"message":"far","timestamp_ns":{ns}}}"#)),
                (
                    FileKind::Cpp,
                    format!(r#"{{"asctime":"{year}-01-01 00:00:00,000","levelname":"I","message":"far"}}"#),
                ),
                (FileKind::Event, format!(r#"{{"message":"far","timestamp":{secs}}}"#)),
                (FileKind::Event, format!(r#"{{"message":"far","timestamp":"{secs}.5"}}"#)),
                (FileKind::Event, format!(r#"{{"message":"far","time_stamp":"{year}-01-01 00:00:00.000000"}}"#)),
                (FileKind::ExportEvent, format!(r#"{{"source_type":"far","timestamp":{secs}}}"#)),
            ];
            for (kind, line) in lines {
                let (ts, flagged, msg) = draft(kind, &line);
                assert_eq!((ts, flagged), (None, true), "{line}");
                assert!(msg.ends_with("far"), "the record is still parsed: {line} gave {msg:?}");
            }
        }
    }

    #[test]
    fn a_usable_time_beside_one_out_of_range_wins_without_a_flag() {
        let header = "2026-11-30 10:00:00,000\tINFO x.py:1 -- m job_id=01000000";
        let (ts, flagged, _) = draft(FileKind::Worker, &format!("{header} timestamp_ns=99999999999999999999"));
        assert_eq!((ts.map(|t| t.to_rfc3339()), flagged), (Some("2026-11-30T10:00:00.000Z".into()), false));
        let json = r#"{"asctime":"2300-01-01 00:00:00,000","message":"m","timestamp_ns":1796029536393944816}"#;
        let (ts, flagged, _) = draft(FileKind::Worker, json);
        assert_eq!((ts, flagged), (Some(Timestamp(1_796_029_536_393_944_816)), false));
    }

    #[test]
    fn separator_like_memmem() {
        for s in
            ["a.py:1 -- msg", " -- ", "x --- y -- z", "a -- b -- c", "--", " -", "a - - b", "a --b -- ", "", "- -- "]
        {
            assert_eq!(super::find_separator(s.as_bytes()), s.find(" -- "), "{s:?}");
        }
    }
}
