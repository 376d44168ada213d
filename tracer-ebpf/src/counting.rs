//! Calls counted in the kernel (cookie `COUNTED`): the start of each call
//! kept per thread until its return, in task storage of its own (smaller
//! and simpler than `inflight`'s, which holds whole records), then added to
//! the process's counts: the bucket of its latency and its time. The calls
//! are the buckets added up.

use aya_ebpf::macros::{btf_map, map};
use aya_ebpf::maps::{Array, PerCpuHashMap};
use tracer_common::{bucket_of, counted_key, Counted, LostReason, HISTOGRAM_SLOTS};

use crate::inflight::TaskStorage;
use crate::{add, bump, count_lost};

/// Counted calls one thread can be inside at once (a counted API called
/// from inside another is rare: two deep is plenty; more is counted lost).
const DEPTH: usize = 4;

/// One thread's counted calls in flight, oldest first.
#[repr(C)]
pub struct Starts {
    depth: u32,
    _pad: u32,
    /// The user stack pointer at each call's entry.
    sp: [u64; DEPTH],
    start_ns: [u64; DEPTH],
    api: [u32; DEPTH],
}

#[btf_map]
static COUNT_STARTS: TaskStorage<Starts> = TaskStorage::new();

/// Calls counted, per process and API, on each CPU: userspace reads them
/// and deletes a process's once it is gone. Not LRU: a full map refuses a
/// new key, and the call is counted lost (`CountsFull`), never a total
/// silently dropped.
#[map]
static COUNTS: PerCpuHashMap<u64, Counted> =
    PerCpuHashMap::with_max_entries(4096, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// One zeroed [`Counted`], never written: what a new `COUNTS` entry starts as.
#[map]
static COUNTED_TEMPLATE: Array<Counted> = Array::with_max_entries(1, 0);

/// A counted call of `api` entered with stack pointer `sp` at `now`.
#[inline(always)]
pub fn enter(api: u32, sp: u64, now: u64) {
    let st = COUNT_STARTS.current(true);
    if st.is_null() {
        count_lost(LostReason::InflightFull);
        return;
    }
    // SAFETY: this thread's own storage; only its own probes touch it, and
    // they run one at a time on it.
    let st = unsafe { &mut *st };
    // A slot whose frame is below this call's is over (its return went
    // unseen), as is one of the same API at the same frame; callers'
    // frames lie above.
    let mut depth = (st.depth as usize).min(DEPTH);
    for i in (0..DEPTH).rev() {
        if i + 1 != depth {
            continue;
        }
        let (Some(&s), Some(&a)) = (st.sp.get(i), st.api.get(i)) else {
            break;
        };
        if s < sp || (s == sp && a == api) {
            depth = i;
            count_lost(LostReason::Unpaired);
        }
    }
    for i in 0..DEPTH {
        if i == depth {
            if let (Some(s), Some(t), Some(a)) =
                (st.sp.get_mut(i), st.start_ns.get_mut(i), st.api.get_mut(i))
            {
                *s = sp;
                *t = now;
                *a = api;
                st.depth = i as u32 + 1;
                return;
            }
        }
    }
    st.depth = depth as u32;
    count_lost(LostReason::InflightFull);
}

/// The return of a counted call of `api` (stack pointer `sp`, in process
/// `tgid`) at `now`: its start is taken off the thread's slots and the call
/// added to the counts. A return without its start (the call began before
/// the probes, or its entry was refused and counted then) adds nothing.
#[inline(always)]
pub fn leave(api: u32, sp: u64, tgid: u32, now: u64) {
    let st = COUNT_STARTS.current(false);
    if st.is_null() {
        return;
    }
    // SAFETY: as in `enter`.
    let st = unsafe { &mut *st };
    let depth = (st.depth as usize).min(DEPTH);
    // The returning frame's entry stack pointer is below `sp`; callers'
    // are above it. The newest slot of this API below `sp` is ours.
    let mut start = None;
    for i in (0..DEPTH).rev() {
        if start.is_some() || i >= depth {
            continue;
        }
        let (Some(&s), Some(&a), Some(&t)) = (st.sp.get(i), st.api.get(i), st.start_ns.get(i))
        else {
            break;
        };
        if s >= sp {
            break;
        }
        if a == api {
            for j in 0..DEPTH {
                if j > i && j < depth {
                    count_lost(LostReason::Unpaired);
                }
            }
            st.depth = i as u32;
            start = Some(t);
        }
    }
    if let Some(start) = start {
        count(tgid, api, now.wrapping_sub(start));
    }
}

/// Adds a call of `api` in process `tgid` that took `dur_ns`.
#[inline(always)]
pub fn count(tgid: u32, api: u32, dur_ns: u64) {
    let key = counted_key(tgid, api);
    let c = match COUNTS.get_ptr_mut(&key) {
        Some(c) => c,
        None => {
            let Some(zero) = COUNTED_TEMPLATE.get(0) else {
                return;
            };
            // BPF_NOEXIST: another CPU's program may have made it meanwhile.
            let _ = COUNTS.insert(&key, zero, aya_ebpf::bindings::BPF_NOEXIST as u64);
            match COUNTS.get_ptr_mut(&key) {
                Some(c) => c,
                None => {
                    count_lost(LostReason::CountsFull);
                    return;
                }
            }
        }
    };
    let i = bucket_of(dur_ns);
    // SAFETY: this CPU's value of a live entry; the adds are atomic (a
    // preempted program on this CPU may be adding too).
    unsafe {
        add(&raw mut (*c).sum_ns, dur_ns);
        if i < HISTOGRAM_SLOTS {
            bump((&raw mut (*c).buckets).cast::<u64>().add(i));
        }
    }
}
