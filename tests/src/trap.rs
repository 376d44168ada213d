//! A booby-trapped libcuda (tests/trap/libcuda.c) mapped by an unprivileged
//! process from a directory it owns, and what shows who ran its code: the
//! marker files its constructor leaves, and the status of each gputrace
//! calibration helper seen mapping it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{gputrace_bin, scratch, sim_dir};

/// The unprivileged user the victim runs as (no passwd entry needed).
pub const VICTIM_UID: u32 = 12345;

fn trap_sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("trap")
}

/// The GNU build id of an ELF file (hex), from `readelf -n`.
pub fn build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .expect("readelf (binutils) is installed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Build ID:")
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| panic!("{} has no build id", path.display()))
}

/// The SHA-256 of a file (hex), from `sha256sum`.
pub fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A trap built for one test: `evil/` (owned by [`VICTIM_UID`]) holds the
/// library and the victim program; `markers/` (mode 1777) collects what the
/// constructor leaves.
pub struct Trap {
    pub evil: PathBuf,
    pub markers: PathBuf,
    pub lib: PathBuf,
}

/// Who ran the trap's constructor, as its marker file's name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub uid: u32,
    pub euid: u32,
    pub nnp: String,
    pub seccomp: String,
    pub capeff: String,
    /// The executable, `/` written as `_`.
    pub exe: String,
}

impl Trap {
    /// Builds the trap; it carries the simulated libcuda's build id, as a
    /// forgery of that driver build would.
    pub fn build(name: &str) -> Trap {
        let dir = scratch(name);
        let evil = dir.join("evil");
        let markers = dir.join("markers");
        std::fs::create_dir_all(&evil).unwrap();
        std::fs::create_dir_all(&markers).unwrap();
        std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let lib = evil.join("libcuda.so.1");
        let src = trap_sources();
        let forged = build_id(&sim_dir().join("libcuda.so.1"));
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            &format!("-DMARKER_DIR=\"{}\"", markers.display()),
            &format!("-Wl,--build-id=0x{forged}"),
            "-Wl,-soname,libcuda.so.1",
            "-o",
            lib.to_str().unwrap(),
            src.join("libcuda.c").to_str().unwrap(),
        ]);
        assert_eq!(build_id(&lib), forged);
        let victim = evil.join("victim");
        cc(&[
            "-O1",
            "-o",
            victim.to_str().unwrap(),
            src.join("victim.c").to_str().unwrap(),
            "-L",
            evil.to_str().unwrap(),
            "-l:libcuda.so.1",
            "-Wl,-rpath,$ORIGIN",
        ]);
        for p in [&evil, &lib, &victim] {
            std::os::unix::fs::chown(p, Some(VICTIM_UID), Some(VICTIM_UID)).unwrap();
        }
        Trap { evil, markers, lib }
    }

    /// Starts the victim as [`VICTIM_UID`]; it maps the trap until dropped.
    pub fn start_victim(&self) -> Victim {
        let mut child = Command::new(self.evil.join("victim"))
            .uid(VICTIM_UID)
            .gid(VICTIM_UID)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the victim");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.starts_with("ready") && line.contains(&format!("uid={VICTIM_UID}")),
            "{line:?}"
        );
        let pid = child.id();
        Victim { child, pid }
    }

    pub fn markers(&self) -> Vec<Marker> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.markers).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let field = |k: &str| {
                name.split(',')
                    .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
                    .unwrap_or("?")
                    .to_string()
            };
            out.push(Marker {
                uid: field("uid").parse().unwrap_or(u32::MAX),
                euid: field("euid").parse().unwrap_or(u32::MAX),
                nnp: field("nnp"),
                seccomp: field("seccomp"),
                capeff: field("capeff"),
                exe: name.split(",exe=").nth(1).unwrap_or("?").to_string(),
            });
        }
        out
    }

    /// Markers left by this build's gputrace (not by the victim, nor by
    /// another gputrace on the machine).
    pub fn markers_of_gputrace(&self) -> Vec<Marker> {
        let ours = gputrace_bin().to_string_lossy().replace('/', "_");
        self.markers()
            .into_iter()
            .filter(|m| m.exe == ours)
            .collect()
    }

    pub fn clear_markers(&self) {
        for e in std::fs::read_dir(&self.markers).unwrap().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }

    /// Watches for this build's gputrace processes that map the trap (a
    /// calibration helper loading it) and records their credentials.
    pub fn watch_helpers(&self) -> HelperWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), seen.clone());
        let lib = self.lib.to_string_lossy().into_owned();
        let exe = gputrace_bin();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for (pid, status) in helpers_mapping(&exe, &lib) {
                    let mut v = out.lock().unwrap();
                    if !v.iter().any(|h: &HelperSeen| h.pid == pid) {
                        v.push(HelperSeen { pid, status });
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        HelperWatch {
            stop,
            seen,
            thread: Some(thread),
        }
    }
}

/// Processes running `exe` that map `lib`, with their `/proc/PID/status`.
fn helpers_mapping(exe: &Path, lib: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .as_deref()
            != Some(exe)
        {
            continue;
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if !maps.lines().any(|l| l.ends_with(lib)) {
            continue;
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            out.push((pid, status));
        }
    }
    out
}

pub struct Victim {
    pub child: Child,
    pub pid: u32,
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A calibration helper seen with the trap mapped.
#[derive(Debug, Clone)]
pub struct HelperSeen {
    pub pid: u32,
    pub status: String,
}

impl HelperSeen {
    /// A field of its status (`Uid`, `CapEff`, ...), whitespace collapsed.
    pub fn field(&self, key: &str) -> String {
        self.status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    }
}

pub struct HelperWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<HelperSeen>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HelperWatch {
    pub fn seen(&self) -> Vec<HelperSeen> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops watching; what was seen.
    pub fn finish(mut self) -> Vec<HelperSeen> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen()
    }
}

impl Drop for HelperWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
