//! The parts of CUPTI 13's C interface the agent uses: enum values,
//! function types and the activity-record layouts (written from the CUDA 13
//! headers' field types and offsets; every offset used is asserted).

use core::ffi::{c_char, c_void};
use core::mem::{offset_of, size_of};

pub(crate) type CuptiResult = u32;
pub(crate) const CUPTI_SUCCESS: CuptiResult = 0;
pub(crate) const CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: CuptiResult = 39;

pub(crate) const KIND_MEMCPY: u32 = 1;
pub(crate) const KIND_MEMSET: u32 = 2;
pub(crate) const KIND_KERNEL: u32 = 3;
pub(crate) const KIND_CONCURRENT_KERNEL: u32 = 10;

pub(crate) const ACTIVITY_FLAG_FLUSH_FORCED: u32 = 1;
pub(crate) const CB_DOMAIN_DRIVER_API: u32 = 1;
pub(crate) const CB_DOMAIN_RUNTIME_API: u32 = 2;
pub(crate) const API_ENTER: u32 = 0;
pub(crate) const API_EXIT: u32 = 1;

pub(crate) type SubscriberHandle = *mut c_void;
pub(crate) type CallbackFunc = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);
pub(crate) type BufferRequestedFunc = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
pub(crate) type BufferCompletedFunc = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
pub(crate) type TimestampFunc = unsafe extern "C" fn() -> u64;

/// `CUpti_CallbackData`, what the driver and runtime API callbacks get.
#[repr(C)]
pub(crate) struct CallbackData {
    /// `CUPTI_API_ENTER` or `CUPTI_API_EXIT`.
    pub callback_site: u32,
    pub function_name: *const c_char,
    pub function_params: *const c_void,
    /// The call's `CUresult` / `cudaError_t`, at exit.
    pub function_return_value: *const c_void,
    pub symbol_name: *const c_char,
    pub context: *mut c_void,
    pub context_uid: u32,
    /// Eight bytes CUPTI keeps from a call's entry callback to its exit.
    pub correlation_data: *mut u64,
    /// The correlation id of the call's GPU records.
    pub correlation_id: u32,
}

/// `CUpti_ActivityKernel10` (CONCURRENT_KERNEL and KERNEL records).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct Kernel10 {
    pub kind: u32,
    pub cache_config: u8,
    pub shared_memory_config: u8,
    pub registers_per_thread: u16,
    pub partitioned_cache: [u32; 2],
    pub start: u64,
    pub end: u64,
    pub completed: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub static_shared_memory: i32,
    pub dynamic_shared_memory: i32,
    pub local_memory_per_thread: u32,
    pub local_memory_total: u32,
    pub correlation_id: u32,
    pub grid_id: i64,
    pub name: *const c_char,
    pub reserved0: *mut c_void,
    pub queued: u64,
    pub submitted: u64,
    pub launch_type: u8,
    pub carveout: [u8; 3],
    pub shared_memory_executed: u32,
    pub graph_node_id: u64,
    pub shmem_limit_config: u32,
    pub graph_id: u32,
    pub rest: [u8; 216 - 160],
}

/// `CUpti_ActivityMemcpy6`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct Memcpy6 {
    pub kind: u32,
    pub copy_kind: u8,
    pub src_kind: u8,
    pub dst_kind: u8,
    pub flags: u8,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
    pub runtime_correlation_id: u32,
    pub pad: u32,
    pub reserved0: *mut c_void,
    pub graph_node_id: u64,
    pub graph_id: u32,
    pub rest: [u8; 96 - 76],
}

/// `CUpti_ActivityMemset4`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct Memset4 {
    pub kind: u32,
    pub value: u32,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
    pub flags: u16,
    pub memory_kind: u16,
    pub pad: u32,
    pub reserved0: *mut c_void,
    pub graph_node_id: u64,
    pub graph_id: u32,
    pub rest: [u8; 88 - 76],
}

const _: () = {
    assert!(size_of::<Kernel10>() == 216);
    assert!(offset_of!(Kernel10, registers_per_thread) == 6);
    assert!(offset_of!(Kernel10, start) == 16);
    assert!(offset_of!(Kernel10, device_id) == 40);
    assert!(offset_of!(Kernel10, stream_id) == 48);
    assert!(offset_of!(Kernel10, grid) == 52);
    assert!(offset_of!(Kernel10, block) == 64);
    assert!(offset_of!(Kernel10, static_shared_memory) == 76);
    assert!(offset_of!(Kernel10, dynamic_shared_memory) == 80);
    assert!(offset_of!(Kernel10, correlation_id) == 92);
    assert!(offset_of!(Kernel10, grid_id) == 96);
    assert!(offset_of!(Kernel10, name) == 104);
    assert!(offset_of!(Kernel10, launch_type) == 136);
    assert!(offset_of!(Kernel10, graph_node_id) == 144);
    assert!(offset_of!(Kernel10, graph_id) == 156);
    assert!(size_of::<Memcpy6>() == 96);
    assert!(offset_of!(Memcpy6, bytes) == 8);
    assert!(offset_of!(Memcpy6, correlation_id) == 44);
    assert!(offset_of!(Memcpy6, runtime_correlation_id) == 48);
    assert!(offset_of!(Memcpy6, graph_node_id) == 64);
    assert!(offset_of!(Memcpy6, graph_id) == 72);
    assert!(size_of::<Memset4>() == 88);
    assert!(offset_of!(Memset4, correlation_id) == 44);
    assert!(offset_of!(Memset4, memory_kind) == 50);
    assert!(offset_of!(Memset4, graph_node_id) == 64);
    assert!(offset_of!(Memset4, graph_id) == 72);
    assert!(size_of::<CallbackData>() == 72);
    assert!(offset_of!(CallbackData, function_return_value) == 24);
    assert!(offset_of!(CallbackData, context_uid) == 48);
    assert!(offset_of!(CallbackData, correlation_data) == 56);
    assert!(offset_of!(CallbackData, correlation_id) == 64);
};

/// Bytes of a record of CUPTI activity kind `kind` (0: not one we read).
pub(crate) const fn record_size(kind: u32) -> usize {
    match kind {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => size_of::<Kernel10>(),
        KIND_MEMCPY => size_of::<Memcpy6>(),
        KIND_MEMSET => size_of::<Memset4>(),
        _ => 0,
    }
}
