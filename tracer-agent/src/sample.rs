//! GPU time sampled (`AgentArgs::sample_percent` below 100): CUPTI collects
//! during one window of that share of each `SAMPLE_PERIOD_MS`, placed at
//! random in the period (so that no periodic pattern of the job is always
//! missed), and is finalized between windows ([`crate::pause`]), so that
//! the process pays CUPTI's cost per launch only inside the windows. Work
//! launched in a window is recorded whenever it runs within the grace
//! after it. The header's `sampled_on_ns` says how long CUPTI collected,
//! for gputrace to state (and to scale busy shares by).

use core::sync::atomic::Ordering::{Acquire, Relaxed};

use tracer_common::gpu::SAMPLE_PERIOD_MS;

use crate::pause::{self, Resume};
use crate::state::Agent;

pub(crate) struct Sampler {
    /// CUPTI collects now.
    on: bool,
    /// When the current state began (CLOCK_MONOTONIC ns).
    since: u64,
    /// Time collected before `since`.
    on_before: u64,
    period_start: u64,
    /// This period's window, [start, end).
    window: (u64, u64),
    /// After a window: when its records have had their grace.
    drained_at: u64,
    /// CUPTI could not be switched on again: no more windows.
    failed: bool,
    rng: u64,
}

const MS: u64 = 1_000_000;
/// Wait after a window for the records of work launched in it (a training
/// step's work is queued some milliseconds ahead: 9.6 ms at the 99th
/// percentile on the DDP job of performance.md; half the time off if
/// shorter). CUPTI stays subscribed meanwhile, which costs launches nearly
/// what collecting does; work still queued after it comes back untimed and
/// is counted as dropped by CUPTI.
const GRACE_NS: u64 = 50 * MS;

impl Sampler {
    /// At start: the kinds are on (the agent enabled them).
    pub(crate) fn new(now: u64) -> Self {
        Self {
            on: true,
            since: now,
            on_before: 0,
            period_start: now,
            window: (0, 0),
            drained_at: 0,
            failed: false,
            // Any odd seed: the windows' places only need to vary.
            rng: now | 1,
        }
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Switches CUPTI on or off as the windows say and publishes the time
    /// collected; returns the ms until the next switch (`None`: not
    /// sampled, never).
    pub(crate) fn tick(&mut self, a: &Agent, now: u64) -> Option<u64> {
        let collected = |s: &Self| s.on_before + if s.on { now.saturating_sub(s.since) } else { 0 };
        if a.sample_percent >= 100 {
            a.header().sampled_on_ns.store(collected(self), Relaxed);
            return None;
        }
        let period = SAMPLE_PERIOD_MS * MS;
        let len = period * u64::from(a.sample_percent) / 100;
        if self.window == (0, 0) || now >= self.period_start + period {
            // The first period, or a new one (a late wake-up skips to the
            // current one).
            self.period_start += (now - self.period_start) / period * period;
            let at = self.period_start + self.next_rand() % (period - len + 1);
            self.window = (at, at + len);
        }
        let want = self.window.0 <= now && now < self.window.1 && !self.failed;
        if want && !self.on {
            match pause::resume_if_off(a) {
                Resume::On => self.switch(now, true, collected(self)),
                Resume::NotYet => {}
                Resume::Failed => self.failed = true,
            }
        } else if !want && self.on {
            self.switch(now, false, collected(self));
            pause::begin(a);
            self.drained_at = now + GRACE_NS.min((period - len) / 2);
        }
        let draining = a.pause.load(Acquire) == pause::DRAINING;
        if draining && !self.on && now >= self.drained_at {
            pause::arm(a);
        }
        a.header().sampled_on_ns.store(collected(self), Relaxed);
        let mut next = if self.on {
            self.window.1
        } else if now < self.window.0 {
            self.window.0
        } else {
            self.period_start + period
        };
        if draining && !self.on && now < self.drained_at {
            next = next.min(self.drained_at);
        }
        Some(next.saturating_sub(now).div_ceil(MS).max(1))
    }

    fn switch(&mut self, now: u64, on: bool, collected: u64) {
        self.on_before = collected;
        self.since = now;
        self.on = on;
    }
}
