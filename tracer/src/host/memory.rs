//! Reading another process's memory (process_vm_readv): never faults, an
//! unmapped address is just an error.

/// Reads `buf.len()` bytes at `addr` of `pid`; false if any part is unreadable.
pub(crate) fn read_exact(pid: u32, addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let read = |id: u32| {
        // SAFETY: the local iovec covers `buf`; the remote one is only read by the kernel.
        unsafe { libc::process_vm_readv(id as libc::pid_t, &local, 1, &remote, 1, 0) }
    };
    let mut n = read(pid);
    // ESRCH: no such process, or one whose leader thread has exited (it
    // has no memory of its own any more) while other threads go on: read
    // through one of those.
    if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        let via = crate::host::discover::reader_id(pid);
        if via != pid {
            n = read(via);
        }
    }
    n == buf.len() as isize
}

pub(crate) fn read_u64(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_exact(pid, addr, &mut b).then(|| u64::from_ne_bytes(b))
}

/// Reads a NUL-terminated string of at most `max` bytes, page by page so a
/// string near the end of a mapping is still read.
pub(crate) fn read_cstr(pid: u32, addr: u64, max: usize) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        let to_page_end = 4096 - (at % 4096) as usize;
        let n = to_page_end.min(max - out.len()).min(256);
        let mut chunk = vec![0u8; n];
        if !read_exact(pid, at, &mut chunk) {
            return None;
        }
        if let Some(end) = chunk.iter().position(|b| *b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some(out);
        }
        out.extend_from_slice(&chunk);
        at += n as u64;
    }
    None
}

/// Whether bytes look like a kernel's symbol name: printable ASCII, no
/// spaces except in already-demangled names, not empty.
pub(crate) fn plausible_name(s: &[u8]) -> bool {
    !s.is_empty()
        && s.len() < 8192
        && s.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
        && !s.starts_with(b" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_bad_addresses() {
        let me = std::process::id();
        let s = b"_Z4reluPfi\0";
        assert_eq!(
            read_cstr(me, s.as_ptr() as u64, 100).unwrap(),
            b"_Z4reluPfi"
        );
        let v: u64 = 0x1122334455667788;
        assert_eq!(read_u64(me, &v as *const u64 as u64), Some(v));
        assert_eq!(read_u64(me, 8), None);
        assert_eq!(read_cstr(me, 0, 10), None);
        assert!(plausible_name(b"void f<int>(int*)"));
        assert!(!plausible_name(b"\x01\x02"));
        assert!(!plausible_name(b""));
    }
}
