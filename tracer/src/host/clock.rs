//! The probes' clock (`CLOCK_MONOTONIC`, what `bpf_ktime_get_ns` reads)
//! and Unix time.

/// Converts `CLOCK_MONOTONIC` (what `bpf_ktime_get_ns` reads) to Unix time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    offset_ns: i128,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

impl Clock {
    /// Measures the offset once, keeping the tightest of a few samples.
    pub(crate) fn measure() -> Self {
        let mut best: Option<(i128, i128)> = None;
        for _ in 0..5 {
            let m0 = clock_ns(libc::CLOCK_MONOTONIC);
            let r = clock_ns(libc::CLOCK_REALTIME);
            let m1 = clock_ns(libc::CLOCK_MONOTONIC);
            let gap = m1 - m0;
            let offset = r - (m0 + gap / 2);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, offset));
            }
        }
        Self {
            offset_ns: best.map_or(0, |b| b.1),
        }
    }

    pub(crate) fn to_unix_ns(self, mono_ns: u64) -> u64 {
        (mono_ns as i128 + self.offset_ns).max(0) as u64
    }

    pub(crate) fn now_mono_ns() -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC) as u64
    }
}
