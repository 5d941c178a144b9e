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

/// No fixture has a failed health check, an OOM kill, a spill or a failed job (the
/// workloads did not cause them), so these lines are Ray's format strings from the
/// 2.60 binaries (`strings gcs_server raylet`) and the 2.x sources, filled in.
#[test]
fn messages_absent_from_the_fixtures() {
    let gcs = "ray-2.60-text/session_x/logs/gcs_server.out";
    let hc = "[2026-11-30 10:21:17,489 W 4034 4034] (gcs_server) gcs_health_check_manager.cc:120: Health check failed for node b41b4d0f9f2f900e85be32890a6a2f6a31a6d567a5a182881cccfc4b, remaining checks 4";
    has(&detect_text(gcs, hc), &["CheckFailed", "b41b4d0f9f2f"]);
    let dead = "[2026-11-30 10:21:17,489 W 4034 4034] (gcs_server) gcs_health_check_manager.cc:70: Node b41b4d0f9f2f900e85be32890a6a2f6a31a6d567a5a182881cccfc4b is dead because the health check failed.";
    has(&detect_text(gcs, dead), &["NodeDeclaredDead", "b41b4d0f9f2f"]);
    let dead60 = "[2026-11-30 10:21:17,489 W 4034 4034] (gcs_server) gcs_health_check_manager.cc:70: Node is dead because the health check failed. node_id=b41b4d0f9f2f900e85be32890a6a2f6a31a6d567a5a182881cccfc4b";
    has(&detect_text(gcs, dead60), &["NodeDeclaredDead", "b41b4d0f9f2f"]);
    let raylet = "ray-2.60-text/session_x/logs/raylet.out";
    let oom = "[2026-11-30 10:21:12,465 I 4102 4102] (raylet) node_manager.cc:2900: Killing 2 worker(s), kill details: pid=4302 (task sq)";
    has(&detect_text(raylet, oom), &["OomKill", "workers: 2"]);
    let oom40 = "[2026-11-30 10:21:12,465 I 4102 4102] (raylet) node_manager.cc:2900: Killing worker with task Type=NORMAL_TASK, Language=PYTHON";
    has(&detect_text(raylet, oom40), &["OomKill", "workers: 1"]);
    let spill = "[2026-11-30 10:21:12,465 I 4102 4102] (raylet) local_object_manager.cc:490: Spilled 512 MiB, 4 objects, write throughput 310 MiB/s.";
    has(&detect_text(raylet, spill), &["Spill", "mib: 512.0", "objects: 4"]);
    let gcs_down = "[2026-11-30 10:21:12,465 E 4102 4102] (raylet) gcs_client.cc:80: Failed to connect to GCS within 60 seconds. GCS may have been killed.";
    has(&detect_text(raylet, gcs_down), &["GcsUnreachable"]);
    assert_eq!(
        job_event("Completed a ray job raysubmit_x with a status FAILED."),
        Some(DriverExit { submission_id: "raysubmit_x", outcome: "FAILED" })
    );
    assert_eq!(
        supervisor_exit("Job raysubmit_x entrypoint command exited with code 1").map(|d| d.outcome),
        Some("code 1")
    );
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
