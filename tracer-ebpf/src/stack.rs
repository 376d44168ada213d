//! `--stacks`: the caller's stack, captured by the entry probe of a call
//! and sent as its own record just before the call's.
//!
//! The record is built in a per-CPU scratch buffer (tens of KiB: more than
//! the 512-byte eBPF stack, and a ring buffer reservation must have a
//! constant size) and sent with `bpf_ringbuf_output` sized by what was
//! copied: the Python frames the walk found, then the stack from `sp` up to
//! the configured window (or to the end of the mapped stack).
//!
//! Uprobe programs run with migration disabled but may be preempted, and
//! another task's program can then run on the same CPU: a busy flag taken
//! with an atomic exchange keeps a second program off the buffer (its
//! stack is counted as dropped).

use aya_ebpf::{
    helpers::{
        bpf_get_current_task, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        generated::{bpf_probe_read_kernel, bpf_probe_read_user},
    },
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::ProbeContext,
};
use tracer_common::{
    stack::{
        PyConfig, PyModel, PyRawFrame, PyStatus, RetFixup, StackRecord, MAX_PY_FRAMES,
        MAX_RET_FIXUPS, MAX_STACK_BYTES, NO_OFFSET, PY_FRAME_HEAD, PY_OWNED_BY_CSTACK,
    },
    EventKind, LostReason, ProbeCookie,
};

use crate::{count_lost, submit_flags, EVENTS};

/// Where the Python frame head is read to, past the record's largest size.
const WORK_AT: usize = StackRecord::MAX_SIZE + 4096;
/// The scratch value: the largest record, the page a copy may overrun in
/// the verifier's eyes, and the work area.
const SCRATCH_BYTES: usize = WORK_AT + 128 + 16;

const PAGE: u64 = 4096;

#[repr(C, align(8))]
pub struct Scratch([u8; SCRATCH_BYTES]);

/// One scratch buffer per CPU (indexed by CPU number; the loader sets the
/// entry count). A plain array: a per-CPU array's value is limited to 32 KiB.
#[map]
static STACK_SCRATCH: Array<Scratch> = Array::with_max_entries(1, 0);

/// The busy flag of each CPU's scratch buffer.
#[map]
static STACK_BUSY: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Calls seen per API on each CPU, for `--stacks-every`.
#[map]
static STACK_SAMPLE: PerCpuArray<u64> = PerCpuArray::with_max_entries(API_SLOTS, 0);
const API_SLOTS: u32 = 1024;

/// Python processes (tgid) and how to walk their frames.
#[map]
static PY_PROCS: HashMap<u32, PyConfig> = HashMap::with_max_entries(4096, 0);

/// Thread (tid) to its `PyThreadState`: `[tstate, when it was looked up]`;
/// tstate 0 = the thread had none (looked up again after a second).
#[map]
static PY_TSTATES: LruHashMap<u32, [u64; 2]> = LruHashMap::with_max_entries(65536, 0);

/// Bytes of stack copied per record (set at load time, at most
/// `MAX_STACK_BYTES`; 0 copies none).
#[unsafe(no_mangle)]
static STACK_BYTES: u64 = 16 << 10;
/// `--stacks-every N` for sampled APIs.
#[unsafe(no_mangle)]
static STACK_EVERY: u64 = 1;
/// `task_struct.thread.fsbase` (0: unknown, no Python walk).
#[unsafe(no_mangle)]
static FSBASE_OFFSET: u64 = 0;
/// `task_struct.utask` (0: unknown, no uretprobe fix-ups), then
/// `uprobe_task.return_instances` and `return_instance.{stack,
/// orig_ret_vaddr, next}`.
#[unsafe(no_mangle)]
static UTASK_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static RI_HEAD_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static RI_STACK_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static RI_ORIG_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static RI_NEXT_OFFSET: u64 = 0;

/// Thread states scanned looking for the calling thread's (all interpreters).
const MAX_TSTATE_SCAN: u32 = 256;
/// How long "this thread has no Python thread state" is believed.
const NO_TSTATE_RETRY_NS: u64 = 1_000_000_000;

#[inline(always)]
fn global(v: &'static u64) -> u64 {
    // SAFETY: a global the loader may have overridden; read it, don't fold it.
    unsafe { core::ptr::read_volatile(v) }
}

/// Atomically swaps `v` into `*p`, returning the old value.
#[inline(always)]
fn xchg(p: *mut u64, v: u64) -> u64 {
    let mut r = v;
    // SAFETY: `p` is a valid, aligned u64 in a map value; BPF_XCHG (kernel
    // 5.12+) is the eBPF atomic exchange.
    unsafe {
        core::arch::asm!("{r} = xchg_64({p} + 0, {r})", p = in(reg) p, r = inout(reg) r, options(nostack));
    }
    r
}

#[inline(always)]
fn read_user_u64(addr: u64) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: reads user memory into a local; failure is an error code.
    let rc = unsafe { bpf_probe_read_user((&mut v as *mut u64).cast(), 8, addr as *const _) };
    (rc == 0).then_some(v)
}

#[inline(always)]
fn read_kernel_u64(addr: u64) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: reads kernel memory into a local; failure is an error code.
    let rc = unsafe { bpf_probe_read_kernel((&mut v as *mut u64).cast(), 8, addr as *const _) };
    (rc == 0).then_some(v)
}

/// Whether this call's stack is wanted: always, or one in `STACK_EVERY`.
///
/// Without branches on the cookie's sampled bit: a branch there would let
/// two paths, differing only in what the verifier knows of that bit, reach
/// the capture, which the verifier would then check twice (past its
/// million-instruction limit). Calls that are not sampled count with a
/// modulus of 1.
#[inline(always)]
pub fn wanted(cookie: ProbeCookie) -> bool {
    if !cookie.stacks() {
        return false;
    }
    let sampled = (cookie.0 >> ProbeCookie::STACKS_SAMPLED.trailing_zeros()) & 1;
    let every = 1 + sampled * global(&STACK_EVERY).saturating_sub(1);
    let Some(n) = STACK_SAMPLE.get_ptr_mut(cookie.api() % API_SLOTS) else {
        return false;
    };
    // SAFETY: this CPU's counter; a preempting program of the same API may
    // make one call more or less sampled, which is harmless.
    unsafe {
        let seen = *n;
        *n = seen + 1;
        seen % every == 0
    }
}

/// Captures and sends the stack record of the call entering now.
#[inline(never)]
pub fn capture(ctx: &ProbeContext, api: u32, pid_tgid: u64, start_ns: u64) {
    // SAFETY: the helper returns this CPU's number.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let (Some(buf), Some(busy)) = (STACK_SCRATCH.get_ptr_mut(cpu), STACK_BUSY.get_ptr_mut(0))
    else {
        count_lost(LostReason::StackDropped);
        return;
    };
    if xchg(busy, 1) != 0 {
        count_lost(LostReason::StackDropped);
        return;
    }
    let base = buf.cast::<u8>();
    let len = fill(ctx, base, api, pid_tgid, start_ns);
    let len = if len > StackRecord::MAX_SIZE {
        StackRecord::MAX_SIZE
    } else {
        len
    };
    // SAFETY: `len` is at most the record's largest size, inside the value.
    let record = unsafe { core::slice::from_raw_parts(base, len) };
    if EVENTS.output::<[u8]>(record, submit_flags()).is_err() {
        count_lost(LostReason::StackDropped);
    }
    // SAFETY: our flag; released with a plain store.
    unsafe { core::ptr::write_volatile(busy, 0) };
}

/// Writes the record into `base`; returns its length.
#[inline(always)]
fn fill(ctx: &ProbeContext, base: *mut u8, api: u32, pid_tgid: u64, start_ns: u64) -> usize {
    // SAFETY: uprobe programs get the user registers.
    let regs = unsafe { &*ctx.regs };
    let hdr = base.cast::<StackRecord>();
    let pid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    // SAFETY: the scratch value starts with room for the header.
    unsafe {
        (*hdr).kind = EventKind::Stack as u32;
        (*hdr).api = api;
        (*hdr).pid = pid;
        (*hdr).tid = tid;
        (*hdr).start_ns = start_ns;
        (*hdr).ip = regs.rip;
        (*hdr).sp = regs.rsp;
        (*hdr).bp = regs.rbp;
    }
    // SAFETY: the helper returns the current task's kernel address.
    let task = unsafe { bpf_get_current_task() };
    let ret_count = ret_fixups(task, hdr);
    let (py_count, status) = match PY_PROCS.get_ptr(pid) {
        // SAFETY: a map value, read-only here.
        Some(cfg) => python_frames(unsafe { &*cfg }, task, tid, base),
        None => (0, PyStatus::NotPython),
    };
    // Through memory, so the verifier forgets which of the walk's many
    // exits (one per frame count) led here and checks the copy once.
    // SAFETY: the header's fields, inside the value.
    let py_count = unsafe {
        (*hdr).ret_count = ret_count;
        (*hdr).py_count = py_count as u32;
        (*hdr).py_status = status as u32;
        core::ptr::read_volatile(&(*hdr).py_count) as usize
    };
    let py_count = if py_count > MAX_PY_FRAMES {
        MAX_PY_FRAMES
    } else {
        py_count
    };
    let frames_end = StackRecord::SIZE + py_count * PyRawFrame::SIZE;
    let copied = copy_window(regs.rsp, base, frames_end);
    // SAFETY: as above.
    unsafe {
        (*hdr).py_count = py_count as u32;
        (*hdr).stack_len = copied as u32;
    }
    frames_end + copied
}

/// Copies the kernel's saved return addresses of this thread's pending
/// uretprobes into the header.
#[inline(always)]
fn ret_fixups(task: u64, hdr: *mut StackRecord) -> u32 {
    let utask_off = global(&UTASK_OFFSET);
    let mut n = 0u32;
    if utask_off == 0 {
        return 0;
    }
    let Some(utask) = read_kernel_u64(task + utask_off) else {
        return 0;
    };
    if utask == 0 {
        return 0;
    }
    let Some(mut ri) = read_kernel_u64(utask + global(&RI_HEAD_OFFSET)) else {
        return 0;
    };
    let (stack_off, orig_off, next_off) = (
        global(&RI_STACK_OFFSET),
        global(&RI_ORIG_OFFSET),
        global(&RI_NEXT_OFFSET),
    );
    for i in 0..MAX_RET_FIXUPS {
        if ri == 0 {
            break;
        }
        let (Some(slot), Some(ret)) = (
            read_kernel_u64(ri + stack_off),
            read_kernel_u64(ri + orig_off),
        ) else {
            break;
        };
        // SAFETY: `i` is below the array's length.
        unsafe { (*hdr).rets[i] = RetFixup { slot, ret } };
        n += 1;
        ri = read_kernel_u64(ri + next_off).unwrap_or(0);
    }
    n
}

/// Copies the stack from `sp` up: the rest of `sp`'s page, then whole
/// pages, stopping at the window's size or the first page that cannot be
/// read (the top of the stack).
#[inline(always)]
fn copy_window(sp: u64, base: *mut u8, at: usize) -> usize {
    let window = global(&STACK_BYTES);
    let window = if window > MAX_STACK_BYTES as u64 {
        MAX_STACK_BYTES as u64
    } else {
        window & !7
    };
    let mut copied: u64 = 0;
    let mut piece = PAGE - (sp & (PAGE - 1));
    for _ in 0..(MAX_STACK_BYTES as u64 / PAGE + 1) {
        if copied >= window {
            break;
        }
        let left = window - copied;
        let n = if piece > left { left } else { piece };
        if n == 0 || n > PAGE || copied > MAX_STACK_BYTES as u64 {
            break;
        }
        let off = at as u64 + copied;
        if off > (StackRecord::MAX_SIZE as u64) {
            break;
        }
        // SAFETY: `off + n` lies inside the scratch value (checked above
        // against its size, which has a page to spare).
        let rc = unsafe {
            bpf_probe_read_user(
                base.add(off as usize).cast(),
                n as u32,
                (sp + copied) as *const _,
            )
        };
        if rc != 0 {
            break;
        }
        copied += n;
        piece = PAGE;
    }
    copied as usize
}

/// Reads a u64 at a configured offset of the frame head in the work area.
#[inline(always)]
fn head_u64(base: *mut u8, off: u32) -> u64 {
    let off = (off & 127) as usize;
    // SAFETY: the work area has 128 + 16 bytes: any masked offset fits.
    unsafe { core::ptr::read_unaligned(base.add(WORK_AT + off).cast::<u64>()) }
}

#[inline(always)]
fn head_u8(base: *mut u8, off: u32) -> u8 {
    let off = (off & 127) as usize;
    // SAFETY: as above.
    unsafe { *base.add(WORK_AT + off) }
}

/// The calling thread's Python frames, written after the header.
#[inline(always)]
fn python_frames(cfg: &PyConfig, task: u64, tid: u32, base: *mut u8) -> (usize, PyStatus) {
    let fs_off = global(&FSBASE_OFFSET);
    if fs_off == 0 {
        return (0, PyStatus::NoFsBase);
    }
    let Some(fsbase) = read_kernel_u64(task + fs_off) else {
        return (0, PyStatus::NoFsBase);
    };
    let tstate = match thread_state(cfg, tid, fsbase) {
        Some(t) => t,
        None => return (0, PyStatus::NoThreadState),
    };
    let Some(mut frame) = read_user_u64(tstate + cfg.tstate_frame as u64) else {
        return (0, PyStatus::ReadFailed);
    };
    if cfg.model == PyModel::CFrame as u32 && frame != 0 {
        match read_user_u64(frame + cfg.cframe_current_frame as u64) {
            Some(f) => frame = f,
            None => return (0, PyStatus::ReadFailed),
        }
    }
    let head_len = if cfg.frame_head_len as usize > PY_FRAME_HEAD {
        PY_FRAME_HEAD as u32
    } else {
        cfg.frame_head_len
    };
    let is_310 = cfg.model == PyModel::FrameObject as u32;
    let mut count: usize = 0;
    let mut status = PyStatus::Complete;
    // One slot per iteration, shims included (written as code 0): a count
    // that moved apart from the loop index would make the verifier track a
    // state per (index, count) pair.
    for i in 0..MAX_PY_FRAMES {
        if frame == 0 {
            break;
        }
        // SAFETY: the work area holds PY_FRAME_HEAD bytes and more.
        let rc =
            unsafe { bpf_probe_read_user(base.add(WORK_AT).cast(), head_len, frame as *const _) };
        if rc != 0 {
            status = PyStatus::ReadFailed;
            break;
        }
        let shim =
            cfg.frame_owner != NO_OFFSET && head_u8(base, cfg.frame_owner) == PY_OWNED_BY_CSTACK;
        let (code, instr) = if shim {
            (0, 0)
        } else if is_310 {
            // f_lasti, an int; every 3.10 frame is its own evaluation.
            let lasti = head_u64(base, cfg.frame_instr) as u32 as i32 as i64;
            (
                head_u64(base, cfg.frame_code),
                ((lasti as u64) << 1) | PyRawFrame::ENTRY_BIT,
            )
        } else {
            let entry = cfg.frame_is_entry != NO_OFFSET && head_u8(base, cfg.frame_is_entry) != 0;
            (
                head_u64(base, cfg.frame_code),
                (head_u64(base, cfg.frame_instr) & !1) | entry as u64,
            )
        };
        let at = StackRecord::SIZE + i * PyRawFrame::SIZE;
        // SAFETY: `i` < MAX_PY_FRAMES: inside the value.
        unsafe {
            let f = base.add(at).cast::<PyRawFrame>();
            (*f).code = code;
            (*f).instr = instr;
        }
        count = i + 1;
        frame = head_u64(base, cfg.frame_previous);
    }
    if frame != 0 && matches!(status, PyStatus::Complete) {
        status = PyStatus::Truncated;
    }
    (count, status)
}

/// The calling thread's `PyThreadState`: the cached one if its `thread_id`
/// is still this thread's `fs` base (`pthread_self()`), else found in the
/// interpreters' thread lists.
#[inline(always)]
fn thread_state(cfg: &PyConfig, tid: u32, fsbase: u64) -> Option<u64> {
    // SAFETY: the helper returns the time.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: a plain value read from a map lookup.
    if let Some(&[cached, when]) = unsafe { PY_TSTATES.get(&tid) } {
        if cached == 0 {
            if now.wrapping_sub(when) < NO_TSTATE_RETRY_NS {
                return None;
            }
        } else if read_user_u64(cached + cfg.tstate_thread_id as u64) == Some(fsbase) {
            return Some(cached);
        }
    }
    let found = scan_thread_states(cfg, fsbase);
    let _ = PY_TSTATES.insert(&tid, &[found.unwrap_or(0), now], 0);
    found
}

#[inline(always)]
fn scan_thread_states(cfg: &PyConfig, fsbase: u64) -> Option<u64> {
    let mut interp = read_user_u64(cfg.runtime + cfg.runtime_interpreters_head as u64)?;
    let mut t = 0u64;
    let mut in_list = false;
    for _ in 0..MAX_TSTATE_SCAN {
        if !in_list {
            if interp == 0 {
                return None;
            }
            t = read_user_u64(interp + cfg.interp_threads_head as u64)?;
            interp = read_user_u64(interp + cfg.interp_next as u64).unwrap_or(0);
            in_list = true;
        }
        if t == 0 {
            in_list = false;
            continue;
        }
        if read_user_u64(t + cfg.tstate_thread_id as u64) == Some(fsbase) {
            return Some(t);
        }
        t = read_user_u64(t + cfg.tstate_next as u64).unwrap_or(0);
    }
    None
}

const _: () = assert!(PY_FRAME_HEAD <= 128);
