//! `gputrace top`: a live terminal view of every GPU process's CUDA and NCCL
//! activity (the interface is `tui`). One task selects over the terminal's
//! events, the ring buffer, a refresh tick and a maintenance tick; the ring
//! is drained in bounded bites so a key is answered even at the highest
//! event rate. The session's events go into `top`'s model.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use crossterm::event::{Event, EventStream};
use futures_util::StreamExt;
use ratatui::backend::Backend;
use ratatui::Terminal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::MissedTickBehavior;

use crate::cli::TopArgs;
use crate::config::Config;
use crate::error::Failure;
use crate::error::Result;
use crate::host::clock::Clock;
use crate::session::preflight;
use crate::session::Session;
use crate::session::TargetSpec;
use crate::session::CHECK_EVERY;
use crate::tui::app::App;
use crate::tui::app::Scope;
use crate::tui::gpu;
use crate::tui::gpu::GpuMonitor;
use crate::tui::input;
use crate::tui::terminal::Screen;
use crate::tui::terminal::StderrCapture;
use crate::tui::view;
use crate::tui::ModelSink;

/// Records decoded per bite of the ring buffer (about a millisecond of work).
const DRAIN_BITE: usize = 1024;

pub(crate) fn run(args: TopArgs, config: &Config) -> Result<ExitCode> {
    let spec = TargetSpec {
        pids: args.pids.clone(),
        all: args.all || args.pids.is_empty(),
        stacks: crate::commands::stack_request(&args.stacks),
        gpu: crate::commands::gpu_options(&args.gpu, config),
        nccl_stall: crate::cli::stall_threshold(args.nccl_stall),
        overhead_budget: crate::cli::budget(args.overhead_budget),
        verbose: false,
        ..TargetSpec::default()
    };
    if !std::io::stdout().is_terminal() {
        return Err(Failure::usage(
            "gputrace top draws on a terminal and stdout is not one; for a log use gputrace --print or --output FILE",
        ));
    }
    preflight(&spec)?;
    let clock = Clock::measure();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the event loop: {e}")))?;
    rt.block_on(async {
        let mut session = Session::start(config, &spec, clock)?;
        let what = if spec.all {
            "every process".to_string()
        } else {
            let pids: Vec<String> = spec.pids.iter().map(u32::to_string).collect();
            format!("PID {}", pids.join(", "))
        };
        let scope = Scope {
            what,
            probes: session.probe_count(),
            lost: 0,
        };
        let window = args.interval.as_secs_f64().ceil().max(1.0) as u64;
        let mut app = App::new(scope, gpu::GpuStatus::Pending, window);
        app.model.probes = session.probe_count();
        let gpus = GpuMonitor::start(args.interval.max(Duration::from_millis(500)));
        let mut stderr = StderrCapture::start()
            .map_err(|e| Failure::runtime(format!("capturing stderr: {e}")))?;
        let mut screen = Screen::enter()
            .map_err(|e| Failure::runtime(format!("setting up the terminal: {e}")))?;
        let events = EventStream::new();
        let sources = Sources {
            session: &mut session,
            clock,
            gpus: &gpus,
            stderr: &mut stderr,
        };
        let result = event_loop(
            &mut screen.terminal,
            events,
            sources,
            &mut app,
            args.interval,
        )
        .await;
        drop(screen);
        drop(stderr);
        session.stop(&mut ModelSink {
            model: &mut app.model,
            now_ns: clock.to_unix_ns(Clock::now_mono_ns()),
        });
        result
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Where the numbers come from.
struct Sources<'a> {
    session: &'a mut Session,
    /// Our own command name: gputrace's calibration helper maps libcuda
    /// and is not one of the user's processes.
    clock: Clock,
    gpus: &'a GpuMonitor,
    stderr: &'a mut StderrCapture,
}

impl Sources<'_> {
    fn now_ns(&self) -> u64 {
        self.clock.to_unix_ns(Clock::now_mono_ns())
    }

    /// Decodes at most one bite of the ring; true when it is empty.
    fn drain(&mut self, app: &mut App) -> bool {
        let mut sink = ModelSink {
            model: &mut app.model,
            now_ns: self.now_ns(),
        };
        self.session.drain(&mut sink, DRAIN_BITE) < DRAIN_BITE
    }

    /// New processes, exits, lost counts: into the model.
    fn maintain(&mut self, app: &mut App) {
        let mut sink = ModelSink {
            model: &mut app.model,
            now_ns: self.now_ns(),
        };
        self.session.maintain(&mut sink);
    }

    /// Takes a new snapshot of the model (unless paused).
    fn refresh(&mut self, app: &mut App) {
        let now = self.now_ns();
        app.model.advance(now);
        if app.paused {
            return; // the screen stays as it was; the model keeps counting
        }
        app.scope.lost = app.model.lost;
        app.scope.probes = app.model.probes;
        app.gpus = self.gpus.latest();
        if let Some(m) = self.stderr.latest() {
            app.message = Some(m);
        }
        app.refresh(now, local_clock());
    }
}

/// `HH:MM:SS`, local time.
fn local_clock() -> String {
    // SAFETY: time(NULL) and localtime_r into a zeroed struct we own.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

async fn event_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    mut events: impl futures_util::Stream<Item = std::io::Result<Event>> + Unpin,
    mut src: Sources<'_>,
    app: &mut App,
    interval: Duration,
) -> Result<()>
where
    B::Error: std::fmt::Display,
{
    let sig = |k| signal(k).map_err(|e| Failure::runtime(e.to_string()));
    let (mut sigint, mut sigterm, mut sighup) = (
        sig(SignalKind::interrupt())?,
        sig(SignalKind::terminate())?,
        sig(SignalKind::hangup())?,
    );
    let mut refresh_tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
    refresh_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut check_tick = tokio::time::interval(CHECK_EVERY);
    check_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let draw_failed = |e: B::Error| Failure::runtime(format!("drawing the screen: {e}"));
    let mut dirty = true;
    // Records are waiting in the ring (it woke us, or the tick says so).
    let mut draining = false;
    while !app.quit {
        if dirty {
            terminal.draw(|f| view::draw(f, app)).map_err(draw_failed)?;
            dirty = false;
        }
        // Biased: the user first, then the clock, then the flood of calls.
        tokio::select! {
            biased;
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = sighup.recv() => break,
            ev = events.next() => match ev {
                Some(Ok(Event::Key(k))) => {
                    if let Some(a) = input::action_for(&k, app) {
                        app.apply(a);
                        dirty = true;
                    }
                }
                Some(Ok(Event::Resize(..))) => {
                    terminal.autoresize().map_err(draw_failed)?;
                    dirty = true;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(Failure::runtime(format!("reading the terminal: {e}"))),
                None => break,
            },
            _ = refresh_tick.tick() => {
                src.refresh(app);
                dirty = true;
            }
            _ = check_tick.tick() => {
                src.maintain(app);
                draining = true;
            }
            r = src.session.readable(), if !draining => {
                r?;
                draining = true;
            }
            // Last: one bite, once everything above had its chance.
            _ = tokio::task::yield_now(), if draining => {
                draining = !src.drain(app);
            }
        }
    }
    Ok(())
}
