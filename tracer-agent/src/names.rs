//! Kernel names in the ring's name area, by CUPTI's name pointer.

use core::ffi::c_char;

use tracer_common::gpu::{RingWriter, MAX_NAME_LEN};

const NAME_SLOTS: usize = 4096;
const NAME_PROBES: usize = 16;

/// Kernel names already in the name area, by CUPTI's name pointer (CUPTI
/// shares one string among the records of a kernel). A hit is checked
/// against the stored bytes, so a reused address never gives a wrong name.
pub(crate) struct Names {
    slots: [(usize, u32); NAME_SLOTS],
}

impl Names {
    pub(crate) fn id(&mut self, w: &mut RingWriter, ptr: *const c_char) -> u32 {
        if ptr.is_null() {
            return 0;
        }
        // SAFETY: CUPTI's record names a NUL-terminated string it owns; at
        // most MAX_NAME_LEN bytes are read.
        let len = unsafe { libc::strnlen(ptr, MAX_NAME_LEN) };
        // SAFETY: `len` bytes were just found readable by strnlen.
        let name = unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), len) };
        let key = ptr as usize;
        let h = (key >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
        let mut free = None;
        for i in 0..NAME_PROBES {
            let s = (h + i) % NAME_SLOTS;
            let (k, id) = self.slots[s];
            if k == key && w.name_is(id, name) {
                return id;
            }
            if k == key || (k == 0 && free.is_none()) {
                free = Some(s);
            }
        }
        let id = w.add_name(name);
        if id != 0 {
            let s = free.unwrap_or(h % NAME_SLOTS);
            self.slots[s] = (key, id);
        }
        id
    }
}
