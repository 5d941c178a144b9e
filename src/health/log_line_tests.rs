//! Every detection on real lines: each test reads the first line holding a needle
//! from a fixture file (the path is the citation) and parses it as raylog does.

use std::path::Path;

use raylog_parsers::{classify, Correlator, FileParser, Options};

use super::*;

/// What `detect` makes of the first line of `fixtures/<rel>` that contains
/// `needle`, parsed as a file of that name. Panics when the line is missing, so a
/// re-recorded fixture cannot silently turn a test vacuous.
fn detect_line(rel: &str, needle: &str) -> Option<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{rel}: no line with {needle:?}"));
    detect_text(rel, line)
}

/// `detect` on one line parsed as a file at `rel`, rendered with `{:?}`.
fn detect_text(rel: &str, line: &str) -> Option<String> {
    let logs = rel.find("/logs/").map_or(rel, |i| &rel[i + "/logs/".len()..]);
    let mut p = FileParser::new(classify(logs, Some("session_x")), None, None);
    let (mut corr, opts) = (Correlator::new(), Options::default());
    let mut out = vec![];
    let bytes = format!("{line}\n");
    p.push(bytes.as_bytes(), &mut corr, &opts, &mut |r| out.push(detect(r).map(|e| format!("{e:?}"))));
    p.finish(&mut corr, &opts, &mut |r| out.push(detect(r).map(|e| format!("{e:?}"))));
    assert_eq!(out.len(), 1, "{line}");
    out.pop().unwrap()
}

const T60: &str = "ray-2.60-text/session_2026-11-30_10-21-03_039314_4033/logs";
const T40: &str = "ray-2.40-text/session_2026-11-30_10-20-31_522239_3222/logs";
const P29: &str = "ray-2.9-plain/session_2026-11-30_10-54-39_571568_2815/logs";
const JSON60: &str = "ray-2.60-cpp-json-attempts/session_2026-11-30_10-54-10_902026_2042/logs";
const EXP60: &str = "ray-2.60-json-rotated-export/session_2026-11-30_10-22-01_024701_5177/logs";
const JOBS60: &str = "ray-2.60-jobs-serve/session_2026-11-30_09-31-29_637100_6988/logs";
const H60: &str = "ray-2.60-health/session_2026-12-01_19-48-51_100483_5715/logs";
const H40: &str = "ray-2.40-health/session_2026-12-01_20-13-07_155434_21439/logs";

fn has(got: &Option<String>, parts: &[&str]) {
    let g = got.as_deref().unwrap_or_else(|| panic!("nothing detected, wanted {parts:?}"));
    for p in parts {
        assert!(g.contains(p), "{p:?} not in {g}");
    }
}

#[test]
fn gcs_worker_exit_in_every_version() {
    let phoenix = "78858d8b5465e97a63167f14411e5b7eef6432391a4bf71a583a5995";
    let got = detect_line(&format!("{T60}/gcs_server.out"), &format!("Reporting worker exit, worker id = {phoenix}"));
    has(&got, &["WorkerDeath", "source: Gcs", phoenix, "b41b4d0f9f2f", "exit_type: \"SYSTEM_ERROR\""]);
    has(&got, &["detail: Some(\"Worker unexpectedly exits with a connection error code 2."]);
    assert!(!got.unwrap().contains("worker_id="), "context pairs are cut from the detail");
    has(&detect_line(&format!("{T40}/gcs_server.out"), "Reporting worker exit"), &["SYSTEM_ERROR", "0769261384"]);
    has(&detect_line(&format!("{P29}/gcs_server.out"), "Reporting worker exit"), &["SYSTEM_ERROR", "1fc3cfa59d"]);
    // 2.60 with RAY_BACKEND_LOG_JSON=1: the same message inside a JSON line.
    has(&detect_line(&format!("{JSON60}/gcs_server.out"), "Reporting worker exit"), &["SYSTEM_ERROR", "2f802ad7"]);
}

#[test]
fn raylet_worker_failure_event_has_the_pid() {
    let got = detect_line(&format!("{T60}/events/event_RAYLET.log"), "Worker PID: 4329");
    has(&got, &["source: RayletEvent", "pid: Some(4329)", "78858d8b5465", "SYSTEM_ERROR", "b41b4d0f9f2f"]);
    // 2.40 and 2.9.3 say `RayTask ID:` where 2.60 says `Lease ID:`.
    has(&detect_line(&format!("{T40}/events/event_RAYLET.log"), "Worker PID: 3518"), &["pid: Some(3518)", "95cbbaef"]);
    has(&detect_line(&format!("{P29}/events/event_RAYLET.log"), "Worker PID: 3123"), &["pid: Some(3123)", "d2da46dc"]);
}

#[test]
fn actor_failure_and_restart_decision() {
    // Phoenix (max_restarts=1): restarted. Counter beta (max_restarts=0): not.
    let got = detect_line(&format!("{T60}/gcs_server.out"), "remaining_restarts = 1");
    has(&got, &["ActorFailure", "ceeabe459a58b124ad5b805d01000000", "78858d8b", "need_reschedule: true"]);
    has(&got, &["remaining_restarts: Some(1)", "job_id: Some(Id(01000000))"]);
    let beta = detect_line(&format!("{T60}/gcs_server.out"), "remaining_restarts = 0");
    has(&beta, &["69817a5d9930bea4b8122df401000000", "remaining_restarts: Some(0)"]);
    has(
        &detect_line(&format!("{T40}/gcs_server.out"), "remaining_restarts = 1"),
        &["b5cb9ca936c8d03589fdb2df01000000"],
    );
    // 2.9.3 puts the actor id before the verb and says `job id = `.
    let old = detect_line(&format!("{P29}/gcs_server.out"), "is failed on worker d2da46dc");
    has(&old, &["actor_id: Some(", "d2da46dc93bf", "job_id: Some(Id(01000000))", "need_reschedule: true"]);
    // An actor whose worker exited as intended (the job supervisor at job end).
    let done = detect_line(&format!("{JOBS60}/gcs_server.out"), "need_reschedule = 0");
    has(&done, &["need_reschedule: false"]);
}

#[test]
fn restarts_follows_need_reschedule_and_remaining() {
    let f = |need_reschedule, remaining_restarts| {
        ActorFailure {
            actor_id: None,
            worker_id: None,
            node_id: None,
            job_id: None,
            need_reschedule,
            remaining_restarts,
            restarting: false,
            from_event: false,
        }
        .restarts()
    };
    assert!(f(true, Some(1)) && f(true, Some(-1)));
    assert!(!f(true, Some(0)) && !f(false, Some(3)) && !f(true, None));
}

#[test]
fn node_removal_in_three_wordings() {
    let got = detect_line(&format!("{T60}/gcs_server.out"), ", death reason = ");
    has(
        &got,
        &["NodeDeath", "b41b4d0f9f2f", "reason: Some(\"EXPECTED_TERMINATION\")", "message: Some(\"received SIGTERM\")"],
    );
    let t40 = detect_line(&format!("{T40}/gcs_server.out"), "Removing node, node name");
    has(&t40, &["244447892a15", "EXPECTED_TERMINATION", "message: Some(\"received SIGTERM\")"]);
    has(&detect_line(&format!("{P29}/gcs_server.out"), "Removing node, node id"), &["272fadd3de7e", "reason: None"]);
    has(&detect_line(&format!("{JSON60}/gcs_server.out"), "death reason"), &["c5c8b7900f4d", "EXPECTED_TERMINATION"]);
}

#[test]
fn node_death_expected_only_for_planned_removals() {
    let d = |reason| NodeDeath { node_id: None, reason, message: None, from_event: false }.expected();
    assert!(d(Some("EXPECTED_TERMINATION")) && d(Some("AUTOSCALER_DRAIN_IDLE")));
    assert!(!d(Some("UNEXPECTED_TERMINATION")) && !d(None));
}

/// The failure events of `workload_health.py` (fixtures/README.md): the real 2.60
/// and 2.40 lines, one test per detection.
#[test]
fn oom_kill_on_real_lines() {
    // The raylet's decision (its continuation lines are not part of this line).
    let got = detect_line(&format!("{H60}/raylet.out"), "Killing 1 worker(s), kill details:");
    has(&got, &["OomKill", "workers: 1", "Memory on the node (IP: 192.0.2.2, ID: 3a291b6294c1"]);
    // The killed worker's exit, said only by GCS: the raylet writes an `Out of
    // Memory` event, not a RAY_WORKER_FAILURE, so GCS's line is the one to count.
    let gcs = detect_line(&format!("{H60}/gcs_server.out"), "exit_type = NODE_OUT_OF_MEMORY");
    has(&gcs, &["source: Gcs", "20d3140244b5", "exit_type: \"NODE_OUT_OF_MEMORY\"", "were killed due to the node"]);
    assert_eq!(detect_line(&format!("{H60}/events/event_RAYLET.log"), "\"Out of Memory\""), None);
    // Before 2.56 (2.40): one line per killed worker, naming its task.
    let old = detect_line(&format!("{H40}/raylet.out"), "Killing worker with task ");
    has(&old, &["OomKill", "workers: 1", "Type=NORMAL_TASK, Language=PYTHON", "function_name=driver.<locals>.hog"]);
    has(&detect_line(&format!("{H40}/gcs_server.out"), "exit_type = NODE_OUT_OF_MEMORY"), &["068a5300b700"]);
}

#[test]
fn gcs_health_check_failure_on_real_lines() {
    let gcs = format!("{H60}/gcs_server.out");
    let got = detect_line(&gcs, "remaining checks 4,");
    has(&got, &["CheckFailed", "node_id: Some(Id(7d62bc128b64", "status message Deadline Exceeded"]);
    let dead = detect_line(&gcs, "Node is dead because the health check failed.");
    has(
        &dead,
        &[
            "NodeDeclaredDead",
            "node_id: Some(Id(7d62bc128b64",
            "detail: \"Node is dead because the health check failed.\"",
        ],
    );
    let removed = detect_line(&gcs, ", death reason = UNEXPECTED_TERMINATION");
    has(&removed, &["NodeDeath", "7d62bc128b64", "health check failed due to missing too many heartbeats"]);
    assert!(!removed.unwrap().contains("node_name="), "context pairs are cut from the message");
}

#[test]
fn gcs_unreachable_on_real_lines() {
    let raylet = format!("{H60}/raylet.out");
    has(&detect_line(&raylet, "GCS has been unavailable for more than 5 seconds"), &["GcsUnreachable"]);
    has(
        &detect_line(&raylet, "Failed to connect to GCS within 5 seconds."),
        &["GcsUnreachable", "GCS may have been killed."],
    );
    // A core worker (here the dashboard's driver) says both as well.
    let driver = format!("{H60}/python-core-driver-02000000ffffffffffffffffffffffffffffffffffffffffffffffff_6037.log");
    has(&detect_line(&driver, "GCS has been unavailable"), &["GcsUnreachable"]);
    has(&detect_line(&driver, "Failed to connect to GCS"), &["GcsUnreachable"]);
    // raylet.err holds a copy of raylet.out's ERROR lines: not a second event.
    assert_eq!(detect_line(&format!("{H60}/raylet.err"), "Failed to connect to GCS"), None);
    // Another service being unavailable is not GCS.
    assert_eq!(detect_line(&raylet, "Core worker 192.0.2.2 has been unavailable"), None);
    // 2.40 says only the second (from `gcs_rpc_client.h`), also in the spill and
    // restore workers' core logs.
    has(&detect_line(&format!("{H40}/raylet.out"), "Failed to connect to GCS within 5"), &["GcsUnreachable"]);
    let spill_worker =
        format!("{H40}/python-core-spill_worker-8ff4c1b948929d8034762222acded56fa2a1771d6bd05003ed5465ed_21797.log");
    has(&detect_line(&spill_worker, "Failed to connect to GCS"), &["GcsUnreachable"]);
}

#[test]
fn object_spilling_on_a_real_line() {
    let got = detect_line(&format!("{H60}/raylet.out"), ":info_message:Spilled ");
    assert_eq!(got.as_deref(), Some("Spill(Spill { mib: 72.0, objects: 3 })"));
    assert_eq!(detect_line(&format!("{H60}/raylet.out"), "Restored 24 MiB"), None);
    // 2.40 logged twice: running totals, not amounts per line.
    let first = detect_line(&format!("{H40}/raylet.out"), ":info_message:Spilled 72 MiB");
    assert_eq!(first.as_deref(), Some("Spill(Spill { mib: 72.0, objects: 3 })"));
    let second = detect_line(&format!("{H40}/raylet.out"), ":info_message:Spilled 144 MiB");
    assert_eq!(second.as_deref(), Some("Spill(Spill { mib: 144.0, objects: 6 })"));
}

#[test]
fn failed_jobs_on_real_lines() {
    let sup = format!("{H60}/jobs/supervisor-raysubmit_health_exit1.log");
    has(
        &detect_line(&sup, "exited with code 1"),
        &["submission_id: \"raysubmit_health_exit1\"", "outcome: \"code 1\""],
    );
    let jobs = format!("{H60}/events/event_JOBS.log");
    let exit1 = detect_line(&jobs, "job raysubmit_health_exit1 with a status FAILED");
    has(&exit1, &["raysubmit_health_exit1", "outcome: \"FAILED\""]);
    // The job manager's reason follows the status: the outcome is the word alone.
    let conda = detect_line(&jobs, "job raysubmit_health_conda with a status FAILED");
    assert_eq!(
        conda.as_deref(),
        Some("DriverExit(DriverExit { submission_id: \"raysubmit_health_conda\", outcome: \"FAILED\" })")
    );
    // 2.40: the same wordings.
    let sup40 = format!("{H40}/jobs/supervisor-raysubmit_health_exit1.log");
    has(&detect_line(&sup40, "exited with code 1"), &["outcome: \"code 1\""]);
    let conda40 = detect_line(&format!("{H40}/events/event_JOBS.log"), "raysubmit_health_conda with a status FAILED");
    has(&conda40, &["outcome: \"FAILED\" }"]);
}

/// Wordings no recorded run produced, so Ray's format strings from older sources,
/// filled in: the health-check lines of Ray before 2.40 (the id in `Node <nid> is
/// dead …`, no gRPC status after `remaining checks`; a two-node 2.40 trial already
/// wrote the 2.60 form, and `ray-2.40-health` has no second node, see
/// fixtures/README.md), and a spill summary without the `:info_message:` prefix
/// (accepted, never seen: 2.40 and 2.60 both write the prefix).
#[test]
fn wordings_without_a_real_line() {
    let gcs = "ray-2.40-text/session_x/logs/gcs_server.out";
    let hc = "[2026-11-30 10:21:17,489 W 4034 4034] (gcs_server) gcs_health_check_manager.cc:120: Health check failed for node b41b4d0f9f2f900e85be32890a6a2f6a31a6d567a5a182881cccfc4b, remaining checks 4";
    has(&detect_text(gcs, hc), &["CheckFailed", "b41b4d0f9f2f"]);
    let dead = "[2026-11-30 10:21:17,489 W 4034 4034] (gcs_server) gcs_health_check_manager.cc:70: Node b41b4d0f9f2f900e85be32890a6a2f6a31a6d567a5a182881cccfc4b is dead because the health check failed.";
    has(&detect_text(gcs, dead), &["NodeDeclaredDead", "b41b4d0f9f2f"]);
    let raylet = "ray-2.40-text/session_x/logs/raylet.out";
    let spill = "[2026-11-30 10:21:12,465 I 4102 4102] (raylet) local_object_manager.cc:490: Spilled 512 MiB, 4 objects, write throughput 310 MiB/s.";
    has(&detect_text(raylet, spill), &["Spill", "mib: 512.0", "objects: 4"]);
}

#[test]
fn owner_task_failures_in_every_version() {
    let driver = format!("{T60}/python-core-driver-01000000ffffffffffffffffffffffffffffffffffffffffffffffff_4033.log");
    let got = detect_line(&driver, "Task attempt 5d4b8d1788f12d2d");
    has(
        &got,
        &["source: Owner", "5d4b8d1788f12d2dceeabe459a58b124ad5b805d01000000", "exception: \"ACTOR_UNAVAILABLE\""],
    );
    let old = format!("{P29}/python-core-driver-01000000ffffffffffffffffffffffffffffffffffffffffffffffff_2815.log");
    has(&detect_line(&old, "Task attempt d695f922"), &["exception: \"ACTOR_DIED\""]);
}

#[test]
fn export_task_failure_names_the_python_exception() {
    let f = format!("{EXP60}/export_events/event_EXPORT_TASK_5177.log");
    let got = detect_line(&f, "bad input 7");
    has(
        &got,
        &[
            "source: Export",
            "error_type: \"TASK_EXECUTION_EXCEPTION\"",
            "exception: \"ValueError\"",
            "attempt: Some(0)",
        ],
    );
    has(&detect_line(&f, "boom from actor method"), &["exception: \"RuntimeError\""]);
    has(&detect_line(&f, "\"error_type\":\"ACTOR_DIED\""), &["exception: \"ACTOR_DIED\""]);
}

#[test]
fn successful_job_is_not_a_driver_failure() {
    assert_eq!(detect_line(&format!("{JOBS60}/events/event_JOBS.log"), "Completed a ray job"), None);
    assert_eq!(detect_line(&format!("{JOBS60}/jobs/supervisor-raysubmit_etl_001.log"), "exited with code 0"), None);
}

#[test]
fn ordinary_lines_are_not_events() {
    assert_eq!(detect_line(&format!("{T60}/gcs_server.out"), "Actor created successfully"), None);
    assert_eq!(detect_line(&format!("{T60}/gcs_server.out"), "Node is dead, rescheduling"), None);
    assert_eq!(detect_line(&format!("{T60}/raylet.out"), "Started worker process with pid 4302"), None);
    assert_eq!(exception_class("User exception:\n  File \"x.py\"\nValueError: bad"), Some("ValueError".into()));
    assert_eq!(exception_class("no colon here at all"), None);
}

#[test]
fn counts_once_keeps_deaths_no_raylet_event_reports() {
    let once = |source, exit_type| {
        Event::WorkerDeath(WorkerDeath { source, worker_id: None, node_id: None, pid: None, exit_type, detail: None })
            .counts_once()
    };
    // A SYSTEM_ERROR death is counted from the raylet's event, not again from GCS.
    assert!(once(DeathSource::RayletEvent, "SYSTEM_ERROR") && !once(DeathSource::Gcs, "SYSTEM_ERROR"));
    // Other exit types (an OOM kill) have no RAY_WORKER_FAILURE event: GCS counts.
    assert!(once(DeathSource::Gcs, "NODE_OUT_OF_MEMORY") && once(DeathSource::Gcs, "USER_ERROR"));
}

/// `between` ends a value at the first of its end bytes, whichever the number of them,
/// and at the text's end with none (or none found).
#[test]
fn between_stops_at_the_first_end_byte() {
    let m = "a = x1, b = y.z w, c = q r";
    assert_eq!(between(m, lit!("a = "), b","), Some("x1"));
    assert_eq!(between(m, lit!("b = "), b", "), Some("y.z"));
    assert_eq!(between(m, lit!("b = "), b", ."), Some("y"));
    assert_eq!(between(m, lit!("b = "), b"!?.w"), Some("y"));
    assert_eq!(between(m, lit!("c = "), b""), Some("q r"));
    assert_eq!(between(m, lit!("c = "), b","), Some("q r"));
    assert_eq!(between(m, lit!("d = "), b","), None);
    assert_eq!(between(m, lit!("q r"), b","), Some(""));
}
