//! Root tests: a libcuda that an unprivileged user could have written is
//! never loaded with privileges (the booby-trapped library of tests/trap,
//! mapped by a process of an unprivileged user from a directory it owns),
//! and the calibration cache cannot be poisoned.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use gputrace_tests::node::Daemon;
use gputrace_tests::tmux::Pane;
use gputrace_tests::trap::{sha256, HelperSeen, Trap, VICTIM_UID};
use gputrace_tests::*;
use serde_json::json;

const NO_CAPS: &str = "0000000000000000";

/// Nothing of the trap ran as root in this build's gputrace; it was loaded
/// (the victim maps it, so gputrace calibrates it), and only by a helper
/// without privileges.
fn assert_sandboxed(trap: &Trap, seen: &[HelperSeen], what: &str) {
    let markers = trap.markers_of_gputrace();
    println!("{what}: markers left by gputrace: {markers:?}");
    for m in &markers {
        assert!(
            m.uid != 0 && m.euid != 0,
            "{what}: the trap's constructor ran as root inside gputrace: {m:?}"
        );
    }
    assert!(
        !seen.is_empty(),
        "{what}: no gputrace process was seen loading the trap (was it calibrated at all?)"
    );
    for h in seen {
        println!(
            "{what}: helper {} Uid {:?} Gid {:?} Groups {:?} CapEff {:?} CapBnd {:?} NoNewPrivs {:?} Seccomp {:?}",
            h.pid,
            h.field("Uid"),
            h.field("Gid"),
            h.field("Groups"),
            h.field("CapEff"),
            h.field("CapBnd"),
            h.field("NoNewPrivs"),
            h.field("Seccomp")
        );
        assert_eq!(h.field("Uid"), "65534 65534 65534 65534", "{what}");
        assert_eq!(h.field("Gid"), "65534 65534 65534 65534", "{what}");
        assert_eq!(h.field("Groups"), "", "{what}");
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(h.field(cap), NO_CAPS, "{what}: {cap}");
        }
        assert_eq!(h.field("NoNewPrivs"), "1", "{what}");
        assert_eq!(h.field("Seccomp"), "2", "{what}");
    }
}

/// Waits until a helper has been seen (or `timeout`).
fn wait_seen(watch: &gputrace_tests::trap::HelperWatch, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while watch.seen().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_untrusted_libcuda_never_runs_code_as_root_under_all_daemon_or_top() {
    let trap = Trap::build("trap-modes");
    let victim = trap.start_victim();
    let cache = scratch("trap-modes-cache").join("cache");
    let cache_env = [("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())];

    // gputrace --all: the first scan finds the victim.
    let watch = trap.watch_helpers();
    let t = Tracer::spawn_with_env(
        &["--all", "--duration", "2s", "--summary", "none"],
        &cache_env,
    );
    let f = t.finish(Duration::from_secs(120));
    assert!(f.status.success(), "{}", f.stderr_text());
    println!("--all said:\n{}", f.stderr_text());
    assert_sandboxed(&trap, &watch.finish(), "gputrace --all");
    let said = f.stderr_text();
    let lib = trap.lib.to_string_lossy();
    assert_eq!(
        said.lines()
            .filter(|l| l.contains(&*lib) && l.contains("not trusted"))
            .count(),
        1,
        "said once: {said}"
    );

    // gputrace daemon.
    trap.clear_markers();
    let watch = trap.watch_helpers();
    let d = Daemon::start(&[], &cache_env);
    d.wait_probed(&trap.evil);
    wait_seen(&watch, Duration::from_secs(10));
    // The daemon installs its SIGTERM handler just after its `attached`
    // line: a signal sent at once can end it before (exit 143).
    std::thread::sleep(Duration::from_millis(500));
    d.tracer.signal(libc::SIGTERM);
    let Daemon { tracer, .. } = d;
    let f = tracer.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}: {}", f.status, f.stderr_text());
    assert_sandboxed(&trap, &watch.finish(), "gputrace daemon");

    // gputrace top, in a terminal.
    trap.clear_markers();
    let watch = trap.watch_helpers();
    let pane = Pane::start("trap-top", 120, 40);
    pane.type_text(&format!(
        "GPUTRACE_CACHE_DIR={} {} top; echo TOP-EXITED=$?",
        cache.display(),
        gputrace_bin().display()
    ));
    pane.send(&["Enter"]);
    pane.wait_for("the top screen", Duration::from_secs(60), |s| {
        s.contains("gputrace top · every process") && s.contains("Processes:")
    });
    wait_seen(&watch, Duration::from_secs(30));
    pane.wait_for("the victim's row", Duration::from_secs(30), |s| {
        s.lines()
            .any(|l| l.split_whitespace().any(|w| w == victim.pid.to_string()))
    });
    pane.send(&["q"]);
    pane.wait_for("the shell again", Duration::from_secs(60), |s| {
        s.contains("TOP-EXITED=0")
    });
    assert_sandboxed(&trap, &watch.finish(), "gputrace top");
    drop(victim);
}

/// Traces the simulated workload whose kernel handles were all made before
/// gputrace attached (so every name comes from calibration or the cache),
/// with the calibration cache in `cache`: the launches' kernel names, and
/// what gputrace said.
fn names_from_handles(name: &str, cache: &Path) -> (Vec<serde_json::Value>, String) {
    let out = scratch(name).join("t.jsonl");
    let mut w = Workload::start(&["--duration-ms", "200", "--launches", "3"]);
    let mut t = Tracer::spawn_with_env(
        &[
            "--pid",
            &w.pid.to_string(),
            "--output",
            out.to_str().unwrap(),
        ],
        &[("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())],
    );
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(60));
    w.go();
    assert!(w.finish().0.success());
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    (kernels(&events, "cuLaunchKernel"), f.stderr_text())
}

fn assert_named(kernels: &[serde_json::Value], what: &str) {
    assert!(!kernels.is_empty(), "{what}: no launches");
    for k in kernels {
        assert!(
            [json!(VECTOR_ADD), json!(REDUCE), json!(RELU)].contains(k),
            "{what}: a launch named {k} (a poisoned layout?)"
        );
    }
}

/// Every file of `dir`, as text.
fn cache_text(dir: &Path) -> String {
    let mut s = String::new();
    if let Ok(d) = std::fs::read_dir(dir) {
        for e in d.flatten() {
            s.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    s
}

#[test]
fn an_untrusted_result_never_reaches_the_cache_and_a_forged_build_id_poisons_nothing() {
    // The trap carries the simulated driver's build id and answers
    // calibration with its own layout (+8; the simulator's is +40).
    let trap = Trap::build("trap-cache");
    let victim = trap.start_victim();
    let cache = scratch("trap-cache-dir").join("cache");
    let t = Tracer::spawn_with_env(
        &["--all", "--duration", "2s", "--summary", "none"],
        &[("GPUTRACE_CACHE_DIR", cache.to_str().unwrap())],
    );
    let f = t.finish(Duration::from_secs(120));
    assert!(f.status.success(), "{}", f.stderr_text());
    drop(victim);
    let text = cache_text(&cache);
    println!("the cache after --all: {text}");
    let forged = gputrace_tests::trap::build_id(&trap.lib);
    assert!(
        !text.contains(&sha256(&trap.lib)) && !text.contains(&forged),
        "an untrusted library's result was written to the cache: {text}"
    );
    // The cache, such as it is, still names the real driver's kernels.
    let (kernels, said) = names_from_handles("trap-cache-names", &cache);
    assert_named(&kernels, &said);
    let text = cache_text(&cache);
    assert!(
        text.contains(&sha256(&sim_dir().join("libcuda.so.1"))),
        "the trusted driver's layout is cached by its content: {text}"
    );
}

/// A poisoned entry for the simulated driver (the +8 layout), under its
/// build id (the old key) and under its content hash.
fn write_poison(dir: &Path) {
    let lib = sim_dir().join("libcuda.so.1");
    let id = gputrace_tests::trap::build_id(&lib);
    let v1 = json!({ format!("build-id:{id}"): [8] });
    let v2 = json!({ format!("sha256:{}", sha256(&lib)): [8] });
    std::fs::write(dir.join("calibration-v1.json"), v1.to_string()).unwrap();
    std::fs::write(dir.join("calibration-v2.json"), v2.to_string()).unwrap();
    for f in ["calibration-v1.json", "calibration-v2.json"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// (owner, mode) of every file of `dir` and the dir itself, and the texts.
fn snapshot(dir: &Path) -> Vec<(String, u32, u32, String)> {
    let mut out = vec![(
        ".".to_string(),
        std::fs::metadata(dir).unwrap().uid(),
        std::fs::metadata(dir).unwrap().mode(),
        String::new(),
    )];
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        out.push((
            e.file_name().to_string_lossy().into_owned(),
            m.uid(),
            m.mode(),
            std::fs::read_to_string(e.path()).unwrap_or_default(),
        ));
    }
    out
}

#[test]
fn a_cache_with_another_owner_or_an_open_mode_is_ignored_and_left_alone() {
    let base = scratch("cache-modes");
    type Setup = fn(&Path);
    let cases: [(&str, Setup); 4] = [
        ("a directory owned by another user", |d| {
            std::os::unix::fs::chown(d, Some(VICTIM_UID), Some(VICTIM_UID)).unwrap();
        }),
        ("a directory others may read", |d| {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }),
        ("a file others may read", |d| {
            for f in ["calibration-v1.json", "calibration-v2.json"] {
                std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o644))
                    .unwrap();
            }
        }),
        ("a file owned by another user", |d| {
            for f in ["calibration-v1.json", "calibration-v2.json"] {
                std::os::unix::fs::chown(d.join(f), Some(VICTIM_UID), Some(VICTIM_UID)).unwrap();
            }
        }),
    ];
    for (i, (what, setup)) in cases.iter().enumerate() {
        let dir = base.join(format!("cache-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        write_poison(&dir);
        setup(&dir);
        let before = snapshot(&dir);
        let (kernels, said) = names_from_handles(&format!("cache-modes-{i}"), &dir);
        println!("{what}: {said}");
        assert_named(&kernels, what);
        assert_eq!(
            said.matches("ignoring the calibration cache").count(),
            1,
            "{what}: said once: {said}"
        );
        assert_eq!(snapshot(&dir), before, "{what}: the cache was changed");
    }
}
