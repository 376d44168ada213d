//! `gputrace daemon`: node mode. Every process that maps libcuda or libnccl,
//! now and later (probes per library file for all processes, see
//! `session::node`), counted into Prometheus metrics served at
//! `http://ADDR/metrics`; optionally the calls as rotated JSONL timelines,
//! written on their own thread. Runs until SIGTERM or SIGINT, then
//! detaches everything and exits 0.

mod admission;
mod http;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use crate::catalogue::COUNTS_TIME_EVERY;
use crate::cli::DaemonArgs;
use crate::config::Config;
use crate::error::Failure;
use crate::error::Result;
use crate::host::clock::Clock;
use crate::outputs::fault::FaultSink;
use crate::outputs::metrics::Metrics;
use crate::outputs::metrics::MetricsSink;
use crate::outputs::timeline::rotate::RotatingTimeline;
use crate::outputs::timeline::writer::OnError;
use crate::outputs::timeline::writer::TimelineSink;
use crate::session::preflight;
use crate::session::RunOptions;
use crate::session::Session;
use crate::session::Stop;
use crate::session::TargetSpec;

pub(crate) fn run(args: DaemonArgs, config: &Config) -> Result<ExitCode> {
    let spec = TargetSpec {
        all: true,
        stacks: crate::commands::stack_request(&args.stacks),
        gpu: crate::commands::gpu_options(&args.gpu, config),
        nccl_stall: crate::cli::stall_threshold(args.nccl_stall),
        overhead_budget: crate::cli::budget(Some(args.overhead_budget)),
        verbose: args.verbose,
        probes: args
            .probes
            .clone()
            .map(|p| p.with_time_every(args.counts_time_every.unwrap_or(COUNTS_TIME_EVERY))),
        ..TargetSpec::default()
    };
    let counts = spec.probes.as_ref().is_some_and(|p| p.counts_any());
    if args.counts_time_every.is_some() && !counts {
        return Err(Failure::usage(
            "--counts-time-every times calls counted in the kernel: give --probes with a FAMILY:counts (e.g. launch:counts)",
        ));
    }
    if counts {
        let with = [
            (spec.overhead_budget.is_some(), "--overhead-budget above 0"),
            (args.output_dir.is_some(), "--output-dir"),
            (spec.gpu.is_some(), "--gpu-time"),
            (spec.stacks.is_some(), "--stacks"),
        ];
        if let Some((_, flag)) = with.iter().find(|(given, _)| *given) {
            return Err(Failure::usage(format!(
                "`:counts` keeps no record of each call, which {flag} needs: give --overhead-budget 0 and leave the others out, or the family without `:counts`"
            )));
        }
    }
    preflight(&spec)?;
    let timelines = match &args.output_dir {
        Some(dir) => {
            let failed = |e: std::io::Error| {
                Failure::runtime(format!("--output-dir {}: {e}", dir.display()))
            };
            let files = RotatingTimeline::open(
                dir,
                args.max_file_mb.saturating_mul(1_000_000),
                args.max_files as usize,
            )
            .map_err(failed)?;
            let what = format!("writing timelines to {}", dir.display());
            Some(TimelineSink::start(files, what, OnError::Disable).map_err(failed)?)
        }
        None => None,
    };
    // Two workers serve HTTP while the tracing loop runs on this thread
    // (calibrations run on threads of their own, beside both).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gputrace-http")
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the event loop: {e}")))?;
    let mut timelines = timelines;
    // A panic while tracing (a bug) unwinds to here: the session goes with
    // it (every probe detached), the timeline being written is ended with
    // what it holds, and main says the panic in one line (exit 1).
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(daemon(&args, config, spec, &mut timelines))
    }));
    // The server's tasks are cancelled; nothing there needs finishing.
    rt.shutdown_timeout(Duration::from_millis(100));
    match ran {
        Ok(result) => result,
        Err(panic) => {
            finish_timelines(&args, timelines.take());
            std::panic::resume_unwind(panic);
        }
    }
}

/// Ends the rotated timeline being written (its summary line).
fn finish_timelines(args: &DaemonArgs, timelines: Option<TimelineSink<RotatingTimeline>>) {
    if let Some(t) = timelines.filter(|t| !t.is_disabled()) {
        if let Err(e) = t.finish(None) {
            let dir = args
                .output_dir
                .as_deref()
                .unwrap_or(std::path::Path::new(""));
            crate::say!("finishing the timeline in {}: {e}", dir.display());
        }
    }
}

async fn daemon(
    args: &DaemonArgs,
    config: &Config,
    spec: TargetSpec,
    timelines: &mut Option<TimelineSink<RotatingTimeline>>,
) -> Result<ExitCode> {
    let listener = TcpListener::bind(args.listen).await.map_err(|e| {
        // The hint fits a port in use only (not, say, an address this host lacks).
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (another daemon there? choose another with --listen ADDR)"
            }
            _ => " (choose another with --listen ADDR)",
        };
        Failure::runtime(format!("cannot listen on {}: {e}{hint}", args.listen))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::runtime(format!("the metrics socket: {e}")))?;
    http::warn_if_exposed(addr);
    let metrics = Arc::new(Mutex::new(Metrics::new(args.keep_exited)));
    let mut session = Session::start(config, &spec, Clock::measure())?;
    let mut sink = MetricsSink::new(metrics.clone());
    // The processes found at the start, and the gauges, before the first scrape.
    session.maintain(&mut (&mut sink, &mut *timelines));
    let server = tokio::spawn(http::serve(listener, metrics));
    crate::say!("serving metrics at http://{addr}/metrics");
    if let Some(t) = &timelines {
        crate::say!(
            "{} ({} files of {} MB at most)",
            t.what(),
            args.max_files,
            args.max_file_mb
        );
    }
    session.announce()?;

    let options = RunOptions {
        deadline: None,
        stop_when_targets_exit: false,
    };
    // The fault switch (tests) first: at its panic no output has that call.
    let mut fault = config.fault_panic_after.map(FaultSink::new);
    let mut sinks = (&mut fault, &mut sink, &mut *timelines);
    let stop = session.run(&mut sinks, &options).await?;
    let stopping = Instant::now();
    server.abort();
    session.stop(&mut sinks);
    finish_timelines(args, timelines.take());
    let signal = match stop {
        Stop::Signal(name) => name,
        _ => "stopped",
    };
    let counted = match sink.counted {
        0 => String::new(),
        n => format!(", {n} of them counted in the kernel"),
    };
    crate::say!(
        "{signal}: detached every probe and stopped in {} ms ({} calls traced{counted}, {} lost)",
        stopping.elapsed().as_millis(),
        sink.calls,
        sink.lost.events_lost()
    );
    Ok(ExitCode::SUCCESS)
}
