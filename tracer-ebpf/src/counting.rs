//! Calls counted in the kernel (cookie `COUNTED`): the start of each call
//! kept until its return (the session cookie where the kernel has uprobe
//! sessions, else the thread's in-flight slots), then added to the
//! process's counts: the bucket of its latency and its time. The calls are
//! the buckets added up.

use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, PerCpuHashMap};
use tracer_common::{bucket_of, counted_key, Counted, LostReason, HISTOGRAM_SLOTS};

use crate::{add, bump, count_lost, inflight};

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

/// A counted call of `api` entered with stack pointer `sp` at `now`: only
/// its start is kept, in the thread's in-flight slots (`inflight`).
#[inline(always)]
pub fn enter(api: u32, sp: u64, now: u64) {
    if let Some(slot) = inflight::push(api, sp) {
        slot.api = api;
        slot.start_ns = now;
    }
}

/// The return of a counted call of `api` (stack pointer `sp`, in process
/// `tgid`) at `now`: its start is taken off the thread's in-flight slots
/// and the call added to the counts. A return without its start (the call
/// began before the probes, or its entry was refused and counted then)
/// adds nothing.
#[inline(always)]
pub fn leave(api: u32, sp: u64, tgid: u32, now: u64) {
    if let Some(e) = inflight::pop(api, sp) {
        count(tgid, api, now.wrapping_sub(e.start_ns));
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
