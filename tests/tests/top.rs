//! Root test: `gputrace top` in a tmux pane, against the simulated workload
//! started after it: the process appears with the rates its own call counts
//! imply, keys sort, filter and quit, and the terminal is given back.
//! Everything waits by polling the screen with a timeout; nothing depends
//! on how fast the machine is.

#![allow(clippy::print_stderr)] // tests say what they measured

use std::time::{Duration, Instant};

use gputrace_tests::tmux::Pane;
use gputrace_tests::*;

/// `14.3k` → 14300, `1.50M` → 1.5e6, `12.5Mi` → 12.5 × 2^20, `88%` → 0.88.
fn number(s: &str) -> f64 {
    let units: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("%", 0.01),
        ("", 1.0),
    ];
    for (suffix, scale) in units {
        if let Some(v) = s.strip_suffix(suffix) {
            if let Ok(v) = v.parse::<f64>() {
                return v * scale;
            }
        }
    }
    panic!("not a number of the process table: {s:?}")
}

const COLUMNS: [&str; 11] = [
    "LAUNCH/s", "COPY/s", "HtoD B/s", "DtoH B/s", "DtoD B/s", "DEV MEM", "PEAK", "NCCL/s",
    "NCCL B/s", "SYNC", "LOST",
];

/// The process table row of `pid`, by column (for a 120-column screen).
fn row(screen: &str, pid: u32) -> Option<Vec<(&'static str, f64)>> {
    let header = screen.lines().find(|l| l.contains("COMMAND"))?;
    let words: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        words.join(" "),
        format!("PID COMMAND {}", COLUMNS.join(" ")),
        "the 120-column process table has changed: update this test"
    );
    let line = screen.lines().find(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.iter().any(|x| *x == pid.to_string()) && w.contains(&"gputrace-worklo")
    })?;
    let after = line.split("gputrace-worklo").nth(1)?;
    let cells: Vec<f64> = after.split_whitespace().map(number).collect();
    assert_eq!(cells.len(), COLUMNS.len(), "row: {line:?}");
    Some(COLUMNS.iter().copied().zip(cells).collect())
}

fn get(row: &[(&str, f64)], col: &str) -> f64 {
    row.iter().find(|(c, _)| *c == col).unwrap().1
}

fn within_factor(what: &str, shown: f64, expected: f64, factor: f64) {
    assert!(
        shown >= expected / factor && shown <= expected * factor,
        "{what}: top shows {shown}, the workload's counts imply {expected:.1} (factor {factor} allowed)"
    );
}

#[test]
fn top_shows_a_new_process_with_its_rates_and_gives_the_terminal_back() {
    let pane = Pane::start("rates", 120, 40);
    let cache = scratch("top-cache");
    let cmd = format!(
        "GPUTRACE_CACHE_DIR={} {} top; echo TOP-EXITED=$?",
        cache.display(),
        gputrace_bin().display()
    );
    pane.type_text(&cmd);
    pane.send(&["Enter"]);
    // The title is drawn once every probe is in.
    pane.wait_for("the top screen", Duration::from_secs(60), |s| {
        s.contains("gputrace top · every process") && s.contains("Processes:")
    });
    assert!(pane.alternate_screen());
    // NVML is looked for in the background: "reading NVML…" first.
    pane.wait_for("NVML's state", Duration::from_secs(30), |s| {
        s.contains("NVML not available")
    });

    // Started after top: it must be found by the periodic scan.
    // Per pass: 100 launches, 6 + 12 × 10 copy-section calls (120 copies and
    // memsets), 5 sync calls of which 3 sleep 2 ms: 231 calls.
    let mut w = Workload::start(&[
        "--loop",
        "--launches",
        "100",
        "--copies",
        "10",
        "--syncs",
        "1",
        "--sync-us",
        "2000",
    ]);
    let pid = w.pid;
    pane.wait_for("the workload's row", Duration::from_secs(30), |s| {
        row(s, pid).is_some()
    });
    w.go();
    let go = Instant::now();
    pane.wait_for("a launch rate", Duration::from_secs(30), |s| {
        row(s, pid).is_some_and(|r| get(&r, "LAUNCH/s") > 0.0)
    });
    // Two refreshes later the 1 s window is a whole second of steady work.
    std::thread::sleep(Duration::from_millis(2500));
    // A capture can catch a frame half drawn: take the next whole one.
    let screen = pane.wait_for("the workload's row again", Duration::from_secs(10), |s| {
        row(s, pid).is_some()
    });
    let shown = row(&screen, pid).expect("the row");
    eprintln!("{screen}");

    // Keys, while it runs. Sort: the next column after LAUNCH/s.
    let t = Instant::now();
    pane.send(&["s"]);
    pane.wait_for("sort by COPY/s", Duration::from_secs(10), |s| {
        s.contains("sort COPY/s")
    });
    eprintln!("key `s` answered on screen in {:?}", t.elapsed());
    // Filter by PID: the row stays; by something else: it goes.
    pane.send(&["/"]);
    pane.type_text(&pid.to_string());
    pane.send(&["Enter"]);
    pane.wait_for(
        "the PID filter, the row still there",
        Duration::from_secs(10),
        |s| s.contains(&format!("filter \"{pid}\"")) && row(s, pid).is_some(),
    );
    pane.send(&["/"]);
    pane.type_text("no-such-command");
    pane.wait_for("no match", Duration::from_secs(10), |s| {
        s.contains("No process matches \"no-such-command\"")
    });
    pane.send(&["Escape"]);
    pane.wait_for("the filter cleared", Duration::from_secs(10), |s| {
        !s.contains("filter \"") && row(s, pid).is_some()
    });

    // What the workload itself says it did.
    w.child.kill_with(libc::SIGTERM);
    let (status, done) = w.finish();
    let secs = go.elapsed().as_secs_f64();
    assert!(status.success());
    let passes = done as f64 / 231.0;
    assert!(passes >= 10.0, "only {passes} passes");
    let per_s = passes / secs;
    eprintln!("workload: {done} calls, {passes:.0} passes in {secs:.2} s; top showed {shown:?}");
    within_factor("LAUNCH/s", get(&shown, "LAUNCH/s"), 100.0 * per_s, 2.0);
    within_factor("COPY/s", get(&shown, "COPY/s"), 120.0 * per_s, 2.0);
    // HtoD: 4096 + 4096 + 1000 bytes, DtoH 8192 + 8192 + 2000, DtoD 16384 + 16384 + 3000, × 10.
    within_factor("HtoD B/s", get(&shown, "HtoD B/s"), 91_920.0 * per_s, 2.0);
    within_factor("DtoH B/s", get(&shown, "DtoH B/s"), 183_840.0 * per_s, 2.0);
    within_factor("DtoD B/s", get(&shown, "DtoD B/s"), 357_680.0 * per_s, 2.0);
    // Three 2 ms sleeps per pass, one thread: a share of the wall time.
    let sync = get(&shown, "SYNC");
    assert!(
        sync >= 0.006 * per_s / 2.0 && sync <= 1.1,
        "SYNC {sync}, expected about {:.2}",
        0.006 * per_s
    );
    assert_eq!(get(&shown, "NCCL/s"), 0.0);
    assert_eq!(get(&shown, "LOST"), 0.0);
    // Each pass allocates 2 MiB twice (rounded to the 2 MiB span: 1 MiB asked
    // each) and frees them: the peak is what one pass holds.
    assert_eq!(get(&shown, "PEAK"), 2.0 * 1048576.0, "{screen}");

    // It exited: marked, still listed for a while.
    pane.wait_for("the exit mark", Duration::from_secs(20), |s| {
        s.lines()
            .any(|l| l.contains(&pid.to_string()) && l.contains("✗ gputrace-worklo"))
    });

    pane.send(&["q"]);
    let s = pane.wait_for("the shell again", Duration::from_secs(60), |s| {
        s.contains("TOP-EXITED=0")
    });
    assert!(
        !s.contains("gputrace top ·"),
        "the TUI is still on screen:\n{s}"
    );
    assert!(
        !pane.alternate_screen(),
        "the alternate screen was not left"
    );
}

#[test]
fn calls_lost_are_counted_per_process() {
    // A 20000-launch burst into a 4 KiB ring: most calls cannot be recorded.
    let mut w = Workload::start(&["--launches", "20000"]);
    let pid = w.pid;
    let pane = Pane::start("lost", 120, 40);
    let cache = scratch("top-lost-cache");
    let cmd = format!(
        "GPUTRACE_RING_BYTES=4096 GPUTRACE_CACHE_DIR={} {} top --pid {pid}",
        cache.display(),
        gputrace_bin().display()
    );
    pane.type_text(&cmd);
    pane.send(&["Enter"]);
    pane.wait_for("the workload's row", Duration::from_secs(60), |s| {
        s.contains(&format!("gputrace top · PID {pid}")) && row(s, pid).is_some()
    });
    w.go();
    assert!(w.finish().0.success());
    // Once it is done, the row's count and the title's total (one process
    // traced: the same calls) settle.
    let title_lost = |s: &str| -> Option<f64> {
        let t = s.lines().next()?.split(" · lost ").nth(1)?;
        t.split_whitespace().next()?.parse().ok()
    };
    let s = pane.wait_for("the lost calls", Duration::from_secs(30), |s| {
        let (Some(r), Some(total)) = (row(s, pid), title_lost(s)) else {
            return false;
        };
        let lost = get(&r, "LOST");
        lost > 0.0 && (lost - total).abs() <= total * 0.01
    });
    let lost = get(&row(&s, pid).unwrap(), "LOST");
    assert!(lost < 20000.0, "{s}");
    pane.send(&["q"]);
    pane.wait_for("the shell again", Duration::from_secs(60), |s| {
        !s.contains("gputrace top ·")
    });
}

trait KillWith {
    fn kill_with(&mut self, sig: i32);
}

impl KillWith for std::process::Child {
    fn kill_with(&mut self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.id() as i32, sig) };
    }
}
