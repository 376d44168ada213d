//! The sandbox's system call filter (seccomp BPF, x86-64): what a library
//! running without privileges could still use against other processes or
//! the kernel is refused with EPERM: tracing and reading other processes,
//! signals to others, namespaces and mounts, eBPF, perf events, io_uring
//! (its operations would bypass this filter), keys, modules, Internet
//! sockets (unix and netlink sockets stay: the driver may use them).
//! Calls of another architecture kill the process.

/// `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct Program {
    len: u16,
    filter: *const Insn,
}

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LO: u32 = 16;
const ARG0_HI: u32 = 20;

const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// Refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    libc::SYS_pidfd_send_signal,
    libc::SYS_pidfd_getfd,
    libc::SYS_tkill,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_adjtimex,
    libc::SYS_clock_adjtime,
    libc::SYS_syslog,
    libc::SYS_personality,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_open_by_handle_at,
    libc::SYS_migrate_pages,
    libc::SYS_move_pages,
    libc::SYS_vhangup,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setgroups,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_capset,
];

/// Allowed only on this process itself (first argument = our PID).
const SELF_ONLY: &[libc::c_long] = &[
    libc::SYS_kill,
    libc::SYS_tgkill,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    // Calibration reads its own memory this way (an unmapped address is an
    // error, not a fault).
    libc::SYS_process_vm_readv,
];

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// Adds "if nr == `nr`: `body`" (the body ends in a return).
fn on_call(p: &mut Vec<Insn>, nr: libc::c_long, body: &[Insn]) {
    p.push(stmt(LD_W_ABS, NR));
    p.push(jump(JEQ_K, nr as u32, 0, body.len() as u8));
    p.extend_from_slice(body);
}

/// The filter for a process whose PID is `pid`.
fn program(pid: u32) -> Vec<Insn> {
    let deny = stmt(RET_K, RET_ERRNO | libc::EPERM as u32);
    let allow = stmt(RET_K, RET_ALLOW);
    let mut p = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
        jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
        deny,
    ];
    for &nr in DENIED {
        on_call(&mut p, nr, &[deny]);
    }
    let self_only = [
        stmt(LD_W_ABS, ARG0_LO),
        jump(JEQ_K, pid, 0, 3),
        stmt(LD_W_ABS, ARG0_HI),
        jump(JEQ_K, 0, 0, 1),
        allow,
        deny,
    ];
    for &nr in SELF_ONLY {
        on_call(&mut p, nr, &self_only);
    }
    on_call(
        &mut p,
        libc::SYS_socket,
        &[
            stmt(LD_W_ABS, ARG0_LO),
            jump(JEQ_K, libc::AF_UNIX as u32, 2, 0),
            jump(JEQ_K, libc::AF_NETLINK as u32, 1, 0),
            deny,
            allow,
        ],
    );
    on_call(
        &mut p,
        libc::SYS_clone,
        &[
            stmt(LD_W_ABS, ARG0_LO),
            jump(JSET_K, NAMESPACE_FLAGS, 0, 1),
            deny,
            allow,
        ],
    );
    // clone3's flags are behind a pointer the filter cannot read: make the
    // C library fall back to clone.
    on_call(
        &mut p,
        libc::SYS_clone3,
        &[stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32)],
    );
    p.push(allow);
    p
}

/// Installs the filter on this process (no_new_privs must be set).
pub(crate) fn install() -> Result<(), String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("the system call filter is written for x86-64 only".into());
    }
    let insns = program(std::process::id());
    let prog = Program {
        len: insns.len() as u16,
        filter: insns.as_ptr(),
    };
    // SAFETY: prog points to `insns`, alive for the call; the kernel copies it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &prog as *const Program,
        )
    };
    if r < 0 {
        return Err(format!("seccomp: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_stay_inside_the_program() {
        let p = program(1234);
        assert!(p.len() < 4096);
        for (i, insn) in p.iter().enumerate() {
            if insn.code & 0x07 == 0x05 {
                let far = i + 1 + insn.jt.max(insn.jf) as usize;
                assert!(far < p.len(), "instruction {i} jumps out");
            }
        }
        assert_eq!(p.last().unwrap().k, RET_ALLOW);
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// Re-runs this test in a process of its own, where the filter is
    /// installed (it cannot be taken off again).
    #[test]
    fn the_filter_refuses_what_it_should_and_allows_the_rest() {
        const CHILD: &str = "GPUTRACE_TEST_SECCOMP_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &format!(
                        "{}::the_filter_refuses_what_it_should_and_allows_the_rest",
                        module_path!().split_once("::").map_or("", |p| p.1)
                    ),
                    "--test-threads",
                    "1",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        assert_eq!(
            // SAFETY: prctl with constant arguments.
            unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
            0
        );
        install().unwrap();
        // SAFETY: plain system calls whose results are checked.
        unsafe {
            assert_eq!(libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0), -1);
            assert_eq!(errno(), libc::EPERM, "ptrace");
            assert_eq!(
                libc::kill(libc::getppid(), 0),
                -1,
                "a signal to another process"
            );
            assert_eq!(libc::kill(libc::getpid(), 0), 0, "a signal to ourselves");
            assert_eq!(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0), -1, "TCP");
            assert!(
                libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) >= 0,
                "unix"
            );
            assert_eq!(libc::unshare(libc::CLONE_NEWUSER), -1, "unshare");
            assert_eq!(libc::syscall(libc::SYS_bpf, 0, 0, 0), -1);
            assert_eq!(errno(), libc::EPERM, "bpf");
        }
        let v: u64 = 0x1122_3344;
        assert_eq!(
            crate::host::memory::read_u64(std::process::id(), &v as *const u64 as u64),
            Some(v),
            "reading our own memory"
        );
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        assert_eq!(crate::host::memory::read_u64(parent, 4096 * 16), None);
        assert_eq!(std::thread::spawn(|| 7).join().unwrap(), 7, "threads");
    }
}
