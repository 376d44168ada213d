//! The daemon's metrics, in the Prometheus text exposition format (0.0.4).
//!
//! One label set per traced process (`pid`, `comm`, and `container_id` /
//! `pod_uid` where its cgroup shows them); a process that exits keeps its
//! series for a grace period (so the last values are scraped), then they are
//! dropped, which keeps the number of series bounded on a busy node.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use crate::aggregate::enrich::Enriched;
use crate::events::model::Args;
use crate::probes::attach::LostCounts;
use crate::probes::catalogue::{Direction, NcclOp};
use crate::probes::cgroup::{self, Container};
use crate::probes::discover;

/// Upper bounds of the latency histogram's buckets, in nanoseconds: host-side
/// API latencies run from about a microsecond (a queued launch) to seconds
/// (a synchronisation, a communicator's creation).
pub const BUCKETS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

#[derive(Clone, Debug, Default)]
struct ApiSeries {
    calls: u64,
    /// Per bucket (not cumulative); the last slot is +Inf.
    buckets: [u64; BUCKETS_NS.len() + 1],
    timed: u64,
    sum_ns: u128,
}

impl ApiSeries {
    fn record(&mut self, dur_ns: Option<u64>) {
        self.calls += 1;
        if let Some(d) = dur_ns {
            let i = BUCKETS_NS.partition_point(|b| *b < d);
            self.buckets[i] += 1;
            self.timed += 1;
            self.sum_ns += u128::from(d);
        }
    }
}

/// The series of one process.
#[derive(Clone, Debug)]
struct ProcessSeries {
    /// `pid="…",comm="…"[,container_id="…"][,pod_uid="…"]`, rendered once.
    labels: String,
    apis: BTreeMap<&'static str, ApiSeries>,
    memcpy: BTreeMap<Direction, u64>,
    nccl: BTreeMap<NcclOp, u64>,
    device_bytes: u64,
    exited_at: Option<Instant>,
}

impl ProcessSeries {
    fn new(pid: u32, comm: &str, container: &Container) -> Self {
        let mut labels = format!("pid=\"{pid}\",comm=\"");
        escape_into(&mut labels, comm);
        labels.push('"');
        for (name, value) in [
            ("container_id", &container.container_id),
            ("pod_uid", &container.pod_uid),
        ] {
            if let Some(v) = value {
                let _ = write!(labels, ",{name}=\"");
                escape_into(&mut labels, v);
                labels.push('"');
            }
        }
        Self {
            labels,
            apis: BTreeMap::new(),
            memcpy: BTreeMap::new(),
            nccl: BTreeMap::new(),
            device_bytes: 0,
            exited_at: None,
        }
    }
}

/// Writes a label value with `\`, `"` and newlines escaped.
fn escape_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A process's name and container, read while it was alive: a short-lived
/// process may be gone from /proc by the time its calls are counted.
#[derive(Clone, Debug)]
struct Identity {
    comm: String,
    container: Container,
    exited_at: Option<Instant>,
}

/// How long the identity of an exited process is kept for its last calls.
const IDENTITY_AFTER_EXIT: Duration = Duration::from_secs(5);

/// What the tracer itself reports alongside the calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracerGauges {
    pub probes: usize,
    pub library_files: usize,
    /// Processes whose decoding state (allocations, kernel names) is held.
    pub process_states: usize,
}

/// Every metric the daemon serves.
pub struct Metrics {
    procs: BTreeMap<u32, ProcessSeries>,
    /// Processes seen alive that have no series yet.
    identities: std::collections::HashMap<u32, Identity>,
    lost: LostCounts,
    gauges: TracerGauges,
    keep_exited: Duration,
    /// Looks up a process's container (replaced in tests).
    container_of: fn(u32) -> Container,
    /// Whether a process is alive (replaced in tests).
    alive: fn(u32) -> bool,
}

impl Metrics {
    /// `keep_exited`: how long the series of an exited process are kept.
    pub fn new(keep_exited: Duration) -> Self {
        Self {
            procs: BTreeMap::new(),
            identities: std::collections::HashMap::new(),
            lost: LostCounts::default(),
            gauges: TracerGauges::default(),
            keep_exited,
            container_of: cgroup::container_of,
            alive: discover::is_alive,
        }
    }

    /// Reads the name and container of processes found mapping libcuda or
    /// libnccl, while they are alive, for the series their calls will make.
    pub fn note_alive(&mut self, pids: &[u32]) {
        for &pid in pids {
            if self.procs.contains_key(&pid) || self.identities.contains_key(&pid) {
                continue;
            }
            let Some(comm) = discover::comm(pid) else {
                continue;
            };
            let container = (self.container_of)(pid);
            self.identities.insert(
                pid,
                Identity {
                    comm,
                    container,
                    exited_at: None,
                },
            );
        }
    }

    /// Counts one call.
    pub fn record(&mut self, e: &Enriched) {
        let c = &e.call;
        let (alive, container_of) = (self.alive, self.container_of);
        let known = self.identities.remove(&c.pid);
        let fresh = || match &known {
            Some(id) => ProcessSeries::new(c.pid, &id.comm, &id.container),
            None => ProcessSeries::new(c.pid, &c.comm, &container_of(c.pid)),
        };
        let p = match self.procs.entry(c.pid) {
            std::collections::btree_map::Entry::Vacant(v) => v.insert(fresh()),
            std::collections::btree_map::Entry::Occupied(o) => {
                let p = o.into_mut();
                // A new process that was given an exited one's PID.
                if p.exited_at.is_some() && alive(c.pid) {
                    *p = fresh();
                }
                p
            }
        };
        p.apis.entry(c.api).or_default().record(c.dur_ns);
        if let Some(b) = e.device_bytes {
            p.device_bytes = b;
        }
        if c.failed() {
            return;
        }
        match &c.args {
            Args::Memcpy(m) => {
                let b = p.memcpy.entry(m.direction).or_default();
                *b = b.saturating_add(m.bytes);
            }
            Args::Nccl(n) => {
                let b = p.nccl.entry(n.op).or_default();
                *b = b.saturating_add(n.bytes().unwrap_or(0));
            }
            _ => {}
        }
    }

    pub fn set_lost(&mut self, lost: LostCounts) {
        self.lost = lost;
    }

    pub fn set_gauges(&mut self, g: TracerGauges) {
        self.gauges = g;
    }

    /// Marks processes that exited; drops those gone for longer than the grace.
    pub fn sweep(&mut self, now: Instant) {
        let alive = self.alive;
        let keep = self.keep_exited;
        self.identities.retain(|pid, id| match id.exited_at {
            Some(t) => now.saturating_duration_since(t) < IDENTITY_AFTER_EXIT,
            None => {
                if !alive(*pid) {
                    id.exited_at = Some(now);
                }
                true
            }
        });
        self.procs.retain(|pid, p| match p.exited_at {
            Some(t) => now.saturating_duration_since(t) < keep,
            None => {
                if !alive(*pid) {
                    p.exited_at = Some(now);
                }
                true
            }
        });
    }

    /// Processes with series (exited ones within the grace included).
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// The whole exposition text (tests; the daemon sends it in chunks).
    pub fn render(&self) -> String {
        let mut cursor = Cursor::default();
        let mut out = String::new();
        while let Some(chunk) = self.render_chunk(&mut cursor, usize::MAX) {
            out.push_str(&chunk);
        }
        out
    }

    /// The next part of the exposition, of about `target` bytes (whole
    /// series of a process at least), resuming at `cursor`; `None` at the
    /// end. A scrape is answered chunk by chunk with the lock taken per
    /// chunk: thousands of processes make tens of MB of text, which is
    /// never held whole, and the tracing loop is never held up long.
    /// Processes that come or go between chunks are simply there or not.
    pub fn render_chunk(&self, cursor: &mut Cursor, target: usize) -> Option<String> {
        if cursor.family > FAMILIES.len() {
            return None;
        }
        let mut o = String::with_capacity(target.min(1 << 20));
        while cursor.family < FAMILIES.len() {
            let (name, kind, help) = FAMILIES[cursor.family];
            if !cursor.header_done {
                header(&mut o, name, kind, help);
                cursor.header_done = true;
            }
            let start = match cursor.after_pid {
                Some(pid) => std::ops::Bound::Excluded(pid),
                None => std::ops::Bound::Unbounded,
            };
            for (pid, p) in self.procs.range((start, std::ops::Bound::Unbounded)) {
                write_family(&mut o, cursor.family, p);
                cursor.after_pid = Some(*pid);
                if o.len() >= target {
                    return Some(o);
                }
            }
            cursor.family += 1;
            cursor.header_done = false;
            cursor.after_pid = None;
        }
        self.write_tracer(&mut o);
        cursor.family += 1;
        Some(o)
    }

    /// The series that are not per process.
    fn write_tracer(&self, o: &mut String) {
        header(
            o,
            "gputrace_events_lost_total",
            "counter",
            "Calls made but not recorded, by reason: ring_full (the ring buffer was full), inflight_full, unpaired (a return without its entry).",
        );
        for (reason, n) in [
            ("ring_full", self.lost.ring_full),
            ("inflight_full", self.lost.inflight_full),
            ("unpaired", self.lost.unpaired),
        ] {
            let _ = writeln!(o, "gputrace_events_lost_total{{reason=\"{reason}\"}} {n}");
        }
        for (name, help, value) in [
            (
                "gputrace_traced_processes",
                "Processes with series here (those that exited within the grace period included).",
                self.procs.len(),
            ),
            (
                "gputrace_probes_attached",
                "Uprobes and uretprobes attached.",
                self.gauges.probes,
            ),
            (
                "gputrace_library_files_probed",
                "Distinct libcuda/libnccl files (device and inode) probed for every process.",
                self.gauges.library_files,
            ),
            (
                "gputrace_process_states",
                "Processes whose decoding state (allocations, kernel names) gputrace holds; freed a few seconds after a process exits.",
                self.gauges.process_states,
            ),
        ] {
            header(o, name, "gauge", help);
            let _ = writeln!(o, "{name} {value}");
        }
    }
}

/// Where a chunked rendering of the exposition stands.
#[derive(Clone, Debug, Default)]
pub struct Cursor {
    /// Index into [`FAMILIES`]; `FAMILIES.len()` is the tracer's own series.
    family: usize,
    header_done: bool,
    after_pid: Option<u32>,
}

/// The per-process metric families, in the order they are written.
const FAMILIES: [(&str, &str, &str); 5] = [
    (
        "gputrace_api_calls_total",
        "counter",
        "CUDA driver and NCCL API calls traced, by process and API.",
    ),
    (
        "gputrace_api_duration_seconds",
        "histogram",
        "Host-side time in each API call (a launch returns once queued; a synchronisation shows the wait for the GPU).",
    ),
    (
        "gputrace_memcpy_bytes_total",
        "counter",
        "Bytes copied (and set, direction=\"memset\") by successful copy calls, by direction.",
    ),
    (
        "gputrace_device_memory_bytes",
        "gauge",
        "Device memory in use that the trace saw allocated and not freed (allocations made before gputrace attached are not in it).",
    ),
    (
        "gputrace_nccl_bytes_total",
        "counter",
        "Bytes passed to successful NCCL collectives and point-to-point calls (count x element size), by operation.",
    ),
];

/// One process's samples of family `family` (an index into [`FAMILIES`]).
fn write_family(o: &mut String, family: usize, p: &ProcessSeries) {
    match family {
        0 => {
            for (api, s) in &p.apis {
                let _ = writeln!(
                    o,
                    "gputrace_api_calls_total{{api=\"{api}\",{}}} {}",
                    p.labels, s.calls
                );
            }
        }
        1 => {
            for (api, s) in p.apis.iter().filter(|(_, s)| s.timed > 0) {
                let mut cumulative = 0;
                for (i, bound) in BUCKETS_NS.iter().enumerate() {
                    cumulative += s.buckets[i];
                    let _ = writeln!(
                        o,
                        "gputrace_api_duration_seconds_bucket{{api=\"{api}\",{},le=\"{}\"}} {cumulative}",
                        p.labels,
                        seconds(*bound as u128)
                    );
                }
                let _ = writeln!(
                    o,
                    "gputrace_api_duration_seconds_bucket{{api=\"{api}\",{},le=\"+Inf\"}} {}",
                    p.labels, s.timed
                );
                let _ = writeln!(
                    o,
                    "gputrace_api_duration_seconds_sum{{api=\"{api}\",{}}} {}",
                    p.labels,
                    seconds(s.sum_ns)
                );
                let _ = writeln!(
                    o,
                    "gputrace_api_duration_seconds_count{{api=\"{api}\",{}}} {}",
                    p.labels, s.timed
                );
            }
        }
        2 => {
            for (d, b) in &p.memcpy {
                let _ = writeln!(
                    o,
                    "gputrace_memcpy_bytes_total{{direction=\"{}\",{}}} {b}",
                    d.name(),
                    p.labels
                );
            }
        }
        3 => {
            let _ = writeln!(
                o,
                "gputrace_device_memory_bytes{{{}}} {}",
                p.labels, p.device_bytes
            );
        }
        _ => {
            for (op, b) in &p.nccl {
                let _ = writeln!(
                    o,
                    "gputrace_nccl_bytes_total{{op=\"{}\",{}}} {b}",
                    op.name(),
                    p.labels
                );
            }
        }
    }
}

fn header(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

/// Nanoseconds as decimal seconds, exactly (no float rounding: `0.0000025`).
fn seconds(ns: u128) -> String {
    let whole = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::events::model::{Call, Memcpy, Nccl};
    use crate::probes::catalogue::Family;

    fn call(pid: u32, api: &'static str, dur: u64, args: Args) -> Enriched {
        Enriched {
            call: Call {
                ts_ns: 1,
                dur_ns: Some(dur),
                pid,
                tid: pid,
                comm: Arc::from("py\"thon"),
                api,
                family: Some(Family::Launch),
                ret: Some(0),
                args,
            },
            device_bytes: None,
        }
    }

    fn container(pid: u32) -> Container {
        if pid == 2 {
            Container {
                container_id: Some("abc123def456".into()),
                pod_uid: Some("8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b".into()),
            }
        } else {
            Container::default()
        }
    }

    fn metrics() -> Metrics {
        let mut m = Metrics::new(Duration::from_secs(60));
        m.container_of = container;
        m.alive = |pid| pid != 3;
        m
    }

    fn other() -> Args {
        Args::Other(Default::default())
    }

    #[test]
    fn renders_counters_histograms_and_labels() {
        let mut m = metrics();
        for _ in 0..7 {
            m.record(&call(1, "cuLaunchKernel", 3_000, other()));
        }
        m.record(&call(1, "cuLaunchKernel", 20_000_000_000, other()));
        m.record(&call(
            2,
            "cuMemcpyHtoD_v2",
            1_000,
            Args::Memcpy(Memcpy {
                dst: 1,
                src: Some(2),
                bytes: 4096,
                direction: Direction::HtoD,
                stream: None,
                value: None,
                readable: (false, true),
                captured: None,
            }),
        ));
        m.record(&call(
            2,
            "ncclAllReduce",
            1_000,
            Args::Nccl(Nccl {
                op: NcclOp::AllReduce,
                count: 1024,
                datatype: 7,
                redop: Some(0),
                root: None,
                peer: None,
                comm: 1,
                stream: 2,
            }),
        ));
        let mut with_mem = call(2, "cuMemAlloc_v2", 1_000, other());
        with_mem.device_bytes = Some(1 << 20);
        m.record(&with_mem);
        m.set_lost(LostCounts {
            ring_full: 5,
            ..Default::default()
        });
        let text = m.render();
        let l1 = r#"pid="1",comm="py\"thon""#;
        let l2 = r#"pid="2",comm="py\"thon",container_id="abc123def456",pod_uid="8a6b1f2e-3c4d-4e5f-9a0b-1c2d3e4f5a6b""#;
        for line in [
            format!("gputrace_api_calls_total{{api=\"cuLaunchKernel\",{l1}}} 8"),
            format!(
                "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"0.0000025\"}} 0"
            ),
            format!(
                "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"0.000005\"}} 7"
            ),
            format!(
                "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"10\"}} 7"
            ),
            format!(
                "gputrace_api_duration_seconds_bucket{{api=\"cuLaunchKernel\",{l1},le=\"+Inf\"}} 8"
            ),
            format!("gputrace_api_duration_seconds_sum{{api=\"cuLaunchKernel\",{l1}}} 20.000021"),
            format!("gputrace_api_duration_seconds_count{{api=\"cuLaunchKernel\",{l1}}} 8"),
            format!("gputrace_memcpy_bytes_total{{direction=\"HtoD\",{l2}}} 4096"),
            format!("gputrace_nccl_bytes_total{{op=\"AllReduce\",{l2}}} 4096"),
            format!("gputrace_device_memory_bytes{{{l2}}} 1048576"),
            format!("gputrace_device_memory_bytes{{{l1}}} 0"),
            "gputrace_events_lost_total{reason=\"ring_full\"} 5".to_string(),
            "# TYPE gputrace_api_duration_seconds histogram".to_string(),
            "# TYPE gputrace_api_calls_total counter".to_string(),
            "# TYPE gputrace_device_memory_bytes gauge".to_string(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line}\n---\n{text}"
            );
        }
        // Every sample line is `name{labels} value` or `name value`.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, v) = l.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
            assert!(l.starts_with("gputrace_"), "{l}");
        }
    }

    #[test]
    fn exited_processes_are_dropped_after_the_grace() {
        let mut m = metrics();
        m.keep_exited = Duration::from_secs(5);
        m.record(&call(1, "cuLaunchKernel", 1, other()));
        m.record(&call(3, "cuLaunchKernel", 1, other()));
        let t0 = Instant::now();
        m.sweep(t0);
        assert_eq!(m.processes(), 2, "kept during the grace");
        m.sweep(t0 + Duration::from_secs(4));
        assert_eq!(m.processes(), 2);
        m.sweep(t0 + Duration::from_secs(6));
        assert_eq!(m.processes(), 1);
        assert!(!m.render().contains("pid=\"3\""));
    }

    #[test]
    fn identities_read_while_alive_label_later_calls() {
        let mut m = metrics();
        m.note_alive(&[std::process::id()]);
        m.container_of = |_| Container::default();
        m.record(&call(std::process::id(), "cuLaunchKernel", 1, other()));
        let text = m.render();
        let me = crate::probes::discover::comm(std::process::id()).unwrap();
        assert!(
            text.contains(&format!("pid=\"{}\",comm=\"{me}\"", std::process::id())),
            "{text}"
        );
        assert!(m.identities.is_empty());
    }

    #[test]
    fn a_reused_pid_starts_afresh() {
        let mut m = metrics();
        m.record(&call(4, "cuLaunchKernel", 1, other()));
        m.alive = |_| false;
        m.sweep(Instant::now());
        m.alive = |_| true;
        m.record(&call(4, "cuMemFree_v2", 1, other()));
        let text = m.render();
        assert!(!text.contains("cuLaunchKernel"), "{text}");
        assert!(text.contains("cuMemFree_v2"));
    }

    #[test]
    fn chunks_add_up_to_the_whole() {
        let mut m = metrics();
        for pid in 1..200 {
            for api in ["cuLaunchKernel", "cuMemAlloc_v2", "ncclAllReduce"] {
                m.record(&call(pid, api, pid as u64 * 1000, other()));
            }
        }
        let whole = m.render();
        let mut cursor = Cursor::default();
        let mut joined = String::new();
        let mut chunks = 0;
        while let Some(c) = m.render_chunk(&mut cursor, 4096) {
            // The target, plus at most one process's series of one family.
            assert!(c.len() < 4096 + 16384, "{}", c.len());
            joined.push_str(&c);
            chunks += 1;
        }
        assert_eq!(joined, whole);
        assert!(chunks > 10);
        assert_eq!(m.render_chunk(&mut cursor, 4096), None);
        // Every family's header comes once, before its samples.
        for (name, kind, _) in FAMILIES {
            assert_eq!(whole.matches(&format!("# TYPE {name} {kind}\n")).count(), 1);
        }
    }

    #[test]
    fn seconds_are_exact() {
        assert_eq!(seconds(1_000), "0.000001");
        assert_eq!(seconds(2_500), "0.0000025");
        assert_eq!(seconds(10_000_000_000), "10");
        assert_eq!(seconds(1_500_000_001), "1.500000001");
        assert_eq!(seconds(0), "0");
    }
}
