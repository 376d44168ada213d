//! The running agent: one [`Agent`] per start, reached by the callbacks
//! through [`AGENT`]; the process-wide phase; and the guard that lets
//! cleanup wait for callbacks still running before it frees anything.

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use core::fmt::Write;

use tracer_common::gpu::{AgentState, Header, RingWriter, MESSAGE_LEN};

use crate::cupti_abi::{CuptiResult, SubscriberHandle};
use crate::cupti_lib::Cupti;
use crate::names::Names;
use crate::pool::Pool;
use crate::sys::{self, SpinLock};

/// A message for the header, without allocating.
struct Msg {
    buf: [u8; MESSAGE_LEN],
    len: usize,
}

impl Write for Msg {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(MESSAGE_LEN - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Sampled windows: where CUPTI stands between them (`Agent::pause`,
/// `crate::pause`). Subscribed, collecting or switched on and off by cbid
/// (as at start).
pub(crate) const PAUSE_ON: u32 = 0;
/// Window over: kinds and callbacks off, its records still coming.
pub(crate) const PAUSE_DRAINING: u32 = 1;
/// Flushed: CUPTI is finalized at the next driver API exit.
pub(crate) const PAUSE_ARMED: u32 = 2;
/// A callback is finalizing.
pub(crate) const PAUSE_FINALIZING: u32 = 3;
/// Finalized: no CUPTI cost in the process until the next window.
pub(crate) const PAUSE_OFF: u32 = 4;

/// What the process-wide agent is doing (`PHASE`).
pub(crate) const IDLE: u32 = 0;
pub(crate) const STARTING: u32 = 1;
pub(crate) const ACTIVE: u32 = 2;
/// Detached as far as possible but CUPTI still holds pointers into this
/// library (start failed after subscribing, or finalize is pending): the
/// library must stay loaded.
pub(crate) const PINNED: u32 = 3;

pub(crate) static PHASE: AtomicU32 = AtomicU32::new(IDLE);
/// The running agent, or null.
pub(crate) static AGENT: AtomicPtr<Agent> = AtomicPtr::new(core::ptr::null_mut());
/// Callbacks between `Guard::enter` and drop.
pub(crate) static INFLIGHT: AtomicUsize = AtomicUsize::new(0);
/// The agent thread not yet joined (0: none).
pub(crate) static THREAD: AtomicU64 = AtomicU64::new(0);
/// An agent was ever started in this process.
pub(crate) static EVER_STARTED: AtomicBool = AtomicBool::new(false);
/// Descriptors the fork child handler closes (-1: none).
pub(crate) static FD_MEMFD: AtomicI32 = AtomicI32::new(-1);
pub(crate) static FD_PIPE_RD: AtomicI32 = AtomicI32::new(-1);
pub(crate) static FD_PIPE_WR: AtomicI32 = AtomicI32::new(-1);

/// Handoff between the agent thread waiting for finalize and the API-exit
/// callback that finalizes (`Agent::handoff`).
pub(crate) const WAITING: u32 = 0;
pub(crate) const THREAD_GAVE_UP: u32 = 1;
pub(crate) const FINALIZED: u32 = 2;

/// The producer side: ring writer and name table, under `Agent::producer`.
pub(crate) struct Producer {
    pub writer: RingWriter,
    pub names: Box<Names>,
}

pub(crate) struct Agent {
    pub cupti: Cupti,
    /// Ours while subscribed (subscribed again after each pause).
    pub subscriber: AtomicPtr<core::ffi::c_void>,
    pub region: *mut u8,
    pub region_len: usize,
    pub pipe_rd: i32,
    pub pool: Pool,
    pub producer_lock: SpinLock,
    pub producer: UnsafeCell<Producer>,
    /// The CUPTI activity kinds enabled (disabled at detach).
    pub cupti_kinds: [u32; 5],
    pub n_cupti_kinds: usize,
    pub flush_ms: u64,
    /// GPU time sampled: the share of each period collected (100: all).
    pub sample_percent: u32,
    /// The API callbacks were switched on at start (the sampler switches
    /// them with the kinds).
    pub api_kinds: bool,
    pub hello_ms: u64,
    pub finalize_ms: u64,
    /// The API callbacks write API records (off from the detach on).
    pub api_records: AtomicBool,
    /// The API-exit callback may finalize.
    pub finalize_armed: AtomicBool,
    /// One callback claimed the finalize.
    pub finalize_claimed: AtomicBool,
    pub handoff: AtomicU32,
    /// Sampled windows: where CUPTI stands between them (`crate::pause`).
    pub pause: AtomicU32,
}

// SAFETY: the raw pointers are to memory the agent owns (region, pool);
// the producer is only reached under `producer_lock`.
unsafe impl Send for Agent {}
// SAFETY: as above.
unsafe impl Sync for Agent {}

impl Agent {
    /// The header, through the writer's view of the region.
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: `header()` only reads `base`, which never changes after
        // init; reading it without the producer lock races with nothing.
        unsafe { (*self.producer.get()).writer.header() }
    }

    pub(crate) fn subscriber(&self) -> SubscriberHandle {
        self.subscriber.load(Ordering::Acquire)
    }

    pub(crate) fn set_state(&self, s: AgentState) {
        self.header().state.store(s as u32, Ordering::Release);
    }

    /// Flushes CUPTI's completed buffers and adds CUPTI's dropped count.
    pub(crate) fn flush(&self, flag: u32) {
        // SAFETY: CUPTI functions resolved at start; the agent is subscribed.
        unsafe { (self.cupti.flush_all)(flag) };
        let mut n: usize = 0;
        // SAFETY: valid out-pointer; NULL context = the global queue.
        if unsafe { (self.cupti.dropped)(core::ptr::null_mut(), 0, &mut n) } == 0 && n > 0 {
            self.header()
                .cupti_dropped
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Says why in the header's message: `what: CUPTI_RESULT_NAME (r)hint`,
    /// without allocating.
    pub(crate) fn say(&self, what: &str, r: CuptiResult, hint: &str) {
        let mut m = Msg {
            buf: [0; MESSAGE_LEN],
            len: 0,
        };
        let mut name = [0u8; 96];
        let n = core::str::from_utf8(self.cupti.result_name(r, &mut name)).unwrap_or("?");
        let _ = write!(m, "{what}: {n} ({r}){hint}");
        self.with_producer(|p| p.writer.set_message(&m.buf[..m.len]));
    }

    /// Disables every activity kind the agent enabled.
    pub(crate) fn disable_kinds(&self) {
        for &k in &self.cupti_kinds[..self.n_cupti_kinds] {
            // SAFETY: resolved CUPTI function; disabling is always allowed.
            unsafe { (self.cupti.disable)(k) };
        }
    }

    /// No API record from now on, no callback of ours enabled (those
    /// running may still finish).
    ///
    /// # Safety
    /// The agent must be subscribed.
    pub(crate) unsafe fn callbacks_off(&self) {
        self.api_records.store(false, Ordering::Release);
        // SAFETY: resolved CUPTI functions; our subscriber (the caller's promise).
        unsafe {
            (self.cupti.enable_domain)(
                0,
                self.subscriber(),
                crate::cupti_abi::CB_DOMAIN_RUNTIME_API,
            );
            (self.cupti.enable_domain)(
                0,
                self.subscriber(),
                crate::cupti_abi::CB_DOMAIN_DRIVER_API,
            );
        }
    }

    /// The API callback for the cbids of `table` in `domain` (CUPTI calls
    /// back for nothing else). Whether every one was switched on.
    pub(crate) fn enable_cbids(&self, domain: u32, table: &[(u32, &str)]) -> bool {
        let mut ok = true;
        for &(cbid, _) in table {
            // SAFETY: resolved CUPTI function; our subscriber.
            let r = unsafe { (self.cupti.enable_callback)(1, self.subscriber(), domain, cbid) };
            ok &= r == crate::cupti_abi::CUPTI_SUCCESS;
        }
        ok
    }

    /// Runs `f` on the producer under the producer lock.
    pub(crate) fn with_producer<R>(&self, f: impl FnOnce(&mut Producer) -> R) -> R {
        let _g = self.producer_lock.lock();
        // SAFETY: the lock makes this the only reference.
        f(unsafe { &mut *self.producer.get() })
    }
}

/// Marks a callback in flight while it may use the agent.
pub(crate) struct Guard;

impl Guard {
    pub(crate) fn enter() -> Guard {
        INFLIGHT.fetch_add(1, Ordering::SeqCst);
        Guard
    }
    /// The running agent, if any (valid while the guard lives: cleanup
    /// waits for guards before freeing).
    pub(crate) fn agent(&self) -> Option<&'static Agent> {
        let p = AGENT.load(Ordering::SeqCst);
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null AGENT points to a live Box<Agent>; cleanup
        // clears AGENT, then waits for every guard entered before, so the
        // agent outlives this guard.
        Some(unsafe { &*p })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        INFLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits (at most ~2 s) until at most `own` guards are in flight.
pub(crate) fn drain_guards(own: usize) -> bool {
    for _ in 0..2000 {
        if INFLIGHT.load(Ordering::SeqCst) <= own {
            return true;
        }
        sys::sleep_ms(1);
    }
    false
}

/// After CUPTI is finalized: stop the callbacks from finding the agent,
/// wait for those running (`own` of them are the caller's), mark the
/// region stopped, then release everything. Runs once.
pub(crate) fn cleanup(own: usize) {
    let p = AGENT.swap(core::ptr::null_mut(), Ordering::SeqCst);
    if p.is_null() {
        return;
    }
    let drained = drain_guards(own);
    // SAFETY: `p` is the Box<Agent> start leaked into AGENT; AGENT is now
    // null, so this is the only owner left (callbacks drained above).
    let a = unsafe { &*p };
    // Descriptors first (our mapping stays valid), so that `Stopped` means
    // nothing but the mapping is left.
    sys::close(FD_MEMFD.swap(-1, Ordering::AcqRel));
    sys::close(FD_PIPE_RD.swap(-1, Ordering::AcqRel));
    sys::close(FD_PIPE_WR.swap(-1, Ordering::AcqRel));
    a.set_state(AgentState::Stopped);
    if drained {
        // SAFETY: CUPTI is finalized and no callback is running: nobody
        // uses the region or the pool any more (gputrace keeps its own
        // mapping of the memfd).
        unsafe {
            sys::unmap(a.region, a.region_len);
            a.pool.free();
            let agent = Box::from_raw(p);
            agent.cupti.close();
        }
    }
    PHASE.store(IDLE, Ordering::SeqCst);
}
