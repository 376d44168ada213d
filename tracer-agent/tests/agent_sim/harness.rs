//! Drives gputrace-workload with the agent loaded (no injector): builds the
//! simulator, spawns the workload, maps the agent's memfd through
//! /proc/PID/fd, talks on the control pipe and reads the ring.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracer_common::gpu::reader::{Ring, Snapshot};
use tracer_common::gpu::{AgentState, Record, HELLO, STOP};

/// The simulator built into this test's target directory.
pub(crate) fn sim_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let out = exe.parent().unwrap().parent().unwrap().join("agent-sim");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sim");
        let st = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&src)
            .arg(format!("OUT={}", out.display()))
            .status()
            .expect("running make for tests/sim");
        assert!(st.success(), "building tests/sim failed");
        out
    })
}

/// The agent shared library cargo built beside this test.
pub(crate) fn agent_so() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let p = dir.join("libgputrace_agent.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libgputrace_agent.so not found near {}", deps.display());
}

/// Lines the workload printed, shared with the thread reading them.
type Lines = Arc<(Mutex<Vec<String>>, Condvar)>;

pub(crate) struct Workload {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines,
    pub pid: i32,
}

impl Workload {
    /// Starts gputrace-workload with `args` (the agent flags included by the caller).
    pub(crate) fn spawn(args: &[&str], env: &[(&str, &str)]) -> Workload {
        let mut cmd = Command::new(sim_dir().join("gputrace-workload"));
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn gputrace-workload");
        let stdout = child.stdout.take().unwrap();
        let lines: Lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let l2 = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let (m, c) = &*l2;
                m.lock().unwrap().push(line);
                c.notify_all();
            }
        });
        let pid = child.id() as i32;
        Workload {
            child,
            stdin: None,
            lines,
            pid,
        }
        .with_stdin()
    }

    fn with_stdin(mut self) -> Self {
        self.stdin = self.child.stdin.take();
        self
    }

    /// The first line starting with `prefix` (waits up to `secs`).
    pub(crate) fn line(&self, prefix: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let (m, c) = &*self.lines;
        let mut g = m.lock().unwrap();
        loop {
            if let Some(l) = g.iter().find(|l| l.starts_with(prefix)) {
                return l.clone();
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "no `{prefix}` line within {secs} s; got {:?}",
                *g
            );
            g = c.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    pub(crate) fn all_lines(&self) -> Vec<String> {
        self.lines.0.lock().unwrap().clone()
    }

    /// Writes a line on the workload's stdin (ends a --wait-stdin wait).
    pub(crate) fn release(&mut self) {
        let s = self.stdin.as_mut().expect("stdin");
        s.write_all(b"go\n").unwrap();
        s.flush().unwrap();
    }

    pub(crate) fn wait(mut self, secs: u64) -> (ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // Let the reader thread drain the pipe.
                std::thread::sleep(Duration::from_millis(50));
                return (st, self.all_lines());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "workload did not exit within {secs} s; output {:?}",
                    self.all_lines()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The value of `key=` in the `agent start=` line.
    pub(crate) fn start_rc(&self) -> i64 {
        field(&self.line("agent start=", 20), "start")
            .parse()
            .unwrap()
    }

    /// What /proc/PID/fd links point to.
    pub(crate) fn fd_targets(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{}/fd", self.pid)) {
            for e in rd.flatten() {
                if let Ok(t) = std::fs::read_link(e.path()) {
                    v.push(t.display().to_string());
                }
            }
        }
        v
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` out of a line of `k=v` words.
pub(crate) fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_string()
}

/// The agent's region mapped in the test, and the control pipe.
pub(crate) struct Agent {
    map: *mut u8,
    len: usize,
    pub ring: Ring,
    pipe: Option<File>,
    pub records: Vec<Record>,
}

impl Agent {
    /// Maps /proc/PID/fd/MEMFD and opens the pipe's write end named in the header.
    pub(crate) fn attach(pid: i32, memfd: i64) -> Agent {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{memfd}"))
            .expect("open the agent's memfd");
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a fresh shared mapping of the memfd; unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: the mapping lives as long as `Agent` (unmapped in Drop, after `ring`).
        let ring = unsafe { Ring::new(map.cast(), len) }.expect("valid region");
        let pipe_fd = ring.snapshot().pipe_fd;
        let pipe = OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/fd/{pipe_fd}"))
            .expect("open the agent's pipe");
        Agent {
            map: map.cast(),
            len,
            ring,
            pipe: Some(pipe),
            records: Vec::new(),
        }
    }

    pub(crate) fn send(&mut self, b: u8) {
        self.pipe.as_mut().unwrap().write_all(&[b]).unwrap();
    }
    pub(crate) fn hello(&mut self) {
        self.send(HELLO);
    }
    pub(crate) fn stop(&mut self) {
        self.send(STOP);
    }
    /// Closes our write end (as if gputrace died).
    pub(crate) fn hang_up(&mut self) {
        self.pipe = None;
    }

    pub(crate) fn snap(&self) -> Snapshot {
        self.ring.snapshot()
    }

    /// Reads everything published so far into `records`.
    pub(crate) fn poll(&mut self) -> usize {
        let mut got = Vec::new();
        self.ring
            .poll(|r| got.push(r.expect("decodable record")))
            .expect("sane ring");
        let n = got.len();
        self.records.extend(got);
        n
    }

    /// Polls until `pred(records, snapshot)` holds (or panics after `secs`).
    pub(crate) fn poll_until(
        &mut self,
        secs: u64,
        what: &str,
        pred: impl Fn(&[Record], &Snapshot) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            self.poll();
            let s = self.snap();
            if pred(&self.records, &s) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not reached in {secs} s; {s:?}, {} records",
                self.records.len()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn wait_state(&mut self, st: AgentState, secs: u64) {
        self.poll_until(secs, &format!("state {st:?}"), |_, s| s.state == st as u32);
    }

    pub(crate) fn name(&self, id: u32) -> String {
        let mut buf = [0u8; 512];
        String::from_utf8_lossy(self.ring.name(id, &mut buf).unwrap_or(b"?")).into_owned()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `attach`; `ring` is not used after this.
        unsafe { libc::munmap(self.map.cast(), self.len) };
    }
}

/// Per-thread launch windows from the `agent window` lines: tid → (start, end).
pub(crate) fn windows(lines: &[String]) -> HashMap<u32, (u64, u64)> {
    lines
        .iter()
        .filter(|l| l.starts_with("agent window"))
        .map(|l| {
            (
                field(l, "tid").parse().unwrap(),
                (
                    field(l, "start_ns").parse().unwrap(),
                    field(l, "end_ns").parse().unwrap(),
                ),
            )
        })
        .collect()
}

/// Starts a workload with the agent and `extra` flags, maps the region and
/// says hello; returns both.
pub(crate) fn start_with_agent(extra: &[&str], env: &[(&str, &str)]) -> (Workload, Agent) {
    let so = agent_so();
    let mut args = vec!["--load-agent", so.to_str().unwrap()];
    args.extend_from_slice(extra);
    let wl = Workload::spawn(&args, env);
    let rc = wl.start_rc();
    assert!(
        rc >= 0,
        "gputrace_agent_start returned {rc}: {:?}",
        tracer_common::gpu::decode_error(rc)
    );
    let mut ag = Agent::attach(wl.pid, rc);
    ag.hello();
    (wl, ag)
}
