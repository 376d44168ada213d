//! Detaching: on STOP, when gputrace goes away, without a hello; the
//! finalize at an API exit; refusal when another CUPTI subscriber exists.

use std::collections::HashSet;

use tracer_common::gpu::{decode_error, encode_error, AgentError, AgentState, DetachReason};

use crate::harness::{agent_so, field, start_with_agent, Agent, Workload};
use crate::*;

/// Launches for 4 s, paced by synchronize calls that sleep 1 ms each.
const LOOP: &[&str] = &[
    "--launches",
    "5",
    "--syncs",
    "1",
    "--sync-us",
    "1000",
    "--duration-ms",
    "4000",
    "--agent-flush-ms",
    "20",
    "--agent-join",
    "--cupti-report",
];

fn memfd_open(wl: &Workload) -> bool {
    wl.fd_targets().iter().any(|t| t.contains("gputrace-gpu"))
}

/// After a detach: stopped, the agent's descriptors closed, no record
/// after, CUPTI finalized from an API-exit callback, the workload finishes
/// on its own with exit status 0 and the library unloads.
fn check_detached(wl: Workload, ag: &mut Agent, reason: DetachReason) {
    ag.wait_state(AgentState::Stopped, 15);
    let s = ag.snap();
    assert_eq!(s.detach(), Some(reason));
    ag.poll();
    assert_eq!(ag.records.len() as u64, s.records_written);
    assert_eq!(s.ring_dropped, 0);
    assert!(!memfd_open(&wl), "the agent closed its memfd");
    let sp = split(&ag.records);
    let apis: HashSet<u32> = sp.apis.iter().map(|a| a.common.correlation).collect();
    let unmatched = sp
        .kernels
        .iter()
        .filter(|k| !apis.contains(&k.common.correlation))
        .count();
    assert!(
        unmatched <= 1,
        "{unmatched} kernels without their API record"
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        ag.snap().records_written,
        s.records_written,
        "nothing written after stopping"
    );
    let (st, lines) = wl.wait(30);
    assert!(st.success(), "{lines:?}");
    let join = lines.iter().find(|l| l.starts_with("agent join=")).unwrap();
    assert_eq!(
        (
            field(join, "join").as_str(),
            field(join, "unloaded").as_str()
        ),
        ("0", "1")
    );
    let cupti = lines.iter().find(|l| l.starts_with("cupti ")).unwrap();
    for (k, v) in [
        ("subscribed", "0"),
        ("finalizes", "1"),
        ("finalize_site", "3"),
        ("observing", "0"),
    ] {
        assert_eq!(field(cupti, k), v, "{cupti}");
    }
    assert!(lines.last().unwrap().starts_with("done calls="));
}

#[test]
fn stop_detaches_and_the_workload_goes_on() {
    let (wl, mut ag) = start_with_agent(LOOP, &[]);
    ag.poll_until(10, "some records", |r, _| r.len() >= 100);
    assert_eq!(ag.snap().agent_state(), Some(AgentState::Running));
    ag.stop();
    check_detached(wl, &mut ag, DetachReason::Requested);
}

#[test]
fn reader_gone_detaches() {
    let (wl, mut ag) = start_with_agent(LOOP, &[]);
    ag.poll_until(10, "some records", |r, _| r.len() >= 100);
    ag.hang_up();
    check_detached(wl, &mut ag, DetachReason::ReaderGone);
}

#[test]
fn no_hello_detaches() {
    let so = agent_so();
    let mut args = vec![
        "--load-agent",
        so.to_str().unwrap(),
        "--agent-hello-ms",
        "300",
    ];
    args.extend_from_slice(LOOP);
    let wl = Workload::spawn(&args, &[]);
    let rc = wl.start_rc();
    let mut ag = Agent::attach(wl.pid, rc);
    check_detached(wl, &mut ag, DetachReason::NoHello);
}

/// STOP after the last CUDA call: no API exit comes, so CUPTI cannot be
/// finalized; the state stays `detaching`, join says so and the workload
/// keeps the library loaded.
#[test]
fn finalize_waits_for_an_api_exit() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--launches",
            "3",
            "--wait-stdin",
            "--wait-stdin-end",
            "--agent-finalize-ms",
            "300",
            "--agent-join",
            "--cupti-report",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    ag.stop();
    ag.wait_state(AgentState::Detaching, 10);
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert_eq!(ag.snap().agent_state(), Some(AgentState::Detaching));
    ag.poll();
    assert_eq!(
        split(&ag.records).kernels.len(),
        3,
        "flushed before waiting"
    );
    wl.release();
    let (st, lines) = wl.wait(30);
    assert!(st.success());
    let join = lines.iter().find(|l| l.starts_with("agent join=")).unwrap();
    let not_finalized = encode_error(AgentError::NotFinalized, 0).to_string();
    assert_eq!(
        (field(join, "join"), field(join, "unloaded").as_str()),
        (not_finalized, "0")
    );
    let cupti = lines.iter().find(|l| l.starts_with("cupti ")).unwrap();
    assert_eq!(field(cupti, "finalizes"), "0");
}

/// The same, then one more CUDA call: its API exit finalizes CUPTI and the
/// callback cleans up (the agent thread had stopped waiting), so join says
/// the library may go.
#[test]
fn a_late_api_exit_finalizes() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--launches",
            "3",
            "--wait-stdin",
            "--wait-stdin-end",
            "--end-launches",
            "1",
            "--agent-finalize-ms",
            "300",
            "--agent-join",
            "--cupti-report",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    ag.stop();
    ag.wait_state(AgentState::Detaching, 10);
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert_eq!(ag.snap().agent_state(), Some(AgentState::Detaching));
    wl.release();
    ag.wait_state(AgentState::Stopped, 10);
    let (st, lines) = wl.wait(30);
    assert!(st.success());
    let join = lines.iter().find(|l| l.starts_with("agent join=")).unwrap();
    assert_eq!(
        (
            field(join, "join").as_str(),
            field(join, "unloaded").as_str()
        ),
        ("0", "1")
    );
    let cupti = lines.iter().find(|l| l.starts_with("cupti ")).unwrap();
    assert_eq!(
        (
            field(cupti, "finalizes").as_str(),
            field(cupti, "finalize_site").as_str()
        ),
        ("1", "3")
    );
}

/// torch.profiler-style: the workload subscribed to CUPTI first. Start
/// refuses with the multiple-subscribers code, leaves no descriptor behind,
/// and the workload runs untouched.
#[test]
fn another_subscriber_is_refused() {
    let so = agent_so();
    let wl = Workload::spawn(
        &[
            "--subscribe-cupti",
            "--load-agent",
            so.to_str().unwrap(),
            "--launches",
            "10",
            "--wait-stdin",
            "--cupti-report",
        ],
        &[],
    );
    let before = wl.fd_targets().len();
    let rc = wl.start_rc();
    assert_eq!(rc, encode_error(AgentError::MultipleSubscribers, 39));
    assert_eq!(
        decode_error(rc),
        Some((Some(AgentError::MultipleSubscribers), 39))
    );
    assert!(!memfd_open(&wl));
    assert!(wl.fd_targets().len() <= before, "no descriptor left behind");
    let mut wl = wl;
    wl.release();
    let (st, lines) = wl.wait(30);
    assert!(st.success());
    assert_eq!(lines.last().unwrap(), "done calls=10");
    let cupti = lines.iter().find(|l| l.starts_with("cupti ")).unwrap();
    for (k, v) in [
        ("subscribed", "1"),
        ("subscribes", "1"),
        ("refused", "1"),
        ("finalizes", "0"),
        ("kinds", "0"),
    ] {
        assert_eq!(field(cupti, k), v, "{cupti}");
    }
}

/// A child fork()ed while the agent runs: its copy of CUPTI still calls the
/// agent's callbacks, which find no agent there (no thread, the region not
/// mapped, the descriptors closed): the child runs and exits normally, and
/// the parent's ring holds only the parent's records.
#[test]
fn a_forked_child_stays_quiet() {
    let (mut wl, mut ag) = start_with_agent(
        &[
            "--launches",
            "10",
            "--wait-stdin",
            "--fork-child",
            "--wait-stdin-end",
            "--agent-flush-ms",
            "20",
        ],
        &[],
    );
    wl.release();
    wl.line("passes done", 30);
    assert_eq!(wl.line("fork child_status=", 5), "fork child_status=0");
    ag.poll_until(10, "parent records", |r, _| r.len() >= 20);
    std::thread::sleep(std::time::Duration::from_millis(100));
    ag.poll();
    let sp = split(&ag.records);
    assert_eq!((sp.kernels.len(), sp.apis.len()), (10, 10));
    assert!(sp.apis.iter().all(|a| a.pid == wl.pid as u32));
    assert_eq!(ag.snap().agent_state(), Some(AgentState::Running));
    wl.release();
    assert!(wl.wait(30).0.success());
}
