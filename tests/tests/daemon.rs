//! Root tests of node mode: `gputrace --all` and `gputrace daemon` find
//! every process that maps the simulated libraries (before and after they
//! start, in another mount namespace, through a new library file), serve
//! exact counts at /metrics, scraped by a real Prometheus, survive bad
//! clients, and stop promptly on SIGTERM (process churn: daemon_churn.rs).
//!
//! Other tests start workloads on the same simulated library at the same
//! time, and a daemon sees those too: assertions name the PIDs a test
//! started, never totals.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use gputrace_tests::node::*;
use gputrace_tests::*;

fn launches(m: &str, pid: u32) -> Option<f64> {
    api_calls(m, pid, "cuLaunchKernel")
}

#[test]
fn daemon_counts_processes_started_before_after_and_in_another_mount_namespace() {
    let mut a = Workload::start(&["--launches", "7", "--copies", "1"]);
    let (mut b, alt) = workload_in_mount_ns("daemon-mntns", &["--launches", "7"]);
    // b maps the library at a path that only its mount namespace has.
    let b_maps = std::fs::read_to_string(format!("/proc/{}/maps", b.pid)).unwrap();
    let b_lib = alt.join("libcuda.so.1");
    assert!(b_maps.contains(b_lib.to_str().unwrap()), "{b_maps}");
    assert!(
        !b_lib.exists(),
        "the bind mount leaked out of the namespace"
    );

    let d = Daemon::start(&[], &[]);
    let mut c = Workload::start(&["--launches", "7"]);
    for w in [&mut a, &mut b, &mut c] {
        w.go();
    }
    let (pa, pb, pc) = (a.pid, b.pid, c.pid);
    for w in [a, b, c] {
        let (status, _) = w.finish();
        assert!(status.success());
    }
    // Until each one's last call (the workload unloads its module as it
    // exits) is counted: the daemon drains the ring buffer in batches, so
    // a process's launches can be counted while its later calls still wait
    // in the ring.
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        [pa, pb, pc]
            .iter()
            .all(|p| api_calls(m, *p, "cuModuleUnload").is_some())
    });
    for pid in [pa, pb, pc] {
        assert_eq!(launches(&m, pid), Some(7.0), "pid {pid}:\n{m}");
        assert_eq!(
            sample(
                &m,
                "gputrace_api_duration_seconds_count",
                &[("api", "cuLaunchKernel"), ("pid", &pid.to_string())]
            ),
            Some(7.0)
        );
        assert!(
            m.contains(&format!("pid=\"{pid}\",comm=\"")),
            "no comm label for {pid}"
        );
    }
    // c started after the daemon: traced from its first call (its setup
    // looks up three kernels); a's setup happened before the daemon came.
    assert_eq!(api_calls(&m, pc, "cuModuleGetFunction"), Some(3.0));
    assert_eq!(api_calls(&m, pa, "cuModuleGetFunction"), None);
    // a's copies: 4096 + 4096 (HtoD_v2, HtoDAsync_v2) + 1000 (cuMemcpy, inferred).
    assert_eq!(
        sample(
            &m,
            "gputrace_memcpy_bytes_total",
            &[("direction", "HtoD"), ("pid", &pa.to_string())]
        ),
        Some(9192.0),
        "{m}"
    );
    assert_eq!(api_calls(&m, pa, "cuMemcpyHtoD_v2"), Some(1.0));
    for line in [
        "# TYPE gputrace_api_calls_total counter",
        "# TYPE gputrace_api_duration_seconds histogram",
        "# TYPE gputrace_memcpy_bytes_total counter",
        "# TYPE gputrace_device_memory_bytes gauge",
        "# TYPE gputrace_nccl_bytes_total counter",
        "# TYPE gputrace_events_lost_total counter",
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line}");
    }
}

#[test]
fn trace_all_follows_processes_that_start_later() {
    let dir = scratch("trace-all");
    let out = dir.join("t.jsonl");
    let mut a = Workload::start(&["--launches", "5"]);
    let t = Tracer::attach(&[
        "--all",
        "--output",
        out.to_str().unwrap(),
        "--summary",
        "none",
    ]);
    let (mut b, _) = workload_in_mount_ns("trace-all-mntns", &["--launches", "4"]);
    a.go();
    b.go();
    let (pa, pb) = (a.pid, b.pid);
    assert!(a.finish().0.success());
    assert!(b.finish().0.success());
    std::thread::sleep(Duration::from_millis(300));
    t.signal(libc::SIGINT);
    let f = t.finish(Duration::from_secs(30));
    assert!(f.status.success(), "{}", f.stderr_text());
    let (events, _) = read_jsonl(&out);
    let of = |pid: u32| -> Vec<serde_json::Value> {
        events.iter().filter(|e| e["pid"] == pid).cloned().collect()
    };
    let (ea, eb) = (counts(&of(pa)), counts(&of(pb)));
    assert_eq!(ea.get("cuLaunchKernel"), Some(&5), "{ea:?}");
    assert_eq!(eb.get("cuLaunchKernel"), Some(&4), "{eb:?}");
    // b started after gputrace: its setup calls are there too.
    assert_eq!(eb.get("cuModuleGetFunction"), Some(&3), "{eb:?}");
    assert_eq!(ea.get("cuModuleGetFunction"), None, "{ea:?}");
}

#[test]
fn prometheus_scrapes_the_daemon() {
    let dir = scratch("prometheus");
    let d = Daemon::start(&[], &[]);
    let mut w = Workload::start(&["--launches", "7", "--nccl", "2"]);
    d.wait_probed(&sim_dir());
    w.go();
    let pid = w.pid;
    assert!(w.finish().0.success());
    d.wait_metrics(Duration::from_secs(30), |m| launches(m, pid).is_some());

    let prom = Prometheus::start(&d.addr, &dir);
    let value = |q: &str| -> Option<String> {
        let r = prom.query(q);
        r.as_array()?.first()?["value"][1]
            .as_str()
            .map(String::from)
    };
    let q = format!("gputrace_api_calls_total{{pid=\"{pid}\",api=\"cuLaunchKernel\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while value(&q).is_none() {
        assert!(
            Instant::now() < deadline,
            "Prometheus stored nothing for {q} within 60 s; log: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(value(&q).as_deref(), Some("7"));
    assert_eq!(
        value(&format!(
            "gputrace_api_duration_seconds_count{{pid=\"{pid}\",api=\"cuLaunchKernel\"}}"
        ))
        .as_deref(),
        Some("7")
    );
    // 2 × ncclAllReduce of 1048576 float32.
    assert_eq!(
        value(&format!(
            "gputrace_nccl_bytes_total{{pid=\"{pid}\",op=\"AllReduce\"}}"
        ))
        .as_deref(),
        Some("8388608")
    );
    assert_eq!(
        value(&format!(
            "gputrace_api_calls_total{{pid=\"{pid}\",api=\"ncclAllReduce\"}}"
        ))
        .as_deref(),
        Some("2")
    );
    assert_eq!(value("up{job=\"gputrace\"}").as_deref(), Some("1"));
    println!(
        "Prometheus at {} stored the daemon's counters for pid {pid}",
        prom.addr
    );
}

/// Runs `n` short workloads (`--launches 1`: 8 traced calls each), `threads`
/// at a time; returns their PIDs.
#[test]
fn sigterm_detaches_and_exits_promptly() {
    // A steady, modest rate (other tests' daemons trace it too).
    let mut w = Workload::start(&[
        "--loop",
        "--launches",
        "20",
        "--syncs",
        "1",
        "--sync-us",
        "2000",
    ]);
    w.go();
    let d = Daemon::start(&[], &[]);
    let pid = w.pid;
    d.wait_metrics(Duration::from_secs(30), |m| launches(m, pid).is_some());
    let daemon_pid = d.pid();
    assert!(kernel_probes_under(daemon_pid, &sim_dir()) > 0);
    let Daemon { tracer, .. } = d;
    let t0 = Instant::now();
    tracer.signal(libc::SIGTERM);
    let f = tracer.finish(Duration::from_secs(30));
    let took = t0.elapsed();
    println!(
        "SIGTERM to exit: {} ms ({})",
        took.as_millis(),
        f.stderr.last().cloned().unwrap_or_default()
    );
    assert!(f.status.success(), "{}", f.stderr_text());
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(f.stderr_text().contains("SIGTERM: detached every probe"));
    // The traced program runs on, unharmed, with the probes gone.
    std::thread::sleep(Duration::from_millis(200));
    assert!(discover_alive(pid));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let (status, done) = w.finish();
    assert!(status.success());
    assert!(done > 0);
}

fn discover_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z"))
        .unwrap_or(false)
}

/// The simulator's files copied: new inodes, a "new container image".
fn copy_sim(name: &str) -> std::path::PathBuf {
    let dir = scratch(name).join("sim");
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "libcuda.so.1",
        "libnccl.so.2",
        "libcudart.so.13",
        "gputrace-workload",
    ] {
        std::fs::copy(sim_dir().join(f), dir.join(f)).unwrap();
    }
    dir
}

#[test]
fn new_library_files_are_probed_and_unmapped_ones_detached() {
    let mut d = Daemon::start(&[], &[("GPUTRACE_DETACH_AFTER", "1s")]);
    let copy = copy_sim("newlib");
    let mut w = Workload::start_bin(&copy.join("gputrace-workload"), &["--launches", "3"]);
    let t0 = Instant::now();
    while kernel_probes_under(d.pid(), &copy) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the new file was never probed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let attach_time = t0.elapsed();
    let probes = kernel_probes_under(d.pid(), &copy);
    println!(
        "new library file probed {} ms after the process mapping it was ready ({probes} probes)",
        attach_time.as_millis()
    );
    assert!(attach_time < Duration::from_secs(5), "{attach_time:?}");
    w.go();
    let pid = w.pid;
    assert!(w.finish().0.success());
    let m = d.wait_metrics(Duration::from_secs(30), |m| {
        launches(m, pid).is_some_and(|n| n >= 3.0)
    });
    assert_eq!(launches(&m, pid), Some(3.0));

    // Nothing maps the copy now: its probes go after GPUTRACE_DETACH_AFTER.
    let t1 = Instant::now();
    while kernel_probes_under(d.pid(), &copy) > 0 {
        assert!(
            t1.elapsed() < Duration::from_secs(20),
            "probes of an unmapped file stayed: {:?}",
            kernel_probes(d.pid())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "unmapped file detached {} ms after its last process exited",
        t1.elapsed().as_millis()
    );
    d.tracer
        .stderr
        .wait_for("gputrace: detached", Duration::from_secs(10));
}

fn raw_exchange(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn malformed_requests_do_not_hurt_the_daemon() {
    let mut d = Daemon::start(&[], &[]);
    let addr = d.addr.clone();
    let r = raw_exchange(&addr, b"\x00\xff\xfe garbage \r\n\r\n");
    assert!(r.is_empty() || r.starts_with("HTTP/1.1 400"), "{r}");
    let r = raw_exchange(&addr, b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.is_empty() || r.starts_with("HTTP/1.1 4"), "{r}");
    let mut huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 200_000));
    huge.extend_from_slice(b"\r\n\r\n");
    let r = raw_exchange(&addr, &huge);
    assert!(
        r.is_empty() || r.starts_with("HTTP/1.1 4"),
        "{}",
        &r[..r.len().min(200)]
    );
    let r = raw_exchange(
        &addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    assert_eq!(http_get(&addr, "/nope").0, 404);
    assert_eq!(http_get(&addr, "/healthz"), (200, "ok\n".to_string()));
    // Half a request, then gone.
    {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"GET /metr").unwrap();
    }
    // More idle connections than the daemon serves at once.
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    drop(idle);
    let t0 = Instant::now();
    loop {
        if matches!(try_http_get(&addr, "/metrics"), Ok((200, _))) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no /metrics after the idle connections"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        d.tracer.child.try_wait().unwrap().is_none(),
        "the daemon died"
    );
    assert!(d
        .metrics()
        .contains("# TYPE gputrace_api_calls_total counter"));
}

#[test]
fn output_dir_holds_rotated_jsonl_timelines() {
    let dir = scratch("output-dir");
    let out = dir.join("timelines");
    let d = Daemon::start(
        &[
            "--output-dir",
            out.to_str().unwrap(),
            "--max-file-mb",
            "1",
            "--max-files",
            "3",
        ],
        &[],
    );
    // ~250 bytes per launch event: over 4 MB, so at least 5 files were made.
    let mut w = Workload::start(&["--launches", "16000"]);
    d.wait_probed(&sim_dir());
    w.go();
    let pid = w.pid;
    assert!(w.finish().0.success());
    // Every launch, or (if a burst elsewhere filled the ring) what arrived.
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = launches(&d.metrics(), pid);
        if now == Some(16000.0) || (now.is_some() && now == last) {
            break;
        }
        assert!(Instant::now() < deadline, "launches of {pid}: {now:?}");
        last = now;
        std::thread::sleep(Duration::from_millis(1500));
    }
    let Daemon { tracer, .. } = d;
    tracer.signal(libc::SIGTERM);
    assert!(tracer.finish(Duration::from_secs(30)).status.success());

    let mut files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    println!("timelines: {names:?}");
    assert_eq!(files.len(), 3, "{names:?}");
    let first_seq: u64 = names[0]["gputrace-".len()..names[0].len() - ".jsonl".len()]
        .parse()
        .unwrap();
    assert!(
        first_seq >= 3,
        "the oldest files were not deleted: {names:?}"
    );
    let mut mine = 0;
    for f in &files {
        let (events, summary) = read_jsonl(f);
        assert_eq!(summary["events"], calls_in(&events));
        let size = std::fs::metadata(f).unwrap().len();
        assert!(
            size < 1_000_000 + 64 * 1024,
            "{} is {size} bytes",
            f.display()
        );
        mine += events
            .iter()
            .filter(|e| e["pid"] == pid && e["api"] == "cuLaunchKernel")
            .count();
        for e in events.iter().filter(|e| e["pid"] == pid).take(3) {
            assert!(e["ts_ns"].as_u64().unwrap() > 0 && e["args"].is_object());
        }
        // `gputrace stats` reads any file of the directory.
        let f = run_gputrace(&["stats", f.to_str().unwrap(), "--format", "json"]);
        assert!(f.status.success(), "{}", f.stderr_text());
    }
    println!("{mine} of the workload's 16000 launches are in the files kept");
    assert!(mine < 16000, "nothing was rotated away");
    assert!(Path::new(&out).is_dir());
}

/// A cgroup laid out as the kubelet's systemd driver makes it for a
/// containerd container, in the cgroup v2 hierarchy; removed on drop.
struct PodCgroup {
    /// Created directories, outermost first.
    dirs: Vec<std::path::PathBuf>,
    uid: String,
    id: String,
}

impl PodCgroup {
    fn create() -> Self {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let root = mounts
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
            })
            .expect("no cgroup2 mount");
        let nanos = now_ns() as u128;
        let uid = format!(
            "{:08x}-7e57-4000-8000-{:012x}",
            std::process::id(),
            nanos & 0xffff_ffff_ffff
        );
        let id = format!("{:032x}{:032x}", std::process::id(), nanos);
        let mut dirs = Vec::new();
        let mut path = root;
        for part in [
            "kubepods.slice".to_string(),
            "kubepods-burstable.slice".to_string(),
            format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_")),
            format!("cri-containerd-{id}.scope"),
        ] {
            path = path.join(part);
            if !path.exists() {
                std::fs::create_dir(&path)
                    .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
                dirs.push(path.clone());
            }
        }
        Self { dirs, uid, id }
    }

    fn add(&self, pid: u32) {
        let procs = self.dirs.last().unwrap().join("cgroup.procs");
        std::fs::write(&procs, format!("{pid}\n"))
            .unwrap_or_else(|e| panic!("{}: {e}", procs.display()));
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[test]
fn container_and_pod_labels_come_from_the_cgroup() {
    let cg = PodCgroup::create();
    let mut w = Workload::start(&["--launches", "2"]);
    cg.add(w.pid);
    let list = run_gputrace(&["list"]);
    assert!(list.status.success());
    let row = list
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{} ", w.pid)))
        .unwrap_or_else(|| panic!("{} not listed:\n{}", w.pid, list.stdout))
        .to_string();
    assert!(row.contains(&cg.id[..12]) && row.contains(&cg.uid), "{row}");

    let d = Daemon::start(&[], &[]);
    w.go();
    let pid = w.pid;
    assert!(w.finish().0.success());
    let m = d.wait_metrics(Duration::from_secs(30), |m| launches(m, pid).is_some());
    // The workload exits at once: its name and container were read while
    // it waited, when the daemon's scan found it.
    let labels = format!(
        "pid=\"{pid}\",comm=\"gputrace-worklo\",container_id=\"{}\",pod_uid=\"{}\"",
        cg.id, cg.uid
    );
    let line = format!("gputrace_api_calls_total{{api=\"cuLaunchKernel\",{labels}}} 2");
    assert!(m.lines().any(|l| l == line), "no {line} in\n{m}");
    println!("{line}");
}

#[test]
fn daemon_reports_a_listen_address_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let f = run_gputrace(&["daemon", "--listen", &addr]);
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr_text());
    let err = f.stderr_text();
    assert!(
        err.contains(&format!("gputrace: cannot listen on {addr}")) && err.lines().count() == 1,
        "{err}"
    );
    let f = run_gputrace(&["daemon", "--listen", "nowhere"]);
    assert_eq!(f.status.code(), Some(2), "{}", f.stderr_text());
}
