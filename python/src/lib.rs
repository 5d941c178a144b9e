//! `raylog._raylog`: the native half of the `raylog` Python package.
//!
//! Thin on purpose: everything it runs is the command line's own code, reached
//! through [`raylog::embed`] (parse as a stream of chunks, trace and health into
//! memory) and [`raylog::cli::main`] (the `raylog` command). The Python half
//! (`python/raylog/__init__.py`) turns chunks into dicts or pyarrow batches and
//! messages into exceptions and warnings. No call holds the GIL while it parses.

use std::sync::Mutex;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use raylog::embed::columns::{Bits, Column, Columns, Type, SCHEMA};
use raylog::embed::stream::{Chunk, Kind, Records, StartError};
use raylog::embed::{run_report, Query};

create_exception!(_raylog, RaylogError, PyException, "An input could not be read, or nothing matched.");

type Flags = Vec<(String, Option<String>)>;

/// Runs the `raylog` command line with `argv` (program name first) and returns its
/// exit code. The GIL is released for the whole run (`raylog ship` runs until a
/// signal).
/// `argv` comes as bytes (`os.fsencode`), so that a path that is not UTF-8 reaches
/// the command line as the binary would get it.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<Vec<u8>>) -> u8 {
    use std::os::unix::ffi::OsStringExt;
    let argv: Vec<std::ffi::OsString> = argv.into_iter().map(std::ffi::OsString::from_vec).collect();
    py.detach(|| raylog::cli::main(argv))
}

/// `raylog trace` or `raylog health` with `--format json`: (exit code, the JSON
/// text, stderr's lines).
#[pyfunction]
fn report(py: Python<'_>, command: &str, paths: Vec<String>, flags: Flags) -> PyResult<(u8, String, Vec<String>)> {
    let query = Query { flags, paths };
    let got = py.detach(|| run_report(command, &query)).map_err(|e| match e {
        StartError::Argument(_) => PyValueError::new_err(e.to_string()),
        e => RaylogError::new_err(e.to_string()),
    })?;
    Ok((got.code, String::from_utf8_lossy(&got.json).into_owned(), got.messages))
}

/// The inputs under `paths` that each parse on their own (a logs dir, an archive,
/// a file): `raylog.ray.read_logs` gives each a read task.
#[pyfunction]
fn read_units(py: Python<'_>, paths: Vec<std::path::PathBuf>) -> PyResult<Vec<String>> {
    py.detach(|| raylog::embed::read_units(&paths)).map_err(PyFileNotFoundError::new_err)
}

/// The columns' names and types, in order (`parse_arrow`'s schema).
#[pyfunction]
fn schema() -> Vec<(&'static str, &'static str)> {
    SCHEMA
        .iter()
        .map(|&(name, t)| {
            let t = match t {
                Type::TimestampNs => "timestamp_ns",
                Type::Bool => "bool",
                Type::Utf8 => "utf8",
                Type::UInt64 => "uint64",
                Type::UInt32 => "uint32",
            };
            (name, t)
        })
        .collect()
}

/// A running `raylog parse`: iterating yields chunks, NDJSON `bytes` or columns,
/// until the end; then [`Scan::end`] says what could not be read.
#[pyclass]
struct Scan {
    records: Mutex<Records>,
}

#[pymethods]
impl Scan {
    /// `kind` is "ndjson" or "columns"; `rows` bounds a chunk of columns.
    #[new]
    fn new(py: Python<'_>, paths: Vec<String>, flags: Flags, kind: &str, rows: usize) -> PyResult<Scan> {
        let kind = match kind {
            "ndjson" => Kind::Ndjson,
            "columns" => Kind::Columns(rows.max(1)),
            other => return Err(PyValueError::new_err(format!("kind {other:?}: give \"ndjson\" or \"columns\""))),
        };
        let query = Query { flags, paths };
        match py.detach(|| Records::start(&query, kind)) {
            Ok(records) => Ok(Scan { records: Mutex::new(records) }),
            Err(e @ StartError::Missing(_)) => Err(PyFileNotFoundError::new_err(e.to_string())),
            Err(e @ StartError::Argument(_)) => Err(PyValueError::new_err(e.to_string())),
            Err(e) => Err(RaylogError::new_err(e.to_string())),
        }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let chunk = py.detach(|| self.records.lock().expect("the scan's lock is not poisoned").next_chunk());
        match chunk {
            None => Ok(None),
            Some(Chunk::Ndjson(bytes)) => Ok(Some(PyBytes::new(py, &bytes).into_any())),
            Some(Chunk::Columns(c)) => columns(py, &c).map(|t| Some(t.into_any())),
        }
    }

    /// After the last chunk: {"failures": [(path, why)], "warnings": [...],
    /// "files": n, "written": n}; None before.
    fn end<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let records = self.records.lock().expect("the scan's lock is not poisoned");
        let Some(end) = records.end() else { return Ok(None) };
        let d = PyDict::new(py);
        d.set_item("failures", end.failures.clone())?;
        d.set_item("warnings", end.warnings.clone())?;
        d.set_item("files", end.files)?;
        d.set_item("written", end.written)?;
        Ok(Some(d))
    }
}

/// (rows, [per column: (null count, validity or None, buffer, buffer or None)]), as
/// `pyarrow.Array.from_buffers` takes them.
fn columns<'py>(py: Python<'py>, c: &Columns) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = |b: &[u8]| PyBytes::new(py, b).into_any();
    let valid = |v: &Bits| if v.zeros == 0 { py.None().into_bound(py) } else { bytes(&v.bytes) };
    let list = PyList::empty(py);
    for col in &c.columns {
        let t = match col {
            Column::Utf8 { valid: v, offsets, data } => {
                let offsets: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
                (v.zeros, valid(v), bytes(&offsets), bytes(data))
            }
            Column::Wide { valid: v, values } => {
                let values: Vec<u8> = values.iter().flat_map(|o| o.to_le_bytes()).collect();
                (v.zeros, valid(v), bytes(&values), py.None().into_bound(py))
            }
            Column::Narrow { valid: v, values } => {
                let values: Vec<u8> = values.iter().flat_map(|o| o.to_le_bytes()).collect();
                (v.zeros, valid(v), bytes(&values), py.None().into_bound(py))
            }
            Column::Bool(b) => (0, py.None().into_bound(py), bytes(&b.bytes), py.None().into_bound(py)),
        };
        list.append(t)?;
    }
    PyTuple::new(py, [c.len().into_pyobject(py)?.into_any(), list.into_any()])
}

#[pymodule]
fn _raylog(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RaylogError", m.py().get_type::<RaylogError>())?;
    // PEP 440's version, and the whole of `raylog --version` (with the commit).
    m.add("__version__", raylog::cli::VERSION.split(' ').next().unwrap_or_default())?;
    m.add("__build__", raylog::cli::VERSION)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(schema, m)?)?;
    m.add_function(wrap_pyfunction!(read_units, m)?)?;
    m.add_class::<Scan>()?;
    Ok(())
}
