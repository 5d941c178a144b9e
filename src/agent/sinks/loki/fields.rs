//! The record fields Loki labels and structured metadata are made of, read from a
//! batch entry without copying.

use crate::agent::batch::{Batch, BatchRecord, IdField, Span};

/// A record field a label template (`{component}`…) or structured metadata uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Component,
    Level,
    Node,
    Cluster,
    ServiceName,
    Stream,
    Session,
    File,
    Pid,
    TaskAttempt,
    /// The trace and `run` span a task's print joins (see
    /// [`crate::agent::traces::span::record_ids`]): computed, for records with an attempt.
    TraceId,
    SpanId,
    TaskName,
    ActorName,
    SubmissionId,
    Id(IdField),
}

impl Field {
    /// The field a name in `TEMPLATE_FIELDS` or `METADATA_FIELDS` means.
    pub fn parse(name: &str) -> Option<Field> {
        if let Some(id) = IdField::ALL.into_iter().find(|f| f.name() == name) {
            return Some(Field::Id(id));
        }
        Some(match name {
            "component" => Field::Component,
            "level" => Field::Level,
            "node" => Field::Node,
            "cluster" => Field::Cluster,
            "service_name" => Field::ServiceName,
            "stream" => Field::Stream,
            "session" => Field::Session,
            "file" => Field::File,
            "pid" => Field::Pid,
            "task_attempt" => Field::TaskAttempt,
            "trace_id" => Field::TraceId,
            "span_id" => Field::SpanId,
            "task_name" => Field::TaskName,
            "actor_name" => Field::ActorName,
            "submission_id" => Field::SubmissionId,
            _ => return None,
        })
    }

    /// The value for `e`; empty when the record has none. `num` holds a number's
    /// digits or an id's hex.
    pub fn value<'b>(self, batch: &'b Batch, e: &BatchRecord, num: &'b mut [u8; 32]) -> &'b str {
        let digits = |num: &'b mut [u8; 32], v: u64| {
            let (d, _) = num.split_at_mut(20);
            // Digits are UTF-8.
            std::str::from_utf8(format_u64(d.try_into().unwrap_or_else(|_| unreachable!()), v)).unwrap_or("")
        };
        match self {
            Field::Pid => e.pid.map_or("", |p| digits(num, p as u64)),
            Field::TaskAttempt => e.task_attempt.map_or("", |a| digits(num, a as u64)),
            Field::TraceId | Field::SpanId => {
                use crate::agent::traces::span::{hex_into, job_of_task, span_id, trace_id, Kind};
                let (Some(task), Some(a)) = (batch.id(e, IdField::Task), e.task_attempt) else { return "" };
                // Each of the two ids `record_ids` gives, hashed only when asked for.
                match self {
                    Field::TraceId => hex_into(&trace_id(job_of_task(task).unwrap_or("")), num),
                    _ => hex_into(&span_id(task, a, Kind::Run), num),
                }
            }
            f => f.text(batch, e),
        }
    }

    /// The value of a field that is not a number (empty for `pid` and `task_attempt`).
    pub fn text<'b>(self, batch: &'b Batch, e: &BatchRecord) -> &'b str {
        match self {
            Field::Component => batch.str(e.component),
            Field::Level => e.level.map_or("", |l| l.as_str()),
            Field::Node => &batch.node.name,
            Field::Cluster => batch.node.cluster.as_deref().unwrap_or(""),
            Field::ServiceName => "ray",
            Field::Stream => e.stream.map_or("", |s| s.as_str()),
            Field::Session => batch.str(e.session),
            Field::File => batch.str(e.file),
            Field::Pid | Field::TaskAttempt | Field::TraceId | Field::SpanId => "",
            Field::TaskName => batch.str(e.task_name),
            Field::ActorName => batch.str(e.actor_name),
            Field::SubmissionId => batch.str(e.submission_id),
            Field::Id(id) => batch.id(e, id).unwrap_or(""),
        }
    }

    /// The span holding the value, for fields kept in the batch's text arena.
    fn span(self, e: &BatchRecord) -> Option<Span> {
        Some(match self {
            Field::Component => e.component,
            Field::Session => e.session,
            Field::File => e.file,
            Field::TaskName => e.task_name,
            Field::ActorName => e.actor_name,
            Field::SubmissionId => e.submission_id,
            Field::Id(id) => e.ids[id as usize],
            _ => return None,
        })
    }

    /// Whether `a` and `b` have the same value. Records of one file share the spans
    /// of its fields, so equal spans settle it without comparing bytes.
    pub fn same(self, batch: &Batch, a: &BatchRecord, b: &BatchRecord) -> bool {
        match self {
            Field::Level => a.level == b.level,
            Field::Stream => a.stream == b.stream,
            Field::Pid => a.pid == b.pid,
            Field::TaskAttempt => a.task_attempt == b.task_attempt,
            Field::TraceId | Field::SpanId => {
                a.task_attempt == b.task_attempt && Field::Id(IdField::Task).same(batch, a, b)
            }
            Field::Node | Field::Cluster | Field::ServiceName => true,
            // Every other field lives in the text arena.
            _ => self.span(a) == self.span(b) || self.text(batch, a) == self.text(batch, b),
        }
    }

    /// Its place in [`text_spans`], for a field kept in the batch's text arena.
    pub fn text_slot(self) -> Option<usize> {
        Some(match self {
            Field::Id(id) => id as usize,
            Field::Component => 5,
            Field::File => 6,
            Field::Session => 7,
            Field::SubmissionId => 8,
            Field::TaskName => 9,
            Field::ActorName => 10,
            _ => return None,
        })
    }

    /// Whether the value can differ between entries of one batch.
    pub fn per_entry(self) -> bool {
        !matches!(self, Field::Node | Field::Cluster | Field::ServiceName)
    }
}

/// The spans of `e`'s fields kept in the text arena, side by side: a field's value is
/// then an index away ([`Field::text_slot`]) rather than a `match` (the Loki
/// encoder reads about ten per entry).
#[inline]
pub fn text_spans(e: &BatchRecord) -> [Span; 11] {
    let [n, j, w, a, t] = e.ids;
    [n, j, w, a, t, e.component, e.file, e.session, e.submission_id, e.task_name, e.actor_name]
}

/// Decimal digits of `v` in `buf`.
pub fn format_u64(buf: &mut [u8; 20], mut v: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}
