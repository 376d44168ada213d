//! The eBPF side of gputrace: one entry program and one return program,
//! attached to every traced symbol, and a raw tracepoint that says when a
//! process runs a new program (exec). The attach cookie says which API a hit
//! belongs to and which extra reads it needs; the catalogue of APIs lives in
//! userspace, so this file knows nothing of CUDA or NCCL.
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod blob;
mod counting;
mod inflight;
mod stack;

use blob::{keep_blob, read_blob, send_blob};

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
        bpf_probe_read_user_str_bytes, generated,
    },
    macros::{map, raw_tracepoint, uprobe, uretprobe},
    maps::{Array, LruHashMap, LruPerCpuHashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext},
    EbpfContext,
};
use tracer_common::{
    Blob, BlobCallEvent, CallEvent, CommLayout, EventKind, ExecEvent, LostReason, NamedCallEvent,
    ProbeCookie, COMM_DEV_READ, COMM_DEV_SLOT, COMM_HASH_READ, COMM_HASH_SLOT, COMM_LAYOUT_SLOTS,
    COMM_NRANKS_READ, COMM_RANKS_SLOT, COMM_RANK_READ, COMM_SEQ_READ, COMM_SEQ_SLOT,
    COMM_SLOT_SHIFT, COMM_VALID_SLOT, DEREF_BYTES, LOST_SLOTS, MAX_ARGS, NO_FIELD, NO_FUNC,
    NO_RETURN, READABLE_SLOT, REG_ARGS, RUNTIME_SLOT, STACK_ARGS,
};

/// Completed calls, drained by userspace. Its size is set at load time.
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);

/// Calls between entry and return, keyed by (tid, api), where task storage
/// cannot be used (see `INFLIGHT_PER_TASK`). LRU so a thread that never
/// returns (killed mid-call) cannot leak an entry forever; one LRU list per
/// CPU, so threads on different CPUs do not contend for one lock (its size
/// is set at load time from the number of CPUs).
#[map]
static INFLIGHT: LruHashMap<u64, CallEvent> =
    LruHashMap::with_max_entries(16384, aya_ebpf::bindings::BPF_F_NO_COMMON_LRU);

/// The bytes a call's entry copied (its cookie's blob bits), waiting for its
/// return; keyed like `INFLIGHT`. Only calls with a blob have an entry here,
/// so the records of every other call in flight stay small.
#[map]
static INFLIGHT_BLOB: LruHashMap<u64, Blob> = LruHashMap::with_max_entries(4096, 0);

/// One zeroed [`Blob`], never written: what a new `INFLIGHT_BLOB` entry
/// starts as. A blob does not fit on the 512-byte eBPF stack beside the
/// call record, so it is inserted from here and filled in place.
#[map]
static BLOB_TEMPLATE: Array<Blob> = Array::with_max_entries(1, 0);

/// Where each traced libnccl build keeps a communicator's identity and
/// counters (slot from the cookie; filled by userspace before attaching).
#[map]
static COMM_LAYOUTS: Array<CommLayout> = Array::with_max_entries(COMM_LAYOUT_SLOTS, 0);

/// The host stub of the runtime launch a thread is inside (tid → stub).
#[map]
static RUNTIME_STUB: LruHashMap<u32, u64> = LruHashMap::with_max_entries(8192, 0);

/// Counters of what could not be recorded, indexed by `LostReason`.
#[map]
static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOST_SLOTS, 0);

/// Calls not recorded, per process (tgid): `gputrace top` shows them per row.
#[map]
static LOST_BY_PID: LruPerCpuHashMap<u32, u64> = LruPerCpuHashMap::with_max_entries(4096, 0);

/// Wake the reader only once this much is waiting; it also polls on a timer.
/// Saves the traced thread an irq_work + wakeup per event. Set by userspace
/// at load time to a quarter of the ring buffer.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: u64 = 512 << 10;

/// 1: calls in flight live in task storage (`inflight`); 0: in the
/// `INFLIGHT` hash map, for kernels whose uprobe programs cannot use task
/// storage. Set at load time; the verifier drops the branch not taken, so
/// a kernel without the task storage helpers still loads the program.
#[unsafe(no_mangle)]
static INFLIGHT_PER_TASK: u32 = 1;

#[inline(always)]
fn per_task() -> bool {
    // SAFETY: a global the loader may have overridden; read it, don't fold it.
    unsafe { core::ptr::read_volatile(&INFLIGHT_PER_TASK) != 0 }
}

/// Where this call waits for its return: task storage, except NCCL calls
/// (rare), which stay in the `INFLIGHT` map because userspace scans it for
/// calls that have not returned (a rank stuck in a collective).
#[inline(always)]
fn per_task_for(cookie: ProbeCookie) -> bool {
    cookie.comm_arg() == 0 && per_task()
}

/// Adds one to a counter in a per-CPU slot. Uprobe programs run with
/// migration disabled but may be preempted, so another task's program can
/// run on this CPU in the middle: the add must be atomic.
#[inline(always)]
pub(crate) fn bump(slot: *mut u64) {
    // `slot` is a valid, aligned u64 in a map value; BPF_XADD is the eBPF
    // atomic add (core's atomics are not offered for this target).
    add(slot, 1);
}

/// Adds `v` to a counter in a per-CPU slot, atomically (see [`bump`]).
#[inline(always)]
pub(crate) fn add(slot: *mut u64, v: u64) {
    // SAFETY: as in `bump`.
    unsafe {
        core::arch::asm!("lock *(u64 *)({p} + 0) += {v}", p = in(reg) slot, v = in(reg) v, options(nostack));
    }
}

#[inline(always)]
pub(crate) fn count_lost(reason: LostReason) {
    if let Some(slot) = LOST.get_ptr_mut(reason as u32) {
        bump(slot);
    }
    if matches!(reason, LostReason::ReadFailed) {
        return; // the call itself was recorded
    }
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    match LOST_BY_PID.get_ptr_mut(pid) {
        Some(n) => bump(n),
        None => {
            let _ = LOST_BY_PID.insert(pid, 1, 0);
        }
    }
}

#[inline(always)]
pub(crate) fn submit_flags() -> u64 {
    // SAFETY: a global the loader may have overridden; read it, don't fold it.
    let threshold = unsafe { core::ptr::read_volatile(&WAKEUP_BYTES) };
    if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= threshold {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
fn arg_at(e: &CallEvent, one_based: u32) -> Option<u64> {
    if one_based == 0 {
        return None;
    }
    e.args.get((one_based - 1) as usize).copied()
}

#[inline(always)]
fn send(e: &CallEvent, cookie: ProbeCookie) {
    let s = cookie.str_arg();
    if s == 0 {
        if EVENTS.output::<CallEvent>(e, submit_flags()).is_err() {
            count_lost(LostReason::RingFull);
        }
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<NamedCallEvent>(0) else {
        count_lost(LostReason::RingFull);
        return;
    };
    let out = entry.as_mut_ptr();
    // SAFETY: `out` points to a reserved record of the right size; every field is written.
    unsafe {
        (*out).call = *e;
        (*out).call.kind = EventKind::NamedCall as u32;
        (*out)._pad = 0;
        let len = match arg_at(e, s) {
            Some(p) if p != 0 => bpf_probe_read_user_str_bytes(p as *const u8, &mut (*out).name)
                .map_or(0, |b| b.len()),
            _ => 0,
        };
        if len == 0 {
            (*out).name[0] = 0;
        }
        (*out).name_len = len as u32;
    }
    entry.submit(submit_flags());
}

/// Fills a whole entry record (every field: it may be uninitialised
/// memory). Fields are written in place, never built on the stack and
/// copied: LLVM turns large copies and zeroing into a byte-at-a-time
/// memcpy/memset subprogram, which cost the entry probe more than all of
/// its helpers together.
#[inline(always)]
fn fill_entry(
    ctx: &ProbeContext,
    cookie: ProbeCookie,
    pid_tgid: u64,
    start_ns: u64,
    e: &mut CallEvent,
) {
    // SAFETY: uprobe programs get the user registers.
    let regs = unsafe { &*ctx.regs };
    e.kind = EventKind::Call as u32;
    e.api = cookie.api();
    e.pid = (pid_tgid >> 32) as u32;
    e.tid = pid_tgid as u32;
    e.start_ns = start_ns;
    e.dur_ns = NO_RETURN;
    e.ret = 0;
    // SAFETY: writes the 16 bytes of `comm` (zeros when it fails).
    unsafe { generated::bpf_get_current_comm(e.comm.as_mut_ptr().cast(), 16) };
    e.args[0] = regs.rdi;
    e.args[1] = regs.rsi;
    e.args[2] = regs.rdx;
    e.args[3] = regs.rcx;
    e.args[4] = regs.r8;
    e.args[5] = regs.r9;
    // Arguments 7.. are on the stack above the return address at `sp`.
    let _: [(); MAX_ARGS - REG_ARGS - STACK_ARGS] = [];
    if cookie.stack_args() {
        // SAFETY: a user-memory read into args[6..11] (40 bytes), which the
        // kernel zeroes when it fails.
        let r = unsafe {
            generated::bpf_probe_read_user(
                e.args.as_mut_ptr().add(REG_ARGS).cast(),
                (STACK_ARGS * 8) as u32,
                (regs.rsp + 8) as *const _,
            )
        };
        if r != 0 {
            count_lost(LostReason::ReadFailed);
        }
    } else {
        e.args[6] = 0;
        e.args[7] = 0;
        e.args[8] = 0;
        e.args[9] = 0;
        e.args[10] = 0;
    }
    e.extra[0] = 0;
    e.extra[1] = 0;
    e.extra[2] = 0;
    e.extra[3] = 0;
    e.extra[4] = 0;
    e.extra[5] = 0;
    if let Some(p) = arg_at(e, cookie.deref_arg()) {
        // SAFETY: a user-memory read into extra[0..5], zeroed when it fails.
        let r = unsafe {
            generated::bpf_probe_read_user(
                e.extra.as_mut_ptr().cast(),
                DEREF_BYTES as u32,
                p as *const _,
            )
        };
        if r != 0 {
            count_lost(LostReason::ReadFailed);
        }
    }
    if cookie.probe_readable() {
        // Host memory can be read from here; device memory cannot. Pages
        // not yet touched also fail, so a miss means "not known", not "device".
        let mut bits = 0u64;
        // SAFETY: user-memory reads; failure is the answer we want.
        if unsafe { bpf_probe_read_user(e.args[0] as *const u8) }.is_ok() {
            bits |= 1;
        }
        // SAFETY: as above.
        if unsafe { bpf_probe_read_user(e.args[1] as *const u8) }.is_ok() {
            bits |= 2;
        }
        e.extra[READABLE_SLOT] = bits;
    }
    if let Some(stub) = arg_at(e, cookie.runtime_set_arg()) {
        let _ = RUNTIME_STUB.insert(&e.tid, &stub, 0);
    }
    if cookie.runtime_get() {
        // SAFETY: a plain value read from a map lookup.
        e.extra[RUNTIME_SLOT] = unsafe { RUNTIME_STUB.get(&e.tid) }.copied().unwrap_or(0);
    }
    read_comm(cookie, e);
}

/// Reads `size` (4 or 8) bytes at `base + off`; `None` for a field the
/// layout lacks or a failed read.
#[inline(always)]
fn comm_field(base: u64, off: u32, wide: bool) -> Option<u64> {
    if off == NO_FIELD {
        return None;
    }
    let at = base.checked_add(off as u64)?;
    // SAFETY (both reads): user-memory reads; failure is handled (and is
    // not counted as lost: the call is recorded, its identity is then
    // unknown).
    if wide {
        unsafe { bpf_probe_read_user(at as *const u64) }.ok()
    } else {
        // SAFETY: as above.
        unsafe { bpf_probe_read_user(at as *const u32) }
            .ok()
            .map(u64::from)
    }
}

/// An NCCL call: the layout slot of its library (so userspace knows the
/// release), and the communicator's hash, rank, size, device and the
/// function's sequence counter, read at entry into `extra`.
#[inline(always)]
fn read_comm(cookie: ProbeCookie, e: &mut CallEvent) {
    let slot = cookie.comm_layout();
    if slot == 0 {
        return;
    }
    e.extra[COMM_VALID_SLOT] = (slot as u64) << COMM_SLOT_SHIFT;
    let Some(comm) = arg_at(e, cookie.comm_arg()) else {
        return;
    };
    if comm == 0 {
        return;
    }
    let Some(l) = COMM_LAYOUTS.get(slot) else {
        return;
    };
    let mut valid = (slot as u64) << COMM_SLOT_SHIFT;
    if let Some(h) = comm_field(comm, l.hash, true) {
        e.extra[COMM_HASH_SLOT] = h;
        valid |= COMM_HASH_READ;
    }
    let mut ranks = 0u64;
    if let Some(r) = comm_field(comm, l.rank, false) {
        ranks |= r;
        valid |= COMM_RANK_READ;
    }
    if let Some(n) = comm_field(comm, l.nranks, false) {
        ranks |= n << 32;
        valid |= COMM_NRANKS_READ;
    }
    e.extra[COMM_RANKS_SLOT] = ranks;
    if let Some(d) = comm_field(comm, l.cuda_dev, false) {
        e.extra[COMM_DEV_SLOT] = d;
        valid |= COMM_DEV_READ;
    }
    let func = cookie.comm_func();
    if func < NO_FUNC && l.seq != NO_FIELD {
        if let Some(s) = comm_field(comm, l.seq.wrapping_add(8 * func), true) {
            e.extra[COMM_SEQ_SLOT] = s;
            valid |= COMM_SEQ_READ;
        }
    }
    e.extra[COMM_VALID_SLOT] = valid;
}

#[uprobe]
pub fn call_entry(ctx: ProbeContext) -> u32 {
    // SAFETY: the helper reads the cookie of the link that ran us.
    let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    // SAFETY: the helper returns the time.
    let start_ns = unsafe { bpf_ktime_get_ns() };
    if cookie.counted() {
        // Only its start, for the return to time it (userspace sets the
        // bit only where calls in flight live in task storage).
        if per_task() {
            // SAFETY: uprobe programs get the user registers.
            counting::enter(cookie.api(), unsafe { (*ctx.regs).rsp }, start_ns);
        }
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    // The stack goes first: userspace holds it until its call arrives.
    if stack::wanted(cookie) {
        stack::capture(&ctx, cookie.api(), pid_tgid, start_ns);
    }
    if cookie.entry_only() && cookie.blob_source() != 0 {
        // No return probe: build the record and read the blob in the ring buffer.
        let Some(mut entry) = EVENTS.reserve::<BlobCallEvent>(0) else {
            count_lost(LostReason::RingFull);
            return 0;
        };
        let out = entry.as_mut_ptr();
        // SAFETY: a reserved record of the right size: fill_entry writes the
        // call, then the blob fields are written.
        unsafe {
            fill_entry(&ctx, cookie, pid_tgid, start_ns, &mut (*out).call);
            (*out).call.kind = EventKind::BlobCall as u32;
            (*out)._pad = 0;
            (*out).blob_len = read_blob((*ctx.regs).rsp, &(*out).call, cookie, &mut (*out).blob);
        }
        entry.submit(submit_flags());
        return 0;
    }
    if cookie.entry_only() && cookie.str_arg() == 0 {
        // No return probe: build the record in the ring buffer itself.
        let Some(mut entry) = EVENTS.reserve::<CallEvent>(0) else {
            count_lost(LostReason::RingFull);
            return 0;
        };
        // SAFETY: a reserved record of the right size, fully written by fill_entry.
        fill_entry(&ctx, cookie, pid_tgid, start_ns, unsafe {
            &mut *entry.as_mut_ptr()
        });
        entry.submit(submit_flags());
        return 0;
    }
    if !cookie.entry_only() && per_task_for(cookie) {
        // SAFETY: uprobe programs get the user registers.
        let sp = unsafe { (*ctx.regs).rsp };
        if let Some(slot) = inflight::push(cookie.api(), sp) {
            fill_entry(&ctx, cookie, pid_tgid, start_ns, slot);
            keep_blob(&ctx, cookie, slot);
        }
        return 0;
    }
    // Built on the stack (192 bytes): a per-CPU buffer is not safe, since a
    // uprobe program can be preempted and another task's run on this CPU.
    let mut ev = core::mem::MaybeUninit::<CallEvent>::uninit();
    // SAFETY: fill_entry writes every field before anything reads one.
    let e = unsafe { &mut *ev.as_mut_ptr() };
    fill_entry(&ctx, cookie, pid_tgid, start_ns, e);
    if cookie.entry_only() {
        send(e, cookie);
        return 0;
    }
    let key = ((e.tid as u64) << 32) | e.api as u64;
    if INFLIGHT.insert(&key, &*e, 0).is_err() {
        count_lost(LostReason::InflightFull);
        return 0;
    }
    keep_blob(&ctx, cookie, e);
    0
}

#[uretprobe]
pub fn call_return(ctx: RetProbeContext) -> u32 {
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the helper reads the cookie of the link that ran us.
    let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    // SAFETY: uretprobe programs get the user registers.
    let regs = unsafe { &*ctx.regs };
    if cookie.counted() {
        if !per_task() {
            return 0;
        }
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        counting::leave(cookie.api(), regs.rsp, tgid, now);
        return 0;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    let key = ((tid as u64) << 32) | cookie.api() as u64;
    let per_task = per_task_for(cookie);
    let e = if per_task {
        match inflight::pop(cookie.api(), regs.rsp) {
            Some(e) => e,
            None => return 0,
        }
    } else {
        let Some(e) = INFLIGHT.get_ptr_mut(&key) else {
            count_lost(LostReason::Unpaired);
            return 0;
        };
        // SAFETY: the entry is ours: keyed by this thread, which is here.
        unsafe { &mut *e }
    };
    e.dur_ns = now.wrapping_sub(e.start_ns);
    e.ret = regs.rax;
    for slot in 0..2u32 {
        if let Some(p) = arg_at(e, cookie.out_arg(slot)) {
            // SAFETY: a user-memory read of what the call wrote; failure leaves 0.
            let v = unsafe { bpf_probe_read_user(p as *const u64) }.unwrap_or(0);
            if let Some(x) = e.extra.get_mut(slot as usize) {
                *x = v;
            }
        }
    }
    if cookie.blob_source() != 0 {
        send_blob(e, key);
        let _ = INFLIGHT_BLOB.remove(&key);
    } else {
        send(e, cookie);
    }
    if !per_task {
        let _ = INFLIGHT.remove(&key);
    }
    if cookie.runtime_set_arg() != 0 {
        let _ = RUNTIME_STUB.remove(&tid);
    }
    0
}

/// A process began a new program: said in the ring, in order with the
/// calls, so userspace names what follows by the new program. Every exec
/// on the host comes here (rare next to calls); userspace keeps those of
/// processes it traces. Not counted as lost when the ring is full: no call
/// is lost, only the new name of those that follow.
/// A raw tracepoint: attached by name, with no tracefs needed.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn process_exec(_ctx: RawTracePointContext) -> u32 {
    let Some(mut entry) = EVENTS.reserve::<ExecEvent>(0) else {
        return 0;
    };
    let out = entry.as_mut_ptr();
    // SAFETY: `out` points to a reserved record of the right size; every
    // field is written.
    unsafe {
        (*out).kind = EventKind::Exec as u32;
        (*out).pid = (bpf_get_current_pid_tgid() >> 32) as u32;
        (*out).ts_ns = bpf_ktime_get_ns();
        (*out).comm = [0; 16];
        generated::bpf_get_current_comm((*out).comm.as_mut_ptr().cast(), 16);
    }
    entry.submit(submit_flags());
    0
}

/// Hits of the bare counting probes (0: entries, 1: returns): the floor a
/// uprobe costs, for benchmarks.
#[map]
static BARE_COUNT: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

#[inline(always)]
fn bare_hit(slot: u32) {
    if let Some(c) = BARE_COUNT.get_ptr_mut(slot) {
        bump(c);
    }
}

#[uprobe]
pub fn bare_entry(_ctx: ProbeContext) -> u32 {
    bare_hit(0);
    0
}

#[uretprobe]
pub fn bare_return(_ctx: RetProbeContext) -> u32 {
    bare_hit(1);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
