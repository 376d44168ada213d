use super::*;

fn sh(script: &str) -> HelperCommand<'static> {
    HelperCommand {
        exe: Path::new("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        env: None,
        keep_fd: None,
        root_dir: true,
    }
}

/// Processes (PIDs in our namespace) whose command line holds `tag`,
/// killed (the test failed if there are any).
fn left_with(tag: &str) -> Vec<u32> {
    let find = || -> Vec<u32> {
        crate::host::discover::all_pids()
            .into_iter()
            .filter(|p| {
                crate::host::discover::stat(*p).is_some_and(|s| !s.exited())
                    && std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| c.windows(tag.len()).any(|w| w == tag.as_bytes()))
            })
            .collect()
    };
    // A process sent SIGKILL dies when it next runs: on a busy machine
    // that can take a moment after the helper returned.
    let mut left = find();
    for _ in 0..40 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        left = find();
    }
    for p in &left {
        // SAFETY: cleaning up after a failed test.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    left
}

/// A descendant in a session of its own that keeps stdout open.
fn daemon_then(tag: &str, then: &str) -> String {
    format!("setsid sh -c 'sleep 300; : {tag}' & sleep 0.2; {then}")
}

#[test]
fn the_answer_is_read_and_a_descendant_holding_the_pipe_dies_with_the_helper() {
    for namespace in [true, false] {
        let tag = format!("gputrace-confine-{}-{namespace}", std::process::id());
        let cancel = AtomicBool::new(false);
        let cmd = sh(&daemon_then(&tag, "echo answer; exit 0"));
        let out = run_in(&cmd, Duration::from_secs(20), 1024, &cancel, namespace).unwrap();
        assert_eq!(out.stdout, b"answer\n");
        assert_eq!(out.ended, Ended::Exited(0));
        assert_eq!(left_with(&tag), Vec::<u32>::new(), "namespace {namespace}");
    }
}

/// As root (gputrace's case) the helper is the init of a PID namespace.
#[test]
fn as_root_the_helper_is_the_init_of_its_own_pid_namespace() {
    if crate::host::fd::euid() != 0 {
        return;
    }
    let cancel = AtomicBool::new(false);
    let out = run(&sh("echo $$"), Duration::from_secs(20), 100, &cancel).unwrap();
    assert_eq!(out.stdout, b"1\n");
    let out = run_in(&sh("echo $$"), Duration::from_secs(20), 100, &cancel, false).unwrap();
    assert_ne!(out.stdout, b"1\n");
}

#[test]
fn a_helper_past_its_deadline_is_killed_with_its_descendants() {
    for namespace in [true, false] {
        let tag = format!(
            "gputrace-confine-deadline-{}-{namespace}",
            std::process::id()
        );
        let cancel = AtomicBool::new(false);
        let cmd = sh(&daemon_then(&tag, "echo partial; sleep 300"));
        let out = run_in(&cmd, Duration::from_secs(1), 1024, &cancel, namespace).unwrap();
        assert_eq!(out.ended, Ended::TimedOut);
        assert_eq!(out.stdout, b"partial\n");
        assert_eq!(left_with(&tag), Vec::<u32>::new(), "namespace {namespace}");
    }
}

/// libcuda's cuInit reads /proc for its own PID: in a PID namespace
/// the helper must see a /proc of that namespace (it got 304 before).
#[test]
fn a_helper_in_its_namespace_sees_its_own_proc() {
    let cancel = AtomicBool::new(false);
    // `read` opens /proc/self/stat in the shell itself (PID 1 there).
    let cmd = sh("read pid rest < /proc/self/stat; echo $$ $pid");
    let out = run_in(&cmd, Duration::from_secs(10), 1024, &cancel, true).unwrap();
    assert_eq!(out.ended, Ended::Exited(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>(),
        ["1", "1"]
    );
    // The host's /proc is untouched.
    assert_ne!(
        std::fs::read_link("/proc/self").unwrap().to_string_lossy(),
        "1"
    );
}

#[test]
fn too_much_output_and_cancelling_stop_the_helper() {
    let cancel = AtomicBool::new(false);
    let out = run(&sh("yes"), Duration::from_secs(20), 1000, &cancel).unwrap();
    assert_eq!(out.ended, Ended::TooMuch);
    assert_eq!(out.stdout.len(), 1000);
    let cancel = AtomicBool::new(true);
    let out = run(&sh("sleep 300"), Duration::from_secs(20), 1000, &cancel).unwrap();
    assert_eq!(out.ended, Ended::Cancelled);
}
