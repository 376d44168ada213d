//! One process's agent: loaded with `tracer-inject`, started on the
//! process's own CUPTI, its shared memory mapped, said hello to; read; told
//! to detach and unloaded. The agent library is built by build.rs and
//! carried inside the gputrace binary (written to a memfd in the target,
//! so nothing is needed in its file system or container).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracer_common::gpu::reader::{Ring, Snapshot};
use tracer_common::gpu::{decode_error, AgentArgs, AgentError, AgentState, Record, HELLO, STOP};
use tracer_inject::{Library, Loaded, Options};

use crate::gpu::convert::{self, AgentClock, ApiCall, Names};
use crate::host::clock::Clock;
use crate::model::gpu::GpuWork;

/// The agent library (`tracer-agent`, built by build.rs).
static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libgputrace_agent.so"));
/// The memfd's name in the target (`/memfd:gputrace-agent` in its maps).
const AGENT_NAME: &str = "gputrace-agent";
/// How long a detach waits for the agent to finalize CUPTI (it does so at
/// the process's next CUDA API exit).
pub const DETACH_WAIT: Duration = Duration::from_secs(3);

/// An agent running in a process.
pub(crate) struct Agent {
    pub(crate) pid: u32,
    loaded: Loaded,
    /// Our mapping of its shared memory (kept after it unmaps its own):
    /// `ring` points into it, so it lives exactly as long.
    _map: memmap2::MmapMut,
    ring: Ring,
    /// The only write end of its control pipe: closing it (our exit, even
    /// by SIGKILL) makes the agent detach itself.
    pipe: Option<File>,
    pub(crate) clock: AgentClock,
    names: Names,
    pub(crate) cupti: String,
    pub(crate) cupti_version: u32,
    pub(crate) clock_error_ns: u64,
}

/// What one poll of the ring gave.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) apis: Vec<ApiCall>,
    pub(crate) work: Vec<GpuWork>,
    /// Records that could not be decoded (a bug, or a broken agent).
    pub(crate) bad: u64,
}

/// The libcupti a process can use: `given`, else the one it maps, else one
/// beside the CUDA runtime it maps (PyTorch's wheels ship them together),
/// as the process sees the path.
pub(crate) fn find_cupti(pid: u32, given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let files = crate::host::discover::mapped_files(pid)
        .map_err(|e| format!("reading /proc/{pid}/maps: {e}"))?;
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string()
    };
    if let Some(p) = files.iter().find(|p| name(p).starts_with("libcupti.so")) {
        return Ok(p.clone());
    }
    for rt in files.iter().filter(|p| name(p).starts_with("libcudart.so")) {
        let Some(dir) = rt.parent() else { continue };
        // Read through the process's root: its mount namespace.
        let seen =
            PathBuf::from(format!("/proc/{pid}/root")).join(dir.strip_prefix("/").unwrap_or(dir));
        let mut found: Vec<String> = std::fs::read_dir(&seen)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("libcupti.so"))
            .collect();
        found.sort();
        if let Some(n) = found.last() {
            return Ok(dir.join(n));
        }
    }
    Err(
        "no libcupti: none is mapped and none lies beside its libcudart (give one with --libcupti)"
            .into(),
    )
}

fn start_error(ret: i64) -> String {
    match decode_error(ret) {
        Some((Some(AgentError::MultipleSubscribers), _)) => {
            "CUPTI is already in use by another tool in it (torch.profiler, Nsight): only one may subscribe".into()
        }
        Some((Some(e), detail)) => format!("the agent could not start: {e:?} ({detail})"),
        Some((None, detail)) => format!("the agent could not start (code {ret}, detail {detail})"),
        None => format!("the agent could not start (code {ret})"),
    }
}

impl Agent {
    /// Loads and starts the agent in `pid` with the libcupti at `cupti`;
    /// on any failure the process is left as it was (the injector's
    /// refusals come before any change to it).
    pub(crate) fn attach(
        pid: u32,
        cupti: &Path,
        kinds: u32,
        share: u32,
        clock: Clock,
    ) -> Result<Agent, String> {
        let ipid = pid as i32;
        tracer_inject::preflight(ipid).map_err(|e| e.to_string())?;
        let opts = Options::default();
        let lib = Library {
            bytes: AGENT,
            name: AGENT_NAME,
        };
        let loaded = tracer_inject::load(ipid, &lib, &opts).map_err(|e| e.to_string())?;
        let undo = |loaded: &Loaded, why: String| {
            let _ = tracer_inject::unload(ipid, loaded, &opts);
            why
        };
        let path = cupti.as_os_str().as_encoded_bytes();
        let mut args = AgentArgs::new(path);
        args.kinds = kinds;
        args.sample_percent = share;
        let ret = match tracer_inject::call(
            ipid,
            &loaded,
            "gputrace_agent_start",
            args.as_bytes(),
            &opts,
        ) {
            Ok(r) => r,
            Err(e) => return Err(undo(&loaded, e.to_string())),
        };
        if ret < 0 {
            return Err(undo(&loaded, start_error(ret)));
        }
        match Self::open(pid, ret, loaded.clone(), clock, cupti) {
            Ok(a) => Ok(a),
            // The agent runs but we cannot read it: closing nothing of ours
            // leaves it without a hello, and it detaches itself.
            Err(e) => Err(e),
        }
    }

    fn open(
        pid: u32,
        memfd: i64,
        loaded: Loaded,
        clock: Clock,
        cupti: &Path,
    ) -> Result<Agent, String> {
        let path = format!("/proc/{pid}/fd/{memfd}");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {path}: {e}"))?;
        // SAFETY: a shared mapping of the agent's memfd; the other process
        // writes it, so it is only read through `Ring`'s bounded volatile
        // and atomic accesses, never as Rust references to its data.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }
            .map_err(|e| format!("mapping {path}: {e}"))?;
        // SAFETY: the mapping lives in the Agent beside the Ring, which is
        // dropped with it.
        let ring = unsafe { Ring::new(map.as_mut_ptr(), map.len()) }
            .map_err(|e| format!("the agent's shared memory: {e:?}"))?;
        let s = ring.snapshot();
        let pipe_path = format!("/proc/{pid}/fd/{}", s.pipe_fd);
        let mut pipe = std::fs::OpenOptions::new()
            .write(true)
            .open(&pipe_path)
            .map_err(|e| format!("opening {pipe_path}: {e}"))?;
        pipe.write_all(&[HELLO])
            .map_err(|e| format!("saying hello: {e}"))?;
        let agent_clock = AgentClock::new(clock, s.clock_kind(), s.clock_offset_ns);
        Ok(Agent {
            pid,
            loaded,
            _map: map,
            ring,
            pipe: Some(pipe),
            clock: agent_clock,
            names: Names::default(),
            cupti: cupti.display().to_string(),
            cupti_version: s.cupti_version,
            clock_error_ns: s.clock_error_ns,
        })
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        self.ring.snapshot()
    }

    /// What the agent last said of itself (printable).
    pub(crate) fn message(&self) -> String {
        let mut buf = [0u8; tracer_common::gpu::MESSAGE_LEN];
        crate::text::printable(&String::from_utf8_lossy(self.ring.message(&mut buf))).into_owned()
    }

    /// Everything the agent published since the last poll.
    pub(crate) fn poll(&mut self) -> Batch {
        let mut b = Batch::default();
        let (pid, clock) = (self.pid, self.clock);
        let ring = &mut self.ring;
        let names = &mut self.names;
        let mut records = Vec::new();
        if ring.poll(|r| records.push(r)).is_err() {
            b.bad += 1;
        }
        for r in records {
            match r {
                Ok(Record::Api(a)) => b.apis.push(convert::api(&a, &clock)),
                Ok(Record::Kernel(k)) => {
                    b.work.extend(convert::kernel(pid, &k, ring, names, &clock))
                }
                Ok(Record::Memcpy(m)) => b.work.extend(convert::memcpy(pid, &m, &clock)),
                Ok(Record::Memset(m)) => b.work.extend(convert::memset(pid, &m, &clock)),
                Err(_) => b.bad += 1,
            }
        }
        b
    }

    /// Tells the agent to detach and waits (reading meanwhile into `drain`)
    /// for it to finalize CUPTI; then unloads it. `true` when it was
    /// unloaded; `false` when the process made no CUDA call in time to
    /// finalize at (the agent then finalizes and stops at its next call,
    /// and its code stays mapped), or is gone.
    pub(crate) fn detach(&mut self, mut drain: impl FnMut(&mut Agent)) -> bool {
        if let Some(p) = self.pipe.as_mut() {
            let _ = p.write_all(&[STOP]);
        }
        let until = Instant::now() + DETACH_WAIT;
        let mut stopped = false;
        while Instant::now() < until {
            drain(self);
            if self.snapshot().agent_state() == Some(AgentState::Stopped) {
                stopped = true;
                break;
            }
            if !crate::host::discover::is_alive(self.pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drain(self);
        // Closing our end: an agent still detaching finalizes on its own.
        self.pipe = None;
        if !stopped {
            return false;
        }
        let ipid = self.pid as i32;
        let opts = Options::default();
        // `join` may say "not finalized" for a few instructions after the
        // state turned Stopped (the callback's cleanup): try a few times.
        for _ in 0..20 {
            match tracer_inject::call(ipid, &self.loaded, "gputrace_agent_join", &[], &opts) {
                Ok(0) => return tracer_inject::unload(ipid, &self.loaded, &opts).is_ok(),
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return false,
            }
        }
        false
    }
}
