//! `gputrace [--pid PID]... [--all] [-- CMD]`: attach, stream, summarise.
//! The sinks: the summary, and as asked `--print` and the `--output`
//! timeline (written on its own thread).

use std::process::ExitCode;

use crate::cli::TraceArgs;
use crate::config::Config;
use crate::error::Failure;
use crate::error::Result;
use crate::host::clock::Clock;
use crate::model::sink::Halt;
use crate::model::sink::Sink;
use crate::outputs::fault::FaultSink;
use crate::outputs::print::PrintSink;
use crate::outputs::summary::SummaryOutput;
use crate::outputs::summary::SummarySink;
use crate::outputs::timeline::writer::OnError;
use crate::outputs::timeline::writer::TimelineSink;
use crate::outputs::timeline::Timeline;
use crate::session::preflight;
use crate::session::RunOptions;
use crate::session::Session;
use crate::session::Stop;
use crate::session::TargetSpec;
use crate::summary::render::render_json;

/// What the trace command asks of the session.
fn target_spec(a: &TraceArgs, config: &Config) -> TargetSpec {
    TargetSpec {
        // A PID given twice (`--pid 7,7`) is one target, not two.
        pids: a
            .pids
            .iter()
            .enumerate()
            .filter(|(i, p)| !a.pids[..*i].contains(p))
            .map(|(_, p)| *p)
            .collect(),
        all: a.all,
        cmd: a.cmd.clone(),
        probes: a.probes.clone(),
        libcuda: a.libcuda.clone(),
        libnccl: a.libnccl.clone(),
        stacks: crate::commands::stack_request(&a.stacks),
        gpu: crate::commands::gpu_options(&a.gpu, config),
        nccl_stall: crate::cli::stall_threshold(a.nccl_stall),
        overhead_budget: crate::cli::budget(a.overhead_budget),
        verbose: a.verbose,
    }
}

pub(crate) fn run(args: TraceArgs, config: &Config) -> Result<ExitCode> {
    let spec = target_spec(&args, config);
    if args.summary_file.is_some() && args.summary_file == args.output {
        return Err(Failure::usage(
            "--summary-file and --output name the same file",
        ));
    }
    if spec.probes.as_ref().is_some_and(|p| p.counts_any()) {
        return Err(Failure::usage(
            "`:counts` is the daemon's (its metrics need only counts): trace records each call, so give the family without `:counts`",
        ));
    }
    preflight(&spec)?;
    let clock = Clock::measure();
    let origin = clock.to_unix_ns(Clock::now_mono_ns());
    // Every output is opened before anything is attached: a path that
    // cannot be written is said at once.
    let summary_out = SummaryOutput::open(args.summary, args.summary_file.as_deref())?;
    let mut timeline = match &args.output {
        Some(path) => {
            let cannot = |e: std::io::Error| {
                Failure::runtime(format!("cannot write {}: {e}", path.display()))
            };
            let file = Timeline::create(path, origin).map_err(cannot)?;
            let what = format!("writing {}", path.display());
            Some(TimelineSink::start(file, what, OnError::Stop).map_err(cannot)?)
        }
        None => None,
    };
    let mut print = args.print.then(PrintSink::stdout);
    let mut summary = SummarySink::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the event loop: {e}")))?;
    let options = RunOptions {
        deadline: args.duration,
        stop_when_targets_exit: true,
    };
    let mut fault = config.fault_panic_after.map(FaultSink::new);
    // A panic while tracing (a bug) unwinds to here first: the session goes
    // with it (every probe detached), then the outputs are ended with what
    // they hold, and main says the panic in one line (exit 1).
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            let mut session = Session::start(config, &spec, clock)?;
            session.announce()?;
            session.release()?;
            // The timeline last: it is handed the calls (no copy).
            // The fault switch first: at its panic no output has that call.
            let mut sinks = (&mut fault, &mut summary, &mut print, &mut timeline);
            let stop = session.run(&mut sinks, &options).await?;
            // No new calls once detached; then everything left in the ring.
            session.stop(&mut sinks);
            let stop = match (stop, sinks.flush()) {
                (Stop::Failed(f), _) | (_, Err(Halt::Failed(f))) => Stop::Failed(f),
                (stop, _) => stop,
            };
            Ok::<_, Failure>(stop)
        })
    }));
    let stop = match ran {
        Ok(stop) => stop?,
        Err(panic) => {
            let _ = finish(summary, timeline, summary_out, Stop::Signal("panic"));
            std::panic::resume_unwind(panic);
        }
    };
    finish(summary, timeline, summary_out, stop)
}

fn finish(
    summary: SummarySink,
    timeline: Option<TimelineSink<Timeline>>,
    out: SummaryOutput,
    stop: Stop,
) -> Result<ExitCode> {
    let all_exited = matches!(stop, Stop::TargetsExited);
    let mut failure = None;
    match (stop, timeline) {
        // The timeline is what failed (or stdout was): it is not ended.
        (Stop::Failed(f), _) => failure = Some(f),
        (_, Some(t)) => {
            // Its last line (made only when there is a timeline to end).
            let json = render_json(summary.summary());
            let what = t.what().to_string();
            if let Err(e) = t.finish(Some(&json)) {
                failure = Some(Failure::runtime(format!("{what} failed: {e}")));
            }
        }
        (_, None) => {}
    }
    let undecodable = summary.undecodable();
    if undecodable > 0 {
        crate::say!("{undecodable} records could not be decoded (a bug: please report it)");
    }
    let lost = summary.summary().lost.events_lost();
    if lost > 0 {
        crate::say!("WARNING: {lost} calls were not recorded (see the summary)");
    }
    if let Err(f) = out.write(summary.summary()) {
        failure.get_or_insert(f);
    }
    if all_exited {
        crate::say!("every traced process has exited");
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}
