//! Facts read out of message text: how a worker exited, what GCS said about an
//! actor's death, which state it reached, which attempt a task record belongs to.
//!
//! Ray states these things in prose that changed between versions (2.9 writes ids
//! before the verb, 2.4x+ appends `key=value` pairs, events say `Worker exit type:`),
//! so each reader accepts every wording seen in the fixtures. They run only on the
//! records of one trace, after the scan, so plain regexes are fast enough behind a
//! literal search that turns away most messages.

use std::sync::{LazyLock, OnceLock};

use memchr::memmem::Finder;

use regex::Regex;

/// How strongly a source speaks for a worker's exit: GCS's verdict beats the event
/// RAY_WORKER_FAILURE, which beats what the worker said about itself while exiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitSource {
    Gcs,
    Event,
    Disconnect,
    Intent,
}

/// One statement about how a worker exited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitFact {
    pub source: ExitSource,
    pub exit_type: Option<String>,
    pub detail: Option<String>,
}

/// A constant pattern compiled once (the unit tests compile every one of them).
fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("constant regex is valid"))
}

/// Text after `label` up to the end, with Ray's trailing context cut off: the
/// `, has creation_task_exception…` tail and ` key=value` pairs.
fn detail_after<'a>(msg: &'a str, label: &str) -> Option<&'a str> {
    let start = msg.find(label)? + label.len();
    let mut d = &msg[start..];
    for tail in [", has creation_task_exception", " (timeout: "] {
        if let Some(i) = d.find(tail) {
            d = &d[..i];
        }
    }
    while let Some(i) = d.trim_end().rfind(' ') {
        let last = d.trim_end()[i + 1..].to_string();
        let is_pair = last
            .split_once('=')
            .is_some_and(|(k, _)| !k.is_empty() && k.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'));
        if !is_pair {
            break;
        }
        d = &d[..i];
    }
    let d = d.trim().trim_end_matches(',');
    (!d.is_empty()).then_some(d)
}

/// A C++ message without the ` key=value` context Ray appends.
pub fn without_pairs(msg: &str) -> Option<String> {
    detail_after(msg, "").map(str::to_string)
}

fn exit_type_after(msg: &str, label: &str) -> Option<String> {
    let start = msg.find(label)? + label.len();
    let t: String = msg[start..].chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
    (!t.is_empty()).then_some(t)
}

/// What a record of `component` with message `m` (and event `label`, if an event)
/// says about its worker's exit, if anything.
pub fn exit_fact(component: &str, m: &str, label: Option<&str>) -> Option<ExitFact> {
    let fact = |source, exit_type, detail: Option<&str>| {
        Some(ExitFact { source, exit_type, detail: detail.map(str::to_string) })
    };
    if component == "gcs_server" {
        if m.starts_with("Reporting worker exit") {
            return fact(ExitSource::Gcs, exit_type_after(m, "exit_type = "), detail_after(m, "exit_detail = "));
        }
        if m.contains(" exits, type=") {
            return fact(ExitSource::Gcs, exit_type_after(m, "exits, type="), None);
        }
        return None;
    }
    // Every statement below names an exit: one search (with a searcher built once)
    // turns away the prints that make up most of a trace.
    static EXIT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("exit"));
    if EXIT.find(m.as_bytes()).is_none() && !m.starts_with("Exit signal received") {
        return None;
    }
    if m.contains("Worker exit type: ") && label.is_none_or(|l| l == "RAY_WORKER_FAILURE") {
        return fact(
            ExitSource::Event,
            exit_type_after(m, "Worker exit type: "),
            detail_after(m, "Worker exit detail: "),
        );
    }
    if m.contains("Disconnect, exit_type=") {
        return fact(ExitSource::Disconnect, exit_type_after(m, "exit_type="), detail_after(m, "exit_detail="));
    }
    if let Some(rest) = m.strip_prefix("Executing worker exit: ") {
        return fact(ExitSource::Intent, exit_type_after(rest, ""), detail_after(rest, " - "));
    }
    if m.starts_with("Exit signal received") {
        return fact(ExitSource::Intent, exit_type_after(m, "exit_type="), detail_after(m, "detail="));
    }
    None
}

/// The signal of a crash dump (`*** SIGSEGV received at time=…`).
pub fn crash_signal(msg: &str) -> Option<String> {
    // The literal first: the regex's captures cost an allocation per message.
    static SIG: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("*** SIG"));
    static RE: OnceLock<Regex> = OnceLock::new();
    SIG.find(msg.as_bytes())?;
    re(&RE, r"\*\*\* (SIG[A-Z]+) received").captures(msg).map(|c| c[1].to_string())
}

/// GCS's `Actor is failed on worker …, death context type = X, remaining_restarts = N`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActorFailure {
    pub death_context: Option<String>,
    pub remaining_restarts: Option<u32>,
    pub num_restarts: Option<u32>,
}

fn number_after(msg: &str, label: &str) -> Option<u32> {
    let start = msg.find(label)? + label.len();
    let digits: String = msg[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn word_after(msg: &str, label: &str) -> Option<String> {
    let start = msg.find(label)? + label.len();
    let w: String = msg[start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    (!w.is_empty()).then_some(w)
}

/// Reads GCS's actor-failure line (both the 2.9 and the 2.4x+ wording).
pub fn actor_failure(msg: &str) -> Option<ActorFailure> {
    static FAILED: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("is failed on worker"));
    FAILED.find(msg.as_bytes())?;
    Some(ActorFailure {
        death_context: word_after(msg, "death context type = "),
        remaining_restarts: number_after(msg, "remaining_restarts = "),
        num_restarts: number_after(msg, "num_restarts = "),
    })
}

/// The driver's `received notification on actor, state: ALIVE, …, num_restarts: 1`.
pub fn actor_notification(msg: &str) -> Option<(String, Option<u32>)> {
    if !msg.starts_with("received notification on actor") {
        return None;
    }
    Some((word_after(msg, "state: ")?, number_after(msg, "num_restarts: ")))
}

/// A worker's pid stated in text: events' `Worker PID: N`, raylet's `Started worker
/// process with pid N`.
pub fn pid_in_text(msg: &str) -> Option<u32> {
    number_after(msg, "Worker PID: ").or_else(|| number_after(msg, "Started worker process with pid "))
}

/// A worker id named in prose (`on worker <id>`, `Worker <id> on node`, `Worker ID:
/// <id>`) by GCS or raylet, for lines whose ids the parser did not place, such as
/// GCS messages inside C++ JSON lines. Other components quote such text (a failed
/// event report, say) without being about the worker.
pub fn worker_in_text(component: &str, msg: &str) -> Option<raylog_parsers::Id> {
    if !matches!(component, "gcs_server" | "raylet") {
        return None;
    }
    for label in ["worker ", "Worker ", "Worker ID: ", "worker id = "] {
        for (i, _) in msg.match_indices(label) {
            let rest = &msg.as_bytes()[i + label.len()..];
            let hex = rest.iter().take_while(|c| c.is_ascii_hexdigit()).count();
            if hex == 56 {
                if let Some(id) = raylog_parsers::Id::parse(&rest[..56]) {
                    return Some(id);
                }
            }
        }
    }
    None
}

/// `attempt_number=N` (export events) or `attempt=N` (structured logging pairs).
pub fn attempt_in_text(msg: &str) -> Option<u32> {
    static RE: OnceLock<Regex> = OnceLock::new();
    re(&RE, r"(?:^|\s)attempt(?:_number)?=(\d+)").captures(msg).and_then(|c| c[1].parse().ok())
}

/// `key=Value` in an export event's summary message (`state=DEAD`, `class_name=Phoenix`).
pub fn export_word(msg: &str, key: &str) -> Option<String> {
    msg.split(' ').find_map(|w| w.strip_prefix(key)?.strip_prefix('=')).map(str::to_string)
}

/// A value inside raw JSON by path: strings unescaped, anything else as raw JSON.
/// `None` when absent, empty, or not JSON.
pub fn json_path(raw: &str, path: &[&str]) -> Option<String> {
    let (first, rest) = path.split_first()?;
    let mut found = None;
    raylog_parsers::json::members(raw, |k, v| {
        if k == *first && found.is_none() {
            found = Some(v);
        }
    })
    .ok()?;
    let v = found?;
    if !rest.is_empty() {
        return json_path(v.raw(), rest);
    }
    let out = match v.str_inner() {
        Some(inner) => {
            let mut s = String::new();
            raylog_parsers::json::unescape_into(inner, &mut s);
            s
        }
        None => v.raw().to_string(),
    };
    (!out.is_empty() && out != "{}" && out != "null").then_some(out)
}

/// A long Ray explanation cut to its first sentences, for one line of text.
pub fn short(text: &str, max: usize) -> String {
    let first_line = text.lines().next().unwrap_or("");
    let mut out = String::new();
    for sentence in first_line.split_inclusive(". ") {
        if !out.is_empty() && out.len() + sentence.len() > max {
            out.push('…');
            return out.trim_end().to_string();
        }
        out.push_str(sentence);
    }
    if out.chars().count() > max {
        let cut: String = out.chars().take(max).collect();
        return format!("{cut}…");
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_lose_context_pairs() {
        let m = "RayletIpcClient::Disconnect, exit_type=INTENDED_SYSTEM_EXIT, exit_detail=Worker exits because the actor is killed. Owner Id: 01 x., has creation_task_exception_pb_bytes=0 worker_id=ab node_id=cd";
        assert_eq!(detail_after(m, "exit_detail="), Some("Worker exits because the actor is killed. Owner Id: 01 x."));
        assert_eq!(exit_type_after(m, "exit_type="), Some("INTENDED_SYSTEM_EXIT".into()));
        let g = "Worker 78 on node b4 exits, type=SYSTEM_ERROR, has creation_task_exception = 0 worker_id=78";
        assert_eq!(exit_type_after(g, "exits, type="), Some("SYSTEM_ERROR".into()));
    }

    #[test]
    fn crash_and_gcs_lines() {
        assert_eq!(crash_signal("*** SIGSEGV received at time=1796036059 on cpu 0 ***"), Some("SIGSEGV".into()));
        let f = actor_failure("Actor 2da2 is failed on worker 1fc3 at node 272f, need_reschedule = 1, death context type = ActorDiedErrorContext, remaining_restarts = 0, job id = 01000000").unwrap();
        assert_eq!(f.death_context.as_deref(), Some("ActorDiedErrorContext"));
        assert_eq!(f.remaining_restarts, Some(0));
        let w = "2f802ad7fdda00f1abcc004f94ef811da2fef08e90874c0eaf085da8";
        let m = format!("Actor is failed on worker {w} at node c5c8, need_reschedule = 1");
        assert_eq!(worker_in_text("gcs_server", &m).map(|i| i.as_str().to_string()), Some(w.to_string()));
        assert_eq!(worker_in_text("dashboard_agent", &m), None);
        assert_eq!(worker_in_text("gcs_server", "worker 2f802ad7 died"), None);
        assert_eq!(attempt_in_text("EXPORT_TASK attempt_number=1 func_or_class_name=flaky"), Some(1));
        assert_eq!(export_word("EXPORT_ACTOR class_name=Counter name=beta state=DEAD", "state"), Some("DEAD".into()));
    }

    #[test]
    fn every_exit_wording_passes_the_literal_search() {
        let read = |comp, m| exit_fact(comp, m, None).map(|f| (f.source, f.exit_type));
        let t = |s: &str| Some(s.to_string());
        let cases = [
            (
                "core_worker",
                "Worker exit type: SYSTEM_ERROR Worker exit detail: died",
                ExitSource::Event,
                "SYSTEM_ERROR",
            ),
            (
                "core_worker",
                "Disconnect, exit_type=INTENDED_USER_EXIT, exit_detail=bye",
                ExitSource::Disconnect,
                "INTENDED_USER_EXIT",
            ),
            ("worker", "Executing worker exit: USER_ERROR - raised", ExitSource::Intent, "USER_ERROR"),
            (
                "core_worker",
                "Exit signal received, exit_type=SYSTEM_ERROR, detail=x",
                ExitSource::Intent,
                "SYSTEM_ERROR",
            ),
            (
                "gcs_server",
                "Worker 78 on node b4 exits, type=NODE_OUT_OF_MEMORY",
                ExitSource::Gcs,
                "NODE_OUT_OF_MEMORY",
            ),
        ];
        for (comp, m, source, ty) in cases {
            assert_eq!(read(comp, m), Some((source, t(ty))), "{m}");
        }
        assert_eq!(read("worker", "step 5: the loop exited cleanly"), None);
        assert_eq!(read("worker", "Exit code 0"), None);
        assert_eq!(crash_signal("*** SIG received"), None);
        assert_eq!(crash_signal("** SIGSEGV received"), None);
    }

    #[test]
    fn json_paths_and_short_text() {
        let j = r#"{"death_cause":{"ctx":{"error_message":"a\nb","pid":5}},"name":""}"#;
        assert_eq!(json_path(j, &["death_cause", "ctx", "error_message"]), Some("a\nb".into()));
        assert_eq!(json_path(j, &["death_cause", "ctx", "pid"]), Some("5".into()));
        assert_eq!(json_path(j, &["name"]), None);
        assert_eq!(short("One two. Three four. Five six seven eight nine.", 22), "One two. Three four. …");
        assert_eq!(short("One two. Three four.", 12), "One two. …");
    }
}
