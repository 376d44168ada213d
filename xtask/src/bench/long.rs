//! The long runs: a soak (a trace written to disk for minutes, memory
//! watched) and `gputrace stats` on a file of a given size.

use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use super::*;

/// A long trace written to disk: gputrace's RSS sampled every second.
pub(crate) fn soak(bench: &Bench, secs: u64) -> Result<()> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(2);
    let mut wl = Command::new(bench.sim.join("gputrace-workload"))
        .env_remove("LD_LIBRARY_PATH")
        .args([
            "--wait-stdin",
            "--loop",
            "--threads",
            &threads.to_string(),
            "--launches",
            "100",
            "--copies",
            "5",
            "--syncs",
            "1",
            // Three 10 ms waits a pass keep the rate (and the file) sane for 10 minutes.
            "--sync-us",
            "10000",
            "--nccl",
            "2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(wl.stdout.take().expect("piped"));
    let pid = wait_line(&mut out, "ready pid=", "the workload")?
        .trim_start_matches("ready pid=")
        .to_string();
    let path = bench.scratch.join("soak.jsonl");
    let mut t = Command::new(&bench.gputrace)
        .args([
            "--pid",
            &pid,
            "--output",
            path.to_str().unwrap(),
            "--summary",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut err = BufReader::new(t.stderr.take().expect("piped"));
    wait_line(&mut err, "gputrace: attached", "gputrace")?;
    wl.stdin.take().expect("piped").write_all(b"go\n")?;
    let start = Instant::now();
    let mut peak = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1));
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", t.id())).unwrap_or_default();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        peak = peak.max(rss);
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(t.id() as i32, libc::SIGINT) };
    let mut stdout = String::new();
    t.stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)?;
    let (_, cpu, maxrss) = wait_rusage(&mut t)?;
    let _ = wl.kill();
    let _ = wl.wait();
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "soak: {secs} s, {} events ({} lost), {:.0} MiB written; gputrace RSS peak {:.1} MiB (VmRSS sampled) / {:.1} MiB (ru_maxrss), CPU {:.1} s",
        v["events"],
        v["lost"],
        size as f64 / 1048576.0,
        peak as f64 / 1024.0,
        maxrss as f64 / 1024.0,
        cpu
    );
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// `gputrace stats` on a large file: a synthetic timeline of about `gb`
/// GiB (the golden input's events repeated with shifted timestamps), read
/// back; prints MB/s and gputrace's peak RSS.
pub(crate) fn stats_file(bench: &Bench, gb: f64, root: &Path) -> Result<()> {
    let input = std::fs::read_to_string(root.join("tracer/tests/golden/input.jsonl"))?;
    let events: Vec<Value> = input
        .lines()
        .map(serde_json::from_str::<Value>)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|v| v.get("type").is_none())
        .collect();
    let path = bench.scratch.join("stats-big.jsonl");
    let target = (gb * (1u64 << 30) as f64) as u64;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
    let mut written = 0u64;
    let mut round = 0u64;
    let start = Instant::now();
    while written < target {
        for e in &events {
            let mut e = e.clone();
            e["ts_ns"] = Value::from(e["ts_ns"].as_u64().unwrap_or(0) + round * 1_000_000);
            // A few processes, so per-process tables are exercised.
            e["pid"] = Value::from(e["pid"].as_u64().unwrap_or(0) + round % 8);
            let line = serde_json::to_string(&e)?;
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            written += line.len() as u64 + 1;
        }
        round += 1;
    }
    out.flush()?;
    drop(out);
    println!(
        "wrote {:.2} GiB ({} events) in {:.1} s",
        written as f64 / (1u64 << 30) as f64,
        round * events.len() as u64,
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let mut child = Command::new(&bench.gputrace)
        .args(["stats", path.to_str().unwrap(), "--format", "json"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)?;
    let (code, cpu, rss) = wait_rusage(&mut child)?;
    let secs = start.elapsed().as_secs_f64();
    let v: Value = serde_json::from_str(stdout.trim())?;
    println!(
        "gputrace stats: exit {code}, {} events in {secs:.1} s = {:.0} MB/s ({:.0} events/s), CPU {cpu:.1} s, peak RSS {:.1} MiB",
        v["events"],
        written as f64 / 1e6 / secs,
        v["events"].as_f64().unwrap_or(0.0) / secs,
        rss as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&path);
    Ok(())
}
