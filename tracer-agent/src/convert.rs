//! CUPTI activity records → ring records, on the buffer-completion path
//! (CUPTI's thread, or the agent thread that flushes), one whole buffer at
//! a time under the producer lock.

use core::ffi::c_void;
use core::sync::atomic::Ordering::Relaxed;

use tracer_common::gpu::{
    with_epoch, Common, KernelRecord, MemcpyRecord, MemsetRecord, Record, RingWriter,
    FLAG_NO_TIMESTAMPS,
};

use crate::cupti_abi::{self as abi, CUPTI_SUCCESS};
use crate::names::Names;
use crate::state::Agent;

/// What happened to the records of one buffer.
#[derive(Default)]
pub(crate) struct Tally {
    pub skipped: u64,
    /// Work CUPTI handed back without its timing: still queued when its
    /// buffer was flushed (forced, at a sampled window's end or a detach).
    pub untimed: u64,
}

/// A record's flags: no timestamps, and the epoch it was made in.
pub(crate) fn flags(start: u64, end: u64, epoch: u64) -> u16 {
    let f = if start == 0 || end == 0 {
        FLAG_NO_TIMESTAMPS
    } else {
        0
    };
    with_epoch(f, epoch)
}

/// Reads the record at `p` (of `len` valid bytes) as one of ours.
///
/// # Safety
/// `p..p+len` must be readable.
unsafe fn convert(
    p: *const u8,
    len: usize,
    epoch: u64,
    names: &mut Names,
    w: &mut RingWriter,
) -> Option<Record> {
    if len < 4 {
        return None;
    }
    // SAFETY: 4 readable bytes (checked); CUPTI records are 8-aligned but
    // an unaligned read costs nothing here.
    let kind = unsafe { p.cast::<u32>().read_unaligned() };
    let need = abi::record_size(kind);
    if need == 0 || len < need {
        return None;
    }
    Some(match kind {
        abi::KIND_KERNEL | abi::KIND_CONCURRENT_KERNEL => {
            // SAFETY: `need` readable bytes hold a record of this kind's layout
            // (abi asserts the offsets).
            let k = unsafe { p.cast::<abi::Kernel10>().read_unaligned() };
            Record::Kernel(KernelRecord {
                common: Common {
                    flags: flags(k.start, k.end, epoch),
                    device: k.device_id,
                    context: k.context_id,
                    stream: k.stream_id,
                    correlation: k.correlation_id,
                    start: k.start,
                    end: k.end,
                },
                grid: k.grid.map(|v| v as u32),
                block: k.block.map(|v| v as u32),
                static_shared: k.static_shared_memory as u32,
                dynamic_shared: k.dynamic_shared_memory as u32,
                registers: k.registers_per_thread as u32,
                name_id: names.id(w, k.name),
                graph_node_id: k.graph_node_id,
                graph_id: k.graph_id,
                launch_type: k.launch_type as u32,
            })
        }
        abi::KIND_MEMCPY => {
            // SAFETY: `need` readable bytes hold a record of this kind's layout
            // (abi asserts the offsets).
            let m = unsafe { p.cast::<abi::Memcpy6>().read_unaligned() };
            Record::Memcpy(MemcpyRecord {
                common: Common {
                    flags: flags(m.start, m.end, epoch),
                    device: m.device_id,
                    context: m.context_id,
                    stream: m.stream_id,
                    correlation: m.correlation_id,
                    start: m.start,
                    end: m.end,
                },
                bytes: m.bytes,
                copy_kind: m.copy_kind,
                src_kind: m.src_kind,
                dst_kind: m.dst_kind,
                copy_flags: m.flags,
                graph_id: m.graph_id,
                graph_node_id: m.graph_node_id,
                runtime_correlation: m.runtime_correlation_id,
            })
        }
        abi::KIND_MEMSET => {
            // SAFETY: `need` readable bytes hold a record of this kind's layout
            // (abi asserts the offsets).
            let m = unsafe { p.cast::<abi::Memset4>().read_unaligned() };
            Record::Memset(MemsetRecord {
                common: Common {
                    flags: flags(m.start, m.end, epoch),
                    device: m.device_id,
                    context: m.context_id,
                    stream: m.stream_id,
                    correlation: m.correlation_id,
                    start: m.start,
                    end: m.end,
                },
                bytes: m.bytes,
                value: m.value,
                memory_kind: m.memory_kind,
                memset_flags: m.flags,
                graph_node_id: m.graph_node_id,
                graph_id: m.graph_id,
            })
        }
        _ => return None,
    })
}

/// Converts every record of a completed buffer into the ring, taking the
/// producer lock per record: CUPTI's iterator runs outside it, and a
/// launching thread writing its API record waits for one record at most.
///
/// # Safety
/// `buffer..buffer+valid` must be a buffer CUPTI handed back.
pub(crate) unsafe fn drain(a: &Agent, buffer: *mut u8, valid: usize) -> Tally {
    let mut t = Tally::default();
    let end = buffer as usize + valid;
    let mut rec: *mut c_void = core::ptr::null_mut();
    // The buffers of an epoch are all completed before the next begins
    // (flushed before CUPTI is finalized between windows).
    let epoch = a.header().pauses.load(Relaxed);
    loop {
        // SAFETY: CUPTI's iterator over the buffer it completed.
        if unsafe { (a.cupti.next_record)(buffer, valid, &mut rec) } != CUPTI_SUCCESS
            || rec.is_null()
        {
            break;
        }
        let at = rec as usize;
        if at < buffer as usize || at >= end {
            break;
        }
        let got = a.with_producer(|p| {
            // SAFETY: `rec..end` lies inside the valid part of the buffer.
            let r = unsafe { convert(rec.cast(), end - at, epoch, &mut p.names, &mut p.writer) };
            match r {
                Some(r) if r.common().flags & FLAG_NO_TIMESTAMPS != 0 => Some(false),
                Some(r) => {
                    p.writer.push(&r.to_bytes());
                    Some(true)
                }
                None => None,
            }
        });
        match got {
            Some(true) => {}
            Some(false) => t.untimed += 1,
            None => t.skipped += 1,
        }
    }
    if t.skipped > 0 {
        a.header().records_skipped.fetch_add(t.skipped, Relaxed);
    }
    if t.untimed > 0 {
        // Lost as CUPTI's own drops are: said with them.
        a.header().cupti_dropped.fetch_add(t.untimed, Relaxed);
    }
    t
}
