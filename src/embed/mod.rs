//! raylog as a library for a caller that embeds it: the Python module
//! (`python/`, `import raylog`) runs `parse`, `trace` and `health` through here, on
//! the same code as the command line and with the command line's own flags.
//!
//! A query is written as the subcommand's arguments ([`Query::parse_args`]): the
//! caller's keyword `actor_id="…"` becomes `--actor-id=…`, so every filter means,
//! validates and fails exactly as it does in a shell, and a new flag needs no code
//! here. [`stream`] parses on a thread of its own and hands records over in bounded
//! chunks, as NDJSON ([`stream::Kind::Ndjson`]) or as Arrow columns
//! ([`columns`]); [`run_report`] runs `trace` or `health` into memory.

pub mod columns;
pub mod stream;

pub use stream::StartError;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Command};

/// A subcommand's arguments, as a caller passed them: `(flag, value)` pairs without
/// the leading `--`, then the input paths.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub flags: Vec<(String, Option<String>)>,
    pub paths: Vec<String>,
}

impl Query {
    /// The command line `raylog <sub> --flag=value … -- paths…`, parsed by clap.
    /// Errors are clap's message with the flags spelt as the caller's keywords.
    pub fn parse_args(&self, sub: &str) -> Result<Command, String> {
        let mut argv = vec!["raylog".to_string(), sub.to_string()];
        for (flag, value) in &self.flags {
            // `--flag=value`: a value that starts with `-` (a regex, an offset) stays a value.
            let flag = flag.replace('_', "-");
            argv.push(match value {
                Some(v) => format!("--{flag}={v}"),
                None => format!("--{flag}"),
            });
        }
        argv.push("--".into());
        argv.extend(self.paths.iter().cloned());
        match Cli::try_parse_from(&argv) {
            Ok(cli) => Ok(cli.command),
            Err(e) => Err(keyword_names(&e.render().to_string())),
        }
    }
}

/// `--actor-id` → `actor_id` in a message meant for a caller of the Python API,
/// and clap's usage lines (which name the command line) dropped.
pub fn keyword_names(msg: &str) -> String {
    let first = msg.lines().take_while(|l| !l.trim_start().starts_with("Usage:")).collect::<Vec<_>>().join("\n");
    let mut out = String::with_capacity(first.len());
    let mut rest = first.trim_end().trim_start_matches("error: ");
    while let Some(i) = rest.find("--") {
        out.push_str(&rest[..i]);
        let flag = &rest[i + 2..];
        let end = flag.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(flag.len());
        out.push_str(&flag[..end].replace('-', "_"));
        rest = &flag[end..];
    }
    out.push_str(rest);
    out
}

/// What `trace` or `health` printed with `--format json`, and what it said on
/// stderr, one message per line (`raylog: error: …`, `raylog: warning: …`).
#[derive(Debug)]
pub struct Report {
    pub code: u8,
    pub json: Vec<u8>,
    pub messages: Vec<String>,
}

/// Runs `trace` or `health` with `--format json`, into memory. A keyword clap
/// rejects is an [`StartError::Argument`]; what the command itself fails on
/// (an ambiguous id, a bad time) is [`StartError::Other`], in its words.
pub fn run_report(sub: &str, query: &Query) -> Result<Report, StartError> {
    let mut q = query.clone();
    q.flags.push(("format".into(), Some("json".into())));
    let cmd = q.parse_args(sub).map_err(StartError::Argument)?;
    let other = |e: anyhow::Error| StartError::Other(keyword_names(&format!("{e:#}")));
    let (mut json, mut err) = (Vec::new(), Vec::new());
    let code = match cmd {
        Command::Trace(mut a) => {
            let _fetched = crate::cli::remote::localize(&mut a.input.paths).map_err(other)?;
            crate::cli::trace::run_to(a, false, &mut json, &mut err)
        }
        Command::Health(mut a) => {
            let _fetched = crate::cli::remote::localize(&mut a.input.paths).map_err(other)?;
            crate::cli::health::run_to(a, &mut json, &mut err)
        }
        _ => return Err(StartError::Argument(format!("{sub}: not a report"))),
    }
    .map_err(other)?;
    let messages = String::from_utf8_lossy(&err).lines().map(str::to_string).collect();
    Ok(Report { code, json, messages })
}

/// The inputs under `paths` that parse on their own, for a reader that gives each
/// to a task of its own (`raylog.ray.read_logs`): every logs dir (one session of one
/// node: the ids `parse` learns across a node's files are all in it), every archive
/// outside those, and every single file given. A path that holds raylog's event
/// spool stays whole: its task events tag the prints of the logs beside it.
pub fn read_units(paths: &[std::path::PathBuf]) -> Result<Vec<String>, String> {
    let mut units = Vec::new();
    for p in paths {
        let d = crate::discover::discover(std::slice::from_ref(p));
        if let Some((path, why)) = d.failures.first() {
            return Err(format!("{path}: {why}"));
        }
        let spool = d.files.iter().any(|f| f.rel.starts_with("ray_events-") && f.rel.ends_with(".ndjson"));
        if !p.is_dir() || spool {
            // As `discover` reads a path given twice once.
            units.push(p.canonicalize().unwrap_or_else(|_| p.clone()).display().to_string());
            continue;
        }
        let dirs: Vec<&str> = d
            .dirs
            .iter()
            .enumerate()
            .filter(|(i, _)| d.files.iter().any(|f| f.dir == *i))
            .map(|(_, dir)| dir.label.as_str())
            .collect();
        units.extend(dirs.iter().map(|s| s.to_string()));
        let covered = |a: &std::path::Path| dirs.iter().any(|dir| a.starts_with(dir));
        units.extend(d.archives.iter().filter(|a| !covered(&a.path)).map(|a| a.path.display().to_string()));
    }
    let mut seen = std::collections::HashSet::new();
    units.retain(|u| seen.insert(u.clone()));
    Ok(units)
}

#[cfg(test)]
mod tests;
