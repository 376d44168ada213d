//! `gputrace_agent_start`: checks the arguments, opens the libcupti, makes
//! the shared region and the pipe, subscribes, enables the kinds and starts
//! the agent thread; undoes everything when a step fails.

use core::cell::UnsafeCell;
use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};

use tracer_common::gpu::*;

use crate::cupti_abi::{
    self as abi, SubscriberHandle, ACTIVITY_FLAG_FLUSH_FORCED, CB_DOMAIN_DRIVER_API,
    CB_DOMAIN_RUNTIME_API, CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, CUPTI_SUCCESS,
};
use crate::cupti_lib::Cupti;
use crate::names::Names;
use crate::pool::{self, Pool};
use crate::state::{self, Agent, Producer, AGENT, WAITING};
use crate::sys::{self, SpinLock};
use crate::{callbacks, detach};

/// Validated arguments.
struct Config {
    kinds: u32,
    ring: u64,
    names: u64,
    flush_ms: u64,
    sample_percent: u32,
    hello_ms: u64,
    finalize_ms: u64,
    buffers: usize,
    buffer_size: usize,
    path: [u8; PATH_LEN],
}

type Fail = (AgentError, u32);

fn config(a: &AgentArgs) -> Result<Config, Fail> {
    let bad = (AgentError::BadArgs, 0);
    if a.version != PROTOCOL_VERSION {
        return Err((AgentError::BadVersion, a.version));
    }
    let or = |v: u64, d: u64| if v == 0 { d } else { v };
    let ring = or(a.ring_capacity, DEFAULT_RING_CAPACITY);
    let names = or(a.names_size, DEFAULT_NAMES_SIZE);
    let buffers = or(a.buffer_count as u64, pool::DEFAULT_BUFFERS as u64) as usize;
    let buffer_size = or(a.buffer_size as u64, pool::DEFAULT_BUFFER_SIZE as u64) as usize;
    let ok = a.kinds != 0
        && a.kinds & !KIND_ALL == 0
        && ring.is_power_of_two()
        && (MIN_RING_CAPACITY..=MAX_RING_CAPACITY).contains(&ring)
        && (MIN_NAMES_SIZE..=MAX_NAMES_SIZE).contains(&names)
        && buffers <= pool::MAX_BUFFERS
        && (pool::MIN_BUFFER_SIZE..=pool::MAX_BUFFER_SIZE).contains(&buffer_size)
        && buffer_size.is_multiple_of(8)
        && a.path().is_some_and(|p| !p.is_empty());
    if !ok {
        return Err(bad);
    }
    Ok(Config {
        kinds: a.kinds,
        ring,
        names,
        flush_ms: or(a.flush_period_ms as u64, 100),
        sample_percent: if (1..100).contains(&a.sample_percent) {
            a.sample_percent
        } else {
            100
        },
        hello_ms: or(a.hello_timeout_ms as u64, 10_000),
        finalize_ms: or(a.finalize_timeout_ms as u64, 5_000),
        buffers,
        buffer_size,
        path: a.cupti_path,
    })
}

/// Fallback clock: offset from CUPTI's clock to CLOCK_MONOTONIC, from the
/// tightest of 50 brackets (monotonic, CUPTI, monotonic).
fn calibrate(c: &Cupti, h: &Header) {
    let mut best: Option<(u64, i64)> = None;
    if let Some(get) = c.get_timestamp {
        for _ in 0..50 {
            let mut ts = 0u64;
            let t0 = sys::monotonic_ns();
            // SAFETY: valid out-pointer.
            let ok = unsafe { get(&mut ts) } == CUPTI_SUCCESS;
            let t1 = sys::monotonic_ns();
            if !ok || t1 < t0 {
                continue;
            }
            let width = t1 - t0;
            let offset = (t0 as i128 + (width / 2) as i128 - ts as i128) as i64;
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, offset));
            }
        }
    }
    let (err, off) = best.unwrap_or((u64::MAX, 0));
    h.clock_offset_ns.store(off, Relaxed);
    h.clock_error_ns.store(err, Relaxed);
    h.clock.store(ClockKind::Cupti as u32, Release);
}

static ATFORK: AtomicBool = AtomicBool::new(false);

/// In a fork()ed child: no agent (the thread does not exist there and the
/// region is not mapped); the callbacks find nothing and do nothing.
unsafe extern "C" fn atfork_child() {
    AGENT.store(core::ptr::null_mut(), SeqCst);
    state::THREAD.store(0, SeqCst);
    sys::close(state::FD_MEMFD.swap(-1, SeqCst));
    sys::close(state::FD_PIPE_RD.swap(-1, SeqCst));
    sys::close(state::FD_PIPE_WR.swap(-1, SeqCst));
    state::PHASE.store(state::IDLE, SeqCst);
}

/// Frees what `start` made before the subscription held (never called
/// once CUPTI may hold pointers to the agent).
fn undo(p: *mut Agent) {
    AGENT.store(core::ptr::null_mut(), SeqCst);
    state::drain_guards(0);
    // SAFETY: `p` is the Box start made; CUPTI was never given our callbacks.
    let a = unsafe { Box::from_raw(p) };
    sys::close(state::FD_MEMFD.swap(-1, SeqCst));
    sys::close(state::FD_PIPE_RD.swap(-1, SeqCst));
    sys::close(state::FD_PIPE_WR.swap(-1, SeqCst));
    // SAFETY: nobody else uses the region or the pool.
    unsafe {
        sys::unmap(a.region, a.region_len);
        a.pool.free();
    }
    let Agent { cupti, .. } = *a;
    cupti.close();
}

/// Starts the agent; the memfd number, or the failure.
pub(crate) fn start(args: &AgentArgs) -> Result<i64, Fail> {
    let cfg = config(args)?;
    let (p, memfd, features) = create(&cfg)?;
    AGENT.store(p, SeqCst);
    // SAFETY: `p` stays valid until cleanup/undo, which only this function
    // (on failure) or the detach path run.
    let a = unsafe { &mut *p };
    subscribe(a, p)?;
    let (kinds, features) = match enable(a, &cfg, features) {
        Ok(v) => v,
        Err((e, r, what)) => return late_failure(a, e, r, what),
    };
    a.header().kinds.store(kinds, Relaxed);
    a.header().features.store(features, Relaxed);
    run(a, p, memfd)
}

/// Opens CUPTI, checks its version, makes the shared region, the pipe and
/// the buffer pool: the agent, not yet published; its memfd and features.
fn create(cfg: &Config) -> Result<(*mut Agent, i32, u32), Fail> {
    let path = CStr::from_bytes_until_nul(&cfg.path).map_err(|_| (AgentError::BadArgs, 0))?;
    let cupti = Cupti::open(path).map_err(|e| (e, 0))?;
    // Only CUPTI 13's record layouts are known (cupti_abi).
    let mut version = 0u32;
    // SAFETY: resolved cuptiGetVersion (None: missing), valid out-pointer.
    let ok = cupti
        .get_version
        .is_some_and(|v| unsafe { v(&mut version) } == CUPTI_SUCCESS);
    if !ok || version < MIN_CUPTI_VERSION {
        cupti.close();
        return Err((AgentError::CuptiVersion, version));
    }
    let page = sys::page_size();
    let Some((_, region_len)) = region_layout(cfg.ring, cfg.names, page) else {
        cupti.close();
        return Err((AgentError::BadArgs, 0));
    };
    let region_len = region_len as usize;
    let (memfd, region) = match sys::memfd_region(region_len) {
        Ok(v) => v,
        Err(e) => {
            cupti.close();
            return Err((AgentError::SharedMemory, e));
        }
    };
    // SAFETY: a fresh zero-filled mapping of `region_len` bytes, page-aligned,
    // owned by this agent until cleanup.
    let writer = unsafe { RingWriter::init(region, region_len, cfg.ring, cfg.names, page) };
    let Some(writer) = writer else {
        return cleanup_early(
            memfd,
            region,
            region_len,
            cupti,
            (AgentError::SharedMemory, 0),
        );
    };
    let pipe = match sys::pipe() {
        Ok(pp) => pp,
        Err(e) => return cleanup_early(memfd, region, region_len, cupti, (AgentError::Pipe, e)),
    };
    let pool = match Pool::new(cfg.buffers, cfg.buffer_size) {
        Ok(pool) => pool,
        Err(e) => {
            sys::close(pipe.0);
            sys::close(pipe.1);
            return cleanup_early(memfd, region, region_len, cupti, (AgentError::NoMemory, e));
        }
    };
    let h = writer.header();
    // SAFETY: getpid has no preconditions.
    h.pid.store(unsafe { libc::getpid() } as u32, Relaxed);
    h.pipe_fd.store(pipe.1, Relaxed);
    h.started_ns.store(sys::monotonic_ns(), Relaxed);
    h.sample_percent.store(cfg.sample_percent, Relaxed);
    let features = if cupti.preloaded {
        FEATURE_CUPTI_PRELOADED
    } else {
        0
    };
    h.cupti_version.store(version, Relaxed);
    state::FD_MEMFD.store(memfd, SeqCst);
    state::FD_PIPE_RD.store(pipe.0, SeqCst);
    state::FD_PIPE_WR.store(pipe.1, SeqCst);
    let names: Box<Names> = {
        // SAFETY: all-zero is a valid `Names` (empty slots).
        unsafe { Box::<Names>::new_zeroed().assume_init() }
    };
    let agent = Box::new(Agent {
        cupti,
        subscriber: core::sync::atomic::AtomicPtr::new(core::ptr::null_mut()),
        region,
        region_len,
        pipe_rd: pipe.0,
        pool,
        producer_lock: SpinLock::new(),
        producer: UnsafeCell::new(Producer { writer, names }),
        cupti_kinds: [0; 5],
        n_cupti_kinds: 0,
        flush_ms: cfg.flush_ms,
        sample_percent: cfg.sample_percent,
        api_kinds: false,
        hello_ms: cfg.hello_ms,
        finalize_ms: cfg.finalize_ms,
        api_records: AtomicBool::new(false),
        finalize_armed: AtomicBool::new(false),
        finalize_claimed: AtomicBool::new(false),
        handoff: AtomicU32::new(WAITING),
        pause: AtomicU32::new(crate::pause::ON),
    });
    Ok((Box::into_raw(agent), memfd, features))
}

/// Subscribes to CUPTI (refused when another tool is subscribed: the
/// agent is undone).
fn subscribe(a: &mut Agent, p: *mut Agent) -> Result<(), Fail> {
    let mut sub: SubscriberHandle = core::ptr::null_mut();
    // SAFETY: resolved cuptiSubscribe; `sub` is a valid out-pointer.
    let r =
        unsafe { (a.cupti.subscribe)(&mut sub, callbacks::api_callback, core::ptr::null_mut()) };
    if r != CUPTI_SUCCESS {
        let (e, hint) = if r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
            (
                AgentError::MultipleSubscribers,
                ": another CUPTI client (a profiler) is subscribed",
            )
        } else {
            (AgentError::Subscribe, "")
        };
        refuse(a, e, r, "cuptiSubscribe", hint);
        undo(p);
        return Err((e, r));
    }
    a.subscriber.store(sub, Release);
    Ok(())
}

/// The clock, the buffer callbacks, the activity kinds and the API
/// callbacks asked for: the kinds and features on, or what failed.
fn enable(
    a: &mut Agent,
    cfg: &Config,
    mut features: u32,
) -> Result<(u32, u32), (AgentError, u32, &'static str)> {
    // The clock first: CUPTI uses the callback only for kinds enabled after it.
    // SAFETY: resolved CUPTI function; our callback never unwinds.
    let ts = a
        .cupti
        .register_timestamp
        .map(|f| unsafe { f(callbacks::timestamp) });
    if ts == Some(CUPTI_SUCCESS) {
        a.header().clock.store(ClockKind::Monotonic as u32, Release);
    } else {
        calibrate(&a.cupti, a.header());
    }
    // SAFETY: resolved CUPTI function; our callbacks never unwind.
    let r = unsafe {
        (a.cupti.register_callbacks)(callbacks::buffer_requested, callbacks::buffer_completed)
    };
    if r != CUPTI_SUCCESS {
        return Err((AgentError::Enable, r, "cuptiActivityRegisterCallbacks"));
    }
    let mut kinds = 0;
    for (bit, kind) in [
        (KIND_KERNEL, abi::KIND_CONCURRENT_KERNEL),
        (KIND_MEMCPY, abi::KIND_MEMCPY),
        (KIND_MEMSET, abi::KIND_MEMSET),
    ] {
        if cfg.kinds & bit == 0 {
            continue;
        }
        // SAFETY: resolved CUPTI function, a valid activity kind.
        let r = unsafe { (a.cupti.enable)(kind) };
        if r != CUPTI_SUCCESS {
            return Err((AgentError::Enable, r, "cuptiActivityEnable"));
        }
        a.cupti_kinds[a.n_cupti_kinds] = kind;
        a.n_cupti_kinds += 1;
        kinds |= bit;
    }
    if cfg.kinds & KIND_API != 0 {
        // The callbacks write API records (with the Linux tid) from the
        // first one enabled on.
        a.api_records.store(true, Release);
        if a.enable_cbids(CB_DOMAIN_DRIVER_API, API_CBIDS) {
            features |= FEATURE_API_BY_CBID;
        }
        if a.enable_cbids(CB_DOMAIN_RUNTIME_API, RUNTIME_API_CBIDS) {
            features |= FEATURE_RUNTIME_API_BY_CBID;
        }
        if features & (FEATURE_API_BY_CBID | FEATURE_RUNTIME_API_BY_CBID) != 0 {
            kinds |= KIND_API;
            a.api_kinds = true;
            features |= FEATURE_SYSTEM_TID;
        }
    }
    Ok((kinds, features))
}

/// Running: the fork handler, the state, the agent thread.
fn run(a: &mut Agent, p: *mut Agent, memfd: i32) -> Result<i64, Fail> {
    if !ATFORK.swap(true, SeqCst) {
        // SAFETY: registers a child handler that only touches atomics and
        // closes descriptors (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) };
    }
    a.set_state(AgentState::Running);
    // Before the thread exists: it may detach and go IDLE at once.
    state::PHASE.store(state::ACTIVE, SeqCst);
    match sys::spawn(detach::thread_main, p.cast()) {
        Ok(t) => {
            state::THREAD.store(t, SeqCst);
            Ok(memfd as i64)
        }
        Err(e) => late_failure(a, AgentError::Thread, e, "pthread_create"),
    }
}

fn refuse(a: &Agent, e: AgentError, r: u32, what: &str, hint: &str) {
    let h = a.header();
    h.error_code.store(e as u32, Relaxed);
    h.cupti_result.store(r, Relaxed);
    a.say(what, r, hint);
    a.set_state(AgentState::Refused);
}

/// Failure after subscribing: CUPTI may hold our callbacks, so the agent
/// detaches as the agent thread would (finalize at the next API exit, then
/// cleanup), and the library stays pinned until then.
fn late_failure(a: &Agent, e: AgentError, r: u32, what: &str) -> Result<i64, Fail> {
    // Before arming: the callback's cleanup moves PINNED to IDLE.
    state::PHASE.store(state::PINNED, SeqCst);
    refuse(a, e, r, what, "");
    // SAFETY: resolved CUPTI functions; our subscriber.
    unsafe {
        detach::stop_api_records(a);
        a.disable_kinds();
        (a.cupti.flush_all)(ACTIVITY_FLAG_FLUSH_FORCED);
        detach::arm_finalize(a);
    }
    a.handoff.store(state::THREAD_GAVE_UP, SeqCst);
    Err((e, r))
}

fn cleanup_early<T>(
    memfd: i32,
    region: *mut u8,
    len: usize,
    cupti: Cupti,
    f: Fail,
) -> Result<T, Fail> {
    // SAFETY: the region was mapped by this start and never shared yet.
    unsafe { sys::unmap(region, len) };
    sys::close(memfd);
    cupti.close();
    Err(f)
}
