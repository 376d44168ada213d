//! Calls counted in the kernel (cookie bit `COUNTED`, the daemon's
//! `--probes FAMILY:counts`): what the eBPF side adds up per process and
//! API, and how many calls to one it times.
//!
//! Cookie bits 20..32 (free where no argument is read): `N`, one call in
//! `N` timed at random (0 and 1: every call).

use crate::{ProbeCookie, HISTOGRAM_SLOTS};

/// The calls of one API in one process counted in the kernel
/// (`ProbeCookie::COUNTED`), on one CPU; keyed by [`counted_key`]. Each
/// field only grows. Every call is in `calls`; the calls timed (all of
/// them, or one in [`ProbeCookie::time_every`] where the kernel has uprobe
/// sessions) are in the buckets and `sum_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub calls: u64,
    pub sum_ns: u64,
    /// Per bucket of [`crate::BUCKETS_NS`] (not cumulative); the last is +Inf.
    pub buckets: [u64; HISTOGRAM_SLOTS],
}

impl Counted {
    pub const fn zeroed() -> Self {
        Self {
            calls: 0,
            sum_ns: 0,
            buckets: [0; HISTOGRAM_SLOTS],
        }
    }

    /// The calls timed (each is in one bucket).
    pub fn timed(&self) -> u64 {
        let mut n = 0u64;
        let mut i = 0;
        while i < HISTOGRAM_SLOTS {
            n = n.wrapping_add(self.buckets[i]);
            i += 1;
        }
        n
    }
}

/// Placeholders of the counted session program (`counted_session`) for
/// calls of the kernel's `bpf_session_cookie` and `bpf_session_is_return`
/// kfuncs: the eBPF side emits a helper call with this number, which
/// userspace turns into the kfunc call (the BTF id of the running kernel's
/// function) before loading it. No helper has such a number.
pub const KFUNC_SESSION_COOKIE: i32 = 0x7ff0_0001;
pub const KFUNC_SESSION_IS_RETURN: i32 = 0x7ff0_0002;

/// The key of a [`Counted`]: the process (tgid) and the API id.
#[inline(always)]
pub const fn counted_key(tgid: u32, api: u32) -> u64 {
    ((tgid as u64) << 32) | api as u64
}

impl ProbeCookie {
    /// Counted calls: one in `n` timed (at most 4,095; 0 and 1: every call).
    pub const fn with_time_every(self, n: u16) -> Self {
        let n = if n > 0xfff { 0xfff } else { n };
        Self((self.0 & !(0xfff << 20)) | ((n as u64) << 20))
    }
    /// Counted calls: one in this many timed (1: every call).
    #[inline(always)]
    pub const fn time_every(self) -> u32 {
        let n = ((self.0 >> 20) & 0xfff) as u32;
        if n == 0 {
            1
        } else {
            n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_cookies_carry_how_many_calls_to_one_timed() {
        let c = ProbeCookie::new(7).with_counted();
        assert_eq!(c.time_every(), 1, "every call unless said");
        assert_eq!(c.with_time_every(16).time_every(), 16);
        assert_eq!(c.with_time_every(16).with_time_every(3).time_every(), 3);
        assert_eq!(c.with_time_every(0).time_every(), 1);
        assert_eq!(c.with_time_every(u16::MAX).time_every(), 4095);
        let t = c.with_time_every(4095);
        assert_eq!((t.api(), t.counted(), t.entry_only()), (7, true, false));
        assert_eq!(t.str_arg(), 0, "bits 32.. untouched");
    }
}
