//! The metrics as Prometheus text (exposition format 0.0.4), rendered in
//! chunks so a scrape of thousands of processes is never held whole.

use std::fmt::Write;

use crate::outputs::metrics::histogram;
use crate::outputs::metrics::seconds;
use crate::outputs::metrics::Metrics;
use crate::outputs::metrics::ProcessSeries;
use crate::probes::symbols::Prologue;

/// A per-process metric family: its name, type, help, and how one
/// process's samples of it are written.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    write: fn(&mut String, &ProcessSeries),
}

/// The per-process families, in the order they are written.
const FAMILIES: &[Family] = &[
    Family {
        name: "gputrace_api_calls_total",
        kind: "counter",
        help: "CUDA driver and NCCL API calls traced, by process and API (estimated where gputrace_sampling_ratio of the API's family is below 1).",
        write: api_calls,
    },
    Family {
        name: "gputrace_sampling_ratio",
        kind: "gauge",
        help: "Share of time the family's busy APIs (launches, copies and sets on a stream, event records, stream waits) were traced in the last period of --overhead-budget's schedule; 1 when traced in full. Where below 1, gputrace_api_calls_total of those APIs is an estimate (calls seen / this share).",
        write: sampling_ratio,
    },
    Family {
        name: "gputrace_sampling_estimated_until_seconds",
        kind: "gauge",
        help: "Where --overhead-budget sampled the process: the end of the last period of the schedule settled (Unix time). The estimated gputrace_api_calls_total count the calls made up to then; the rest of the calls are counted when their period ends.",
        write: estimated_until,
    },
    Family {
        name: "gputrace_api_duration_seconds",
        kind: "histogram",
        help: "Host-side time in each API call (a launch returns once queued; a synchronisation shows the wait for the GPU).",
        write: api_durations,
    },
    Family {
        name: "gputrace_memcpy_bytes_total",
        kind: "counter",
        help: "Bytes copied (and set, direction=\"memset\") by successful copy calls, by direction.",
        write: memcpy_bytes,
    },
    Family {
        name: "gputrace_device_memory_bytes",
        kind: "gauge",
        help: "Device memory in use that the trace saw allocated and not freed (allocations made before gputrace attached are not in it).",
        write: device_memory,
    },
    Family {
        name: "gputrace_nccl_bytes_total",
        kind: "counter",
        help: "Bytes passed to successful NCCL collectives and point-to-point calls (count x element size), by operation.",
        write: nccl_bytes,
    },
    Family {
        name: "gputrace_gpu_busy_seconds_total",
        kind: "counter",
        help: "--gpu-time: time the device ran work of the process (the union of its kernels', copies' and memsets' spans on the GPU, across streams); rate() of it is the busy share.",
        write: crate::outputs::metrics::gpu::busy_seconds,
    },
    Family {
        name: "gputrace_gpu_busy_ratio",
        kind: "gauge",
        help: "--gpu-time: share of the last five seconds (or so) the device ran work of the process (with --gpu-time-share, of the time sampled in them).",
        write: crate::outputs::metrics::gpu::busy_ratio,
    },
    Family {
        name: "gputrace_gpu_sampled_seconds_total",
        kind: "counter",
        help: "--gpu-time-share: time the process's CUPTI collected GPU records; the GPU series count the work launched then (absent without --gpu-time-share).",
        write: crate::outputs::metrics::gpu::sampled_seconds,
    },
    Family {
        name: "gputrace_gpu_stopped",
        kind: "gauge",
        help: "--gpu-time-share: 1 for a process whose GPU time stopped, CUPTI taken by another tool between two windows (absent otherwise).",
        write: crate::outputs::metrics::gpu::stopped,
    },
    Family {
        name: "gputrace_gpu_kernel_seconds_total",
        kind: "counter",
        help: "--gpu-time: GPU time of the process's kernels, for the 20 with the most of it (up to 40 as the ranking changes, every 10 s); the rest, and a kernel's time before it got its own series, in kernel=\"other\".",
        write: crate::outputs::metrics::gpu::kernel_seconds,
    },
    Family {
        name: "gputrace_nccl_gpu_seconds_total",
        kind: "counter",
        help: "--gpu-time: GPU time of the NCCL kernels the process launched, by operation (op=\"group\" for kernels of a group call).",
        write: crate::outputs::metrics::gpu::nccl_seconds,
    },
    Family {
        name: "gputrace_gemm_calls_total",
        kind: "counter",
        help: "Successful cuBLAS GEMM calls, by shape (ops b x m x n x k as cuBLAS was called, column-major) and types (A,B->C and compute type), for the 20 shapes with the most time (GPU time with --gpu-time, else host time; up to 40 as the ranking changes, every 10 s); the rest, and a shape's calls before it got its own series, in shape=\"other\".",
        write: crate::outputs::metrics::gemm::calls,
    },
    Family {
        name: "gputrace_gemm_seconds",
        kind: "histogram",
        help: "Host-side time of successful cuBLAS GEMM calls, by shape and types (the shapes of gputrace_gemm_calls_total).",
        write: crate::outputs::metrics::gemm::durations,
    },
    Family {
        name: "gputrace_gemm_gpu_seconds_total",
        kind: "counter",
        help: "--gpu-time: GPU time of cuBLAS GEMM calls, by shape and types (the shapes of gputrace_gemm_calls_total): per call, the span from its first kernel's start to its last kernel's end, counted once the call's kernels are all reported.",
        write: crate::outputs::metrics::gemm::gpu_seconds,
    },
    Family {
        name: "gputrace_graph_kernels_total",
        kind: "counter",
        help: "Kernels run as nodes of CUDA graph launches (launches of graphs whose nodes are not known add none), for processes that launched graphs.",
        write: graph_kernels,
    },
];

/// Where a chunked rendering of the exposition stands: the family being
/// written (by name; `None` before the first), whether its header is out,
/// and the last process written.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cursor {
    family: Option<&'static str>,
    header_done: bool,
    after_pid: Option<(u32, u32)>,
    /// The tracer's own series are written (the end).
    done: bool,
}

impl Cursor {
    /// The family to write now, looked up by name; `None` once the
    /// per-process families are all written.
    fn current(&mut self) -> Option<&'static Family> {
        let name = *self.family.get_or_insert(FAMILIES[0].name);
        FAMILIES.iter().find(|f| f.name == name)
    }

    /// Moves on to the family after the current one.
    fn next_family(&mut self) {
        let at = FAMILIES.iter().position(|f| Some(f.name) == self.family);
        self.family = Some(match at.and_then(|i| FAMILIES.get(i + 1)) {
            Some(f) => f.name,
            None => "",
        });
        self.header_done = false;
        self.after_pid = None;
    }
}

impl Metrics {
    #[cfg(test)]
    /// The whole exposition text (tests; the daemon sends it in chunks).
    pub(crate) fn render(&self) -> String {
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
    pub(crate) fn render_chunk(&self, cursor: &mut Cursor, target: usize) -> Option<String> {
        if cursor.done {
            return None;
        }
        let mut o = String::with_capacity(target.min(1 << 20));
        while let Some(family) = cursor.current() {
            if !cursor.header_done {
                header(&mut o, family.name, family.kind, family.help);
                cursor.header_done = true;
            }
            let start = match cursor.after_pid {
                Some(pid) => std::ops::Bound::Excluded(pid),
                None => std::ops::Bound::Unbounded,
            };
            for (pid, p) in self.procs.range((start, std::ops::Bound::Unbounded)) {
                (family.write)(&mut o, p);
                cursor.after_pid = Some(*pid);
                if o.len() >= target {
                    return Some(o);
                }
            }
            cursor.next_family();
        }
        self.write_tracer(&mut o);
        cursor.done = true;
        Some(o)
    }

    /// The series that are not per process.
    fn write_tracer(&self, o: &mut String) {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.nccl.render(o, now_ns);
        header(
            o,
            "gputrace_events_lost_total",
            "counter",
            "Calls made but not recorded, by reason: ring_full (the ring buffer was full), inflight_full, unpaired (a return without its entry), counts_full (no room to count a process's calls in the kernel).",
        );
        for (reason, n) in [
            ("ring_full", self.lost.ring_full),
            ("inflight_full", self.lost.inflight_full),
            ("unpaired", self.lost.unpaired),
            ("counts_full", self.lost.counts_full),
        ] {
            let _ = writeln!(o, "gputrace_events_lost_total{{reason=\"{reason}\"}} {n}");
        }
        if let Some(c) = self.hit_cost {
            header(
                o,
                "gputrace_probe_hit_cost_seconds",
                "gauge",
                "What one traced call costs its thread on this machine (measured at start for --overhead-budget): probes=\"entry\" an entry probe, \"entry_return\" an entry and a return probe; prologue=\"stepped\" on a function whose first instruction the kernel single-steps, \"emulated\" on one whose first instruction it emulates (a push).",
            );
            for (prologue, class) in [
                ("stepped", Prologue::Stepped),
                ("emulated", Prologue::Emulated),
            ] {
                let (entry, entry_return) = c.seconds(class);
                for (probes, s) in [("entry", entry), ("entry_return", entry_return)] {
                    let _ = writeln!(
                        o,
                        "gputrace_probe_hit_cost_seconds{{probes=\"{probes}\",prologue=\"{prologue}\"}} {s}"
                    );
                }
            }
        }
        if let Some(k) = self.cost_ratio {
            header(
                o,
                "gputrace_probe_cost_ratio",
                "gauge",
                "How many times gputrace_probe_hit_cost_seconds the sampled probes cost the traced processes in place, read from their kernel time while the probes were on and off (1 until enough was read; at least 1, at most 4): --overhead-budget charges each hit at the measured cost times this.",
            );
            let _ = writeln!(o, "gputrace_probe_cost_ratio {k}");
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

fn api_calls(o: &mut String, p: &ProcessSeries) {
    for (api, s) in &p.apis {
        // Sampled (`--overhead-budget`): the estimate, as of the last period.
        let n = p
            .estimated
            .get(api)
            .map_or(s.calls, |e| (e.round() as u64).max(s.calls));
        let _ = writeln!(
            o,
            "gputrace_api_calls_total{{api=\"{api}\",{}}} {n}",
            p.labels
        );
    }
}

/// The share of time each family with samplable APIs was traced: 1 when
/// exact (always so without `--overhead-budget`).
fn sampling_ratio(o: &mut String, p: &ProcessSeries) {
    let mut families: Vec<&'static str> = p
        .apis
        .keys()
        .filter_map(|a| crate::catalogue::api_by_name(a))
        .filter(|a| a.samplable())
        .map(|a| a.family.name())
        .collect();
    families.sort_unstable();
    families.dedup();
    for f in families {
        let r = p.ratios.get(f).copied().unwrap_or(1.0);
        let _ = writeln!(
            o,
            "gputrace_sampling_ratio{{family=\"{f}\",{}}} {r}",
            p.labels
        );
    }
}

fn estimated_until(o: &mut String, p: &ProcessSeries) {
    if let Some(ns) = p.estimated_until_ns {
        let _ = writeln!(
            o,
            "gputrace_sampling_estimated_until_seconds{{{}}} {}",
            p.labels,
            seconds(u128::from(ns))
        );
    }
}

fn api_durations(o: &mut String, p: &ProcessSeries) {
    for (api, s) in p.apis.iter().filter(|(_, s)| s.timed > 0) {
        let labels = format!("api=\"{api}\",{}", p.labels);
        histogram(o, "gputrace_api_duration_seconds", &labels, s);
    }
}

fn memcpy_bytes(o: &mut String, p: &ProcessSeries) {
    for (d, b) in &p.memcpy {
        let _ = writeln!(
            o,
            "gputrace_memcpy_bytes_total{{direction=\"{}\",{}}} {b}",
            d.name(),
            p.labels
        );
    }
}

fn device_memory(o: &mut String, p: &ProcessSeries) {
    let _ = writeln!(
        o,
        "gputrace_device_memory_bytes{{{}}} {}",
        p.labels, p.device_bytes
    );
}

fn nccl_bytes(o: &mut String, p: &ProcessSeries) {
    for (op, b) in &p.nccl {
        let _ = writeln!(
            o,
            "gputrace_nccl_bytes_total{{op=\"{}\",{}}} {b}",
            op.name(),
            p.labels
        );
    }
}

fn graph_kernels(o: &mut String, p: &ProcessSeries) {
    if let Some(n) = p.graph_kernels {
        let _ = writeln!(o, "gputrace_graph_kernels_total{{{}}} {n}", p.labels);
    }
}

fn header(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_exact() {
        assert_eq!(seconds(1_000), "0.000001");
        assert_eq!(seconds(2_500), "0.0000025");
        assert_eq!(seconds(10_000_000_000), "10");
        assert_eq!(seconds(1_500_000_001), "1.500000001");
        assert_eq!(seconds(0), "0");
    }

    #[test]
    fn every_family_once_in_order() {
        let text = Metrics::new(std::time::Duration::from_secs(1)).render();
        let mut at = 0;
        for f in FAMILIES {
            let line = format!("# TYPE {} {}\n", f.name, f.kind);
            assert_eq!(text.matches(&line).count(), 1, "{line}");
            let i = text.find(&line).unwrap();
            assert!(i >= at, "{} out of order", f.name);
            at = i;
        }
    }
}
