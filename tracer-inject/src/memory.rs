//! Reading and writing another process's memory through /proc/PID/mem.
//!
//! /proc/PID/mem goes through the kernel's FOLL_FORCE path for a ptracer, so
//! it also works on pages that are not writable in the target.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;

pub(crate) struct Memory {
    file: File,
}

impl Memory {
    pub(crate) fn open(pid: i32) -> io::Result<Memory> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))?;
        Ok(Memory { file })
    }

    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, addr)
    }

    pub(crate) fn write(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, addr)
    }

    pub(crate) fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// A NUL-terminated string of at most `max` bytes (without the NUL);
    /// longer strings are cut.
    pub(crate) fn read_cstr(&self, addr: u64, max: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 256];
        let mut at = addr;
        while out.len() < max {
            // Do not cross a page boundary in one read: the string may end
            // just before an unmapped page.
            let to_page_end = 4096 - (at % 4096) as usize;
            let n = chunk.len().min(to_page_end);
            self.read(at, &mut chunk[..n])?;
            if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..end]);
                break;
            }
            out.extend_from_slice(&chunk[..n]);
            at += n as u64;
        }
        out.truncate(max);
        Ok(out)
    }

    /// Finds a `syscall` instruction (0f 05) in [start, end).
    pub(crate) fn find_syscall_insn(&self, start: u64, end: u64) -> Option<u64> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut at = start;
        while at < end {
            let n = ((end - at) as usize).min(buf.len());
            self.read(at, &mut buf[..n]).ok()?;
            if let Some(i) = buf[..n].windows(2).position(|w| w == [0x0f, 0x05]) {
                return Some(at + i as u64);
            }
            // Overlap by one byte so a pair across chunks is not missed.
            at += (n as u64).saturating_sub(1).max(1);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_own_memory() {
        let mem = Memory::open(std::process::id() as i32).unwrap();
        let mut target = vec![0u8; 32];
        let s = b"hello\0world";
        mem.write(target.as_mut_ptr() as u64, s).unwrap();
        // The write went behind the compiler's back: read through the same path.
        assert_eq!(
            mem.read_cstr(target.as_ptr() as u64, 100).unwrap(),
            b"hello"
        );
        assert_eq!(mem.read_cstr(target.as_ptr() as u64, 3).unwrap(), b"hel");
        let v: u64 = 0x1122_3344_5566_7788;
        assert_eq!(mem.read_u64(&v as *const u64 as u64).unwrap(), v);
        drop(target);
    }
}
