//! Issue 14: `gputrace stats` holds a bounded amount of memory whatever the
//! file (it streams), and says where a bad line is: a file of ~130 MB with
//! a 40 MiB line in it is read in well under 64 MiB of RSS.

#![allow(clippy::print_stderr)] // tests say what they measured

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn stats_streams_a_large_file_with_a_giant_line() {
    let golden =
        std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/input.jsonl"))
            .unwrap();
    let text = std::str::from_utf8(&golden).unwrap();
    let first = text.lines().next().unwrap();
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"summary\""))
        .collect();
    let dir = std::env::temp_dir().join(format!("gputrace-reader-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, "{first}").unwrap();
    // Line 2: 40 MiB without a newline, more than the reader's 16 MiB limit.
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..40 {
        f.write_all(&chunk).unwrap();
    }
    f.write_all(b"\n").unwrap();
    let rounds = 18_000;
    for _ in 0..rounds {
        for l in &calls {
            writeln!(f, "{l}").unwrap();
        }
    }
    f.flush().unwrap();
    drop(f);
    let size = std::fs::metadata(&path).unwrap().len();

    let child = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["stats", "--format", "json"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let out = child.wait_with_output_rusage(pid);
    let _ = std::fs::remove_dir_all(&dir);
    let (status, stdout, stderr, max_rss_kib) = out;
    eprintln!(
        "stats on {} MB: peak RSS {} MiB",
        size / 1_000_000,
        max_rss_kib / 1024
    );
    assert_eq!(status, 1, "{stderr}");
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{stderr}");
    assert!(
        errors[0].ends_with("big.jsonl:2: line longer than 16 MiB"),
        "{stderr}"
    );
    assert!(
        errors[1].contains("has 1 unreadable line(s), first at line 2"),
        "{stderr}"
    );
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let total = j["total"]["calls"]
        .as_u64()
        .or_else(|| j["total"]["events"].as_u64());
    if let Some(n) = total {
        assert_eq!(n, 1 + rounds * calls.len() as u64);
    }
    assert!(size > 120_000_000);
    assert!(
        max_rss_kib < 64 * 1024,
        "peak RSS {max_rss_kib} KiB reading a {size}-byte file"
    );
}

/// Waits for the child by pid with wait4, for its peak RSS.
trait WaitRusage {
    fn wait_with_output_rusage(self, pid: i32) -> (i32, String, String, u64);
}

impl WaitRusage for std::process::Child {
    fn wait_with_output_rusage(mut self, pid: i32) -> (i32, String, String, u64) {
        use std::io::Read;
        let mut so = self.stdout.take().unwrap();
        let mut se = self.stderr.take().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let mut err = String::new();
        let _ = se.read_to_string(&mut err);
        let out = t.join().unwrap();
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child by its pid.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        assert_eq!(r, pid);
        (libc::WEXITSTATUS(status), out, err, ru.ru_maxrss as u64)
    }
}
