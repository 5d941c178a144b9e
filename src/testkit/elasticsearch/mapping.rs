//! The test server's dynamic mapping: the first value seen decides a field's type,
//! and a later value that does not fit fails its item, as in Elasticsearch.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Elasticsearch's dynamic field types, as far as conflicts go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldType {
    Long,
    Float,
    Boolean,
    Text,
    Date,
    Object,
}

/// The document as an object, with a data stream's `@timestamp` checked.
pub(super) fn parse_source(source: &[u8], id: &str, ds: bool) -> Result<Map<String, Value>, (&'static str, String)> {
    let v: Value = serde_json::from_slice(source)
        .map_err(|e| ("document_parsing_exception", format!("[1:1] failed to parse: {e}")))?;
    let Value::Object(obj) = v else {
        return Err(("mapper_parsing_exception", "failed to parse, document is not a JSON object".into()));
    };
    if ds {
        match obj.get("@timestamp") {
            None => {
                return Err((
                    "document_parsing_exception",
                    "data stream timestamp field [@timestamp] is missing".into(),
                ))
            }
            Some(t) if !is_date(t) => {
                let reason = format!("[1:15] failed to parse field [@timestamp] of type [date] in document with id '{id}'. Preview of field's value: '{t}'");
                return Err(("document_parsing_exception", reason));
            }
            Some(_) => {}
        }
    }
    Ok(obj)
}

/// Dates as `strict_date_optional_time||epoch_millis` reads them.
fn is_date(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_i64() || n.is_u64(),
        Value::String(s) => {
            s.parse::<jiff::Timestamp>().is_ok()
                || s.parse::<jiff::civil::DateTime>().is_ok()
                || s.parse::<jiff::civil::Date>().is_ok()
        }
        _ => false,
    }
}

/// Checks a document against an index's mapping, collecting new fields in `added`
/// (dynamic mapping: the first value seen decides a field's type).
pub(super) struct Checker<'a> {
    pub(super) mapping: &'a HashMap<String, FieldType>,
    pub(super) added: Vec<(String, FieldType)>,
    pub(super) id: &'a str,
}

impl Checker<'_> {
    pub(super) fn object(&mut self, prefix: &str, obj: &Map<String, Value>) -> Result<(), String> {
        for (k, v) in obj {
            let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            self.value(&path, v)?;
        }
        Ok(())
    }

    fn value(&mut self, path: &str, v: &Value) -> Result<(), String> {
        let added = self.added.iter().find(|(p, _)| p == path).map(|(_, t)| t);
        let known = self.mapping.get(path).or(added).copied();
        match (v, known) {
            (Value::Null, _) => Ok(()),
            (Value::Array(a), _) => a.iter().try_for_each(|x| self.value(path, x)),
            (Value::Object(o), None | Some(FieldType::Object)) => {
                if known.is_none() {
                    self.added.push((path.to_string(), FieldType::Object));
                }
                self.object(path, o)
            }
            (_, Some(FieldType::Object)) => Err(format!(
                "[1:2] object mapping for [{path}] tried to parse field [{path}] as object, but found a concrete value"
            )),
            (_, None) => {
                self.added.push((path.to_string(), dynamic_type(path, v)));
                Ok(())
            }
            (_, Some(t)) if fits(t, v) => Ok(()),
            (_, Some(t)) => Err(format!(
                "[1:2] failed to parse field [{path}] of type [{}] in document with id '{}'. Preview of field's value: '{}'",
                format!("{t:?}").to_lowercase(),
                self.id,
                v.as_str().map_or_else(|| v.to_string(), str::to_string)
            )),
        }
    }
}

fn dynamic_type(path: &str, v: &Value) -> FieldType {
    match v {
        Value::Bool(_) => FieldType::Boolean,
        Value::Number(n) if n.is_f64() => FieldType::Float,
        Value::Number(_) => FieldType::Long,
        _ if path == "@timestamp" => FieldType::Date,
        _ => FieldType::Text,
    }
}

/// Whether `v` can be indexed into a field of type `t` (with Elasticsearch's coercion).
fn fits(t: FieldType, v: &Value) -> bool {
    match (t, v) {
        (FieldType::Text, Value::Object(_)) => false,
        (FieldType::Text, _) => true,
        (FieldType::Long | FieldType::Float, Value::Number(_)) => true,
        (FieldType::Long | FieldType::Float, Value::String(s)) => s.trim().parse::<f64>().is_ok(),
        (FieldType::Boolean, Value::Bool(_)) => true,
        (FieldType::Boolean, Value::String(s)) => matches!(s.as_str(), "true" | "false" | ""),
        (FieldType::Date, _) => is_date(v),
        _ => false,
    }
}
