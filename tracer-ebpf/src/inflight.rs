//! Calls between entry and return, kept per thread in task-local storage.
//!
//! Why not a hash map keyed by (tid, api): an LRU hash insert at entry, a
//! lookup and a delete at return took a bucket lock and an LRU list lock
//! each time, about a quarter of what gputrace adds to a traced call.
//! Task storage hangs off the thread's own `task_struct`: the lookup is a
//! pointer chase through a per-map cache, nothing is shared with other
//! threads, and the kernel frees it when the thread exits (a thread killed
//! mid-call leaks nothing).
//!
//! A thread can be inside several traced calls at once (a runtime launch
//! calls the driver's, NCCL calls both), so each thread holds a small stack
//! of in-flight calls. Each slot remembers the stack pointer at entry, which
//! names the call's frame: a return matches the newest slot of its API that
//! is not a caller's frame, and slots of frames that are already gone (a
//! return probe detached mid-call, a `longjmp` out of a call) are dropped
//! and counted, never left to fill the stack.

use aya_ebpf::{
    bindings::{task_struct, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE},
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get},
    macros::btf_map,
};
use tracer_common::{CallEvent, LostReason};

use crate::count_lost;

/// Calls one thread can be inside at once (runtime → driver → ... nests 3).
pub const DEPTH: usize = 6;

/// One thread's calls in flight, oldest first.
#[repr(C)]
pub struct InFlight {
    /// Slots in use.
    pub depth: u32,
    /// Entries refused because every slot was in use: their returns find no
    /// slot and must not be counted a second time.
    pub overflow: u32,
    /// The user stack pointer at each call's entry.
    pub sp: [u64; DEPTH],
    pub calls: [CallEvent; DEPTH],
}

/// A BTF-defined task storage map: aya-ebpf 0.2.1 has the BTF map
/// machinery but no task storage type. The layout is what the loader reads
/// from BTF (type, key, value, max_entries, map_flags as pointer fields).
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; aya_ebpf::bindings::bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders the loader reads from BTF; they are
// never dereferenced, so sharing the static is sound.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The current thread's value, created zeroed when `create`.
    #[inline(always)]
    fn current(&self, create: bool) -> *mut T {
        // SAFETY: the helper returns the current task as a trusted BTF pointer.
        let task: *mut task_struct = unsafe { bpf_get_current_task_btf() };
        let flags = if create {
            BPF_LOCAL_STORAGE_GET_F_CREATE as u64
        } else {
            0
        };
        // SAFETY: `self` is a task storage map; a NULL value with the create
        // flag asks for a zeroed one.
        unsafe {
            bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                task,
                core::ptr::null_mut(),
                flags,
            )
        }
        .cast()
    }
}

#[btf_map]
static INFLIGHT_TASK: TaskStorage<InFlight> = TaskStorage::new();

/// Takes a slot for a call of `api` entered with stack pointer `sp`; the
/// caller fills it. `None` (counted) when the storage cannot be had or is
/// full. The slot stays valid until the program returns.
///
/// Loops run over constant indices (unrolled): the verifier then sees fixed
/// offsets into the value instead of a computed index it cannot bound.
#[inline(always)]
pub fn push(api: u32, sp: u64) -> Option<&'static mut CallEvent> {
    let st = INFLIGHT_TASK.current(true);
    if st.is_null() {
        count_lost(LostReason::InflightFull);
        return None;
    }
    // SAFETY: this thread's own storage; only its own probes touch it, and
    // they run one at a time on it.
    let st = unsafe { &mut *st };
    // A slot whose frame is below this call's is stale: that call is over,
    // its return went unseen (callers' frames lie above). So is one at the
    // same frame and API: the same call site called again. The same frame
    // with another API may be a tail call, whose return is still to come.
    let mut depth = (st.depth as usize).min(DEPTH);
    for i in (0..DEPTH).rev() {
        if i + 1 != depth {
            continue;
        }
        let (Some(&s), Some(c)) = (st.sp.get(i), st.calls.get(i)) else {
            break;
        };
        if s < sp || (s == sp && c.api == api) {
            depth = i;
            count_lost(LostReason::Unpaired);
        } else {
            break;
        }
    }
    for i in 0..DEPTH {
        if i == depth {
            if let (Some(s), Some(c)) = (st.sp.get_mut(i), st.calls.get_mut(i)) {
                *s = sp;
                let c: *mut CallEvent = c;
                st.depth = i as u32 + 1;
                // SAFETY: a slot of this thread's storage, which the kernel
                // keeps until the thread exits; nothing else writes it.
                return Some(unsafe { &mut *c });
            }
        }
    }
    st.depth = depth as u32;
    st.overflow = st.overflow.wrapping_add(1);
    count_lost(LostReason::InflightFull);
    None
}

/// The in-flight record of the call of `api` returning with stack pointer
/// `sp`, taken off the thread's stack (with any stale slots above it).
/// `None` when there is none, which is not counted: that call began before
/// the entry probe was attached (return probes are attached first), or its
/// entry was refused and counted then. The record stays valid until the
/// program returns (nothing else writes this thread's storage).
#[inline(always)]
pub fn pop(api: u32, sp: u64) -> Option<&'static mut CallEvent> {
    let st = INFLIGHT_TASK.current(false);
    if st.is_null() {
        return None;
    }
    // SAFETY: as in `push`.
    let st = unsafe { &mut *st };
    let depth = (st.depth as usize).min(DEPTH);
    // The returning frame's entry stack pointer is below `sp` (the return
    // address was popped); callers' frames are above it. The newest slot
    // of this API below `sp` is ours.
    for i in (0..DEPTH).rev() {
        if i >= depth {
            continue;
        }
        let (Some(&s), Some(c)) = (st.sp.get(i), st.calls.get(i)) else {
            break;
        };
        if s >= sp {
            break; // a caller's frame: ours is not on the stack
        }
        if c.api == api {
            // Slots above ours are calls whose returns will never come.
            for j in 0..DEPTH {
                if j > i && j < depth {
                    count_lost(LostReason::Unpaired);
                }
            }
            st.depth = i as u32;
            return st.calls.get_mut(i);
        }
    }
    if st.overflow > 0 {
        st.overflow -= 1; // its entry was counted when refused
    }
    None
}
