//! `gputrace daemon`: node mode. Every process that maps libcuda or libnccl,
//! now and later (probes per library file for all processes, see
//! `session::node`), counted into Prometheus metrics served at
//! `http://ADDR/metrics`; optionally the calls as rotated JSONL timelines.
//! Runs until SIGTERM or SIGINT, then detaches everything and exits 0.

mod admission;
mod http;
mod timeline;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use super::session::{preflight, Session, TargetSpec, CHECK_EVERY, DRAIN_EVERY};
use crate::aggregate::enrich::{Clock, Enriched};
use crate::cli::DaemonArgs;
use crate::error::{Failure, Result};
use crate::export::prometheus::{Metrics, TracerGauges};
use crate::probes::attach::LostCounts;
use timeline::RotatingTimeline;

/// How often exited processes are looked for and timelines flushed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

pub fn run(args: DaemonArgs) -> Result<ExitCode> {
    let spec = TargetSpec {
        all: true,
        ..TargetSpec::default()
    };
    preflight(&spec)?;
    let timelines = match &args.output_dir {
        Some(dir) => Some(
            RotatingTimeline::open(
                dir,
                args.max_file_mb.saturating_mul(1_000_000),
                args.max_files as usize,
            )
            .map_err(|e| Failure::runtime(format!("--output-dir {}: {e}", dir.display())))?,
        ),
        None => None,
    };
    // Two workers serve HTTP while the tracing loop runs on this thread
    // (attaching to a new libcuda may block it for its calibration).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gputrace-http")
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the event loop: {e}")))?;
    let result = rt.block_on(daemon(&args, spec, timelines));
    // The server's tasks are cancelled; nothing there needs finishing.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

async fn daemon(
    args: &DaemonArgs,
    spec: TargetSpec,
    mut timelines: Option<RotatingTimeline>,
) -> Result<ExitCode> {
    let listener = TcpListener::bind(args.listen).await.map_err(|e| {
        Failure::runtime(format!(
            "cannot listen on {}: {e} (another daemon there? choose another with --listen ADDR)",
            args.listen
        ))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::runtime(format!("the metrics socket: {e}")))?;
    http::warn_if_exposed(addr);
    let metrics = Arc::new(Mutex::new(Metrics::new(args.keep_exited)));
    let mut session = Session::start(&spec, Clock::measure())?;
    update_gauges(&session, &metrics);
    let server = tokio::spawn(http::serve(listener, metrics.clone()));
    eprintln!("gputrace: serving metrics at http://{addr}/metrics");
    if let Some(t) = &timelines {
        eprintln!(
            "gputrace: writing timelines to {} ({} files of {} MB at most)",
            t.dir().display(),
            args.max_files,
            args.max_file_mb
        );
    }
    session.state.announce();

    let mut sink = Sink {
        metrics: &metrics,
        timelines: timelines.as_mut(),
        lost: LostCounts::default(),
        calls: 0,
    };
    let (signal_name, stopping) = event_loop(&mut session, &mut sink).await?;
    server.abort();
    session.state.detach_all();
    sink.lost = session.state.lost();
    session.drain_now(&mut |e| sink.handle(&e));
    if let Some(t) = sink.timelines.as_mut() {
        if let Err(e) = t.close(sink.lost) {
            eprintln!(
                "gputrace: finishing the timeline in {}: {e}",
                t.dir().display()
            );
        }
    }
    eprintln!(
        "gputrace: {signal_name}: detached every probe and stopped in {} ms ({} calls traced, {} lost)",
        stopping.elapsed().as_millis(),
        sink.calls,
        sink.lost.events_lost()
    );
    Ok(ExitCode::SUCCESS)
}

/// Where each call goes: the metrics, and the timelines while they can be written.
struct Sink<'a> {
    metrics: &'a Mutex<Metrics>,
    timelines: Option<&'a mut RotatingTimeline>,
    lost: LostCounts,
    calls: u64,
}

impl Sink<'_> {
    fn handle(&mut self, e: &Enriched) {
        self.calls += 1;
        lock(self.metrics).record(e);
        self.write(e);
    }

    fn write(&mut self, e: &Enriched) {
        let Some(t) = self.timelines.as_mut() else {
            return;
        };
        if let Err(err) = t.write(&e.call, self.lost) {
            // The metrics go on without the timelines.
            eprintln!(
                "gputrace: writing timelines to {} failed: {err}; no more timelines are written (metrics go on)",
                t.dir().display()
            );
            self.timelines = None;
        }
    }

    fn flush(&mut self) {
        if let Some(t) = self.timelines.as_mut() {
            if let Err(err) = t.flush() {
                eprintln!(
                    "gputrace: writing timelines to {} failed: {err}; no more timelines are written (metrics go on)",
                    t.dir().display()
                );
                self.timelines = None;
            }
        }
    }
}

fn lock(m: &Mutex<Metrics>) -> std::sync::MutexGuard<'_, Metrics> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn update_gauges(session: &Session, metrics: &Mutex<Metrics>) {
    let mut m = lock(metrics);
    m.note_alive(session.state.gpu_processes());
    m.set_gauges(TracerGauges {
        probes: session.state.attacher.probe_count(),
        library_files: session.state.probed_files(),
        process_states: session.state.processes_known(),
    });
    m.set_lost(session.state.lost());
}

/// Runs until a signal; returns its name and when it came.
async fn event_loop(session: &mut Session, sink: &mut Sink<'_>) -> Result<(&'static str, Instant)> {
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut drain_tick = tokio::time::interval(DRAIN_EVERY);
    let mut check_tick = tokio::time::interval(CHECK_EVERY);
    let mut last_sweep = Instant::now();
    let name = loop {
        tokio::select! {
            r = session.readable() => {
                r?;
                session.drain_now(&mut |e| sink.handle(&e));
            }
            _ = drain_tick.tick() => {
                session.drain_now(&mut |e| sink.handle(&e));
            }
            _ = check_tick.tick() => {
                if let Err(e) = session.state.maintain() {
                    eprintln!("gputrace: {e}");
                }
                sink.lost = session.state.lost();
                update_gauges(session, sink.metrics);
                if last_sweep.elapsed() >= SWEEP_EVERY {
                    last_sweep = Instant::now();
                    lock(sink.metrics).sweep(last_sweep);
                    sink.flush();
                    release_free_memory();
                }
            }
            _ = sigint.recv() => break "SIGINT",
            _ = sigterm.recv() => break "SIGTERM",
        }
    };
    Ok((name, Instant::now()))
}

/// Hands memory freed since (series of exited processes, large /metrics
/// bodies built on the HTTP threads) back to the system. glibc keeps freed
/// memory in its per-thread arenas otherwise, so a burst of short-lived
/// processes would leave the daemon's RSS at its peak for good.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
