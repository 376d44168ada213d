//! `gputrace [--pid PID]... [--all] [-- CMD]`: attach, stream, summarise.

use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use super::pipeline::Pipeline;
use super::session::{preflight, Session, TargetSpec, CHECK_EVERY, DRAIN_EVERY};
use crate::aggregate::enrich::Clock;
use crate::aggregate::render::{render_json, render_text};
use crate::cli::{SummaryFormat, TraceArgs};
use crate::error::{Failure, Result};
use crate::export::Timeline;
use crate::probes::attach::LostCounts;

impl From<&TraceArgs> for TargetSpec {
    fn from(a: &TraceArgs) -> Self {
        TargetSpec {
            pids: a.pids.clone(),
            all: a.all,
            cmd: a.cmd.clone(),
            probes: a.probes.clone(),
            libcuda: a.libcuda.clone(),
            libnccl: a.libnccl.clone(),
        }
    }
}

pub fn run(args: TraceArgs) -> Result<ExitCode> {
    let spec = TargetSpec::from(&args);
    preflight(&spec)?;
    let clock = Clock::measure();
    let origin = clock.to_unix_ns(Clock::now_mono_ns());
    let timeline = match &args.output {
        Some(path) => Some(
            Timeline::create(path, origin)
                .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the event loop: {e}")))?;
    let mut pipeline = Pipeline::new(timeline, args.print);
    let (stop, lost, decode_errors) = rt.block_on(async {
        let mut session = Session::start(&spec, clock)?;
        session.state.announce();
        if let Some(cmd) = args.cmd.first() {
            session.state.release(cmd)?;
        }
        let stop = event_loop(&mut session, &mut pipeline, &args).await?;
        Ok::<_, Failure>((stop, session.state.lost(), session.state.decode_errors))
    })?;
    pipeline.summary.lost = lost;
    finish(&mut pipeline, &args, lost, decode_errors, stop)
}

/// Why tracing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Duration,
    Signal,
    TargetsExited,
    WriteError,
}

async fn event_loop(
    session: &mut Session,
    pipeline: &mut Pipeline,
    args: &TraceArgs,
) -> Result<Stop> {
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut drain_tick = tokio::time::interval(DRAIN_EVERY);
    let mut check_tick = tokio::time::interval(CHECK_EVERY);
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let sleep = tokio::time::sleep_until(
        deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86400 * 365)),
    );
    tokio::pin!(sleep);
    let stop = loop {
        tokio::select! {
            r = session.readable() => {
                r?;
                session.drain_now(&mut |e| pipeline.handle(e));
            }
            _ = drain_tick.tick() => {
                session.drain_now(&mut |e| pipeline.handle(e));
            }
            _ = check_tick.tick() => {
                if session.state.maintain()? {
                    break Stop::TargetsExited;
                }
            }
            _ = &mut sleep, if deadline.is_some() => break Stop::Duration,
            _ = sigint.recv() => break Stop::Signal,
            _ = sigterm.recv() => break Stop::Signal,
        }
        if pipeline.write_error.is_some() {
            break Stop::WriteError;
        }
        pipeline.flush_print();
    };
    // No new events once detached; then take everything left in the ring.
    session.state.detach_all();
    session.drain_now(&mut |e| pipeline.handle(e));
    Ok(stop)
}

fn finish(
    pipeline: &mut Pipeline,
    args: &TraceArgs,
    lost: LostCounts,
    decode_errors: u64,
    stop: Stop,
) -> Result<ExitCode> {
    pipeline.summary.lost = lost;
    let json = render_json(&pipeline.summary);
    let mut failure = None;
    if let Some(e) = pipeline.write_error.take() {
        failure = Some(match &args.output {
            Some(p) => Failure::runtime(format!(
                "writing {} failed: {e}; tracing stopped",
                p.display()
            )),
            None => Failure::runtime(format!("writing the output failed: {e}; tracing stopped")),
        });
    }
    if failure.is_none() {
        if let Err(e) = pipeline.finish_timeline(&json) {
            let path = args
                .output
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            failure = Some(Failure::runtime(format!("writing {path} failed: {e}")));
        }
    }
    if decode_errors > 0 {
        eprintln!(
            "gputrace: {decode_errors} records could not be decoded (a bug: please report it)"
        );
    }
    let lost_n = pipeline.summary.lost.events_lost();
    if lost_n > 0 {
        eprintln!("gputrace: WARNING: {lost_n} calls were not recorded (see the summary)");
    }
    match args.summary {
        SummaryFormat::Text => print!("{}", render_text(&pipeline.summary)),
        SummaryFormat::Json => println!("{json}"),
        SummaryFormat::None => {}
    }
    if stop == Stop::TargetsExited {
        eprintln!("gputrace: every traced process has exited");
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}
