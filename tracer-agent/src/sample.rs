//! GPU time sampled (`AgentArgs::sample_percent` below 100): CUPTI collects
//! during one window of that share of each `SAMPLE_PERIOD_MS`, placed at
//! random in the period (so that no periodic pattern of the job is always
//! missed), and is switched off between windows: its activity kinds
//! disabled and the API callbacks off, so that the process pays CUPTI's
//! cost per launch only inside the windows. Work launched in a window is
//! recorded whenever it runs. The header's `sampled_on_ns` says how long
//! CUPTI collected, for gputrace to state (and to scale busy shares by).

use core::sync::atomic::Ordering::{Relaxed, Release};

use tracer_common::gpu::{API_CBIDS, RUNTIME_API_CBIDS, SAMPLE_PERIOD_MS};

use crate::cupti_abi::{CB_DOMAIN_DRIVER_API, CB_DOMAIN_RUNTIME_API};
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
    rng: u64,
}

const MS: u64 = 1_000_000;

impl Sampler {
    /// At start: the kinds are on (the agent enabled them).
    pub(crate) fn new(now: u64) -> Self {
        Self {
            on: true,
            since: now,
            on_before: 0,
            period_start: now,
            window: (0, 0),
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
        let want = self.window.0 <= now && now < self.window.1;
        if want != self.on {
            self.on_before = collected(self);
            self.since = now;
            self.on = want;
            switch(a, want);
        }
        a.header().sampled_on_ns.store(collected(self), Relaxed);
        let next = if self.on {
            self.window.1
        } else if now < self.window.0 {
            self.window.0
        } else {
            self.period_start + period
        };
        Some(next.saturating_sub(now).div_ceil(MS).max(1))
    }
}

/// CUPTI's kinds and the API callbacks on or off.
fn switch(a: &Agent, on: bool) {
    if on {
        for &k in &a.cupti_kinds[..a.n_cupti_kinds] {
            // SAFETY: resolved CUPTI function, a kind the agent enabled at start.
            unsafe { (a.cupti.enable)(k) };
        }
        if a.api_kinds {
            a.api_records.store(true, Release);
            a.enable_cbids(CB_DOMAIN_DRIVER_API, API_CBIDS);
            a.enable_cbids(CB_DOMAIN_RUNTIME_API, RUNTIME_API_CBIDS);
        }
    } else {
        // SAFETY: subscribed until the detach, which runs on this thread
        // after the sampler.
        unsafe { a.callbacks_off() };
        a.disable_kinds();
    }
}
