//! The command line (docs/cli.md describes every option).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::catalogue::ProbeSelection;
use crate::units::parse_duration;

/// Trace what running GPU programs ask of the CUDA driver and NCCL, from
/// outside the process: eBPF uprobes, no restart, no LD_PRELOAD.
#[derive(Debug, Parser)]
#[command(name = "gputrace", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Live terminal view of every GPU process's CUDA and NCCL activity.
    Top(TopArgs),
    /// Print the summary of a timeline written by gputrace (.jsonl, .jsonl.zst, .json, .pftrace).
    Stats(StatsArgs),
    /// List the processes that map libcuda/libnccl, with the library files.
    List,
    /// Node mode: trace every GPU process forever, serve Prometheus metrics.
    Daemon(DaemonArgs),
    /// Internal: find where this libcuda keeps kernel names (run by gputrace itself).
    #[command(name = "__calibrate", hide = true)]
    Calibrate {
        libcuda: PathBuf,
        /// Give up every privilege before loading it (for untrusted files).
        #[arg(long)]
        sandbox: bool,
    },
    /// Internal: find where this libcublasLt keeps a matmul's problem (run by gputrace itself).
    #[command(name = "__calibrate-lt", hide = true)]
    CalibrateLt {
        libcublaslt: PathBuf,
        /// Give up every privilege before loading it (for untrusted files).
        #[arg(long)]
        sandbox: bool,
    },
    /// Internal: list the catalogue symbols a library exports, with file offsets.
    #[command(name = "__symbols", hide = true)]
    Symbols { library: PathBuf },
    /// Internal (benchmarks): a bare counting uprobe, the floor any uprobe tool pays.
    #[command(name = "__bare", hide = true)]
    Bare(BareArgs),
    /// Internal (tests): panics, to show that a panic ends as one line and exit 1.
    #[command(name = "__panic", hide = true)]
    Panic,
}

#[derive(Debug, Args)]
pub struct BareArgs {
    /// Library to probe.
    #[arg(long)]
    pub library: PathBuf,
    /// Symbols to probe (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub symbols: Vec<String>,
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Add a return probe to each symbol.
    #[arg(long = "ret")]
    pub with_return: bool,
    /// Stop after this long (else at SIGINT/SIGTERM).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SummaryFormat {
    Text,
    Json,
    None,
}

#[derive(Debug, Args, Clone)]
pub struct TraceArgs {
    /// Trace this running process (repeatable, or comma-separated).
    #[arg(long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// Trace every process that maps libcuda or libnccl, also ones that start later.
    #[arg(long)]
    pub all: bool,
    /// Stop after this long (e.g. 10s, 2m, 500ms).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Write the timeline here: .jsonl (one event per line), .jsonl.zst (the same, zstd-compressed), .json (Chrome trace) or .pftrace / .perfetto-trace (Perfetto's protobuf trace, for large traces).
    #[arg(long, value_name = "FILE", value_parser = parse_output)]
    pub output: Option<PathBuf>,
    /// Summary printed at the end.
    #[arg(long, value_enum, default_value_t = SummaryFormat::Text, value_name = "FORMAT")]
    pub summary: SummaryFormat,
    /// Write the summary to this file instead of stdout (so --summary json is parseable next to the command's own output).
    #[arg(long, value_name = "PATH")]
    pub summary_file: Option<PathBuf>,
    /// Print one line per call on stdout as it happens.
    #[arg(long)]
    pub print: bool,
    /// Probe families: launch,memory,memcpy,sync,names,runtime,nccl; FAMILY:args traces arguments without latency.
    #[arg(long, value_name = "LIST", value_parser = parse_probes)]
    pub probes: Option<ProbeSelection>,
    /// Use this libcuda instead of the one found in /proc/PID/maps.
    #[arg(long, value_name = "PATH")]
    pub libcuda: Option<PathBuf>,
    /// Use this libnccl instead of the one found in /proc/PID/maps (NCCL linked into another library).
    #[arg(long, value_name = "PATH")]
    pub libnccl: Option<PathBuf>,
    #[command(flatten)]
    pub stacks: StackArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// NCCL: report ranks waiting in a collective for another, or a thread inside an NCCL call, for this long (0: never).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub nccl_stall: Duration,
    /// Keep the probes' cost under PCT percent of each traced process's time (its threads' probe time added up, as a share of one CPU) by sampling launches, copies on a stream, event records and stream waits (counts then estimated; other calls always traced); 0: trace every call. Off unless given.
    #[arg(long, value_name = "PCT", value_parser = parse_budget, allow_hyphen_values = true)]
    pub overhead_budget: Option<f64>,
    /// Say more on stderr (the probe hit cost, what the overhead budget decides).
    #[arg(long)]
    pub verbose: bool,
    /// Start this command and trace it from its first call.
    #[arg(last = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

/// `--stacks` and its settings (trace, top, daemon).
#[derive(Debug, Args, Clone, Default)]
pub struct StackArgs {
    /// Record the caller's call stack (native and Python frames) with each call.
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks: one launch in N per API gets a stack (sync, memory, copies, NCCL: every call).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "stacks", value_parser = clap::value_parser!(u32).range(1..))]
    pub stacks_every: u32,
    /// With --stacks: bytes of user stack copied per call (a multiple of 8, at most 65536; default 16384).
    #[arg(long, value_name = "BYTES", requires = "stacks")]
    pub stack_bytes: Option<u32>,
}

/// `--gpu-time` and its settings (trace, top, daemon).
#[derive(Debug, Args, Clone, Default)]
pub struct GpuArgs {
    /// Also measure how long each kernel, copy and memset ran on the GPU: loads an agent into each traced process (with ptrace; it uses the process's own CUPTI) and unloads it at the end.
    #[arg(long)]
    pub gpu_time: bool,
    /// With --gpu-time: the libcupti the traced processes load (as they see the path), where they map none and none lies beside their libcudart.
    #[arg(long, value_name = "PATH", requires = "gpu_time")]
    pub libcupti: Option<PathBuf>,
    /// With --gpu-time: collect GPU records during this share of each second only (one window at a random place in it; CUPTI is off in the process between windows), to cut its cost on the process; the outputs say the share and count what ran in the windows (1-100, default 100: all the time).
    #[arg(long, value_name = "PERCENT", requires = "gpu_time", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub gpu_time_share: Option<u32>,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Show only this process (repeatable, or comma-separated).
    #[arg(long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// Every process that maps libcuda or libnccl (the default).
    #[arg(long)]
    pub all: bool,
    /// Refresh interval (at most an hour).
    #[arg(long, value_name = "DUR", value_parser = parse_interval, default_value = "1s")]
    pub interval: Duration,
    #[command(flatten)]
    pub stacks: StackArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// NCCL: report ranks waiting in a collective for another, or a thread inside an NCCL call, for this long (0: never).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub nccl_stall: Duration,
    /// Keep the probes' cost under PCT percent of each traced process's time (its threads' probe time added up, as a share of one CPU) by sampling launches, copies on a stream, event records and stream waits (counts then estimated; other calls always traced); 0: trace every call. Off unless given.
    #[arg(long, value_name = "PCT", value_parser = parse_budget, allow_hyphen_values = true)]
    pub overhead_budget: Option<f64>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A .jsonl, .jsonl.zst, .json or .pftrace timeline.
    pub file: PathBuf,
    #[arg(long, value_enum, default_value_t = StatsFormat::Text)]
    pub format: StatsFormat,
    /// Instead of the summary, write folded stacks weighted by host time
    /// (ns) for flamegraph.pl, inferno or speedscope (a timeline traced with --stacks).
    #[arg(long, conflicts_with = "format")]
    pub folded: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Serve metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub listen: SocketAddr,
    /// Also write rotated JSONL timelines here.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// With --output-dir: start a new timeline file once one holds this many MB.
    #[arg(long, value_name = "MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_file_mb: u64,
    /// With --output-dir: keep at most this many timeline files (the oldest go first).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_files: u64,
    /// Keep the series of an exited process this long, then drop them.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "60s")]
    pub keep_exited: Duration,
    /// Stacks go to the --output-dir timelines only (metrics have no call-site labels).
    #[command(flatten)]
    pub stacks: StackArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// NCCL: report ranks waiting in a collective for another, or a thread inside an NCCL call, for this long (0: never).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub nccl_stall: Duration,
    /// Keep the probes' cost under PCT percent of each traced process's time (its threads' probe time added up, as a share of one CPU) by sampling launches, copies on a stream, event records and stream waits (counts then estimated; other calls always traced); 0: trace every call.
    #[arg(long, value_name = "PCT", value_parser = parse_budget, allow_hyphen_values = true, default_value = "1")]
    pub overhead_budget: f64,
    /// Say more on stderr (the probe hit cost, what the overhead budget decides).
    #[arg(long)]
    pub verbose: bool,
    /// Probe families, as trace's --probes (default: all); FAMILY:counts counts that family's busy calls (launches, event records, stream waits, capture queries) in the kernel, per process and API, with no record of each: the cheapest a traced call gets. Needs --overhead-budget 0 and no --output-dir, --gpu-time or --stacks.
    #[arg(long, value_name = "LIST", value_parser = parse_probes)]
    pub probes: Option<ProbeSelection>,
    /// With FAMILY:counts: time one counted call in N, chosen at random (their latency histogram is that sample; the calls are all counted); 1 times every call [default: 16]. Where the kernel has no uprobe sessions every call is timed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4095))]
    pub counts_time_every: Option<u16>,
}

/// `--overhead-budget`: a percentage, 0 (off) to 100.
pub fn parse_budget(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a percentage from 0 to 100 (e.g. 1 or 0.5; 0 traces every call)"
        )),
    }
}

/// `--overhead-budget` as the session takes it: `None` for off (0).
pub fn budget(v: Option<f64>) -> Option<f64> {
    v.filter(|p| *p > 0.0)
}

/// `--nccl-stall`: `None` for 0 (stalls not looked for).
pub fn stall_threshold(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// `top`'s refresh: a duration of at most an hour.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > Duration::from_secs(3600) {
        return Err(format!("`{s}` is longer than an hour"));
    }
    Ok(d)
}

fn parse_output(s: &str) -> Result<PathBuf, String> {
    // `t.jsonl/` names a directory; Path would quietly drop the slash.
    if s.ends_with('/') {
        return Err(format!("`{s}` names a directory: give a file"));
    }
    let p = PathBuf::from(s);
    match TimelineFormat::from_path(&p) {
        Some(_) => Ok(p),
        None => Err(format!(
            "`{s}` must end in .jsonl (events), .jsonl.zst (compressed events), .json (Chrome trace) or .pftrace (Perfetto trace)"
        )),
    }
}

fn parse_probes(s: &str) -> Result<ProbeSelection, String> {
    ProbeSelection::parse(s)
}

/// The formats `--output` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormat {
    Jsonl,
    Chrome,
    JsonlZst,
    Perfetto,
}

impl TimelineFormat {
    pub fn from_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        match path.extension()?.to_str()? {
            "jsonl" => Some(Self::Jsonl),
            "json" => Some(Self::Chrome),
            "zst" if name.ends_with(".jsonl.zst") => Some(Self::JsonlZst),
            "pftrace" | "perfetto-trace" => Some(Self::Perfetto),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
        // Too long for a Duration from a float: an error, not a panic.
        assert!(parse_duration("1e30").is_err());
        assert_eq!(
            parse_duration("9223372036854775807s").unwrap(),
            Duration::from_secs(i64::MAX as u64)
        );
        assert!(parse_interval("2h").is_err());
    }

    #[test]
    fn command_lines() {
        let c = Cli::try_parse_from(["gputrace", "--pid", "1,2", "--pid", "3", "--duration", "1s"])
            .unwrap();
        assert_eq!(c.trace.pids, vec![1, 2, 3]);
        let c = Cli::try_parse_from(["gputrace", "--print", "--", "python3", "-c", "x"]).unwrap();
        assert_eq!(c.trace.cmd, vec!["python3", "-c", "x"]);
        let c = Cli::try_parse_from([
            "gputrace",
            "--summary",
            "json",
            "--summary-file",
            "s.json",
            "--",
            "x",
        ])
        .unwrap();
        assert_eq!(c.trace.summary_file, Some(PathBuf::from("s.json")));
        assert!(Cli::try_parse_from(["gputrace", "--output", "x.txt", "--pid", "1"]).is_err());
        assert!(Cli::try_parse_from(["gputrace", "--probes", "nope", "--pid", "1"]).is_err());
        let c = Cli::try_parse_from(["gputrace", "stats", "f.jsonl", "--format", "json"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Stats(StatsArgs {
                format: StatsFormat::Json,
                ..
            }))
        ));
    }
}
