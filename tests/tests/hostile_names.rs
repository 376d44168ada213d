//! Root tests: command names and file paths are chosen by whoever runs the
//! traced process; gputrace prints them on root's terminal (`--print`,
//! `list`, `top`, its own messages), so terminal escape sequences in them
//! must not reach it.

use std::time::Duration;

use gputrace_tests::*;

const ESC: char = '\u{1b}';

/// The simulator in a directory whose name holds an escape sequence, with
/// the workload under a name that does too (its command name).
fn hostile_copy(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch(name).join(format!("lib{ESC}]0;owned{}", '\u{7}'));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["libcuda.so.1", "libnccl.so.2", "libcudart.so.13"] {
        std::fs::copy(sim_dir().join(f), dir.join(f)).unwrap();
    }
    let exe = dir.join(format!("w{ESC}[2J{ESC}[31m"));
    std::fs::copy(sim_dir().join("gputrace-workload"), &exe).unwrap();
    (dir, exe)
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(ESC) && !text.contains('\u{7}'),
        "{what} printed a control character: {text:?}"
    );
}

#[test]
fn escape_sequences_in_names_and_paths_do_not_reach_the_terminal() {
    let (dir, exe) = hostile_copy("hostile-names");

    // --print: the command name on every line.
    let f = run_gputrace(&[
        "--print",
        "--summary",
        "text",
        "--",
        exe.to_str().unwrap(),
        "--launches",
        "2",
    ]);
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(f.stdout.contains("cuLaunchKernel"), "{}", f.stdout);
    assert_clean("--print", &f.stdout);
    assert_clean("gputrace's messages", &f.stderr_text());

    // --all: the path of a newly mapped file in its message; `list`.
    let mut t = Tracer::attach(&["--all", "--duration", "4s", "--summary", "none"]);
    let mut w = Workload::start_bin(&exe, &["--launches", "2"]);
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(30));
    let list = std::process::Command::new(gputrace_bin())
        .arg("list")
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(list.contains(&w.pid.to_string()), "{list}");
    assert_clean("list", &list);
    w.go();
    assert!(w.finish().0.success());
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    let said = f.stderr_text();
    assert!(
        said.contains("newly mapped") && said.contains("lib?]0;owned?"),
        "{said}"
    );
    assert_clean("--all", &said);
    let _ = std::fs::remove_dir_all(dir);
}

/// Unicode bidirectional controls (a right-to-left override shows what
/// follows reversed: `w`, U+202E, `gpj.exe` reads as `wexe.jpg`) are escaped like
/// control characters, in `--print` and in the summary, text or JSON.
#[test]
fn bidi_controls_in_names_do_not_reach_the_terminal() {
    let dir = scratch("hostile-bidi");
    for f in ["libcuda.so.1", "libnccl.so.2", "libcudart.so.13"] {
        std::fs::copy(sim_dir().join(f), dir.join(f)).unwrap();
    }
    let exe = dir.join("w\u{202e}gpj.exe");
    std::fs::copy(sim_dir().join("gputrace-workload"), &exe).unwrap();
    let bidi = |s: &str| {
        s.chars()
            .any(|c| matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
    };
    for summary in ["text", "json"] {
        let f = run_gputrace(&[
            "--print",
            "--summary",
            summary,
            "--",
            exe.to_str().unwrap(),
            "--launches",
            "2",
        ]);
        assert!(f.status.success(), "{}", f.stderr_text());
        assert!(f.stdout.contains("cuLaunchKernel"), "{}", f.stdout);
        assert!(!bidi(&f.stdout), "{summary}: {:?}", f.stdout);
        assert!(!bidi(&f.stderr_text()), "{:?}", f.stderr_text());
        // On every --print line, and in the summary's process.
        let printed: Vec<&str> = f
            .stdout
            .lines()
            .filter(|l| l.contains("] cuLaunchKernel "))
            .collect();
        assert_eq!(printed.len(), 2, "{}", f.stdout);
        assert!(
            printed.iter().all(|l| l.contains(" w?gpj.exe[")),
            "{printed:?}"
        );
        let lines = printed.len();
        assert!(
            f.stdout.matches("w?gpj.exe").count() > lines,
            "{summary}: {}",
            f.stdout
        );
    }
}
