//! The one error type of the crate: every refusal and failure is one variant
//! with a one-line message that names the process and says what happened.

use std::io;

/// Why an injection, a call or an unload did not happen (or did not finish).
///
/// The refusals (`WrongArchitecture`, `PtraceDenied`, `AlreadyTraced`,
/// `SeccompDenied`, `SeccompUnchecked`, `NoDlopen`, `BadLibrary`,
/// `NotLoaded`) are all detected before anything in the target is changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // the fields are named for what they hold
pub enum Error {
    /// No such process, a zombie, or a kernel thread.
    #[error("process {pid} does not exist (or is a zombie or a kernel thread)")]
    NoSuchProcess { pid: i32 },

    /// The target is not a 64-bit x86-64 program (e.g. a 32-bit i386 or x32 one).
    #[error("process {pid} is not a 64-bit x86-64 program: {detail}")]
    WrongArchitecture { pid: i32, detail: String },

    /// ptrace is not permitted; `reason` says why where it can be told.
    #[error("ptrace of process {pid} is not permitted: {reason}")]
    PtraceDenied { pid: i32, reason: String },

    /// Another tracer (a debugger, strace, another injector) holds the target.
    #[error("process {pid} is already traced by process {tracer}")]
    AlreadyTraced { pid: i32, tracer: i32 },

    /// The target's seccomp filter would not allow a system call the
    /// injection or the loaded code makes.
    #[error("seccomp filter of process {pid} (thread {tid}) does not allow {syscall}: {action}")]
    SeccompDenied {
        pid: i32,
        tid: i32,
        syscall: String,
        action: String,
    },

    /// The target has a seccomp filter that could not be read and checked.
    #[error("process {pid} has a seccomp filter that cannot be checked: {reason}")]
    SeccompUnchecked { pid: i32, reason: String },

    /// The target has no dlopen (statically linked, or no glibc).
    #[error("process {pid} has no dlopen: {reason}")]
    NoDlopen { pid: i32, reason: String },

    /// The bytes given to [`crate::load`] are not a loadable x86-64 shared object.
    #[error("the library to load is unusable: {0}")]
    BadLibrary(String),

    /// [`crate::Loaded`] does not describe a library loaded in the target
    /// (already unloaded, or the process was restarted).
    #[error("no library loaded by us at {base:#x} (handle {handle:#x}) in process {pid}")]
    NotLoaded { pid: i32, handle: u64, base: u64 },

    /// The target (or the traced thread) exited while we worked in it.
    #[error("process {pid} exited during injection ({detail})")]
    TargetExited { pid: i32, detail: String },

    /// A thread did not stop, or did not reach a system call, in time.
    /// Nothing in the target was changed when this is returned from the
    /// attach phase; see [`crate::Options::stop_timeout`].
    #[error("timed out after {ms} ms waiting for {what} in process {pid}")]
    Timeout { pid: i32, what: String, ms: u128 },

    /// A remote function call did not return in time: it was interrupted and
    /// abandoned, and the thread put back where it was (see the crate docs,
    /// "Timeouts", for what is left behind).
    #[error("{what} in process {pid} did not return within {ms} ms: interrupted and abandoned, thread restored")]
    CallTimeout { pid: i32, what: String, ms: u128 },

    /// Our code (the loaded library's constructor or function, or the
    /// loader) faulted: SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGSYS. The fault
    /// was not delivered; the call was abandoned as on a timeout and the
    /// thread restored.
    #[error("code run in process {pid} faulted (signal {signal}, address {addr:#x}): call abandoned, thread restored")]
    RemoteFault { pid: i32, signal: i32, addr: u64 },

    /// dlopen returned NULL; `message` is the target's dlerror().
    #[error("dlopen of {path} failed in process {pid}: {message}")]
    DlopenFailed {
        pid: i32,
        path: String,
        message: String,
    },

    /// dlsym of the symbol returned NULL; `message` is the target's dlerror().
    #[error("symbol {symbol} not found in the library loaded in process {pid}: {message}")]
    SymbolNotFound {
        pid: i32,
        symbol: String,
        message: String,
    },

    /// dlclose returned non-zero; `message` is the target's dlerror().
    #[error("dlclose failed in process {pid}: {message}")]
    DlcloseFailed { pid: i32, message: String },

    /// A system call made inside the target returned an error.
    #[error("remote {syscall} failed in process {pid}: {source}")]
    RemoteSyscall {
        pid: i32,
        syscall: &'static str,
        source: io::Error,
    },

    /// A local operation (ptrace, /proc, waitpid) failed.
    #[error("{op} for process {pid} failed: {source}")]
    Os {
        pid: i32,
        op: String,
        source: io::Error,
    },

    /// The target did something we cannot make sense of.
    #[error("unexpected state of process {pid}: {detail}")]
    Unexpected { pid: i32, detail: String },

    /// This crate only works on x86-64 Linux hosts.
    #[error("tracer-inject supports only x86-64 Linux hosts")]
    UnsupportedHost,
}

impl Error {
    pub(crate) fn os(pid: i32, op: impl Into<String>, source: io::Error) -> Self {
        Error::Os {
            pid,
            op: op.into(),
            source,
        }
    }
}
