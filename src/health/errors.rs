//! The report's `top_errors`: ERROR and FATAL records counted by message template
//! ([`super::template`]), per component, with the first example and the first and
//! last times. A template is made once per error (on a parse worker when there are
//! several threads) and looked up once; its entry is made the first time it is seen.

use std::collections::{BTreeMap, HashMap};

use raylog_parsers::id::IdMapState;
use raylog_parsers::{Record, Timestamp};
use serde::Serialize;

use super::template::template;

/// How many `top_errors` templates are kept.
pub const TOP_ERRORS: usize = 20;

/// One ERROR/FATAL message template.
#[derive(Debug, Serialize)]
pub struct ErrorTemplate {
    pub template: String,
    pub count: u64,
    pub components: BTreeMap<String, u64>,
    pub example: String,
    pub first: Option<String>,
    pub last: Option<String>,
}

/// One template's errors so far.
struct Acc {
    count: u64,
    components: BTreeMap<String, u64>,
    example: String,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
}

impl Acc {
    fn count(&mut self, r: &Record<'_>) {
        self.count += 1;
        // A template's errors come from a few components: each key is made once.
        match self.components.get_mut(r.component()) {
            Some(n) => *n += 1,
            None => drop(self.components.insert(r.component().to_string(), 1)),
        }
        self.first = self.first.min(r.timestamp).or(self.first).or(r.timestamp);
        self.last = self.last.max(r.timestamp);
    }
}

/// The error records of a scan, by template.
#[derive(Default)]
pub struct Errors {
    templates: HashMap<String, Acc, IdMapState>,
    /// Every error record, whatever its template.
    records: u64,
}

impl Errors {
    /// Counts error record `r`, under `known` when its template was made already.
    pub fn add(&mut self, r: &Record<'_>, known: Option<&str>) {
        self.records += 1;
        let made;
        let key = match known {
            Some(k) => k,
            None => {
                made = template(r.message);
                &made
            }
        };
        if let Some(acc) = self.templates.get_mut(key) {
            return acc.count(r);
        }
        let example = crate::trace::facts::short(r.message, 240);
        let mut acc = Acc { count: 0, components: BTreeMap::new(), example, first: r.timestamp, last: r.timestamp };
        acc.count(r);
        self.templates.insert(key.to_string(), acc);
    }

    /// How many error records were counted.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The [`TOP_ERRORS`] most frequent templates (then the earliest, then by text).
    pub fn top(self) -> Vec<ErrorTemplate> {
        let mut v: Vec<ErrorTemplate> = self
            .templates
            .into_iter()
            .map(|(template, a)| ErrorTemplate {
                template,
                count: a.count,
                components: a.components,
                example: a.example,
                first: a.first.map(|t| t.to_rfc3339()),
                last: a.last.map(|t| t.to_rfc3339()),
            })
            .collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then(a.first.cmp(&b.first)).then(a.template.cmp(&b.template)));
        v.truncate(TOP_ERRORS);
        v
    }
}
