//! Attaching through `BPF_LINK_TYPE_UPROBE_MULTI` (Linux 6.6+): one link
//! carries every symbol of a library, with a cookie each.
//!
//! Why: a uprobe attached as a perf event is removed one at a time, each
//! removal waiting ~0.1 s for an RCU grace period under a global lock, so
//! 160 probes take 17 s to detach. A multi link is created and removed with
//! one wait. aya 0.14 cannot load a program for this attach type, so the
//! programs are relocated with aya-obj against the maps aya created and
//! loaded here with `expected_attach_type = BPF_TRACE_UPROBE_MULTI`.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{anyhow, Context};
use aya::maps::Map;
use aya::Ebpf;
use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type, BPF_F_UPROBE_MULTI_RETURN,
};

fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, zero-initialised bpf_attr of the full size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a successful BPF_PROG_LOAD / BPF_LINK_CREATE returns a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

fn map_fd(map: &Map) -> Option<i32> {
    let data = match map {
        Map::RingBuf(d)
        | Map::LruHashMap(d)
        | Map::HashMap(d)
        | Map::PerCpuArray(d)
        | Map::Array(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd().as_raw_fd())
}

/// The entry and return programs, loaded for multi-uprobe links.
pub(crate) struct MultiPrograms {
    entry: OwnedFd,
    ret: OwnedFd,
}

/// One multi-uprobe link; dropping it removes all its uprobes.
#[derive(Debug)]
pub(crate) struct MultiLink {
    _fd: OwnedFd,
    pub probes: usize,
}

fn load_one(insns: &[bpf_insn], name: &str, license: &CString) -> anyhow::Result<OwnedFd> {
    load_as(
        insns,
        name,
        license,
        bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32,
    )
}

/// `BPF_TRACE_UPROBE_SESSION` (Linux 6.13+), past what aya-obj's bindings
/// name.
const BPF_TRACE_UPROBE_SESSION: u32 = 57;

fn load_as(
    insns: &[bpf_insn],
    name: &str,
    license: &CString,
    attach_type: u32,
) -> anyhow::Result<OwnedFd> {
    let mut log = vec![0u8; 1 << 20];
    // SAFETY: bpf_attr is plain data; all-zero is its default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the prog-load member of the union.
    let u = unsafe { &mut attr.__bindgen_anon_3 };
    u.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
    u.expected_attach_type = attach_type;
    u.insn_cnt = insns.len() as u32;
    u.insns = insns.as_ptr() as u64;
    u.license = license.as_ptr() as u64;
    for (d, s) in u.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    match sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        Err(e) => {
            // Load again with the verifier log for the error message.
            // SAFETY: as above.
            let u = unsafe { &mut attr.__bindgen_anon_3 };
            u.log_level = 1;
            u.log_size = log.len() as u32;
            u.log_buf = log.as_mut_ptr() as u64;
            let _ = sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|b| *b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            Err(anyhow!(
                "loading {name} for multi-uprobe links: {e} ({})",
                tail.join(" / ")
            ))
        }
    }
}

impl MultiPrograms {
    /// Relocates `call_entry`/`call_return` against `ebpf`'s maps and loads them.
    pub(crate) fn load(ebpf: &Ebpf, object: &[u8]) -> anyhow::Result<Self> {
        Self::load_named(ebpf, object, "call_entry", "call_return")
    }

    /// Same, for another entry/return pair of the object.
    pub(crate) fn load_named(
        ebpf: &Ebpf,
        object: &[u8],
        entry: &str,
        ret: &str,
    ) -> anyhow::Result<Self> {
        let obj = relocated(ebpf, object)?;
        let load = |name: &str| -> anyhow::Result<OwnedFd> {
            load_one(&instructions(&obj, name)?, name, &obj.license)
        };
        Ok(Self {
            entry: load(entry)?,
            ret: load(ret)?,
        })
    }

    /// Attaches the entry (or return) program at `offsets` of `path`, each
    /// with its cookie; `pid` limits it to one process.
    pub(crate) fn attach(
        &self,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: Option<u32>,
        ret: bool,
    ) -> std::io::Result<MultiLink> {
        let prog = if ret { &self.ret } else { &self.entry };
        let flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
        let attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
        link_uprobes(prog, attach_type, flags, path, offsets, cookies, pid)
    }
}

/// The program of calls counted in the kernel where the kernel has uprobe
/// sessions (`counted_session`): one link runs it at each call's entry and
/// return.
pub(crate) struct SessionProgram {
    prog: OwnedFd,
}

impl SessionProgram {
    /// Relocates and loads `counted_session`, its kfunc placeholders made
    /// calls of this kernel's `bpf_session_cookie` and
    /// `bpf_session_is_return`; an error where the kernel has no sessions.
    pub(crate) fn load(ebpf: &Ebpf, object: &[u8]) -> anyhow::Result<Self> {
        let obj = relocated(ebpf, object)?;
        let mut insns = instructions(&obj, "counted_session")?;
        let btf = aya_obj::btf::Btf::from_sys_fs().context("reading the kernel's BTF")?;
        let id = |name: &str| {
            btf.id_by_type_name_kind(name, aya_obj::btf::BtfKind::Func)
                .with_context(|| format!("no kfunc {name} in this kernel"))
        };
        let cookie = id("bpf_session_cookie")?;
        let is_return = id("bpf_session_is_return")?;
        let mut patched = [0u32; 2];
        for insn in &mut insns {
            // BPF_JMP | BPF_CALL with a helper number (src_reg 0).
            if insn.code != 0x85 || insn.src_reg() != 0 {
                continue;
            }
            let (target, which) = match insn.imm {
                tracer_common::KFUNC_SESSION_COOKIE => (cookie, 0),
                tracer_common::KFUNC_SESSION_IS_RETURN => (is_return, 1),
                _ => continue,
            };
            insn.set_src_reg(2); // BPF_PSEUDO_KFUNC_CALL
            insn.off = 0; // the kfunc is vmlinux's
            insn.imm = target as i32;
            patched[which] += 1;
        }
        if patched.contains(&0) {
            anyhow::bail!("counted_session: kfunc placeholders missing ({patched:?} found)");
        }
        let prog = load_as(
            &insns,
            "counted_session",
            &obj.license,
            BPF_TRACE_UPROBE_SESSION,
        )?;
        Ok(Self { prog })
    }

    /// One session link at `offsets` of `path`, each with its cookie;
    /// `pid` limits it to one process.
    pub(crate) fn attach(
        &self,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: Option<u32>,
    ) -> std::io::Result<MultiLink> {
        link_uprobes(
            &self.prog,
            BPF_TRACE_UPROBE_SESSION,
            0,
            path,
            offsets,
            cookies,
            pid,
        )
    }
}

/// `object` with its maps relocated against those aya created in `ebpf`.
fn relocated(ebpf: &Ebpf, object: &[u8]) -> anyhow::Result<aya_obj::Object> {
    let mut obj = aya_obj::Object::parse(object).context("parsing the eBPF object")?;
    let objmaps = obj.maps.clone();
    let mut maps = Vec::new();
    for (name, m) in ebpf.maps() {
        let fd = map_fd(m).ok_or_else(|| anyhow!("map {name}: unexpected type"))?;
        let om = objmaps
            .get(name)
            .ok_or_else(|| anyhow!("map {name} not in the object"))?;
        maps.push((name, fd, om));
    }
    let text: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(maps.into_iter(), &text)
        .context("relocating maps")?;
    obj.relocate_calls(&text).context("relocating calls")?;
    Ok(obj)
}

/// The instructions of program `name` of a relocated object.
fn instructions(obj: &aya_obj::Object, name: &str) -> anyhow::Result<Vec<bpf_insn>> {
    let prog = obj
        .programs
        .get(name)
        .ok_or_else(|| anyhow!("program {name} missing"))?;
    let func = obj
        .functions
        .get(&prog.function_key())
        .ok_or_else(|| anyhow!("function of {name} missing"))?;
    Ok(func.instructions.clone())
}

/// A link of `prog` at `offsets` of `path`, one cookie each.
fn link_uprobes(
    prog: &OwnedFd,
    attach_type: u32,
    flags: u32,
    path: &Path,
    offsets: &[u64],
    cookies: &[u64],
    pid: Option<u32>,
) -> std::io::Result<MultiLink> {
    assert_eq!(offsets.len(), cookies.len());
    let cpath = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: bpf_attr is plain data; all-zero is its default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the link-create member of the union.
    let lc = unsafe { &mut attr.link_create };
    lc.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
    lc.attach_type = attach_type;
    // SAFETY: writing the uprobe_multi member of the inner union.
    let um = unsafe { &mut lc.__bindgen_anon_3.uprobe_multi };
    um.path = cpath.as_ptr() as u64;
    um.offsets = offsets.as_ptr() as u64;
    um.cookies = cookies.as_ptr() as u64;
    um.cnt = offsets.len() as u32;
    um.flags = flags;
    um.pid = pid.unwrap_or(0);
    let fd = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?;
    Ok(MultiLink {
        _fd: fd,
        probes: offsets.len(),
    })
}
