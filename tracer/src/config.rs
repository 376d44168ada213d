//! What gputrace takes from its environment, read once, here: every
//! environment variable it honours is a field of [`Config`] (and a row of
//! docs/configuration.md). Modules get their settings from this struct,
//! never from the environment themselves.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::Failure;

/// The default ring buffer: 16 MiB holds about 80,000 call records.
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;

/// Settings of a tracing run that are not on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `GPUTRACE_RING_BYTES`: the ring buffer's size, a power of two of
    /// at least a page (4096).
    pub ring_bytes: u32,
    /// `GPUTRACE_DETACH_AFTER`: in node mode, how long a probed library file
    /// may go unmapped by every process before its probes are detached.
    pub detach_after: Duration,
    /// Unset by `GPUTRACE_NO_CALIBRATION` (any value): kernel names are then
    /// not read from handles (no calibration helper runs).
    pub calibration: bool,
    /// `GPUTRACE_CACHE_DIR`: where calibration results are kept.
    pub cache_dir: PathBuf,
    /// `GPUTRACE_ATTACH=perf`: one perf event per probe, even where the
    /// kernel has multi-uprobe links (for comparison and old kernels).
    pub perf_events: bool,
    /// `GPUTRACE_FAULT_PANIC_AFTER=N` (tests only): the trace panics as
    /// the Nth call reaches its outputs, to show that a panic still ends
    /// the outputs with what was recorded.
    pub fault_panic_after: Option<u64>,
    /// `GPUTRACE_INFLIGHT=map`: keep calls in flight in the eBPF hash map
    /// even where task storage works (for comparison and its tests).
    pub inflight_map: bool,
    /// `GPUTRACE_SAMPLE_PERIOD`: with `--overhead-budget`, the length of
    /// one period of the sampling schedule (100ms to 60s): the sampled
    /// probes are attached and detached once per period.
    pub sample_period: Duration,
    /// `GPUTRACE_DEBUG` (any value): developers' lines on stderr (what a
    /// calibration search tried, for one).
    pub debug: bool,
    /// `GPUTRACE_GPU_KINDS=kernel,memcpy,memset,api`: with `--gpu-time`, the
    /// CUPTI record kinds the agent enables (all by default; for measuring
    /// what each costs). Without `api` the GPU's work is not joined to calls.
    pub gpu_kinds: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ring_bytes: DEFAULT_RING_BYTES,
            detach_after: Duration::from_secs(10),
            calibration: true,
            cache_dir: PathBuf::from("/var/cache/gputrace"),
            perf_events: false,
            fault_panic_after: None,
            inflight_map: false,
            sample_period: crate::config::PERIOD,
            debug: false,
            gpu_kinds: tracer_common::gpu::KIND_ALL,
        }
    }
}

impl Config {
    /// Reads the environment; a value that does not parse is a usage
    /// error (exit 2), never silently replaced by the default.
    pub fn from_env() -> Result<Self, Failure> {
        Self::from_vars(|name| std::env::var_os(name)).map_err(Failure::usage)
    }

    /// The same, from any source of variables (tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Result<Self, String> {
        let mut c = Config::default();
        let text = |name: &str| -> Result<Option<String>, String> {
            get(name)
                .map(|v| {
                    v.into_string()
                        .map_err(|_| format!("{name} is not valid UTF-8"))
                })
                .transpose()
        };
        if let Some(v) = text("GPUTRACE_RING_BYTES")? {
            c.ring_bytes = v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| n.is_power_of_two() && *n >= 4096)
                .ok_or_else(|| {
                    format!("GPUTRACE_RING_BYTES={v}: give a power of two of at least 4096 bytes (the default is {DEFAULT_RING_BYTES})")
                })?;
        }
        c.debug = get("GPUTRACE_DEBUG").is_some();
        if let Some(v) = text("GPUTRACE_GPU_KINDS")? {
            c.gpu_kinds = parse_gpu_kinds(&v)?;
        }
        if let Some(v) = text("GPUTRACE_DETACH_AFTER")? {
            c.detach_after = crate::units::parse_duration(&v)
                .map_err(|e| format!("GPUTRACE_DETACH_AFTER: {e}"))?;
        }
        if let Some(v) = text("GPUTRACE_SAMPLE_PERIOD")? {
            c.sample_period = crate::units::parse_duration(&v)
                .ok()
                .filter(|d| (Duration::from_millis(100)..=Duration::from_secs(60)).contains(d))
                .ok_or_else(|| {
                    format!("GPUTRACE_SAMPLE_PERIOD={v}: give a duration from 100ms to 60s (the default is 1s)")
                })?;
        }
        c.calibration = get("GPUTRACE_NO_CALIBRATION").is_none();
        if let Some(v) = get("GPUTRACE_CACHE_DIR").filter(|v| !v.is_empty()) {
            c.cache_dir = PathBuf::from(v);
        }
        match text("GPUTRACE_ATTACH")?.as_deref() {
            None | Some("") | Some("multi") => {}
            Some("perf") => c.perf_events = true,
            Some(other) => {
                return Err(format!(
                    "GPUTRACE_ATTACH={other}: give `perf` (one perf event per probe) or `multi`"
                ))
            }
        }
        if let Some(v) = text("GPUTRACE_FAULT_PANIC_AFTER")? {
            c.fault_panic_after =
                Some(v.trim().parse::<u64>().map_err(|_| {
                    format!("GPUTRACE_FAULT_PANIC_AFTER={v}: give a number of calls")
                })?);
        }
        match text("GPUTRACE_INFLIGHT")?.as_deref() {
            None | Some("") | Some("task") => {}
            Some("map") => c.inflight_map = true,
            Some(other) => {
                return Err(format!(
                    "GPUTRACE_INFLIGHT={other}: give `map` (the eBPF hash map) or `task` (task storage, the default)"
                ))
            }
        }
        Ok(c)
    }
}

/// The length of one period of the schedule unless configured
/// (`Config::sample_period`).
pub const PERIOD: Duration = Duration::from_millis(1000);

/// `kernel,memcpy,memset,api` (any of them, comma-separated).
fn parse_gpu_kinds(v: &str) -> Result<u32, String> {
    use tracer_common::gpu::{KIND_API, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET};
    let mut kinds = 0;
    for k in v.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        kinds |= match k {
            "kernel" => KIND_KERNEL,
            "memcpy" => KIND_MEMCPY,
            "memset" => KIND_MEMSET,
            "api" => KIND_API,
            other => {
                return Err(format!(
                    "GPUTRACE_GPU_KINDS={v}: `{other}` is not one of kernel, memcpy, memset, api"
                ))
            }
        };
    }
    if kinds == 0 {
        return Err(format!(
            "GPUTRACE_GPU_KINDS={v}: name at least one of kernel, memcpy, memset, api"
        ));
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, String> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_each_variable() {
        assert_eq!(config(&[]).unwrap(), Config::default());
        let c = config(&[
            ("GPUTRACE_RING_BYTES", "4096"),
            ("GPUTRACE_DETACH_AFTER", "2s"),
            ("GPUTRACE_NO_CALIBRATION", "1"),
            ("GPUTRACE_CACHE_DIR", "/tmp/c"),
            ("GPUTRACE_ATTACH", "perf"),
            ("GPUTRACE_INFLIGHT", "map"),
            ("GPUTRACE_SAMPLE_PERIOD", "5s"),
        ])
        .unwrap();
        assert_eq!(
            c,
            Config {
                ring_bytes: 4096,
                detach_after: Duration::from_secs(2),
                calibration: false,
                cache_dir: PathBuf::from("/tmp/c"),
                perf_events: true,
                fault_panic_after: None,
                debug: false,
                gpu_kinds: tracer_common::gpu::KIND_ALL,
                inflight_map: true,
                sample_period: Duration::from_secs(5),
            }
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_variable_named() {
        for (var, value) in [
            ("GPUTRACE_RING_BYTES", "lots"),
            ("GPUTRACE_RING_BYTES", "5000"),
            ("GPUTRACE_RING_BYTES", "1024"),
            ("GPUTRACE_DETACH_AFTER", "soon"),
            ("GPUTRACE_ATTACH", "kprobe"),
            ("GPUTRACE_INFLIGHT", "lru"),
            ("GPUTRACE_SAMPLE_PERIOD", "10ms"),
            ("GPUTRACE_SAMPLE_PERIOD", "2m"),
            ("GPUTRACE_SAMPLE_PERIOD", "often"),
        ] {
            let e = config(&[(var, value)]).unwrap_err();
            assert!(
                e.starts_with(&format!("{var}={value}")) || e.starts_with(var),
                "{e}"
            );
        }
    }
}
