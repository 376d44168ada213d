//! The target's libcupti: opened with dlopen (the copy already mapped
//! first), its functions resolved with dlsym.

use core::ffi::{c_char, c_int, c_void, CStr};

use tracer_common::gpu::AgentError;

use crate::cupti_abi::*;

type Fn0 = unsafe extern "C" fn() -> CuptiResult;
type FnU32 = unsafe extern "C" fn(u32) -> CuptiResult;

/// Resolved CUPTI entry points. Optional ones are `None` when this libcupti
/// lacks them.
pub(crate) struct Cupti {
    handle: *mut c_void,
    /// The library was already mapped (RTLD_NOLOAD succeeded).
    pub preloaded: bool,
    pub subscribe:
        unsafe extern "C" fn(*mut SubscriberHandle, CallbackFunc, *mut c_void) -> CuptiResult,
    pub unsubscribe: unsafe extern "C" fn(SubscriberHandle) -> CuptiResult,
    pub enable_domain: unsafe extern "C" fn(u32, SubscriberHandle, u32) -> CuptiResult,
    /// `cuptiEnableCallback(enable, subscriber, domain, cbid)`.
    pub enable_callback: unsafe extern "C" fn(u32, SubscriberHandle, u32, u32) -> CuptiResult,
    pub register_callbacks:
        unsafe extern "C" fn(BufferRequestedFunc, BufferCompletedFunc) -> CuptiResult,
    pub enable: FnU32,
    pub disable: FnU32,
    pub flush_all: FnU32,
    pub next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> CuptiResult,
    pub dropped: unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> CuptiResult,
    pub finalize: Fn0,
    pub register_timestamp: Option<unsafe extern "C" fn(TimestampFunc) -> CuptiResult>,
    pub get_timestamp: Option<unsafe extern "C" fn(*mut u64) -> CuptiResult>,
    pub get_version: Option<unsafe extern "C" fn(*mut u32) -> CuptiResult>,
    pub result_string: Option<unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult>,
}

// SAFETY: the handle and function pointers are process-global and CUPTI's
// functions are thread-safe.
unsafe impl Send for Cupti {}
// SAFETY: as above; nothing here is mutated after `open`.
unsafe impl Sync for Cupti {}

/// Resolves `name` (NUL-terminated) as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the function's real type.
unsafe fn sym<T: Copy>(handle: *mut c_void, name: &CStr) -> Option<T> {
    // SAFETY: `handle` came from dlopen; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    debug_assert_eq!(
        core::mem::size_of::<T>(),
        core::mem::size_of::<*mut c_void>()
    );
    // SAFETY: the caller names the symbol's real function type, which is
    // pointer-sized.
    Some(unsafe { core::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Cupti {
    /// Opens `path`: the copy already mapped if there is one, else loads it
    /// (RTLD_NODELETE: a libcupti that may have started threads is never
    /// unmapped by our dlclose).
    pub(crate) fn open(path: &CStr) -> Result<Cupti, AgentError> {
        // SAFETY: `path` is NUL-terminated; dlopen has no other precondition.
        let mut handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        let preloaded = !handle.is_null();
        if handle.is_null() {
            let flags: c_int = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE;
            // SAFETY: as above.
            handle = unsafe { libc::dlopen(path.as_ptr(), flags) };
        }
        if handle.is_null() {
            return Err(AgentError::CuptiLoad);
        }
        // SAFETY: each name is resolved as its CUPTI 13 prototype.
        let c = unsafe {
            (|| {
                Some(Cupti {
                    handle,
                    preloaded,
                    subscribe: sym(handle, c"cuptiSubscribe")?,
                    unsubscribe: sym(handle, c"cuptiUnsubscribe")?,
                    enable_domain: sym(handle, c"cuptiEnableDomain")?,
                    enable_callback: sym(handle, c"cuptiEnableCallback")?,
                    register_callbacks: sym(handle, c"cuptiActivityRegisterCallbacks")?,
                    enable: sym(handle, c"cuptiActivityEnable")?,
                    disable: sym(handle, c"cuptiActivityDisable")?,
                    flush_all: sym(handle, c"cuptiActivityFlushAll")?,
                    next_record: sym(handle, c"cuptiActivityGetNextRecord")?,
                    dropped: sym(handle, c"cuptiActivityGetNumDroppedRecords")?,
                    finalize: sym(handle, c"cuptiFinalize")?,
                    register_timestamp: sym(handle, c"cuptiActivityRegisterTimestampCallback"),
                    get_timestamp: sym(handle, c"cuptiGetTimestamp"),
                    get_version: sym(handle, c"cuptiGetVersion"),
                    result_string: sym(handle, c"cuptiGetResultString"),
                })
            })()
        };
        match c {
            Some(c) => Ok(c),
            None => {
                // SAFETY: `handle` came from dlopen and is closed once.
                unsafe { libc::dlclose(handle) };
                Err(AgentError::CuptiSymbol)
            }
        }
    }

    /// CUPTI's name for `r`, into `out` (e.g. for the header message).
    pub(crate) fn result_name<'a>(&self, r: CuptiResult, out: &'a mut [u8; 96]) -> &'a [u8] {
        let mut p: *const c_char = core::ptr::null();
        let ok = match self.result_string {
            // SAFETY: CUPTI writes a static string pointer into `p`.
            Some(f) => (unsafe { f(r, &mut p) }) == CUPTI_SUCCESS && !p.is_null(),
            None => false,
        };
        let n = if ok {
            // SAFETY: CUPTI returned a NUL-terminated static string.
            let s = unsafe { CStr::from_ptr(p) }.to_bytes();
            let n = s.len().min(out.len());
            out[..n].copy_from_slice(&s[..n]);
            n
        } else {
            0
        };
        &out[..n]
    }

    /// Drops our reference to the library (it stays mapped: either the
    /// process maps it too, or it was opened RTLD_NODELETE).
    pub(crate) fn close(self) {
        // SAFETY: the handle came from dlopen and is closed exactly once
        // (`self` is consumed).
        unsafe { libc::dlclose(self.handle) };
    }
}
