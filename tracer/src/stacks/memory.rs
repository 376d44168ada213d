//! Reading a traced process's memory, or a copy of part of it.
//!
//! The Python reader and the symbol/unwind code are written against
//! [`Memory`] so that the same code reads a live process (the resolver,
//! the tests) or a snapshot the probe copied (the stack window).

/// A source of a process's memory. Reads never fault: an address that is not
/// mapped (or not in the snapshot) is `false` / `None`.
pub trait Memory {
    /// Fills `buf` from `addr`; false if any byte is unreadable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    fn read_u32(&self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b).then(|| u32::from_le_bytes(b))
    }

    fn read_i32(&self, addr: u64) -> Option<i32> {
        self.read_u32(addr).map(|v| v as i32)
    }

    fn read_u8(&self, addr: u64) -> Option<u8> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b).then_some(b[0])
    }

    /// `len` bytes at `addr`, or `None`.
    fn read_vec(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v).then_some(v)
    }
}

/// A live process, read with `process_vm_readv` (needs the same rights as
/// ptrace: root or CAP_SYS_PTRACE, or being the target's parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    pub pid: u32,
}

impl ProcessMemory {
    pub fn new(pid: u32) -> Self {
        Self { pid }
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        crate::host::memory::read_exact(self.pid, addr, buf)
    }
}

/// A copied window of memory (the user stack from `base` on, as a probe
/// copies it): reads outside it fail.
#[derive(Clone, Copy, Debug)]
pub struct Window<'a> {
    pub base: u64,
    pub bytes: &'a [u8],
}

impl Memory for Window<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(start) = addr.checked_sub(self.base) else {
            return false;
        };
        let Ok(start) = usize::try_from(start) else {
            return false;
        };
        match start
            .checked_add(buf.len())
            .and_then(|end| self.bytes.get(start..end))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_memory_reads_own_memory_and_refuses_unmapped() {
        let me = ProcessMemory::new(std::process::id());
        let v: u64 = 0x1122_3344_5566_7788;
        assert_eq!(me.read_u64(&v as *const u64 as u64), Some(v));
        assert_eq!(me.read_u64(8), None);
        assert!(me.read(8, &mut []));
    }

    #[test]
    fn window_reads_only_inside() {
        let bytes: Vec<u8> = (0u8..16).collect();
        let w = Window {
            base: 0x1000,
            bytes: &bytes,
        };
        assert_eq!(w.read_u64(0x1000), Some(0x0706_0504_0302_0100));
        assert_eq!(w.read_u64(0x1008), Some(0x0f0e_0d0c_0b0a_0908));
        assert_eq!(w.read_u64(0x1009), None, "one byte past the end");
        assert_eq!(w.read_u64(0xfff), None, "below the base");
        assert_eq!(w.read_u8(0x100f), Some(15));
        assert_eq!(w.read_u64(u64::MAX - 2), None);
    }
}
