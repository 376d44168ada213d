//! Small wrappers over the system calls the agent makes: the shared region
//! (memfd), the control pipe, anonymous memory, the monotonic clock, a
//! spin lock, and the raw agent thread.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};

/// `CLOCK_MONOTONIC` in nanoseconds (the clock of `bpf_ktime_get_ns`).
/// The calling thread's Linux tid.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }) as u32
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

pub(crate) fn errno() -> u32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as u32
}

pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

pub(crate) fn close(fd: i32) {
    if fd >= 0 {
        // SAFETY: closing a descriptor this agent opened and still owns.
        unsafe { libc::close(fd) };
    }
}

/// A shared region: a memfd of `len` bytes mapped MAP_SHARED, not inherited
/// by fork()ed children. Returns (fd, address); errno on failure.
pub(crate) fn memfd_region(len: usize) -> Result<(i32, *mut u8), u32> {
    // SAFETY: the name is NUL-terminated; flags are valid.
    let fd = unsafe { libc::memfd_create(c"gputrace-gpu".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `fd` is our new memfd.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        let e = errno();
        close(fd);
        return Err(e);
    }
    // SAFETY: a fresh shared mapping of our memfd; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = errno();
        close(fd);
        return Err(e);
    }
    // SAFETY: `p..p+len` is the mapping just made. Failure only means a
    // child would inherit the mapping; the atfork handler still keeps the
    // agent quiet there.
    unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) };
    Ok((fd, p.cast()))
}

/// Private anonymous memory (the CUPTI buffer pool); errno on failure.
pub(crate) fn anon(len: usize) -> Result<*mut u8, u32> {
    // SAFETY: a fresh private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno())
    } else {
        Ok(p.cast())
    }
}

/// Unmaps what `memfd_region` or `anon` mapped.
///
/// # Safety
/// `p..p+len` must be such a mapping, no longer used by anyone.
pub(crate) unsafe fn unmap(p: *mut u8, len: usize) {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        unsafe { libc::munmap(p.cast::<c_void>(), len) };
    }
}

/// A close-on-exec pipe: (read end, write end); errno on failure.
pub(crate) fn pipe() -> Result<(i32, i32), u32> {
    let mut fds = [-1i32; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(errno());
    }
    Ok((fds[0], fds[1]))
}

/// Starts `f(arg)` on a raw pthread (no Rust thread-locals, nothing that
/// pins the library) with every signal blocked, so the process's signal
/// handlers never run on it. Returns the thread or the error number.
pub(crate) fn spawn(
    f: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> Result<libc::pthread_t, u32> {
    // SAFETY: plain libc calls on valid local out-pointers; the old mask is
    // restored before returning.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut t: libc::pthread_t = 0;
        let e = libc::pthread_create(&mut t, core::ptr::null(), f, arg);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        if e != 0 {
            Err(e as u32)
        } else {
            libc::pthread_setname_np(t, c"gputrace-agent".as_ptr());
            Ok(t)
        }
    }
}

pub(crate) fn sleep_ms(ms: u64) {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is valid; an early wake-up (signal) only shortens the sleep.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

/// A tiny spin lock (buffer completions may arrive on several threads).
pub(crate) struct SpinLock(AtomicBool);

impl SpinLock {
    pub(crate) const fn new() -> Self {
        Self(AtomicBool::new(false))
    }
    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 100 {
                core::hint::spin_loop();
            } else {
                // SAFETY: no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
        SpinGuard(self)
    }
}

pub(crate) struct SpinGuard<'a>(&'a SpinLock);

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.store(false, Ordering::Release);
    }
}
