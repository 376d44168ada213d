//! Helpers for the root integration tests: start the simulated workload,
//! run gputrace against it, read what it wrote.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod budget;
pub mod node;
pub mod tmux;
pub mod trap;

/// The directory holding the simulated libraries and `gputrace-workload`.
pub fn sim_dir() -> PathBuf {
    PathBuf::from(env!("GPUTRACE_SIM_DIR"))
}

pub fn workload_bin() -> PathBuf {
    sim_dir().join("gputrace-workload")
}

/// The gputrace binary of this build (target/<profile>/gputrace).
pub fn gputrace_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GPUTRACE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> → target/<profile>/gputrace
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("gputrace");
    assert!(
        bin.exists(),
        "{} missing: build it first (`cargo build -p tracer`; `cargo xtask test` does)",
        bin.display()
    );
    bin
}

/// A scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gputrace-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Lines from a pipe, read on a thread so a test can wait with a timeout.
pub struct Lines {
    rx: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn new(r: impl Read + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a line starting with `prefix`; panics after `timeout`.
    pub fn wait_for(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line starting with {prefix:?} within {timeout:?}; saw {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Everything until the pipe closes.
    pub fn rest(mut self) -> Vec<String> {
        while let Ok(l) = self.rx.recv_timeout(Duration::from_secs(60)) {
            self.seen.push(l);
        }
        self.seen
    }
}

/// The simulated workload, started with `--wait-stdin` so a tracer can attach first.
pub struct Workload {
    pub child: Child,
    pub pid: u32,
    /// Kernel thread ids of the worker threads, in order.
    pub tids: Vec<u32>,
    stdin: Option<ChildStdin>,
    pub stdout: Lines,
}

impl Workload {
    pub fn start(args: &[&str]) -> Self {
        Self::start_bin(&workload_bin(), args)
    }

    pub fn start_bin(bin: &Path, args: &[&str]) -> Self {
        Self::start_with(Command::new(bin), args)
    }

    /// `cmd` runs the workload (through a wrapper that execs it, say);
    /// `--wait-stdin` and `args` are appended.
    pub fn start_with(mut cmd: Command, args: &[&str]) -> Self {
        // The simulated libraries, never a real libcuda on LD_LIBRARY_PATH
        // (NVIDIA's containers set it).
        cmd.env_remove("LD_LIBRARY_PATH");
        let mut child = cmd
            .arg("--wait-stdin")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gputrace-workload");
        let mut stdout = Lines::new(child.stdout.take().unwrap());
        let ready = stdout.wait_for("ready pid=", Duration::from_secs(20));
        let pid: u32 = ready["ready pid=".len()..].parse().unwrap();
        assert_eq!(pid, child.id());
        let threads = args
            .iter()
            .position(|a| *a == "--threads")
            .map(|i| args[i + 1].parse::<usize>().unwrap())
            .unwrap_or(1);
        let mut tids = Vec::new();
        for t in 0..threads {
            let line = stdout.wait_for(&format!("thread {t} tid="), Duration::from_secs(10));
            tids.push(line.rsplit('=').next().unwrap().parse().unwrap());
        }
        let stdin = child.stdin.take();
        Self {
            child,
            pid,
            tids,
            stdin,
            stdout,
        }
    }

    /// Releases the counted phase.
    pub fn go(&mut self) {
        let mut stdin = self.stdin.take().expect("go once");
        stdin.write_all(b"go\n").unwrap();
    }

    /// Releases the counted phase of a workload started with
    /// `--wait-stdin-end`, keeps it at its end (`passes done`) for `hold`,
    /// then lets it end: what its agent collects lasts past its last call
    /// by a flush period.
    pub fn go_and_hold(&mut self, hold: Duration) {
        let mut stdin = self.stdin.take().expect("go once");
        stdin.write_all(b"go\n").unwrap();
        self.stdout.wait_for("passes done", Duration::from_secs(60));
        std::thread::sleep(hold);
        drop(stdin);
    }

    /// Releases the counted phase of a workload started with
    /// `--wait-stdin-end` and waits for its `passes done`: it then stays at
    /// its end, calling nothing, until the stdin handed back is dropped.
    pub fn go_and_stay(&mut self) -> ChildStdin {
        let mut stdin = self.stdin.take().expect("go once");
        stdin.write_all(b"go\n").unwrap();
        self.stdout.wait_for("passes done", Duration::from_secs(60));
        stdin
    }

    /// Waits for the workload to end; returns its status and the lines it
    /// printed after the ready lines.
    pub fn finish_lines(mut self) -> (ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let lines = std::mem::replace(&mut self.stdout, Lines::new(std::io::empty())).rest();
        (status, lines)
    }

    /// Waits for the workload to end; returns its status and the `done calls=` count.
    pub fn finish(mut self) -> (ExitStatus, u64) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let lines = std::mem::replace(&mut self.stdout, Lines::new(std::io::empty())).rest();
        let done = lines
            .iter()
            .find_map(|l| l.strip_prefix("done calls="))
            .map(|n| n.parse().unwrap())
            .unwrap_or(0);
        (status, done)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running gputrace.
pub struct Tracer {
    pub child: Child,
    pub stderr: Lines,
    stdout: Option<std::process::ChildStdout>,
}

/// What gputrace printed and how it ended.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: Vec<String>,
}

impl Finished {
    pub fn stderr_text(&self) -> String {
        self.stderr.join("\n")
    }
}

impl Tracer {
    /// Starts gputrace and waits for its `gputrace: attached` line.
    /// Attaches to workload `w`, writing the timeline to `out`, with `extra` arguments.
    pub fn attach_to(w: &Workload, out: &Path, extra: &[&str]) -> Self {
        Self::attach_to_with_env(w, out, extra, &[])
    }

    /// [`Self::attach_to`], with `env` set for gputrace.
    pub fn attach_to_with_env(
        w: &Workload,
        out: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let pid = w.pid.to_string();
        let mut args = vec!["--pid", &pid, "--output", out.to_str().expect("UTF-8 path")];
        args.extend_from_slice(extra);
        Self::attach_with_env(&args, env)
    }

    pub fn attach(args: &[&str]) -> Self {
        Self::attach_with_env(args, &[])
    }

    fn attach_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut t = Self::spawn_with_env(args, env);
        t.stderr
            .wait_for("gputrace: attached", Duration::from_secs(60));
        t
    }

    pub fn spawn(args: &[&str]) -> Self {
        Self::spawn_with_env(args, &[])
    }

    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        // Calibrations are cached per test process, not in /var/cache.
        let cache =
            std::env::temp_dir().join(format!("gputrace-test-cache-{}", std::process::id()));
        let mut child = Command::new(gputrace_bin())
            .args(args)
            .env("GPUTRACE_CACHE_DIR", cache)
            .env_remove("LD_LIBRARY_PATH")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gputrace");
        let stderr = Lines::new(child.stderr.take().unwrap());
        let stdout = child.stdout.take();
        Self {
            child,
            stderr,
            stdout,
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits for gputrace to exit (at most `timeout`).
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let mut stdout = String::new();
        let mut out = self.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "gputrace did not exit within {timeout:?}; stderr: {:?}",
                    self.stderr.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        stdout.push_str(&reader.join().unwrap());
        let stderr = std::mem::replace(&mut self.stderr, Lines::new(std::io::empty())).rest();
        Finished {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs gputrace to completion with no attach wait (error cases).
pub fn run_gputrace(args: &[&str]) -> Finished {
    Tracer::spawn(args).finish(Duration::from_secs(60))
}

/// Events and the final summary line of a `.jsonl` file.
/// The calls among a timeline's lines (what its summary's `events` counts):
/// graph, stack and cross-rank records have a `type`, calls none.
pub fn calls_in(events: &[Value]) -> u64 {
    events.iter().filter(|e| e.get("type").is_none()).count() as u64
}

pub fn read_jsonl(path: &Path) -> (Vec<Value>, Value) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut events = Vec::new();
    let mut summary = None;
    for (i, line) in text.lines().enumerate() {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}: {line}", i + 1));
        if v.get("type").and_then(Value::as_str) == Some("summary") {
            assert!(summary.is_none(), "two summary lines");
            summary = Some(v);
        } else {
            assert!(summary.is_none(), "an event after the summary line");
            events.push(v);
        }
    }
    (events, summary.expect("the file ends with a summary line"))
}

/// Events of one API.
pub fn of_api<'a>(events: &'a [Value], api: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["api"] == api).collect()
}

/// The calls the workload makes after `done calls=` (its teardown: the
/// module and library unloads, the setup graph's destruction), made by its
/// main thread.
pub fn is_teardown(e: &Value) -> bool {
    [
        "cuLibraryUnload",
        "cuModuleUnload",
        "cuGraphExecDestroy",
        "cuGraphDestroy",
    ]
    .iter()
    .any(|a| e["api"] == *a)
}

/// Counts per API.
pub fn counts(events: &[Value]) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    // Calls only: not the graph, stack or cross-rank records.
    for e in events.iter().filter(|e| e.get("type").is_none()) {
        if let Some(api) = e["api"].as_str() {
            *m.entry(api.to_string()).or_default() += 1;
        }
    }
    m
}

/// Parses `"0x…"`.
pub fn hex(v: &Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("not a hex string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// What one traced run of the workload gave.
pub struct Run {
    /// The events and summary line, when the output was `.jsonl`.
    pub events: Vec<Value>,
    pub summary: Value,
    pub gputrace: Finished,
    /// The workload's own `done calls=` count.
    pub done: u64,
    pub pid: u32,
    pub tids: Vec<u32>,
    /// The timeline gputrace wrote.
    pub out: PathBuf,
}

/// Starts the workload at `bin` with `args`, attaches gputrace to it by PID
/// (with `extra` arguments, writing JSONL), lets it run to its end, and
/// reads what gputrace wrote. Both must succeed.
pub fn trace_run(name: &str, bin: &Path, args: &[&str], extra: &[&str]) -> Run {
    trace_run_to(name, "t.jsonl", bin, args, extra)
}

/// [`trace_run`], writing the timeline to `file` in the test's scratch
/// directory (`.json` for a Chrome trace, which is not parsed here).
pub fn trace_run_to(name: &str, file: &str, bin: &Path, args: &[&str], extra: &[&str]) -> Run {
    trace_run_with_env(name, file, bin, args, extra, &[])
}

/// [`trace_run_to`], with `env` set for gputrace.
pub fn trace_run_with_env(
    name: &str,
    file: &str,
    bin: &Path,
    args: &[&str],
    extra: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let out = scratch(name).join(file);
    let mut w = Workload::start_bin(bin, args);
    let (pid, tids) = (w.pid, w.tids.clone());
    let t = Tracer::attach_to_with_env(&w, &out, extra, env);
    w.go();
    let (status, done) = w.finish();
    assert!(status.success(), "the workload failed: {status}");
    let gputrace = t.finish(Duration::from_secs(120));
    assert!(
        gputrace.status.success(),
        "gputrace failed: {}",
        gputrace.stderr_text()
    );
    let (events, summary) = if file.ends_with(".jsonl") {
        read_jsonl(&out)
    } else {
        (Vec::new(), Value::Null)
    };
    Run {
        events,
        summary,
        gputrace,
        done,
        pid,
        tids,
        out,
    }
}

/// [`trace_run`] of the default simulated workload.
pub fn trace_workload(name: &str, args: &[&str], extra: &[&str]) -> Run {
    trace_run(name, &workload_bin(), args, extra)
}

/// The simulated workload's kernels, demangled (tests/sim/README.md).
pub const VECTOR_ADD: &str = "vector_add(float const*, float const*, float*, int)";
pub const REDUCE: &str = "void sim::detail::reduce_kernel<256>(float const*, float*, int)";
pub const RELU: &str = "relu(float*, int)";
pub const GEMM: &str =
    "void cublas::gemm<float>(float const*, float const*, float*, int, int, int)";

/// The `kernel` of every event of one API, in order.
pub fn kernels(events: &[Value], api: &str) -> Vec<Value> {
    of_api(events, api)
        .iter()
        .map(|e| e["args"]["kernel"].clone())
        .collect()
}

/// `n` simulated NCCL ranks of one communicator (its id shared through
/// `id_file`), one thread each, all-reduces only; `extra[r]`: rank r's
/// own options.
pub fn nccl_ranks(n: usize, id_file: &Path, extra: &[&[&str]]) -> Vec<Workload> {
    nccl_ranks_bin(&workload_bin(), n, id_file, extra)
}

/// [`nccl_ranks`] of the workload `bin` (a copy of the simulator beside
/// other libraries).
pub fn nccl_ranks_bin(bin: &Path, n: usize, id_file: &Path, extra: &[&[&str]]) -> Vec<Workload> {
    let n_s = n.to_string();
    (0..n)
        .map(|r| {
            let rank = r.to_string();
            let mut args = vec![
                "--ranks",
                &n_s,
                "--rank",
                &rank,
                "--id-file",
                id_file.to_str().unwrap(),
                "--threads",
                "1",
                "--nccl-allreduce-only",
            ];
            args.extend_from_slice(extra[r]);
            Workload::start_bin(bin, &args)
        })
        .collect()
}

/// gputrace attached by PID to the ranks `ws`, writing the JSONL timeline
/// to `out` and the JSON summary to `sum`; `extra`: more options.
pub fn attach_ranks(ws: &[Workload], out: &Path, sum: &Path, extra: &[&str]) -> Tracer {
    let pids = pids_of(ws);
    let mut args = vec![
        "--pid",
        &pids,
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "json",
        "--summary-file",
        sum.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Tracer::attach(&args)
}

/// Lets NCCL ranks run, waits for each to succeed, then for gputrace
/// (which stops when they have exited); their pids and gputrace's end.
pub fn ranks_to_the_end(mut ws: Vec<Workload>, t: Tracer) -> (Vec<u32>, Finished) {
    for w in ws.iter_mut() {
        w.go();
    }
    let p: Vec<u32> = ws.iter().map(|w| w.pid).collect();
    for w in ws {
        let (status, _) = w.finish();
        assert!(status.success(), "a rank failed: {status}");
    }
    let f = t.finish(Duration::from_secs(60));
    assert!(f.status.success(), "{}", f.stderr_text());
    (p, f)
}

/// The PIDs of `ws`, as `--pid` takes them.
pub fn pids_of(ws: &[Workload]) -> String {
    ws.iter()
        .map(|w| w.pid.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// How long a workload is kept alive after its last call under
/// `--gpu-time`: the agent hands its records over every 100 ms (a
/// process's last tenth of a second before it exits is not recorded:
/// docs/gpu-time.md).
pub const GPU_HOLD: Duration = Duration::from_millis(600);

/// gputrace attached to `w` with `--gpu-time`, once its agent is attached.
pub fn attach_gpu(w: &Workload, out: &Path, extra: &[&str]) -> Tracer {
    let mut args = vec!["--gpu-time"];
    args.extend_from_slice(extra);
    let mut t = Tracer::attach_to(w, out, &args);
    t.stderr.wait_for(
        &format!("gputrace: process {}: GPU time from its CUPTI", w.pid),
        Duration::from_secs(30),
    );
    t
}
