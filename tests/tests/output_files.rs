//! Root tests: gputrace (running as root) never writes through a symbolic
//! link someone else planted where it writes, never overwrites another
//! user's file in a shared directory, and refuses an output directory that
//! anyone may rewrite.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gputrace_tests::node::{kernel_probes_under, sample, Daemon};
use gputrace_tests::trap::VICTIM_UID;
use gputrace_tests::*;

const PRECIOUS: &str = "precious: root's own file\n";

/// A directory like /tmp (mode 1777) and a root-owned file outside it.
fn shared_dir(name: &str) -> (PathBuf, PathBuf) {
    let base = scratch(name);
    let shared = base.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let precious = base.join("precious");
    std::fs::write(&precious, PRECIOUS).unwrap();
    (shared, precious)
}

/// A symbolic link at `at` to `target`, made by the unprivileged user.
fn plant_symlink(target: &Path, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
    std::os::unix::fs::lchown(at, Some(VICTIM_UID), Some(VICTIM_UID)).unwrap();
}

fn assert_untouched(precious: &Path) {
    let now = std::fs::read_to_string(precious).unwrap();
    assert!(
        now == PRECIOUS,
        "root's file was written through the planted link: it now holds {} bytes, starting {:?}",
        now.len(),
        &now[..now.len().min(120)]
    );
}

#[test]
fn daemon_timelines_never_go_through_a_planted_symlink() {
    let (shared, precious) = shared_dir("planted-daemon");
    let d = Daemon::start(&["--output-dir", shared.to_str().unwrap()], &[]);
    // Planted once the daemon runs, before it opens its first file (at the
    // first call it sees): the names it is about to use.
    for n in 1..=3 {
        plant_symlink(&precious, &shared.join(format!("gputrace-{n:06}.jsonl")));
    }
    let mut w = Workload::start(&["--launches", "50"]);
    // libcuda's probes, not only the first file's (libnccl's come first,
    // libcuda's after its calibration).
    let libcuda = sim_dir().join("libcuda.so.1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while kernel_probes_under(d.pid(), &libcuda) == 0 {
        assert!(Instant::now() < deadline, "libcuda was never probed");
        std::thread::sleep(Duration::from_millis(20));
    }
    w.go();
    let pid = w.pid;
    assert!(w.finish().0.success());
    // All 50, or (when other tests' workloads fill the ring) what arrived.
    let counted = || {
        sample(
            &d.metrics(),
            "gputrace_api_calls_total",
            &[("pid", &pid.to_string()), ("api", "cuLaunchKernel")],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = counted();
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = counted();
        if now == Some(50.0) || now == last || Instant::now() > deadline {
            last = now;
            break;
        }
        last = now;
    }
    let Daemon { tracer, .. } = d;
    tracer.signal(libc::SIGTERM);
    let f = tracer.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    assert_untouched(&precious);
    let mut names: Vec<String> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    println!("{names:?}");
    for n in 1..=3 {
        let p = shared.join(format!("gputrace-{n:06}.jsonl"));
        assert!(
            std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{} is no longer the planted link",
            p.display()
        );
    }
    // The timeline went on at the next free name, in files of root's
    // that hold what the metrics counted.
    let mut mine = 0;
    for name in names
        .iter()
        .filter(|n| n.as_str() > "gputrace-000003.jsonl")
    {
        let p = shared.join(name);
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.file_type().is_file() && m.uid() == 0, "{name}");
        let (events, summary) = read_jsonl(&p);
        assert_eq!(summary["events"], calls_in(&events));
        mine += events
            .iter()
            .filter(|e| e["pid"] == pid && e["api"] == "cuLaunchKernel")
            .count();
    }
    assert!(
        names.iter().any(|n| n == "gputrace-000004.jsonl"),
        "{names:?} counted {last:?}; the daemon said {}",
        f.stderr_text()
    );
    assert_eq!(Some(mine as f64), last.or(Some(0.0)), "{names:?}");
}

#[test]
fn daemon_refuses_an_output_dir_anyone_may_rewrite() {
    let dir = scratch("open-output-dir").join("open");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let t = Tracer::spawn(&[
        "daemon",
        "--listen",
        "127.0.0.1:0",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    let f = t.finish(Duration::from_secs(30));
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    assert_eq!(f.stderr.len(), 1, "one line: {:?}", f.stderr);
    let line = &f.stderr[0];
    assert!(
        line.starts_with("gputrace: --output-dir") && line.contains("sticky"),
        "{line}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// `gputrace --output OUT -- workload --launches 3`.
fn trace_to(out: &Path) -> Finished {
    let bin = workload_bin();
    run_gputrace(&[
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "none",
        "--",
        bin.to_str().unwrap(),
        "--launches",
        "3",
    ])
}

#[test]
fn trace_output_never_follows_a_symlink_nor_overwrites_another_users_file() {
    let (shared, precious) = shared_dir("planted-trace");

    // A link planted at the output path.
    for file in ["t.jsonl", "t.json"] {
        let at = shared.join(file);
        plant_symlink(&precious, &at);
        let f = trace_to(&at);
        assert_eq!(f.status.code(), Some(1), "{file}: {}", f.stderr_text());
        assert_eq!(f.stderr.len(), 1, "one line: {:?}", f.stderr);
        assert!(f.stderr[0].contains("symbolic link"), "{}", f.stderr[0]);
        assert_untouched(&precious);
    }

    // Another user's file in the shared directory.
    let theirs = shared.join("theirs.jsonl");
    std::fs::write(&theirs, "their data\n").unwrap();
    std::os::unix::fs::chown(&theirs, Some(VICTIM_UID), Some(VICTIM_UID)).unwrap();
    let f = trace_to(&theirs);
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    assert_eq!(f.stderr.len(), 1, "one line: {:?}", f.stderr);
    assert!(
        f.stderr[0].contains("owned by uid 12345"),
        "{}",
        f.stderr[0]
    );
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "their data\n");

    // A second name of root's file (a hard link) in the shared directory.
    let linked = shared.join("linked.jsonl");
    std::fs::hard_link(&precious, &linked).unwrap();
    let f = trace_to(&linked);
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    assert!(f.stderr[0].contains("link"), "{}", f.stderr[0]);
    assert_untouched(&precious);

    // Our own file: overwritten, as before; a new one: made.
    let mine = shared.join("mine.jsonl");
    std::fs::write(&mine, "an old trace\n").unwrap();
    for out in [mine, shared.join("new.jsonl")] {
        let f = trace_to(&out);
        assert!(f.status.success(), "{}", f.stderr_text());
        let (events, _) = read_jsonl(&out);
        assert_eq!(of_api(&events, "cuLaunchKernel").len(), 3);
    }
}

/// A directory of root's reached through a link another user planted in
/// the shared directory: `SHARED/link` → `PRIVATE` (which holds root's
/// `config.json`).
fn planted_dir_link(name: &str) -> (PathBuf, PathBuf) {
    let (shared, _) = shared_dir(name);
    let private = shared.parent().unwrap().join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("config.json"), PRECIOUS).unwrap();
    let link = shared.join("link");
    plant_symlink(&private, &link);
    (link, private)
}

fn assert_refused_link(f: &Finished, link: &Path) {
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    assert_eq!(f.stderr.len(), 1, "one line: {:?}", f.stderr);
    let said = format!("{} is a symbolic link", link.display());
    assert!(f.stderr[0].contains(&said), "{}", f.stderr[0]);
}

#[test]
fn no_file_is_written_through_a_planted_link_in_a_directory_component() {
    let (link, private) = planted_dir_link("planted-component");
    let bin = workload_bin();
    let bin = bin.to_str().unwrap();
    let target = link.join("config.json");
    let target = target.to_str().unwrap();
    let new = link.join("new.jsonl");
    let new = new.to_str().unwrap();
    for args in [
        vec!["--output", target, "--summary", "none"],
        vec!["--output", new, "--summary", "none"],
        vec!["--summary", "text", "--summary-file", target],
        vec!["--summary", "json", "--summary-file", new],
    ] {
        let mut all = args.clone();
        all.extend(["--", bin, "--launches", "3"]);
        let f = run_gputrace(&all);
        assert_refused_link(&f, &link);
        assert_untouched(&private.join("config.json"));
        assert!(!private.join("new.jsonl").exists(), "{args:?}");
    }

    // The daemon's output directory, below the link and the link itself.
    for dir in [link.join("timelines"), link.clone()] {
        let t = Tracer::spawn(&[
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--output-dir",
            dir.to_str().unwrap(),
        ]);
        let f = t.finish(Duration::from_secs(30));
        assert_refused_link(&f, &link);
        assert!(
            f.stderr[0].starts_with("gputrace: --output-dir"),
            "{}",
            f.stderr[0]
        );
    }

    // The cache: not used (said), nothing made where the link points; the
    // trace goes on without it.
    let out = scratch("planted-component-out").join("t.jsonl");
    let cache = link.join("cache");
    let f = Tracer::spawn_with_env(
        &[
            "--output",
            out.to_str().unwrap(),
            "--summary",
            "none",
            "--",
            bin,
            "--launches",
            "3",
        ],
        &[("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())],
    )
    .finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    assert_eq!(of_api(&events, "cuLaunchKernel").len(), 3);
    let mut names: Vec<_> = std::fs::read_dir(&private)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec![std::ffi::OsString::from("config.json")]);
    assert_untouched(&private.join("config.json"));
    let said = format!("{} is a symbolic link", link.display());
    assert!(
        f.stderr.iter().any(
            |l| l.starts_with("gputrace: ignoring the calibration cache") && l.contains(&said)
        ),
        "{}",
        f.stderr_text()
    );
}
