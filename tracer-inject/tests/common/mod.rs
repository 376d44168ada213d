//! Shared test harness: builds the C victims and the test library once per
//! test binary (with `cc`, into the cargo test temp dir), runs victims with
//! their stdout collected line by line, and reads their state from /proc.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) use tracer_inject::{Library, Options};

pub(crate) struct Built {
    pub(crate) dir: PathBuf,
    pub(crate) victim: PathBuf,
    pub(crate) victim_static: PathBuf,
    /// None when `cc -m32` does not work here (multilib not installed).
    pub victim32: Result<PathBuf, String>,
    pub(crate) holder: PathBuf,
    pub probe1: Vec<u8>,
    pub probe2: Vec<u8>,
    /// A library whose dlopen fails (unresolvable symbol).
    pub(crate) bad_probe: Vec<u8>,
}

fn src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/victims")
        .join(name)
}

fn cc(args: &[&str]) -> Result<(), String> {
    let out = Command::new("cc")
        .args(args)
        .output()
        .map_err(|e| format!("running cc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

pub(crate) fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        // Remove what earlier, finished test runs left.
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = name
                .strip_prefix("inject-")
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists());
            if stale {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = tmp.join(format!("inject-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = |n: &str| dir.join(n);
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let victim_c = s(&src("victim.c"));
        let probe_c = s(&src("probe.c"));
        cc(&["-O2", "-pthread", &victim_c, "-o", &s(&p("victim"))]).unwrap();
        cc(&[
            "-O2",
            "-static",
            "-pthread",
            &victim_c,
            "-o",
            &s(&p("victim-static")),
        ])
        .unwrap();
        let victim32 = cc(&[
            "-m32",
            "-O2",
            "-pthread",
            &victim_c,
            "-o",
            &s(&p("victim32")),
        ])
        .map(|_| p("victim32"));
        cc(&["-O2", &s(&src("holder.c")), "-o", &s(&p("holder"))]).unwrap();
        for id in ["1", "2"] {
            let out = s(&p(&format!("libprobe{id}.so")));
            let def = format!("-DPROBE_ID={id}");
            cc(&[
                "-O2",
                "-shared",
                "-fPIC",
                "-fno-omit-frame-pointer",
                &def,
                &probe_c,
                "-o",
                &out,
            ])
            .unwrap();
        }
        cc(&[
            "-O2",
            "-shared",
            "-fPIC",
            &s(&src("bad_probe.c")),
            "-o",
            &s(&p("libbad.so")),
        ])
        .unwrap();
        Built {
            bad_probe: std::fs::read(p("libbad.so")).unwrap(),
            victim: p("victim"),
            victim_static: p("victim-static"),
            victim32,
            holder: p("holder"),
            probe1: std::fs::read(p("libprobe1.so")).unwrap(),
            probe2: std::fs::read(p("libprobe2.so")).unwrap(),
            dir,
        }
    })
}

pub(crate) fn probe1() -> Library<'static> {
    Library {
        bytes: &built().probe1,
        name: "gputrace-test-probe",
    }
}

pub(crate) fn probe2() -> Library<'static> {
    Library {
        bytes: &built().probe2,
        name: "gputrace-test-probe2",
    }
}

pub(crate) fn opts() -> Options {
    Options::default()
}

/// A running victim; killed and reaped on drop.
pub(crate) struct Victim {
    pub(crate) child: Child,
    pub(crate) pid: i32,
    pub(crate) stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    pub(crate) marker: PathBuf,
}

impl Victim {
    pub(crate) fn spawn(exe: &Path, args: &[&str]) -> Victim {
        static N: AtomicU32 = AtomicU32::new(0);
        let marker = built()
            .dir
            .join(format!("marker-{}", N.fetch_add(1, Ordering::SeqCst)));
        let _ = std::fs::remove_file(&marker);
        let mut child = Command::new(exe)
            .args(args)
            .env("PROBE_MARKER", &marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        Victim {
            child,
            pid,
            stdin,
            lines,
            marker,
        }
    }

    pub(crate) fn start(args: &[&str]) -> Victim {
        Victim::spawn(&built().victim, args)
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until some output line satisfies `pred`; returns it.
    pub(crate) fn wait_line(
        &self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| pred(l)) {
                return Some(l);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Field `key` of the last line starting with "tick" ("tick N intr I").
    pub(crate) fn last(&self, key: &str) -> Option<i64> {
        let lines = self.lines();
        let line = lines.iter().rev().find(|l| l.starts_with("tick "))?;
        field(line, key)
    }

    /// Any "BAD ..." line (a register or restart check failed in the victim).
    pub(crate) fn bad(&self) -> Option<String> {
        self.lines().into_iter().find(|l| l.starts_with("BAD"))
    }

    /// Waits until the tick counter passes `n`.
    pub(crate) fn wait_tick(&self, n: i64, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.last("tick").is_some_and(|t| t > n) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None)) && state(self.pid).is_some_and(|s| s != 'Z')
    }

    pub(crate) fn marker(&self) -> String {
        std::fs::read_to_string(&self.marker).unwrap_or_default()
    }

    pub(crate) fn maps(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/maps", self.pid)).unwrap_or_default()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn field(line: &str, key: &str) -> Option<i64> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == key {
            return it.next()?.parse().ok();
        }
    }
    None
}

/// Scheduler state of a process (R, S, T, Z ...).
pub(crate) fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The system call thread `tid` of `pid` is blocked in, if any.
pub(crate) fn in_syscall(pid: i32, tid: i32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Waits until the main thread of `pid` blocks in system call `nr`.
pub(crate) fn wait_syscall(pid: i32, nr: i64, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if in_syscall(pid, pid) == Some(nr) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// A minimal static i386 ELF executable, made without a compiler: it loops
/// on nanosleep({1, 0}) through int 0x80. Needs IA-32 emulation in the kernel.
pub(crate) fn tiny_i386_sleeper() -> Vec<u8> {
    const BASE: u32 = 0x0804_8000;
    const CODE: u32 = 52 + 32; // after the ELF header and one program header
    let ts = BASE + CODE + 16;
    let mut code = vec![0xb8, 162, 0, 0, 0]; // mov eax, 162 (nanosleep)
    code.push(0xbb); // mov ebx, &ts
    code.extend(ts.to_le_bytes());
    code.extend([0x31, 0xc9, 0xcd, 0x80, 0xeb, 0xf0]); // xor ecx,ecx; int 0x80; jmp start
    code.extend([1, 0, 0, 0, 0, 0, 0, 0]); // struct timespec {1, 0}
    let total = CODE + code.len() as u32;
    let mut elf = vec![0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    for half in [2u16, 3] {
        elf.extend(half.to_le_bytes()); // ET_EXEC, EM_386
    }
    for word in [1u32, BASE + CODE, 52, 0, 0] {
        elf.extend(word.to_le_bytes()); // version, entry, phoff, shoff, flags
    }
    for half in [52u16, 32, 1, 0, 0, 0] {
        elf.extend(half.to_le_bytes()); // ehsize, phentsize, phnum, sh*
    }
    for word in [1u32, 0, BASE, BASE, total, total, 5, 0x1000] {
        elf.extend(word.to_le_bytes()); // PT_LOAD, offset, vaddr, paddr, filesz, memsz, R+X, align
    }
    elf.extend(code);
    elf
}

/// Anonymous executable mappings (our scratch code page would be one).
pub(crate) fn anon_exec(maps: &str) -> usize {
    maps.lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 5 && f[1].contains('x')
        })
        .count()
}

pub(crate) fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

pub(crate) fn write_stdin(v: &mut Victim, data: &[u8]) {
    let s = v.stdin.as_mut().unwrap();
    s.write_all(data).unwrap();
    s.flush().unwrap();
}

/// The victim is alive, saw no bad register or syscall result, and ticks on.
pub(crate) fn assert_healthy(v: &mut Victim) {
    assert_eq!(
        v.bad(),
        None,
        "victim saw a corrupted register or a bad syscall result"
    );
    assert!(v.alive(), "victim died");
    assert!(
        v.wait_tick(0, 5 * Duration::from_secs(1)),
        "victim does not tick"
    );
    let tick = v.last("tick").expect("victim ticks");
    assert!(
        v.wait_tick(tick + 3, 5 * Duration::from_secs(1)),
        "victim stopped ticking"
    );
    assert_eq!(v.bad(), None);
}
