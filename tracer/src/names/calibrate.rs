//! Finding, per libcuda build, where a CUfunction keeps its kernel's name.
//!
//! A short-lived helper process (gputrace itself, hidden subcommand
//! `__calibrate`) loads that libcuda, creates a context, loads a tiny PTX
//! module with two kernels, asks cuFuncGetName for the first one's name and
//! searches the handle's memory for a pointer to that string, directly or
//! through one more pointer. The layout found must also name the second
//! kernel. Nothing is hard-coded: a driver that keeps the name elsewhere is
//! found, and one where nothing matches turns the feature off for that file.
//!
//! The helper loads exactly the file it is handed (`/proc/self/fd/N` of a
//! descriptor the parent opened and checked): as root for a library
//! `probes::trust` trusts, else only after it has entered `sandbox`. It
//! runs confined (`host::confine`: a PID namespace of its own, killed with
//! all it started at its deadline), on a thread beside the tracing
//! (`names::background`). Its answer is read bounded and against the
//! deadline, and checked like any untrusted input.

use std::ffi::{c_char, c_void, CStr, CString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::graphs::layout::ExecLayout;
use crate::host::confine;
use crate::host::confine::Ended;
use crate::host::confine::HelperCommand;
use crate::host::memory::read_cstr;
use crate::host::memory::read_u64;

/// Offsets to follow from the handle to the name: `[8]` is `*(h + 8)`,
/// `[16, 8]` is `*(*(h + 16) + 8)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Layout(pub Vec<u32>);

impl Layout {
    /// The name of `handle` in process `pid`, if the layout leads to a string.
    pub(crate) fn read(&self, pid: u32, handle: u64) -> Option<Vec<u8>> {
        let mut p = handle;
        for off in &self.0 {
            p = read_u64(pid, p.checked_add(*off as u64)?)?;
            if p < 4096 {
                return None;
            }
        }
        read_cstr(pid, p, 64 << 10)
    }

    /// What calibration can find: one offset up to 512, or two up to 256,
    /// each a multiple of 8. Anything else (from a hostile helper, a
    /// tampered cache) is refused.
    pub(crate) fn is_plausible(&self) -> bool {
        let max = match self.0.len() {
            1 => 512,
            2 => 256,
            _ => return false,
        };
        self.0.iter().all(|o| *o <= max && o % 8 == 0)
    }

    #[cfg(test)]
    pub(crate) fn describe(&self) -> String {
        let path: Vec<String> = self.0.iter().map(|o| format!("+{o}")).collect();
        format!("name pointer at handle{}", path.join(" then "))
    }
}

const PTX: &str = "\
.version 6.0
.target sm_50
.address_size 64

.visible .entry gputrace_calibrate_alpha()
{
\tret;
}

.visible .entry gputrace_calibrate_beta()
{
\tret;
}
";
const KERNELS: [&str; 2] = ["gputrace_calibrate_alpha", "gputrace_calibrate_beta"];

/// Every layout (up to two pointers deep) that leads from `handle` to `name`.
pub(crate) fn find_layouts(pid: u32, handle: u64, name: &[u8]) -> Vec<Layout> {
    let mut found = Vec::new();
    let matches = |p: u64| p >= 4096 && read_cstr(pid, p, name.len() + 1).as_deref() == Some(name);
    for off in (0..=512u32).step_by(8) {
        if let Some(p) = handle
            .checked_add(u64::from(off))
            .and_then(|a| read_u64(pid, a))
        {
            if matches(p) {
                found.push(Layout(vec![off]));
            }
        }
    }
    for off1 in (0..=256u32).step_by(8) {
        let Some(q) = handle
            .checked_add(u64::from(off1))
            .and_then(|a| read_u64(pid, a))
        else {
            continue;
        };
        if q < 4096 {
            continue;
        }
        for off2 in (0..=256u32).step_by(8) {
            // (Any word may look like a pointer: near the top of the
            // address space it must not overflow.)
            if let Some(p) = q
                .checked_add(u64::from(off2))
                .and_then(|a| read_u64(pid, a))
            {
                if matches(p) {
                    found.push(Layout(vec![off1, off2]));
                }
            }
        }
    }
    found
}

type CuInit = unsafe extern "C" fn(u32) -> i32;
type CuDeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
type CuPrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, i32) -> i32;
type CuCtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> i32;
type CuModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> i32;
type CuModuleGetFunction =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> i32;
type CuFuncGetName = unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> i32;

/// What one calibration found: the name layout, and where executable
/// graphs keep their kernel nodes (or why that is not known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub names: Layout,
    pub exec: Result<ExecLayout, String>,
}

/// How long the executable-graph search may take in the helper (it takes
/// about a second on the real driver; the helper's own timeout, 20 s in the
/// sandbox, covers the names calibration too).
const EXEC_SEARCH: Duration = Duration::from_secs(10);

/// In a calibration helper: the function `$name` of `$lib` (a library it
/// loaded) as a `$ty`, which must be its C signature; returns an error
/// from the enclosing function where the library exports no such symbol.
macro_rules! helper_sym {
    ($lib:expr, $name:literal, $ty:ty) => {{
        // SAFETY: a symbol lookup in the library just opened.
        let p = unsafe { libc::dlsym($lib, concat!($name, "\0").as_ptr().cast()) };
        if p.is_null() {
            return Err(format!("it exports no {}", $name));
        }
        // SAFETY: the caller names the symbol's C signature (its header's).
        unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p) }
    }};
}
pub(crate) use helper_sym;

/// Loads the library at `path` into this (helper) process.
pub(crate) fn dlopen_here(path: &Path) -> Result<*mut c_void, String> {
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: loading a shared library by path; its initialisers run here,
    // in this helper process, which exists for that.
    let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        // SAFETY: dlerror returns a thread-local message or NULL.
        let msg = unsafe { libc::dlerror() };
        let msg = if msg.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: a non-NULL dlerror message is a NUL-terminated string.
            unsafe { CStr::from_ptr(msg) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(format!("cannot load it: {msg}"));
    }
    Ok(lib)
}

/// In the helper, with `--sandbox`: gives up every privilege before the
/// library is loaded; what the sandbox applied.
pub(crate) fn enter_sandbox(lib: &Path) -> Result<Vec<String>, String> {
    crate::host::sandbox::enter(held_fd(lib))
        .map_err(|e| format!("cannot enter the sandbox ({e}): the library was not loaded"))
}

/// Runs in the helper process: loads `libcuda` here and finds the layouts.
/// `names_found` is told the name layout before the executable-graph
/// search starts (the helper says it at once: a driver that crashes in
/// the graph search then costs the graphs only).
pub(crate) fn calibrate_here(
    libcuda: &Path,
    names_found: &mut dyn FnMut(&Layout),
) -> Result<Found, String> {
    let lib = dlopen_here(libcuda)?;
    macro_rules! sym {
        ($name:literal, $ty:ty) => {
            helper_sym!(lib, $name, $ty)
        };
    }
    let cu_init = sym!("cuInit", CuInit);
    let device_get = sym!("cuDeviceGet", CuDeviceGet);
    let retain = sym!("cuDevicePrimaryCtxRetain", CuPrimaryCtxRetain);
    let set_current = sym!("cuCtxSetCurrent", CuCtxSetCurrent);
    let load = sym!("cuModuleLoadData", CuModuleLoadData);
    let get_function = sym!("cuModuleGetFunction", CuModuleGetFunction);
    let get_name = sym!("cuFuncGetName", CuFuncGetName);
    let check = |what: &str, r: i32| {
        if r == 0 {
            Ok(())
        } else {
            Err(format!("{what} returned CUresult {r}"))
        }
    };
    let ptx = CString::new(PTX).expect("no NUL");
    let me = std::process::id();
    // SAFETY: each call gets valid out-pointers and the arguments cuda.h describes.
    unsafe {
        check("cuInit (is there a GPU?)", cu_init(0))?;
        let mut dev = 0;
        check("cuDeviceGet", device_get(&mut dev, 0))?;
        let mut ctx = std::ptr::null_mut();
        check("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
        check("cuCtxSetCurrent", set_current(ctx))?;
        let mut module = std::ptr::null_mut();
        check("cuModuleLoadData", load(&mut module, ptx.as_ptr().cast()))?;
        let mut handles = Vec::new();
        for k in KERNELS {
            let mut f = std::ptr::null_mut();
            let kname = CString::new(k).expect("no NUL");
            check(
                "cuModuleGetFunction",
                get_function(&mut f, module, kname.as_ptr()),
            )?;
            let mut name: *const c_char = std::ptr::null();
            check("cuFuncGetName", get_name(&mut name, f))?;
            let got = read_cstr(me, name as u64, 4096)
                .ok_or("cuFuncGetName gave an unreadable pointer")?;
            if got != k.as_bytes() {
                return Err(format!(
                    "cuFuncGetName said {:?} for {k}",
                    String::from_utf8_lossy(&got)
                ));
            }
            handles.push(f as u64);
        }
        let candidates = find_layouts(me, handles[0], KERNELS[0].as_bytes());
        let names = candidates
            .into_iter()
            .find(|l| l.read(me, handles[1]).as_deref() == Some(KERNELS[1].as_bytes()))
            .ok_or_else(|| "no pointer to the kernel name in the first 512 bytes of the CUfunction, directly or one pointer deep".to_string())?;
        names_found(&names);
        let exec = crate::graphs::layout::known::calibrate(lib, ctx, EXEC_SEARCH);
        Ok(Found { names, exec })
    }
}

/// The answer the helper prints on stdout (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
struct HelperAnswer {
    layout: Option<Layout>,
    error: Option<String>,
    #[serde(default)]
    exec_layout: Option<ExecLayout>,
    #[serde(default)]
    exec_error: Option<String>,
    /// What the sandbox applied (`--sandbox` only).
    #[serde(default)]
    sandbox: Option<Vec<String>>,
}

/// The descriptor number of a `/proc/self/fd/N` path.
fn held_fd(path: &Path) -> Option<i32> {
    path.strip_prefix("/proc/self/fd")
        .ok()?
        .to_str()?
        .parse()
        .ok()
}

/// The hidden `__calibrate PATH [--sandbox]` subcommand.
pub(crate) fn helper_main(libcuda: &Path, sandbox: bool) -> std::process::ExitCode {
    let mut answer = HelperAnswer {
        layout: None,
        error: None,
        sandbox: None,
        exec_layout: None,
        exec_error: None,
    };
    let entered = if sandbox {
        match enter_sandbox(libcuda) {
            Ok(applied) => {
                answer.sandbox = Some(applied);
                true
            }
            Err(e) => {
                answer.error = Some(e);
                false
            }
        }
    } else {
        true
    };
    if entered {
        let sandbox = answer.sandbox.clone();
        let mut say_names = |l: &Layout| {
            let partial = HelperAnswer {
                layout: Some(l.clone()),
                error: None,
                sandbox: sandbox.clone(),
                exec_layout: None,
                exec_error: Some(
                    "the calibration helper ended during the executable-graph search".into(),
                ),
            };
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string(&partial).expect("serialisable")
            );
            let _ = out.flush();
        };
        match calibrate_here(libcuda, &mut say_names) {
            Ok(found) => {
                answer.layout = Some(found.names);
                match found.exec {
                    Ok(l) => answer.exec_layout = Some(l),
                    Err(e) => answer.exec_error = Some(e),
                }
            }
            Err(e) => answer.error = Some(e),
        }
    }
    println!("{}", serde_json::to_string(&answer).expect("serialisable"));
    std::process::ExitCode::SUCCESS
}

/// How the helper runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Helper {
    /// As we are (root): for trusted libraries only.
    Privileged,
    /// In the sandbox: for any other library.
    Sandboxed,
}

/// Most of a helper's answer read (a layout is a few bytes).
const MAX_ANSWER: usize = 16 << 10;

/// A message from the helper made safe to print: printable ASCII, bounded.
pub(crate) fn sanitize(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(300)
        .collect();
    if s.chars().count() > 300 {
        clean + "..."
    } else {
        clean
    }
}

/// What the helper answered: one line, or two where it said the names
/// before the executable-graph search (which may crash in a driver) and
/// then the whole answer with the same names. Anything else (more lines,
/// other text, names that changed) is no answer: the helper ran a library
/// gputrace does not trust.
fn one_answer(text: &str) -> Option<HelperAnswer> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let parsed: Vec<HelperAnswer> = lines
        .iter()
        .map(|l| serde_json::from_str(l).ok())
        .collect::<Option<_>>()?;
    let mut parsed = parsed.into_iter();
    match (parsed.next(), parsed.next(), parsed.next()) {
        (Some(one), None, None) => Some(one),
        (Some(names), Some(whole), None)
            if names.exec_layout.is_none()
                && names.layout.is_some()
                && names.layout == whole.layout
                && whole.error.is_none() =>
        {
            Some(whole)
        }
        _ => None,
    }
}

/// Runs `gputrace SUBCOMMAND /proc/self/fd/N [--sandbox]` on the library
/// open in `lib` (at most `timeout`; `cancel` ends it early), confined:
/// what it printed. The helper and everything its library starts are gone
/// when this returns (`host::confine`).
pub(crate) fn run_confined(
    subcommand: &str,
    lib: &File,
    how: Helper,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<String, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find gputrace's own binary: {e}"))?;
    let fd = lib.as_raw_fd();
    let mut cmd = HelperCommand {
        exe: &exe,
        args: vec![subcommand.into(), format!("/proc/self/fd/{fd}").into()],
        env: None,
        // The library's descriptor (close-on-exec, as every descriptor of
        // ours) is handed to the helper, and only it.
        keep_fd: Some(fd),
        root_dir: false,
    };
    if how == Helper::Sandboxed {
        cmd.args.push("--sandbox".into());
        cmd.env = Some(vec!["CUDA_CACHE_DISABLE=1".into()]);
        cmd.root_dir = true;
    }
    let ran = confine::run(&cmd, timeout, MAX_ANSWER, cancel)
        .map_err(|e| format!("cannot start the calibration helper: {e}"))?;
    match ran.ended {
        Ended::Exited(_) => {}
        Ended::TimedOut => {
            return Err(format!(
                "the calibration helper did not finish within {timeout:?} (it was killed, with every process it started)"
            ))
        }
        Ended::Cancelled => return Err("gputrace ended before the calibration helper".into()),
        Ended::TooMuch => {
            return Err(format!(
                "the calibration helper printed more than {MAX_ANSWER} bytes"
            ))
        }
    }
    Ok(String::from_utf8_lossy(&ran.stdout).into_owned())
}

/// Runs the helper on the library open in `lib` (at most `timeout`;
/// `cancel` ends it early). The helper and everything its library starts
/// are gone when this returns (`host::confine`).
pub(crate) fn run_helper(
    lib: &File,
    how: Helper,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<Found, String> {
    let text = run_confined("__calibrate", lib, how, timeout, cancel)?;
    let answer = one_answer(&text).ok_or_else(|| {
        format!(
            "the calibration helper crashed or printed {:?}",
            sanitize(text.trim())
        )
    })?;
    let exec = match (answer.exec_layout, answer.exec_error) {
        // Checked like any input from outside: the helper ran a library.
        (Some(l), _) if l.is_plausible() => Ok(l),
        (Some(l), _) => Err(format!(
            "an implausible layout: {}",
            sanitize(&l.describe())
        )),
        (None, Some(e)) => Err(sanitize(&e)),
        (None, None) => Err("the calibration helper said nothing of graphs".into()),
    };
    match (answer.layout, answer.error) {
        (Some(names), _) if names.is_plausible() => Ok(Found { names, exec }),
        (Some(l), _) => Err(format!(
            "the calibration helper gave an implausible layout ({} offsets)",
            l.0.len()
        )),
        (None, Some(e)) => Err(sanitize(&e)),
        (None, None) => Err("the calibration helper gave no answer".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One answer, or the names then the whole answer with the same names;
    /// never a pick among several.
    #[test]
    fn the_helper_gives_one_answer() {
        let names = r#"{"layout":[8],"error":null,"exec_error":"ended during the search"}"#;
        let whole = r#"{"layout":[8],"error":null,"exec_layout":null,"exec_error":"none found"}"#;
        let other = r#"{"layout":[16],"error":null,"exec_layout":null,"exec_error":"none found"}"#;
        let exec_error = |t: &str| one_answer(t).map(|a| a.exec_error);
        assert_eq!(
            exec_error(names),
            Some(Some("ended during the search".into()))
        );
        assert_eq!(
            exec_error(&format!("{names}\n{whole}\n")),
            Some(Some("none found".into()))
        );
        assert!(
            one_answer(&format!("{names}\n{other}")).is_none(),
            "names changed"
        );
        assert!(one_answer(&format!("{names}\n{whole}\n{whole}")).is_none());
        assert!(one_answer(&format!("noise\n{whole}")).is_none());
        assert!(one_answer("").is_none());
    }

    #[repr(C)]
    struct FakeModule {
        pad: [u64; 3],
        name: *const u8,
    }

    #[repr(C)]
    struct FakeFunc {
        magic: u64,
        other: [u64; 4],
        module: *const FakeModule,
        name: *const u8,
    }

    #[test]
    fn finds_direct_and_indirect_layouts() {
        let me = std::process::id();
        let a = b"kernel_alpha\0";
        let b = b"kernel_beta\0";
        let ma = Box::new(FakeModule {
            pad: [1, 2, 3],
            name: a.as_ptr(),
        });
        let mb = Box::new(FakeModule {
            pad: [1, 2, 3],
            name: b.as_ptr(),
        });
        let fa = Box::new(FakeFunc {
            magic: 7,
            other: [0; 4],
            module: &*ma,
            name: a.as_ptr(),
        });
        let fb = Box::new(FakeFunc {
            magic: 7,
            other: [0; 4],
            module: &*mb,
            name: b.as_ptr(),
        });
        let found = find_layouts(me, &*fa as *const _ as u64, b"kernel_alpha");
        // Memory past the struct may point to the name by chance: as in
        // calibration, keep the layouts that also name the second kernel.
        let verified: Vec<Layout> = found
            .into_iter()
            .filter(|l| l.read(me, &*fb as *const _ as u64).as_deref() == Some(&b"kernel_beta"[..]))
            .collect();
        assert_eq!(verified[0], Layout(vec![48]));
        assert!(verified.contains(&Layout(vec![40, 24])));
        assert_eq!(Layout(vec![48]).describe(), "name pointer at handle+48");
    }

    #[test]
    fn plausible_layouts() {
        assert!(Layout(vec![8]).is_plausible());
        assert!(Layout(vec![256, 8]).is_plausible());
        assert!(!Layout(vec![]).is_plausible());
        assert!(!Layout(vec![12]).is_plausible());
        assert!(!Layout(vec![520]).is_plausible());
        assert!(!Layout(vec![8, 264]).is_plausible());
        assert!(!Layout(vec![8, 8, 8]).is_plausible());
        assert_eq!(sanitize("a\x1b[2Jb"), "a?[2Jb");
        assert!(sanitize(&"x".repeat(1000)).len() < 310);
    }
}
