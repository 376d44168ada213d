//! The CUPTI buffer pool: a fixed number of preallocated buffers handed
//! out lock-free from CUPTI's buffer-requested callback (which may run on
//! any of the target's threads), never allocating there.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

pub(crate) const MAX_BUFFERS: usize = 64;
pub(crate) const DEFAULT_BUFFERS: usize = 8;
pub(crate) const DEFAULT_BUFFER_SIZE: usize = 4 << 20;
pub(crate) const MIN_BUFFER_SIZE: usize = 4 << 10;
pub(crate) const MAX_BUFFER_SIZE: usize = 64 << 20;

pub(crate) struct Pool {
    base: *mut u8,
    size: usize,
    count: usize,
    used: [AtomicBool; MAX_BUFFERS],
}

// SAFETY: `base` points to memory the pool owns; handing a buffer out is
// arbitrated by the atomics.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    /// `count` buffers of `size` bytes (both already validated); errno on failure.
    pub(crate) fn new(count: usize, size: usize) -> Result<Pool, u32> {
        let base = sys::anon(count * size)?;
        Ok(Pool {
            base,
            size,
            count,
            used: [const { AtomicBool::new(false) }; MAX_BUFFERS],
        })
    }

    pub(crate) fn buffer_size(&self) -> usize {
        self.size
    }

    /// A free buffer, or `None` when all are with CUPTI or being read.
    pub(crate) fn take(&self) -> Option<*mut u8> {
        for (i, u) in self.used[..self.count].iter().enumerate() {
            if u.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: i < count, so the buffer lies inside the mapping.
                return Some(unsafe { self.base.add(i * self.size) });
            }
        }
        None
    }

    /// Whether `p..p+len` lies inside buffer `p` of this pool.
    pub(crate) fn contains(&self, p: *const u8, len: usize) -> bool {
        let b = self.base as usize;
        let a = p as usize;
        a >= b
            && a < b + self.count * self.size
            && (a - b).is_multiple_of(self.size)
            && len <= self.size
    }

    /// Gives buffer `p` back (ignored if it is not one of ours).
    pub(crate) fn give_back(&self, p: *const u8) {
        if self.contains(p, 0) {
            let i = (p as usize - self.base as usize) / self.size;
            self.used[i].store(false, Ordering::Release);
        }
    }

    /// Every buffer free again: those CUPTI took and never handed back
    /// (an empty one is kept, not completed) are lost to it once finalized.
    ///
    /// # Safety
    /// CUPTI finalized and no buffer callback running.
    pub(crate) unsafe fn reclaim_all(&self) {
        for u in &self.used[..self.count] {
            u.store(false, Ordering::Release);
        }
    }

    /// Unmaps the buffers.
    ///
    /// # Safety
    /// No buffer may be in use (CUPTI finalized, no callback running).
    pub(crate) unsafe fn free(&self) {
        // SAFETY: the caller's contract; the mapping is `new`'s.
        unsafe { sys::unmap(self.base, self.count * self.size) };
    }
}
