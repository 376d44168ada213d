//! Helpers for node mode: the daemon, its `/metrics`, what the kernel says
//! it has attached, a Prometheus server, a workload in its own mount namespace.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{scratch, sim_dir, Tracer, Workload};

/// A running `gputrace daemon` on a free loopback port.
pub struct Daemon {
    pub tracer: Tracer,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Daemon {
    /// Starts `gputrace daemon --listen 127.0.0.1:0 ARGS` and waits until
    /// it serves and has attached. Exact (`--overhead-budget 0`: the tests
    /// count calls) unless ARGS give a budget.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = vec!["daemon", "--listen", "127.0.0.1:0"];
        if !args.contains(&"--overhead-budget") {
            all.extend_from_slice(&["--overhead-budget", "0"]);
        }
        all.extend_from_slice(args);
        let mut tracer = Tracer::spawn_with_env(&all, env);
        let line = tracer
            .stderr
            .wait_for("gputrace: serving metrics at", Duration::from_secs(60));
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        tracer
            .stderr
            .wait_for("gputrace: attached", Duration::from_secs(60));
        Self { tracer, addr }
    }

    pub fn pid(&self) -> u32 {
        self.tracer.child.id()
    }

    pub fn metrics(&self) -> String {
        let (status, body) = http_get(&self.addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until the daemon has probes on a file under `dir` (a process
    /// mapping a file no probe covers yet is found by the next scan of
    /// /proc, within a second).
    pub fn wait_probed(&self, dir: &Path) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while kernel_probes_under(self.pid(), dir) == 0 {
            assert!(
                Instant::now() < deadline,
                "no probes on {} within 30 s",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `/metrics` until `f` accepts it; panics with the last text after `timeout`.
    pub fn wait_metrics(&self, timeout: Duration, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.metrics();
            if f(&m) {
                return m;
            }
            if Instant::now() > deadline {
                panic!("/metrics did not reach the expected state within {timeout:?}:\n{m}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A plain HTTP/1.0 GET on loopback: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// [`http_get`], with failures as errors.
pub fn try_http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no status line in {head:?}"),
            )
        })?;
    Ok((status, body.to_string()))
}

/// `gputrace_api_calls_total` of `api` in process `pid`.
pub fn api_calls(metrics: &str, pid: u32, api: &str) -> Option<f64> {
    sample(
        metrics,
        "gputrace_api_calls_total",
        &[("api", api), ("pid", &pid.to_string())],
    )
}

/// The value of the sample `name{...}` whose labels include every pair of
/// `labels` (the first such line).
pub fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (set, value) = if let Some(r) = rest.strip_prefix('{') {
            let (set, v) = r.split_once("} ")?;
            (set, v)
        } else {
            ("", rest.strip_prefix(' ')?)
        };
        labels
            .iter()
            .all(|(k, v)| set.contains(&format!("{k}=\"{v}\"")))
            .then(|| value.parse().ok())?
    })
}

/// Distinct `pid` label values in the text.
pub fn pids_in(metrics: &str) -> std::collections::BTreeSet<u32> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("pid=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect()
}

/// The uprobes and uretprobes process `pid` holds through multi-uprobe
/// links, per probed file, as the kernel reports them in fdinfo.
pub fn kernel_probes(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if !info.lines().any(|l| {
            l.starts_with("link_type:")
                && (l.ends_with("uprobe_multi") || l.ends_with("uretprobe_multi"))
        }) {
            continue;
        }
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
        };
        let (Some(cnt), Some(path)) = (field("uprobe_cnt:"), field("path:")) else {
            continue;
        };
        *out.entry(path).or_default() += cnt.parse::<u64>().unwrap_or(0);
    }
    out
}

/// Probes on files under `dir`.
pub fn kernel_probes_under(pid: u32, dir: &Path) -> u64 {
    kernel_probes(pid)
        .iter()
        .filter(|(p, _)| Path::new(p).starts_with(dir))
        .map(|(_, n)| n)
        .sum()
}

pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `RssAnon`).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Resident memory in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// File descriptors other than bpf links (those are counted as probes).
pub fn non_link_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.to_string_lossy() != "anon_inode:bpf_link")
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// Live processes that map a libcuda or libnccl now.
pub fn live_gpu_processes() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("maps"))
                        .map(|m| m.contains("/libcuda.so") || m.contains("/libnccl.so"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The simulated workload in its own mount namespace, where the simulator's
/// directory is bind-mounted at another path and the workload run from
/// there: it maps the same libcuda file under a path that exists only in
/// that namespace.
pub fn workload_in_mount_ns(name: &str, args: &[&str]) -> (Workload, PathBuf) {
    let alt = scratch(name).join("alt-lib");
    std::fs::create_dir_all(&alt).unwrap();
    // sh -c SCRIPT sh SRC DST ARGS...: $1, $2 are the directories, then the
    // workload's own arguments.
    let mut cmd = Command::new("unshare");
    cmd
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"src="$1"; dst="$2"; shift 2; mount --bind "$src" "$dst" && exec "$dst/gputrace-workload" "$@""#)
        .arg("sh")
        .arg(sim_dir())
        .arg(&alt);
    (Workload::start_with(cmd, args), alt)
}

/// A Prometheus server scraping `target` every second, on a free loopback port.
pub struct Prometheus {
    child: Child,
    pub addr: String,
}

impl Prometheus {
    pub fn start(target: &str, dir: &Path) -> Self {
        let bin = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("prometheus is not installed: run `cargo xtask setup` (Debian's `prometheus` package)");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: gputrace\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Self { child, addr };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect(&p.addr).is_ok() && http_get(&p.addr, "/-/ready").0 == 200 {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within 60 s; its log: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An instant query through the HTTP API: the `data.result` array.
    pub fn query(&self, promql: &str) -> serde_json::Value {
        let (status, body) = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", encode(promql)),
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"].clone()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
