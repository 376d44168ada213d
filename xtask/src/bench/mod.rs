//! `cargo xtask bench`: the cost gputrace adds to each traced call, against
//! the floor any uprobe tool pays (a bare counting uprobe on the same
//! symbol), and the event rate it sustains. Prints a table, writes JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

mod long;
mod mode;
pub(crate) use long::{soak, stats_file};
pub(crate) use mode::Mode;

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    pub ns_per_call: f64,
    /// CPU time of the workload's threads per call: unlike the wall time,
    /// it leaves out time other processes took (a shared machine), so it
    /// tells the probe's own cost apart from the reader's CPU.
    pub cpu_ns_per_call: f64,
    pub calls: u64,
    pub events: u64,
    pub lost: u64,
    /// Busy time of the workload's loop (calls × ns per call).
    pub busy_s: f64,
    /// gputrace's user+system CPU time.
    pub cpu_s: f64,
    pub max_rss_kb: u64,
}

pub(crate) struct Bench {
    pub sim: PathBuf,
    pub gputrace: PathBuf,
    pub scratch: PathBuf,
}

fn kind_symbol(kind: &str) -> (&'static str, &'static str) {
    match kind {
        "launch" => ("libcuda.so.1", "cuLaunchKernel"),
        "memcpy" => ("libcuda.so.1", "cuMemcpyHtoDAsync_v2"),
        "nccl" => ("libnccl.so.2", "ncclAllReduce"),
        _ => ("libcuda.so.1", "cuLaunchKernel"),
    }
}

fn wait_line<R: Read>(r: &mut BufReader<R>, prefix: &str, what: &str) -> Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("{what} ended before printing `{prefix}`");
        }
        if line.starts_with(prefix) {
            return Ok(line.trim_end().to_string());
        }
    }
}

/// User+system CPU seconds a running process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    // Fields 14 and 15 (utime, stime); `rest` starts at field 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks / hz
}

/// Waits for a child and returns its status code and rusage (user+sys s, max RSS KiB).
fn wait_rusage(child: &mut Child) -> Result<(i32, f64, u64)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child by pid.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    if r < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let cpu = ru.ru_utime.tv_sec as f64
        + ru.ru_utime.tv_usec as f64 / 1e6
        + ru.ru_stime.tv_sec as f64
        + ru.ru_stime.tv_usec as f64 / 1e6;
    Ok((libc::WEXITSTATUS(status), cpu, ru.ru_maxrss as u64))
}

impl Bench {
    /// One run of the workload's bench loop under `mode`.
    pub(crate) fn run(&self, mode: Mode, kind: &str, threads: usize, calls: u64) -> Result<Sample> {
        let calls = if mode == Mode::None {
            calls.max(20_000_000)
        } else {
            calls
        };
        // The simulated libraries, never a real libcuda on LD_LIBRARY_PATH.
        let mut wl = Command::new(self.sim.join("gputrace-workload"))
            .env_remove("LD_LIBRARY_PATH")
            .args([
                "--wait-stdin",
                "--bench",
                kind,
                "--threads",
                &threads.to_string(),
                "--calls",
                &calls.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting gputrace-workload")?;
        let mut out = BufReader::new(wl.stdout.take().expect("piped"));
        let ready = wait_line(&mut out, "ready pid=", "the workload")?;
        let pid = ready.trim_start_matches("ready pid=").to_string();
        let jsonl = self.scratch.join("bench.jsonl");
        let tracer_args = self.tracer_args(mode, kind, &pid, &jsonl);
        let mut cpu_at_attach = 0.0;
        let mut said = None;
        let mut tracer = match &tracer_args {
            Some(a) => {
                let mut t = Command::new(&self.gputrace)
                    .args(a)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .env("GPUTRACE_CACHE_DIR", self.scratch.join("cache"))
                    .env(
                        "GPUTRACE_INFLIGHT",
                        if mode == Mode::GputraceMap {
                            "map"
                        } else {
                            "task"
                        },
                    )
                    .spawn()
                    .context("starting gputrace")?;
                let mut err: BufReader<ChildStderr> =
                    BufReader::new(t.stderr.take().expect("piped"));
                wait_line(&mut err, "gputrace: attached", "gputrace")?;
                // What loading cost (the verifier: seconds with --stacks)
                // is not the cost of events.
                cpu_at_attach = cpu_seconds(t.id());
                // Keep reading stderr so gputrace never blocks on it.
                said = Some(std::thread::spawn(move || {
                    let mut text = String::new();
                    let _ = err.read_to_string(&mut text);
                    text
                }));
                Some(t)
            }
            None => None,
        };
        wl.stdin.take().expect("piped").write_all(b"go\n")?;
        let line = wait_line(&mut out, "bench ", "the workload")?;
        let _ = wl.wait();
        let mut s = sample(&line, threads)?;
        if let Some(t) = &mut tracer {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(t.id() as i32, libc::SIGINT) };
            let mut stdout = String::new();
            t.stdout
                .take()
                .expect("piped")
                .read_to_string(&mut stdout)?;
            let (code, cpu, rss) = wait_rusage(t)?;
            if code != 0 {
                bail!("gputrace exited with {code}");
            }
            s.cpu_s = (cpu - cpu_at_attach).max(0.0);
            s.max_rss_kb = rss;
            if mode.counted() {
                // The daemon's last line: "(N calls traced, M of them
                // counted in the kernel, L lost)".
                let text = said.take().and_then(|h| h.join().ok()).unwrap_or_default();
                let figure = |after: &str| -> u64 {
                    text.rsplit_once(after)
                        .and_then(|(before, _)| before.rsplit([' ', '(']).next()?.parse().ok())
                        .unwrap_or(0)
                };
                s.events = figure(" calls traced");
                s.lost = figure(" lost)");
            } else if mode.traced() {
                let v: Value = serde_json::from_str(stdout.trim())
                    .with_context(|| format!("summary: {stdout}"))?;
                s.events = v["events"].as_u64().unwrap_or(0);
                s.lost = v["lost"].as_u64().unwrap_or(0);
            } else {
                let v: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
                s.events = v["entries"].as_u64().unwrap_or(0);
            }
        }
        let _ = std::fs::remove_file(&jsonl);
        Ok(s)
    }

    /// gputrace's (or the bare tracer's) arguments for `mode`; `None`:
    /// untraced.
    fn tracer_args(&self, mode: Mode, kind: &str, pid: &str, jsonl: &Path) -> Option<Vec<String>> {
        let (lib, symbol) = kind_symbol(kind);
        match mode {
            Mode::None => None,
            Mode::GputraceCounts | Mode::GputraceCountsEvery => {
                let every = if mode == Mode::GputraceCounts {
                    "16"
                } else {
                    "1"
                };
                Some(
                    [
                        "daemon",
                        "--listen",
                        "127.0.0.1:0",
                        "--overhead-budget",
                        "0",
                        "--probes",
                        "launch:counts",
                        "--counts-time-every",
                        every,
                    ]
                    .map(String::from)
                    .to_vec(),
                )
            }
            Mode::Bare | Mode::BareRet => {
                let mut a = vec![
                    "__bare".to_string(),
                    "--library".into(),
                    self.sim.join(lib).display().to_string(),
                    "--symbols".into(),
                    symbol.into(),
                    "--pid".into(),
                    pid.to_string(),
                ];
                if mode == Mode::BareRet {
                    a.push("--ret".into());
                }
                Some(a)
            }
            _ => {
                let mut a = vec![
                    "--pid".to_string(),
                    pid.to_string(),
                    "--output".into(),
                    jsonl.display().to_string(),
                    "--summary".into(),
                    "json".into(),
                ];
                match mode {
                    Mode::GputraceArgs => a.extend([
                        "--probes".to_string(),
                        "launch:args,memcpy:args,nccl:args".into(),
                    ]),
                    Mode::GputraceStacks => {
                        a.extend(["--stacks".to_string(), "--stacks-every".into(), "1".into()])
                    }
                    Mode::GputraceStacks64 => {
                        a.extend(["--stacks".to_string(), "--stacks-every".into(), "64".into()])
                    }
                    _ => {}
                }
                Some(a)
            }
        }
    }
}

/// The figures of the workload's `bench ...` line.
fn sample(line: &str, threads: usize) -> Result<Sample> {
    let ns_per_call: f64 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("ns_per_call="))
        .ok_or_else(|| anyhow!("no ns_per_call in {line:?}"))?
        .parse()?;
    let cpu_ns_per_call: f64 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("cpu_ns_per_call="))
        .unwrap_or("NaN")
        .parse()?;
    let total_calls: u64 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("calls="))
        .unwrap_or("0")
        .parse()?;
    Ok(Sample {
        ns_per_call,
        cpu_ns_per_call,
        calls: total_calls,
        busy_s: ns_per_call * (total_calls / threads as u64) as f64 / 1e9,
        ..Default::default()
    })
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) struct Options {
    pub reps: usize,
    pub calls: u64,
    pub kinds: Vec<String>,
    pub threads: Vec<usize>,
    /// The rows measured (a row's floor row must be among them for its ratio).
    pub modes: Vec<Mode>,
    pub throughput_secs: f64,
    pub out: PathBuf,
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{cpu}, {cores} cores, Linux {}", kernel.trim())
}

pub(crate) fn run(bench: &Bench, o: &Options) -> Result<()> {
    let mut rows = Vec::new();
    println!("machine: {}", machine());
    println!(
        "{:<7} {:>3}  {:<22} {:>11} {:>9} {:>8} {:>11} {:>8} {:>11} {:>8} {:>12} {:>9}",
        "kind",
        "thr",
        "mode",
        "ns/call",
        "spread",
        "vs floor",
        "CPU ns/call",
        "vs floor",
        "events/s",
        "lost",
        "CPU µs/event",
        "RSS MiB"
    );
    for kind in &o.kinds {
        for &threads in &o.threads {
            let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); o.modes.len()];
            // Interleave the modes so drift hits them all alike.
            for _ in 0..o.reps {
                for (i, mode) in o.modes.iter().enumerate() {
                    if mode.applies(kind) {
                        samples[i].push(bench.run(*mode, kind, threads, o.calls)?);
                    }
                }
            }
            let med = |i: usize, f: &dyn Fn(&Sample) -> f64| {
                median(&mut samples[i].iter().map(f).collect::<Vec<_>>())
            };
            let floor = |m: Mode| m.floor().and_then(|f| o.modes.iter().position(|x| *x == f));
            for (i, mode) in o.modes.iter().enumerate() {
                if !mode.applies(kind) {
                    continue;
                }
                let ns = med(i, &|s| s.ns_per_call);
                let lo = samples[i]
                    .iter()
                    .map(|s| s.ns_per_call)
                    .fold(f64::INFINITY, f64::min);
                let hi = samples[i].iter().map(|s| s.ns_per_call).fold(0.0, f64::max);
                let ratio = floor(*mode).map(|f| ns / med(f, &|s| s.ns_per_call));
                let cpu = med(i, &|s| s.cpu_ns_per_call);
                let cpu_ratio = floor(*mode).map(|f| cpu / med(f, &|s| s.cpu_ns_per_call));
                let traced = mode.traced() || mode.counted();
                let events_s = med(i, &|s| s.events as f64 / s.busy_s.max(1e-9));
                let lost = samples[i].iter().map(|s| s.lost).sum::<u64>();
                let cpu_us = med(i, &|s| {
                    if s.events > 0 {
                        s.cpu_s * 1e6 / s.events as f64
                    } else {
                        f64::NAN
                    }
                });
                let rss =
                    samples[i].iter().map(|s| s.max_rss_kb).max().unwrap_or(0) as f64 / 1024.0;
                println!(
                    "{:<7} {:>3}  {:<22} {:>11.1} {:>9} {:>8} {:>11.1} {:>8} {:>11} {:>8} {:>12} {:>9}",
                    kind,
                    threads,
                    mode.name(),
                    ns,
                    format!("±{:.0}%", (hi - lo) / ns.max(1e-9) * 50.0),
                    ratio.map_or("".into(), |r| format!("{r:.3}x")),
                    cpu,
                    cpu_ratio.map_or("".into(), |r| format!("{r:.3}x")),
                    if traced {
                        format!("{events_s:.0}")
                    } else {
                        "".into()
                    },
                    if traced { lost.to_string() } else { "".into() },
                    if traced {
                        format!("{cpu_us:.2}")
                    } else {
                        "".into()
                    },
                    if *mode == Mode::None {
                        "".into()
                    } else {
                        format!("{rss:.1}")
                    },
                );
                rows.push(json!({
                    "kind": kind, "threads": threads, "mode": mode.name(), "reps": o.reps,
                    "ns_per_call_median": ns, "ns_per_call_min": lo, "ns_per_call_max": hi,
                    "ratio_to_floor": ratio, "cpu_ns_per_call_median": cpu, "cpu_ratio_to_floor": cpu_ratio, "events_per_s": if traced { Some(events_s) } else { None },
                    "events_lost": lost, "cpu_us_per_event": if traced { Some(cpu_us) } else { None },
                    "peak_rss_mib": rss,
                }));
            }
        }
    }
    let throughput = if o.throughput_secs > 0.0 {
        Some(throughput(bench, o.throughput_secs)?)
    } else {
        None
    };
    let doc =
        json!({"machine": machine(), "date": date(), "overhead": rows, "throughput": throughput});
    if let Some(dir) = o.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&o.out, serde_json::to_string_pretty(&doc)? + "\n")?;
    println!("wrote {}", o.out.display());
    Ok(())
}

/// The most calls per second the workload makes on every core, traced with
/// JSONL written to a file: events recorded and lost.
fn throughput(bench: &Bench, secs: f64) -> Result<Value> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // Size the run to about `secs` from a short probe of the traced rate.
    let probe = bench.run(Mode::Gputrace, "launch", threads, 50_000)?;
    let per_thread = ((secs * 1e9 / probe.ns_per_call.max(1.0)) as u64).max(10_000);
    let s = bench.run(Mode::Gputrace, "launch", threads, per_thread)?;
    let rate = s.calls as f64 / s.busy_s.max(1e-9);
    let recorded = s.events as f64 / s.busy_s.max(1e-9);
    println!(
        "throughput: {threads} threads, {} calls in {:.2} s = {rate:.0} calls/s; recorded {} events ({recorded:.0}/s), lost {}; gputrace CPU {:.2} µs/event, RSS {:.1} MiB",
        s.calls,
        s.busy_s,
        s.events,
        s.lost,
        s.cpu_s * 1e6 / s.events.max(1) as f64,
        s.max_rss_kb as f64 / 1024.0
    );
    Ok(
        json!({"threads": threads, "calls": s.calls, "seconds": s.busy_s, "calls_per_s": rate,
              "events": s.events, "events_per_s": recorded, "lost": s.lost,
              "cpu_us_per_event": s.cpu_s * 1e6 / s.events.max(1) as f64, "peak_rss_mib": s.max_rss_kb as f64 / 1024.0}),
    )
}

fn date() -> String {
    let out = Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%dT%H:%M:%SZ")
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn default_out(root: &Path) -> PathBuf {
    let host =
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "host".into());
    root.join("bench/results")
        .join(format!("{}-{}.json", host.trim(), date().replace(':', "")))
}
