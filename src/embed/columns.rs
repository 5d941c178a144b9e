//! Records as Arrow columns, built as raw Arrow buffers (validity bitmaps, offsets,
//! values) so that the Python side wraps them with `pyarrow.Array.from_buffers`
//! without touching a value: no Arrow crate, and no Python object per field.
//!
//! The schema is fixed ([`SCHEMA`]): one column per field of the NDJSON record, in
//! its order. Ids and names are strings, `timestamp` is nanoseconds since the epoch
//! (`timestamp[ns, UTC]`), the flags are booleans (false where the NDJSON omits
//! them), `fields` is its JSON object as a string. A field the NDJSON omits is null.

use raylog_parsers::id::Id;
use raylog_parsers::ndjson::write_fields_object;
use raylog_parsers::Record;

/// A chunk is sent once its strings hold this many bytes: 32-bit offsets are
/// Arrow's `string` type, and chunks stay small enough to convert quickly.
pub const MAX_BYTES: usize = 64 << 20;

/// The type of a column, as the Python side names it for pyarrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    TimestampNs,
    Bool,
    Utf8,
    UInt64,
    UInt32,
}

/// `(name, type)` of every column, in order.
pub const SCHEMA: &[(&str, Type)] = &[
    ("timestamp", Type::TimestampNs),
    ("timestamp_inferred", Type::Bool),
    ("timestamp_estimated", Type::Bool),
    ("level", Type::Utf8),
    ("message", Type::Utf8),
    ("component", Type::Utf8),
    ("stream", Type::Utf8),
    ("file", Type::Utf8),
    ("offset", Type::UInt64),
    ("session", Type::Utf8),
    ("submission_id", Type::Utf8),
    ("node_id", Type::Utf8),
    ("job_id", Type::Utf8),
    ("worker_id", Type::Utf8),
    ("actor_id", Type::Utf8),
    ("task_id", Type::Utf8),
    ("task_attempt", Type::UInt32),
    ("pid", Type::UInt32),
    ("task_name", Type::Utf8),
    ("actor_name", Type::Utf8),
    ("fields", Type::Utf8),
    ("truncated", Type::Bool),
];

/// A validity (or boolean) bitmap, least significant bit first, as Arrow lays it.
#[derive(Debug, Default)]
pub struct Bits {
    pub bytes: Vec<u8>,
    pub len: usize,
    /// Bits that are 0: a validity bitmap's null count.
    pub zeros: usize,
}

impl Bits {
    fn push(&mut self, bit: bool) {
        if self.len % 8 == 0 {
            self.bytes.push(0);
        }
        if bit {
            *self.bytes.last_mut().expect("a byte was pushed") |= 1 << (self.len % 8);
        } else {
            self.zeros += 1;
        }
        self.len += 1;
    }
}

/// One column's buffers.
#[derive(Debug)]
pub enum Column {
    /// Validity, `len + 1` offsets, the UTF-8 bytes.
    Utf8 { valid: Bits, offsets: Vec<i32>, data: Vec<u8> },
    /// Validity and little-endian values, 8 bytes each (u64, or i64 nanoseconds).
    Wide { valid: Bits, values: Vec<u64> },
    /// Validity and u32 values.
    Narrow { valid: Bits, values: Vec<u32> },
    /// Values only: never null.
    Bool(Bits),
}

impl Column {
    fn new(t: Type, rows: usize) -> Column {
        match t {
            Type::Utf8 => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                Column::Utf8 { valid: Bits::default(), offsets, data: Vec::new() }
            }
            Type::TimestampNs | Type::UInt64 => {
                Column::Wide { valid: Bits::default(), values: Vec::with_capacity(rows) }
            }
            Type::UInt32 => Column::Narrow { valid: Bits::default(), values: Vec::with_capacity(rows) },
            Type::Bool => Column::Bool(Bits::default()),
        }
    }

    fn str(&mut self, v: Option<&[u8]>) {
        let Column::Utf8 { valid, offsets, data } = self else { unreachable!("a string column") };
        valid.push(v.is_some());
        data.extend_from_slice(v.unwrap_or_default());
        offsets.push(i32::try_from(data.len()).expect("a chunk is cut at MAX_BYTES, far below 2 GiB"));
    }

    fn id(&mut self, v: &Option<Id>) {
        self.str(v.as_ref().map(|i| i.as_str().as_bytes()))
    }

    fn wide(&mut self, v: Option<u64>) {
        let Column::Wide { valid, values } = self else { unreachable!("a 64-bit column") };
        valid.push(v.is_some());
        values.push(v.unwrap_or_default());
    }

    fn narrow(&mut self, v: Option<u32>) {
        let Column::Narrow { valid, values } = self else { unreachable!("a 32-bit column") };
        valid.push(v.is_some());
        values.push(v.unwrap_or_default());
    }

    fn bool(&mut self, v: bool) {
        let Column::Bool(bits) = self else { unreachable!("a boolean column") };
        bits.push(v);
    }
}

/// Rows of records, column by column, in [`SCHEMA`]'s order.
#[derive(Debug)]
pub struct Columns {
    pub columns: Vec<Column>,
    rows: usize,
    /// Scratch for the `fields` JSON of one record.
    fields: Vec<u8>,
}

impl Columns {
    pub fn with_capacity(rows: usize) -> Columns {
        let columns = SCHEMA.iter().map(|&(_, t)| Column::new(t, rows)).collect();
        Columns { columns, rows: 0, fields: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Bytes held by the string columns (what [`MAX_BYTES`] bounds).
    pub fn bytes(&self) -> usize {
        self.columns.iter().map(|c| if let Column::Utf8 { data, .. } = c { data.len() } else { 0 }).sum()
    }

    /// Appends one record: the same values as its NDJSON line.
    pub fn push(&mut self, r: &Record<'_>) {
        let f = r.file;
        let ids = r.ids;
        let c = &mut self.columns;
        // Times before 1970 are negative nanoseconds: the same i64 bits.
        c[0].wide(r.timestamp.map(|t| t.0 as u64));
        c[1].bool(r.timestamp_inferred);
        c[2].bool(r.timestamp_estimated);
        c[3].str(r.level.map(|l| l.as_str().as_bytes()));
        c[4].str(Some(r.message.as_bytes()));
        c[5].str(Some(f.component.as_bytes()));
        c[6].str(f.stream.map(|s| s.as_str().as_bytes()));
        c[7].str(Some(f.rel_path.as_bytes()));
        c[8].wide(Some(r.offset));
        c[9].str(f.session.as_deref().map(str::as_bytes));
        c[10].str(f.submission_id.as_deref().map(str::as_bytes));
        c[11].id(&ids.node_id);
        c[12].id(&ids.job_id);
        c[13].id(&ids.worker_id);
        c[14].id(&ids.actor_id);
        c[15].id(&ids.task_id);
        c[16].narrow(ids.task_attempt);
        c[17].narrow(r.pid);
        c[18].str(r.task_name.map(str::as_bytes));
        c[19].str(r.actor_name.map(str::as_bytes));
        if r.fields.is_empty() {
            c[20].str(None);
        } else {
            self.fields.clear();
            write_fields_object(&mut self.fields, r.fields);
            c[20].str(Some(&self.fields));
        }
        c[21].bool(r.truncated);
        self.rows += 1;
    }
}
