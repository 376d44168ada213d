//! Issue 14, arguments: every option given what a hostile or careless user
//! would give it. Each case must end, within a time limit, with the
//! documented exit code (2 bad arguments, 1 runtime failure) and exactly
//! one error line on stderr that names the problem: no panic, no usage
//! block, no hang.

use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::process::Command;
use std::time::Duration;

use gputrace_tests::*;

/// Lines gputrace says on the way that are not the failure itself.
fn progress(line: &str) -> bool {
    [
        "gputrace: attached",
        "gputrace: WARNING",
        "gputrace: serving metrics",
        "gputrace: writing timelines",
    ]
    .iter()
    .any(|p| line.starts_with(p))
}

/// Runs gputrace with `args` (and `env`), killed (and the test failed) if
/// it has not ended in 30 s; checks the exit code and the one error line.
fn expect_failure(args: &[&str], env: &[(&str, &str)], code: i32, needle: &str) {
    let f = Tracer::spawn_with_env(args, env).finish(Duration::from_secs(30));
    let text = f.stderr_text();
    assert_eq!(f.status.code(), Some(code), "{args:?}: stderr {text:?}");
    assert!(
        !text.contains("panicked") && !text.contains("internal error"),
        "{args:?}: {text}"
    );
    let errors: Vec<&String> = f.stderr.iter().filter(|l| !progress(l)).collect();
    assert_eq!(
        errors.len(),
        1,
        "{args:?}: one error line, got {:?}",
        f.stderr
    );
    assert!(
        errors[0].starts_with("gputrace: "),
        "{args:?}: {:?}",
        errors[0]
    );
    assert!(
        errors[0].contains(needle),
        "{args:?}: expected {needle:?} in {:?}",
        errors[0]
    );
}

/// Bad arguments: exit 2 before anything is attached (no target needed).
#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        // PIDs
        (&["--pid", "-1"], "unexpected argument '-1'"),
        (&["--pid", "0"], "--pid 0: not a process id"),
        (&["--pid", "4294967296"], "4294967296 is not in"),
        (&["--pid", ""], "cannot parse integer from empty string"),
        (&["--pid", "12abc"], "invalid digit"),
        (&["--pid", "1,,2"], "cannot parse integer from empty string"),
        (&["--pid"], "a value is required for '--pid <PID>'"),
        // Durations at and past their limits
        (
            &["--pid", "1", "--duration", "-1s"],
            "unexpected argument '-1'",
        ),
        (&["--pid", "1", "--duration=-1s"], "not a duration"),
        (&["--pid", "1", "--duration=-1"], "not a duration"),
        (&["--pid", "1", "--duration", "NaN"], "not a duration"),
        (&["--pid", "1", "--duration", "inf"], "not a duration"),
        (&["--pid", "1", "--duration", "1e30"], "not a duration"),
        (&["--pid", "1", "--duration", ""], "not a duration"),
        (
            &["--pid", "1", "--duration", "99999999999999999999h"],
            "not a duration",
        ),
        (
            &["--pid", "1", "--duration", "1s", "--duration", "2s"],
            "cannot be used multiple times",
        ),
        (&["top", "--interval", "2h"], "longer than an hour"),
        (&["top", "--interval", "soon"], "not a duration"),
        (&["daemon", "--keep-exited", "forever"], "not a duration"),
        // Probe selections
        (&["--pid", "1", "--probes", ""], "no probe family given"),
        (&["--pid", "1", "--probes", ",,,"], "no probe family given"),
        (
            &["--pid", "1", "--probes", "bogus:args"],
            "unknown probe family `bogus`",
        ),
        (
            &["--pid", "1", "--probes", "LAUNCH"],
            "unknown probe family `LAUNCH`",
        ),
        (
            &["--pid", "1", "--probes", ":args"],
            "unknown probe family ``",
        ),
        (
            &["--pid", "1", "--probes", "launch:bogus"],
            "unknown probe mode `bogus`",
        ),
        (
            &["--pid", "1", "--probes", "launch:args:args"],
            "unknown probe mode",
        ),
        (
            &["--pid", "1", "--probes", "launch,launch:args"],
            "`launch` is given in two modes",
        ),
        // `:counts` is the daemon's, without what needs each call.
        (
            &["--pid", "1", "--probes", "launch:counts"],
            "`:counts` is the daemon's",
        ),
        (
            &["daemon", "--probes", "launch:counts"],
            "which --overhead-budget above 0 needs",
        ),
        (
            &[
                "daemon",
                "--overhead-budget",
                "0",
                "--probes",
                "sync:counts",
                "--output-dir",
                "/tmp",
            ],
            "which --output-dir needs",
        ),
        (
            &[
                "daemon",
                "--overhead-budget",
                "0",
                "--probes",
                "launch:counts",
                "--gpu-time",
            ],
            "which --gpu-time needs",
        ),
        (
            &[
                "daemon",
                "--overhead-budget",
                "0",
                "--counts-time-every",
                "4",
            ],
            "--counts-time-every times calls counted in the kernel",
        ),
        (
            &["daemon", "--counts-time-every", "0"],
            "invalid value '0' for '--counts-time-every <N>'",
        ),
        (
            &["daemon", "--counts-time-every", "4096"],
            "4096 is not in 1..=4095",
        ),
        // Outputs
        (&["--pid", "1", "--output", ""], "must end in .jsonl"),
        (&["--pid", "1", "--output", ".jsonl"], "must end in .jsonl"),
        (&["--pid", "1", "--output", "/tmp"], "must end in .jsonl"),
        (
            &["--pid", "1", "--output", "/tmp/t.jsonl/"],
            "names a directory",
        ),
        (&["--pid", "1", "--summary", "yaml"], "invalid value 'yaml'"),
        (
            &[
                "--pid",
                "1",
                "--output",
                "/tmp/same.jsonl",
                "--summary-file",
                "/tmp/same.jsonl",
            ],
            "name the same file",
        ),
        // The daemon
        (&["daemon", "--listen", "bogus"], "invalid socket address"),
        (
            &["daemon", "--listen", "127.0.0.1:99999"],
            "invalid socket address",
        ),
        (
            &["daemon", "--listen", "localhost:9464"],
            "invalid socket address",
        ),
        (&["daemon", "--max-file-mb", "0"], "0 is not in 1.."),
        (&["daemon", "--max-files", "0"], "0 is not in 1.."),
        (&["daemon", "--max-files", "-1"], "unexpected argument '-1'"),
        // Commands
        (&["stats"], "required arguments were not provided: <FILE>"),
        (&["frobnicate"], "unexpected argument 'frobnicate'"),
        (&[], "nothing to trace"),
    ];
    for (args, needle) in cases {
        expect_failure(args, &[], 2, needle);
    }
    // A bad environment variable is a bad argument too.
    expect_failure(
        &["--pid", "1"],
        &[("GPUTRACE_RING_BYTES", "5000")],
        2,
        "GPUTRACE_RING_BYTES=5000",
    );
    // `:counts` keeps its calls' starts in task storage: with the in-flight
    // map forced, it is refused (a runtime failure: the kernel decides).
    expect_failure(
        &[
            "daemon",
            "--overhead-budget",
            "0",
            "--probes",
            "launch:counts",
        ],
        &[("GPUTRACE_INFLIGHT", "map")],
        1,
        "`:counts` needs task storage",
    );
}

/// A PID whose process is a zombie (exited, never reaped).
fn zombie() -> (std::process::Child, u32) {
    let dir = scratch("zombie");
    let file = dir.join("pid");
    // The shell's background child exits; `exec sleep` never reaps it.
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sleep 0.05 & echo $! > {}; exec sleep 60",
            file.display()
        ))
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if let Ok(s) = std::fs::read_to_string(&file) {
            if let Ok(pid) = s.trim().parse::<u32>() {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                if stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
                {
                    return (parent, pid);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = parent.kill();
    let _ = parent.wait();
    panic!("no zombie");
}

/// A kernel thread's PID (PF_KTHREAD in /proc/PID/stat's flags).
fn kernel_thread() -> Option<(u32, String)> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let comm = stat[stat.find('(')? + 1..stat.rfind(')')?].to_string();
        let flags: u64 = stat[stat.rfind(')')? + 2..]
            .split(' ')
            .nth(6)?
            .parse()
            .ok()?;
        if flags & 0x0020_0000 != 0 {
            return Some((pid, comm));
        }
    }
    None
}

/// Targets that exist but cannot be traced: exit 1, one line.
#[test]
fn untraceable_targets_are_one_line_and_exit_1() {
    let (mut parent, z) = zombie();
    expect_failure(
        &["--pid", &z.to_string()],
        &[],
        1,
        &format!("process {z} has already exited"),
    );
    let _ = parent.kill();
    let _ = parent.wait();
    if let Some((k, comm)) = kernel_thread() {
        expect_failure(
            &["--pid", &k.to_string()],
            &[],
            1,
            &format!("process {k} ({comm}) maps neither libcuda nor libnccl"),
        );
    }
    expect_failure(
        &["--pid", "4294967295"],
        &[],
        1,
        "no process with PID 4294967295",
    );
}

/// `--libcuda`/`--libnccl` given files that are no library: said before
/// anything is calibrated or attached.
#[test]
fn override_libraries_that_are_not_libraries() {
    let w = Workload::start(&[]);
    let pid = w.pid.to_string();
    let dir = scratch("badlibs");
    let truncated = dir.join("truncated.so");
    let whole = std::fs::read(sim_dir().join("libcuda.so.1")).unwrap();
    std::fs::write(&truncated, &whole[..3000]).unwrap();
    let t = truncated.to_str().unwrap();
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let sh = sh.to_str().unwrap();
    let cases: &[(&str, &str, String)] = &[
        (
            "--libcuda",
            "/etc/passwd",
            "--libcuda /etc/passwd: not an ELF shared library".into(),
        ),
        (
            "--libcuda",
            t,
            format!("--libcuda {t}: not an ELF shared library"),
        ),
        (
            "--libcuda",
            "/tmp",
            "--libcuda /tmp: not a regular file".into(),
        ),
        (
            "--libnccl",
            "/dev/zero",
            "--libnccl /dev/zero: not a regular file".into(),
        ),
        (
            "--libcuda",
            sh,
            format!("--libcuda {sh}: defines none of the libcuda functions gputrace probes"),
        ),
        (
            "--libnccl",
            "/nonexistent/libnccl.so.2",
            "--libnccl /nonexistent/libnccl.so.2: No such file or directory".into(),
        ),
    ];
    for (opt, path, needle) in cases {
        expect_failure(&["--pid", &pid, opt, path], &[], 1, needle);
    }
    // A PID given twice is one target.
    let out = dir.join("t.jsonl");
    let t = Tracer::attach(&[
        "--pid",
        &format!("{pid},{pid}"),
        "--pid",
        &pid,
        "--duration",
        "200ms",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(
        t.stderr.seen.iter().any(|l| l.ends_with("to 1 process")),
        "{:?}",
        t.stderr.seen
    );
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
}

/// Outputs that cannot be written: exit 1, one line, before attaching.
#[test]
fn outputs_that_cannot_be_written() {
    let w = Workload::start(&[]);
    let pid = w.pid.to_string();
    let dir = scratch("badout");
    let d = dir.join("dir.jsonl");
    std::fs::create_dir(&d).unwrap();
    let link = dir.join("full.jsonl");
    symlink("/dev/full", &link).unwrap();
    let (d, link) = (d.to_str().unwrap(), link.to_str().unwrap());
    let cases: &[(&[&str], String)] = &[
        (
            &["--output", d],
            format!("cannot write {d}: Is a directory"),
        ),
        (
            &["--output", link],
            format!("cannot write {link}: it is a symbolic link"),
        ),
        (
            &["--output", "/nonexistent/dir/t.json"],
            "cannot write /nonexistent/dir/t.json: No such file or directory".into(),
        ),
        (
            &["--summary-file", "/dev/full"],
            "cannot write /dev/full: it is not a regular file".into(),
        ),
        (
            &["--summary-file", dir.to_str().unwrap()],
            format!("cannot write {}: Is a directory", dir.display()),
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["--pid", &pid];
        args.extend_from_slice(extra);
        expect_failure(&args, &[], 1, needle);
    }
}

/// `--summary-file` on a full disk: the trace runs, the summary cannot be
/// written, and that is the one error line (exit 1).
#[test]
fn summary_file_on_a_full_disk() {
    let dir = scratch("fullsummary");
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8k", "tmpfs"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(ok.success(), "mounting a tmpfs needs root");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(dir.clone());
    // Fill it.
    let _ = std::fs::write(dir.join("fill"), vec![0u8; 64 << 10]);
    let mut w = Workload::start(&["--loop", "--launches", "10"]);
    w.go();
    let s = dir.join("s.txt");
    expect_failure(
        &[
            "--pid",
            &w.pid.to_string(),
            "--duration",
            "300ms",
            "--summary-file",
            s.to_str().unwrap(),
        ],
        &[],
        1,
        &format!("writing {} failed: No space left on device", s.display()),
    );
}

/// `--listen` where it cannot listen: exit 1, one line, the right hint.
#[test]
fn daemon_listen_that_cannot_be_bound() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    expect_failure(
        &["daemon", "--listen", &addr],
        &[],
        1,
        &format!("cannot listen on {addr}: Address already in use"),
    );
    // TEST-NET-1 (RFC 5737): on no interface of this host.
    let f =
        Tracer::spawn(&["daemon", "--listen", "192.0.2.1:9464"]).finish(Duration::from_secs(30));
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    let text = f.stderr_text();
    assert!(text.contains("cannot listen on 192.0.2.1:9464"), "{text}");
    assert!(!text.contains("another daemon there"), "{text}");
}
