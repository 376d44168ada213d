//! x86-64 register state of a ptrace-stopped thread: the general registers
//! (PTRACE_GETREGS) and the whole FP/vector state (PTRACE_GETREGSET
//! NT_X86_XSTATE, or the legacy FXSAVE area where XSAVE is missing), and the
//! register set-ups for a system call and for a function call.

use std::io;

pub(crate) type Regs = libc::user_regs_struct;

const PTRACE_GETREGS: u32 = 12;
const PTRACE_SETREGS: u32 = 13;
const PTRACE_GETFPREGS: u32 = 14;
const PTRACE_SETFPREGS: u32 = 15;
const PTRACE_GETREGSET: u32 = 0x4204;
const PTRACE_SETREGSET: u32 = 0x4205;
const NT_X86_XSTATE: u64 = 0x202;

/// rflags bits: trap flag and direction flag.
const FLAG_TF: u64 = 0x100;
const FLAG_DF: u64 = 0x400;

/// The kernel's "restart this system call" return values (never seen by user space).
pub(crate) const ERESTARTSYS: i64 = 512;
pub(crate) const ERESTARTNOINTR: i64 = 513;
pub(crate) const ERESTARTNOHAND: i64 = 514;
pub(crate) const ERESTART_RESTARTBLOCK: i64 = 516;

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(crate) fn get(tid: i32) -> io::Result<Regs> {
    // SAFETY: user_regs_struct is plain integers; zero is a valid value.
    let mut regs: Regs = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes one user_regs_struct into `regs`.
    check(unsafe { libc::ptrace(PTRACE_GETREGS as _, tid, 0u64, &mut regs as *mut Regs) })?;
    Ok(regs)
}

pub(crate) fn set(tid: i32, regs: &Regs) -> io::Result<()> {
    // SAFETY: the kernel reads one user_regs_struct from `regs`.
    check(unsafe { libc::ptrace(PTRACE_SETREGS as _, tid, 0u64, regs as *const Regs) })
}

/// The FP/SSE/AVX/... state of a thread, as saved by the kernel.
pub(crate) enum FpState {
    /// The XSAVE area, exactly as long as the kernel returned it.
    Xstate(Vec<u8>),
    /// The 512-byte FXSAVE area (CPUs or kernels without XSAVE).
    Fx(Box<libc::user_fpregs_struct>),
}

pub(crate) fn get_fp(tid: i32) -> io::Result<FpState> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: the kernel writes at most iov_len bytes into `buf` and
        // stores the length it wrote in iov_len.
        let r = unsafe {
            libc::ptrace(
                PTRACE_GETREGSET as _,
                tid,
                NT_X86_XSTATE,
                &mut iov as *mut libc::iovec,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENODEV)) {
                break;
            }
            return Err(e);
        }
        if iov.iov_len < buf.len() || buf.len() >= 1 << 20 {
            buf.truncate(iov.iov_len);
            return Ok(FpState::Xstate(buf));
        }
        // Possibly cut: try again with more room.
        buf.resize(buf.len() * 2, 0);
    }
    // SAFETY: plain data; zero is valid.
    let mut fx: Box<libc::user_fpregs_struct> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: the kernel writes one user_fpregs_struct into `fx`.
    check(unsafe {
        libc::ptrace(
            PTRACE_GETFPREGS as _,
            tid,
            0u64,
            &mut *fx as *mut libc::user_fpregs_struct,
        )
    })?;
    Ok(FpState::Fx(fx))
}

pub(crate) fn set_fp(tid: i32, fp: &FpState) -> io::Result<()> {
    match fp {
        FpState::Xstate(buf) => {
            let mut iov = libc::iovec {
                iov_base: buf.as_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            // SAFETY: the kernel reads iov_len bytes from `buf` (not written to).
            check(unsafe {
                libc::ptrace(
                    PTRACE_SETREGSET as _,
                    tid,
                    NT_X86_XSTATE,
                    &mut iov as *mut libc::iovec,
                )
            })
        }
        FpState::Fx(fx) => {
            // SAFETY: the kernel reads one user_fpregs_struct.
            check(unsafe {
                libc::ptrace(
                    PTRACE_SETFPREGS as _,
                    tid,
                    0u64,
                    &**fx as *const libc::user_fpregs_struct,
                )
            })
        }
    }
}

/// Whether a stop shows an interrupted system call that the kernel will
/// restart: orig_rax is a syscall number and rax one of the -ERESTART* codes.
pub(crate) fn restarting(regs: &Regs) -> bool {
    (regs.orig_rax as i64) >= 0
        && matches!(
            (regs.rax as i64).wrapping_neg(),
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND | ERESTART_RESTARTBLOCK
        )
}

/// Registers for executing the `syscall` instruction at `insn` with syscall
/// `nr`; orig_rax = -1 so the kernel restarts nothing when we resume.
pub(crate) fn for_syscall(base: &Regs, insn: u64, nr: i64, args: [u64; 6]) -> Regs {
    let mut r = *base;
    r.rip = insn;
    r.rax = nr as u64;
    r.orig_rax = u64::MAX;
    r.rdi = args[0];
    r.rsi = args[1];
    r.rdx = args[2];
    r.r10 = args[3];
    r.r8 = args[4];
    r.r9 = args[5];
    r.eflags &= !(FLAG_TF | FLAG_DF);
    r
}

/// Registers for calling `func` per the SysV ABI, with its return address
/// already pushed at `sp` (so sp % 16 == 8 at entry), up to six integer args.
pub(crate) fn for_call(base: &Regs, func: u64, sp: u64, args: &[u64]) -> Regs {
    let mut r = *base;
    r.rip = func;
    r.rsp = sp;
    r.orig_rax = u64::MAX;
    r.rax = 0; // number of vector registers used by a variadic call
    let slots = [
        &mut r.rdi, &mut r.rsi, &mut r.rdx, &mut r.rcx, &mut r.r8, &mut r.r9,
    ];
    for (slot, &a) in slots.into_iter().zip(args) {
        *slot = a;
    }
    r.eflags &= !(FLAG_TF | FLAG_DF);
    r
}

/// Where a call's return address goes: below the 128-byte red zone of the
/// interrupted code, 16-byte aligned, minus the 8 bytes of the address.
pub(crate) fn call_sp(rsp: u64) -> u64 {
    (rsp.wrapping_sub(128) & !15).wrapping_sub(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_stack_is_aligned_below_red_zone() {
        for rsp in [0x7ffc_0000_1000u64, 0x7ffc_0000_1008, 0x7ffc_0000_0ff3] {
            let sp = call_sp(rsp);
            assert_eq!(sp % 16, 8, "entry sp must be 8 mod 16");
            assert!(sp + 8 <= rsp - 128, "must not touch the red zone");
            assert!(rsp - 128 - (sp + 8) < 16);
        }
    }

    #[test]
    fn restart_codes() {
        // SAFETY: plain integers.
        let mut r: Regs = unsafe { std::mem::zeroed() };
        r.orig_rax = 35;
        r.rax = (-ERESTART_RESTARTBLOCK) as u64;
        assert!(restarting(&r));
        r.rax = (-libc::EINTR as i64) as u64;
        assert!(!restarting(&r));
        r.rax = (-ERESTARTSYS) as u64;
        r.orig_rax = u64::MAX;
        assert!(!restarting(&r));
    }
}
