//! load / call / unload: the steps, on top of `RemoteThread`.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::MetadataExt;

use object::elf;
use object::read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _};
use object::Endianness;

use crate::maps::{read_maps, Mapping};
use crate::symbols::{file_groups, resolve, DlApi};
use crate::thread::RemoteThread;
use crate::{preflight, seccomp, Error, Library, Loaded, Options};

const MFD_CLOEXEC: u64 = 1;
const RTLD_NOW_LOCAL: u64 = (libc::RTLD_NOW | libc::RTLD_LOCAL) as u64;
/// memfd_create names are at most 249 bytes.
const MAX_NAME: usize = 249;
/// Scratch data layout of `load`: the name at 0, the dlopen path at 256.
const PATH_OFFSET: u64 = 256;

/// The bytes must be an x86-64 ELF shared object whose first segment is at
/// address 0 (so that its load bias is the address of its first mapping).
fn check_library(lib: &Library) -> Result<(), Error> {
    if lib.name.len() > MAX_NAME || lib.name.contains('\0') {
        return Err(Error::BadLibrary(format!(
            "name must be at most {MAX_NAME} bytes without NUL: {:?}",
            lib.name
        )));
    }
    let file = ElfFile64::<Endianness>::parse(lib.bytes)
        .map_err(|e| Error::BadLibrary(format!("not a 64-bit ELF file: {e}")))?;
    let endian = file.endian();
    let header = file.elf_header();
    if header.e_machine(endian) != elf::EM_X86_64 {
        return Err(Error::BadLibrary("not built for x86-64".into()));
    }
    if header.e_type(endian) != elf::ET_DYN {
        return Err(Error::BadLibrary("not a shared object (ET_DYN)".into()));
    }
    let first = file
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| ph.p_vaddr(endian))
        .min();
    match first {
        Some(v) if v < 4096 => Ok(()),
        Some(v) => Err(Error::BadLibrary(format!(
            "first segment at {v:#x}, not 0 (prelinked?)"
        ))),
        None => Err(Error::BadLibrary("no loadable segment".into())),
    }
}

/// (major, minor) of a dev_t, as /proc/PID/maps prints them.
fn dev_pair(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// Seizes a thread of `pid` and checks its seccomp filter; nothing changed yet.
fn attach(pid: i32, opts: &Options) -> Result<(RemoteThread, DlApi), Error> {
    let dl = preflight::check(pid)?;
    let t = RemoteThread::seize(pid, opts)?;
    seccomp::check_thread(pid, t.tid, &opts.seccomp_syscalls)?;
    Ok((t, dl))
}

/// Runs `body` in a seized thread, then releases the thread (also on error).
fn with_thread<T>(
    pid: i32,
    opts: &Options,
    body: impl FnOnce(&mut RemoteThread, &DlApi) -> Result<T, Error>,
) -> Result<T, Error> {
    let (mut t, dl) = attach(pid, opts)?;
    let result = body(&mut t, &dl);
    let released = t.release();
    let value = result?;
    released?;
    Ok(value)
}

pub(crate) fn load(pid: i32, lib: &Library, opts: &Options) -> Result<Loaded, Error> {
    check_library(lib)?;
    with_thread(pid, opts, |t, dl| {
        t.prepare(PATH_OFFSET as usize + 64)?;
        let mut name = lib.name.as_bytes().to_vec();
        name.push(0);
        let name_addr = t.put(0, &name)?;
        let fd = t.syscall_ok(
            "memfd_create",
            libc::SYS_memfd_create,
            [name_addr, MFD_CLOEXEC, 0, 0, 0, 0],
        )?;
        let result =
            fill_memfd(pid, fd, lib.bytes).and_then(|id| open_unique(t, dl, fd, id, lib, opts));
        // The mapping keeps the file alive; the descriptor is not needed.
        let closed = t.syscall_ok("close", libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
        let loaded = result?;
        closed?;
        Ok(loaded)
    })
}

/// Writes the library into the target's memfd from our side; returns the
/// file's (device, inode) to recognise its mappings.
fn fill_memfd(pid: i32, fd: u64, bytes: &[u8]) -> Result<((u32, u32), u64), Error> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let mut f = OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| Error::os(pid, format!("opening {path}"), e))?;
    f.write_all(bytes)
        .map_err(|e| Error::os(pid, format!("writing {path}"), e))?;
    let meta = f
        .metadata()
        .map_err(|e| Error::os(pid, format!("fstat of {path}"), e))?;
    Ok((dev_pair(meta.dev()), meta.ino()))
}

/// dlopen("/proc/self/fd/N"). glibc hands back an already loaded library when
/// the path string matches one loaded before (an earlier injection with the
/// same descriptor number): we recognise our file by its inode in the maps,
/// undo such a dlopen, and try an equivalent path spelled differently.
fn open_unique(
    t: &mut RemoteThread,
    dl: &DlApi,
    fd: u64,
    id: ((u32, u32), u64),
    lib: &Library,
    opts: &Options,
) -> Result<Loaded, Error> {
    let pid = t.pid;
    for attempt in 0..8 {
        let path = format!("/proc/self/{}fd/{fd}", "./".repeat(attempt));
        let mut c_path = path.clone().into_bytes();
        c_path.push(0);
        let path_addr = t.put(PATH_OFFSET, &c_path)?;
        let handle = t.call(
            "dlopen",
            dl.dlopen,
            &[path_addr, RTLD_NOW_LOCAL],
            opts.call_timeout,
        )?;
        if handle == 0 {
            let message = t.call_for_string("dlerror", dl.dlerror, opts.call_timeout)?;
            return Err(Error::DlopenFailed { pid, path, message });
        }
        let maps = read_maps(pid).map_err(|e| t.os_err("reading maps", e))?;
        let ours: Vec<&Mapping> = maps.iter().filter(|m| (m.dev, m.inode) == id).collect();
        let Some(first) = ours.iter().min_by_key(|m| (m.offset, m.start)) else {
            t.call("dlclose", dl.dlclose, &[handle], opts.call_timeout)?;
            continue;
        };
        let base = first.start;
        let l_addr = t
            .mem
            .read_u64(handle)
            .map_err(|e| t.os_err("reading the link map", e))?;
        if l_addr != base {
            t.call("dlclose", dl.dlclose, &[handle], opts.call_timeout)?;
            return Err(Error::Unexpected {
                pid,
                detail: format!(
                    "dlopen handle {handle:#x} has load address {l_addr:#x}, maps say {base:#x}"
                ),
            });
        }
        return Ok(Loaded {
            handle,
            base,
            path,
            name: lib.name.to_string(),
        });
    }
    Err(Error::DlopenFailed {
        pid,
        path: format!("/proc/self/fd/{fd}"),
        message: "every spelling of the path is already in use by a loaded library".into(),
    })
}

/// `loaded` still describes a library of ours: a memfd mapping at `base`
/// and a link map at `handle` whose load address is `base`.
fn check_loaded(t: &RemoteThread, loaded: &Loaded) -> Result<(), Error> {
    let not_loaded = || Error::NotLoaded {
        pid: t.pid,
        handle: loaded.handle,
        base: loaded.base,
    };
    let maps = read_maps(t.pid).map_err(|e| t.os_err("reading maps", e))?;
    let mapped = maps
        .iter()
        .any(|m| m.start == loaded.base && m.offset == 0 && m.path.starts_with("/memfd:"));
    if !mapped || t.mem.read_u64(loaded.handle).ok() != Some(loaded.base) {
        return Err(not_loaded());
    }
    Ok(())
}

pub(crate) fn call(
    pid: i32,
    loaded: &Loaded,
    symbol: &str,
    arg: &[u8],
    opts: &Options,
) -> Result<i64, Error> {
    if symbol.contains('\0') {
        return Err(Error::SymbolNotFound {
            pid,
            symbol: symbol.into(),
            message: "the name contains a NUL byte".into(),
        });
    }
    with_thread(pid, opts, |t, dl| {
        check_loaded(t, loaded)?;
        let arg_offset = (symbol.len() as u64 + 1).div_ceil(16) * 16;
        t.prepare(arg_offset as usize + arg.len())?;
        let mut name = symbol.as_bytes().to_vec();
        name.push(0);
        let name_addr = t.put(0, &name)?;
        let arg_addr = if arg.is_empty() {
            0
        } else {
            t.put(arg_offset, arg)?
        };
        let func = t.call(
            "dlsym",
            dl.dlsym,
            &[loaded.handle, name_addr],
            opts.call_timeout,
        )?;
        if func == 0 {
            let message = t.call_for_string("dlerror", dl.dlerror, opts.call_timeout)?;
            return Err(Error::SymbolNotFound {
                pid,
                symbol: symbol.into(),
                message,
            });
        }
        Ok(t.call(symbol, func, &[arg_addr], opts.call_timeout)? as i64)
    })
}

pub(crate) fn unload(pid: i32, loaded: &Loaded, opts: &Options) -> Result<(), Error> {
    with_thread(pid, opts, |t, dl| {
        check_loaded(t, loaded)?;
        t.prepare(0)?;
        let ret = t.call("dlclose", dl.dlclose, &[loaded.handle], opts.call_timeout)? as i32;
        if ret != 0 {
            let message = t.call_for_string("dlerror", dl.dlerror, opts.call_timeout)?;
            return Err(Error::DlcloseFailed { pid, message });
        }
        Ok(())
    })
}

/// Address of `symbol` (from the library's .dynsym) in the target, without
/// stopping it.
pub(crate) fn symbol_address(pid: i32, loaded: &Loaded, symbol: &str) -> Result<u64, Error> {
    let maps = read_maps(pid).map_err(|_| Error::NoSuchProcess { pid })?;
    let not_loaded = Error::NotLoaded {
        pid,
        handle: loaded.handle,
        base: loaded.base,
    };
    let group = file_groups(&maps)
        .into_iter()
        .find(|g| {
            g.iter()
                .any(|m| m.start == loaded.base && m.offset == 0 && m.path.starts_with("/memfd:"))
        })
        .ok_or(not_loaded)?;
    let found = resolve(pid, &group, &[symbol])
        .map_err(|e| Error::os(pid, "reading the loaded library", std::io::Error::other(e)))?;
    found
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| Error::SymbolNotFound {
            pid,
            symbol: symbol.into(),
            message: "not in the library's dynamic symbol table".into(),
        })
}
