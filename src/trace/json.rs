//! A small JSON value for the trace summary, and its writer.
//!
//! Not `serde_json::Value`: the trace's golden files need a layout serde_json does not
//! offer (objects whose members are all short scalars on one line, the rest one
//! member per line, so golden files diff line by line), and member order as built.
//! The summary is small and built once, so a tiny tree suffices. Absent values are
//! left out, never `null`, as in the record schema. Strings are escaped by the same
//! writer as the records (`raylog_parsers::ndjson::write_str`).

use raylog_parsers::ndjson::write_str;
use raylog_parsers::{Id, Timestamp};

/// A JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Bool(bool),
    Num(u64),
    Str(String),
    Arr(Vec<J>),
    Obj(Obj),
    /// Already-serialised JSON (records), written as is.
    Raw(String),
}

/// An object under construction; members keep insertion order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Obj(Vec<(String, J)>);

impl Obj {
    pub fn new() -> Obj {
        Obj::default()
    }

    /// Adds a member.
    pub fn set(&mut self, key: &str, v: J) -> &mut Obj {
        self.0.push((key.to_string(), v));
        self
    }

    /// Adds a member when the value is present.
    pub fn opt(&mut self, key: &str, v: Option<J>) -> &mut Obj {
        if let Some(v) = v {
            self.set(key, v);
        }
        self
    }

    pub fn str(&mut self, key: &str, v: Option<&str>) -> &mut Obj {
        self.opt(key, v.map(|s| J::Str(s.to_string())))
    }

    pub fn id(&mut self, key: &str, v: Option<Id>) -> &mut Obj {
        self.opt(key, v.map(|i| J::Str(i.as_str().to_string())))
    }

    pub fn time(&mut self, key: &str, v: Option<Timestamp>) -> &mut Obj {
        self.opt(key, v.map(|t| J::Str(t.to_rfc3339())))
    }

    pub fn num(&mut self, key: &str, v: Option<u64>) -> &mut Obj {
        self.opt(key, v.map(J::Num))
    }

    pub fn done(&mut self) -> J {
        J::Obj(std::mem::take(self))
    }
}

fn esc(out: &mut String, s: &str) {
    let mut v = Vec::with_capacity(s.len() + 2);
    write_str(&mut v, s);
    out.push_str(&String::from_utf8_lossy(&v));
}

impl J {
    fn is_scalar(&self) -> bool {
        matches!(self, J::Bool(_) | J::Num(_) | J::Str(_))
    }

    /// Writes compactly (no whitespace).
    pub fn write_compact(&self, out: &mut String) {
        match self {
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Num(n) => out.push_str(&n.to_string()),
            J::Str(s) => esc(out, s),
            J::Raw(r) => out.push_str(r),
            J::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_compact(out);
                }
                out.push(']');
            }
            J::Obj(Obj(members)) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    esc(out, k);
                    out.push(':');
                    v.write_compact(out);
                }
                out.push('}');
            }
        }
    }

    /// Writes with two-space indentation; small flat objects and raw values stay on
    /// one line.
    pub fn write_pretty(&self, out: &mut String, indent: usize) {
        let inline = match self {
            J::Obj(Obj(m)) => m.iter().all(|(_, v)| v.is_scalar()) && self.compact_len() <= 100,
            J::Arr(items) => items.is_empty(),
            _ => true,
        };
        if inline {
            return self.write_compact(out);
        }
        let pad = "  ".repeat(indent + 1);
        let (open, close) = if matches!(self, J::Arr(_)) { ('[', ']') } else { ('{', '}') };
        out.push(open);
        let mut first = true;
        let mut item = |out: &mut String, key: Option<&str>, v: &J| {
            out.push_str(if first { "\n" } else { ",\n" });
            first = false;
            out.push_str(&pad);
            if let Some(k) = key {
                esc(out, k);
                out.push_str(": ");
            }
            v.write_pretty(out, indent + 1);
        };
        match self {
            J::Arr(items) => items.iter().for_each(|v| item(out, None, v)),
            J::Obj(Obj(m)) => m.iter().for_each(|(k, v)| item(out, Some(k), v)),
            _ => {}
        }
        out.push('\n');
        out.push_str(&"  ".repeat(indent));
        out.push(close);
    }

    fn compact_len(&self) -> usize {
        let mut s = String::new();
        self.write_compact(&mut s);
        s.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_and_compact() {
        let inner = Obj::new().str("a", Some("x\"y")).num("n", Some(3)).str("gone", None).done();
        let j = Obj::new().set("inner", inner).set("list", J::Arr(vec![J::Bool(true)])).done();
        let mut s = String::new();
        j.write_pretty(&mut s, 0);
        assert_eq!(s, "{\n  \"inner\": {\"a\":\"x\\\"y\",\"n\":3},\n  \"list\": [\n    true\n  ]\n}");
        let mut c = String::new();
        j.write_compact(&mut c);
        assert_eq!(c, r#"{"inner":{"a":"x\"y","n":3},"list":[true]}"#);
    }
}
