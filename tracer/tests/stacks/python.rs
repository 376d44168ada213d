#![allow(clippy::print_stderr)] // tests say what they measured

use std::path::{Path, PathBuf};
use std::process::Command;

use gputrace::stacks::memory::ProcessMemory;
use gputrace::stacks::memory::Window;
use gputrace::stacks::merge::merge;
use gputrace::stacks::merge::EVAL_FUNCTION;
use gputrace::stacks::native::ElfCache;
use gputrace::stacks::native::ProcessUnwinder;
use gputrace::stacks::native::Regs;
use gputrace::stacks::native::StackEnd;
use gputrace::stacks::python::linetable::addr2line;
use gputrace::stacks::python::Layout;
use gputrace::stacks::python::PyFrame;
use gputrace::stacks::python::PythonProcess;

use crate::support::{fixture, run, scratch, stop_and_copy, Fixture};

/// The CPython interpreters to test: the system's and pyenv's (3.10 to
/// 3.13 where installed; this machine's image has 3.11 for sure). At least
/// one must exist.
pub(crate) fn interpreters() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in ["/usr/bin/python3"] {
        if Path::new(p).exists() {
            out.push(p.into());
        }
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    if let Ok(dir) = std::fs::read_dir(Path::new(&home).join(".pyenv/versions")) {
        let mut v: Vec<PathBuf> = dir
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                ["3.10", "3.11", "3.12", "3.13"]
                    .iter()
                    .any(|m| n.starts_with(&format!("{m}.")))
            })
            .map(|e| e.path().join("bin/python3"))
            .filter(|p| p.exists())
            .collect();
        v.sort();
        out.extend(v);
    }
    assert!(!out.is_empty(), "no CPython 3.10-3.13 interpreter found");
    out
}

pub(crate) fn minor_of(python: &Path) -> u8 {
    let out = Command::new(python)
        .args(["-c", "import sys; print(sys.version_info[1])"])
        .output()
        .expect("running python");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a minor version")
}

/// The line of the fixture that ends with `# mark:NAME`.
fn marked_line(source: &str, mark: &str) -> i32 {
    let tag = format!("# mark:{mark}");
    source
        .lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .map(|i| i as i32 + 1)
        .unwrap_or_else(|| panic!("no {tag} in the fixture"))
}

#[test]
fn reads_the_frames_of_each_thread_of_live_interpreters() {
    let script = fixture("chain.py");
    let source = std::fs::read_to_string(&script).unwrap();
    let file = script.to_str().unwrap();
    let mut covered = Vec::new();
    for python in interpreters() {
        let minor = minor_of(&python);
        let child = Fixture::start(Command::new(&python).arg(&script));
        let pid = child.pid();
        let mem = ProcessMemory::new(pid);
        let mut cache = ElfCache::new();
        let mut modules = ProcessUnwinder::for_pid(pid, &mut cache).unwrap();
        let mut py = PythonProcess::detect(modules.modules(), &mem)
            .unwrap_or_else(|e| panic!("{}: {e}", python.display()))
            .unwrap_or_else(|| panic!("{}: no _PyRuntime found", python.display()));
        assert_eq!((py.layout.major, py.layout.minor), (3, minor));
        assert_eq!(py.from_debug_offsets, minor >= 13, "{}", python.display());
        if py.from_debug_offsets {
            // What the interpreter publishes agrees with our table.
            assert_eq!(Some(py.layout), Layout::for_version(3, minor));
        }
        let qual = |q: &'static str, plain: &'static str| if minor >= 11 { q } else { plain };

        // Main thread: blocked in readline, called from Holder.block.
        let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        assert_eq!(tids.len(), 2, "main and worker threads: {tids:?}");
        let threads = py.threads(&mem);
        assert_eq!(threads.len(), 2, "{threads:?}");
        // The fixture says "ready" just before it blocks: read until both
        // threads are where they block (what we read is true either way).
        let main_blocks = format!("{file}:{})", marked_line(&source, "main-blocks"));
        let worker_blocks = format!("{file}:{})", marked_line(&source, "worker-blocks"));
        let mut stacks: Vec<(u32, Vec<String>)> = Vec::new();
        let mut main_native = None;
        let mut main_raw = Vec::new();
        for _ in 0..250 {
            stacks.clear();
            for &tid in &tids {
                let stopped =
                    stop_and_copy(pid, tid, if tid == pid { 1 << 20 } else { 0 }, |_| true);
                let fsbase = stopped.regs.fs_base;
                let t = py.thread_by_fsbase(&mem, fsbase).unwrap_or_else(|| {
                    panic!(
                        "{}: no thread state has fs base {fsbase:#x}",
                        python.display()
                    )
                });
                if minor >= 11 {
                    assert_eq!(t.native_thread_id, Some(u64::from(tid)));
                }
                let raw = py.walk(&mem, t.address);
                // 3.10 makes one C-level evaluation per frame.
                if minor == 10 {
                    assert!(raw.iter().all(|r| r.entry));
                }
                let frames: Vec<String> = raw
                    .iter()
                    .map(|r| {
                        py.resolve(&mem, *r)
                            .map(|f| f.to_string())
                            .unwrap_or_default()
                    })
                    .collect();
                if tid == pid {
                    // Python frames and native stack of one stop.
                    main_native = Some((stopped.regs, stopped.stack.clone()));
                    main_raw = raw;
                }
                drop(stopped);
                stacks.push((tid, frames));
            }
            let blocked = |tid_is_main: bool, end: &str| {
                stacks.iter().any(|(t, f)| {
                    (*t == pid) == tid_is_main && f.first().is_some_and(|f| f.ends_with(end))
                })
            };
            if blocked(true, &main_blocks) && blocked(false, &worker_blocks) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let main = &stacks.iter().find(|(t, _)| *t == pid).unwrap().1;
        assert_eq!(
            main,
            &[
                format!(
                    "{} ({file}:{})",
                    qual("Holder.block", "block"),
                    marked_line(&source, "main-blocks")
                ),
                format!(
                    "outer ({file}:{})",
                    marked_line(&source, "main-calls-block")
                ),
                format!(
                    "<module> ({file}:{})",
                    marked_line(&source, "main-calls-outer")
                ),
            ],
            "{}",
            python.display()
        );
        let worker = &stacks.iter().find(|(t, _)| *t != pid).unwrap().1;
        assert_eq!(
            worker[..3],
            [
                format!("café ({file}:{})", marked_line(&source, "worker-blocks")),
                format!(
                    "函数 ({file}:{})",
                    marked_line(&source, "worker-calls-cafe")
                ),
                format!("𠀀 ({file}:{})", marked_line(&source, "worker-calls-cjk")),
            ],
            "{}: {worker:#?}",
            python.display()
        );
        let outer: Vec<&str> = worker[3..]
            .iter()
            .map(|f| f.split(" (").next().unwrap())
            .collect();
        assert_eq!(
            outer,
            [
                qual("Thread.run", "run"),
                qual("Thread._bootstrap_inner", "_bootstrap_inner"),
                qual("Thread._bootstrap", "_bootstrap")
            ],
            "{}: {worker:#?}",
            python.display()
        );
        assert!(
            worker[3..].iter().all(|f| f.contains("threading.py:")),
            "{worker:#?}"
        );

        // The main thread's native stack (unwound through the interpreter's
        // .eh_frame) merged with its Python frames: the Python frames
        // replace the interpreter's evaluation frames, in call order.
        let (stopped_regs, stack) = main_native.expect("main thread stopped");
        let regs = Regs {
            ip: stopped_regs.rip,
            sp: stopped_regs.rsp,
            bp: stopped_regs.rbp,
        };
        let window = Window {
            base: regs.sp,
            bytes: &stack,
        };
        let (native, end) = modules.stack(regs, &window);
        assert_eq!(end, StackEnd::Complete, "{}: {native:#?}", python.display());
        let evals = native
            .iter()
            .filter(|f| f.function.as_deref() == Some(EVAL_FUNCTION))
            .count();
        // 3.10: one evaluation per Python frame; 3.11+: these three Python
        // frames call each other directly, one evaluation.
        assert_eq!(
            evals,
            if minor == 10 { 3 } else { 1 },
            "{}: {native:#?}",
            python.display()
        );
        let py_frames: Vec<(PyFrame, bool)> = main_raw
            .iter()
            .map(|r| (py.resolve(&mem, *r).unwrap(), r.entry))
            .collect();
        let merged: Vec<String> = merge(&native, &py_frames)
            .iter()
            .map(|f| f.to_string())
            .collect();
        let at = |s: &str| {
            merged
                .iter()
                .position(|f| f == s)
                .unwrap_or_else(|| panic!("{s} not in {merged:#?}"))
        };
        let (b, o, m) = (at(&main[0]), at(&main[1]), at(&main[2]));
        assert!(b > 0 && b < o && o < m, "{}: {merged:#?}", python.display());
        if minor >= 11 {
            assert_eq!(
                (o, m),
                (b + 1, b + 2),
                "{}: one evaluation: {merged:#?}",
                python.display()
            );
        }
        assert!(
            !merged.iter().any(|f| f.starts_with(EVAL_FUNCTION)),
            "{merged:#?}"
        );
        assert!(
            merged[m + 1..]
                .iter()
                .any(|f| f.starts_with("Py_RunMain ") || f.starts_with("Py_BytesMain ")),
            "the interpreter's own outer frames: {merged:#?}"
        );
        assert!(merged.last().unwrap().starts_with("_start "), "{merged:#?}");
        eprintln!("{} main thread: {}", python.display(), merged.join(" <- "));
        covered.push(format!("{} (3.{minor})", python.display()));
    }
    eprintln!("Python frames read from: {}", covered.join(", "));
}

#[test]
fn line_tables_give_the_lines_cpython_gives() {
    let mut covered = Vec::new();
    for python in interpreters() {
        let out = Command::new(&python)
            .arg(fixture("linetables.py"))
            .output()
            .expect("running linetables.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let minor = v["minor"].as_u64().unwrap() as u8;
        let mut checked = 0;
        for code in v["codes"].as_array().unwrap() {
            let table: Vec<u8> = (0..code["table"].as_str().unwrap().len() / 2)
                .map(|i| {
                    u8::from_str_radix(&code["table"].as_str().unwrap()[i * 2..i * 2 + 2], 16)
                        .unwrap()
                })
                .collect();
            let first = code["first"].as_i64().unwrap() as i32;
            for r in code["lines"].as_array().unwrap() {
                let (start, end) = (r[0].as_i64().unwrap(), r[1].as_i64().unwrap());
                let want = r[2].as_i64().map(|l| l as i32);
                for off in (start..end).step_by(2) {
                    assert_eq!(
                        addr2line(minor, &table, first, off),
                        want,
                        "3.{minor} {} offset {off}",
                        code["name"]
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "too few instructions checked: {checked}");
        covered.push(format!("3.{minor}: {checked} instructions"));
    }
    eprintln!("line tables checked: {}", covered.join(", "));
}

/// Our offset tables against `offsetof` in each interpreter's own headers
/// (where its development headers are installed).
#[test]
fn offset_tables_match_the_headers() {
    let dir = scratch("offsets");
    let mut covered = Vec::new();
    for python in interpreters() {
        let out = Command::new(&python)
            .args(["-c", "import sysconfig,sys; print(sysconfig.get_paths()['include']); print(sys.version_info[1])"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut lines = text.lines();
        let include = lines.next().unwrap().to_string();
        let minor: u8 = lines.next().unwrap().parse().unwrap();
        if !Path::new(&include)
            .join("internal/pycore_runtime.h")
            .exists()
        {
            eprintln!(
                "{}: no internal headers, offsets not checked",
                python.display()
            );
            continue;
        }
        let exe = dir.join(format!("offsets-{minor}-{}", covered.len()));
        run(Command::new("cc")
            .args(["-w", "-I"])
            .arg(&include)
            .arg(fixture("cpython_offsets.c"))
            .arg("-o")
            .arg(&exe));
        let out = Command::new(&exe).output().unwrap();
        let measured: std::collections::HashMap<String, u32> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect();
        let l = Layout::for_version(3, minor).unwrap();
        let m = |k: &str| {
            *measured
                .get(k)
                .unwrap_or_else(|| panic!("{k} not measured"))
        };
        let frame_code = if minor >= 11 {
            "iframe.code"
        } else {
            "frame.f_code"
        };
        let frame_prev = if minor >= 11 {
            "iframe.previous"
        } else {
            "frame.f_back"
        };
        let frame_instr = if minor >= 11 {
            "iframe.instr"
        } else {
            "frame.f_lasti"
        };
        let tstate_frame = match minor {
            10 => "tstate.frame",
            11 | 12 => "tstate.cframe",
            _ => "tstate.current_frame",
        };
        let code_code = if minor >= 11 {
            "code.co_code_adaptive"
        } else {
            "code.co_code"
        };
        let pairs = [
            (l.runtime_interpreters_head, m("runtime.interpreters_head")),
            (l.interp_next, m("interp.next")),
            (l.interp_threads_head, m("interp.threads_head")),
            (l.tstate_next, m("tstate.next")),
            (l.tstate_thread_id, m("tstate.thread_id")),
            (l.tstate_frame, m(tstate_frame)),
            (l.frame_code, m(frame_code)),
            (l.frame_previous, m(frame_prev)),
            (l.frame_instr, m(frame_instr)),
            (l.code_filename, m("code.co_filename")),
            (l.code_name, m("code.co_name")),
            (l.code_firstlineno, m("code.co_firstlineno")),
            (l.code_linetable, m("code.co_linetable")),
            (l.code_code, m(code_code)),
            (l.object_type, m("object.ob_type")),
            (l.bytes_size, m("bytes.ob_size")),
            (l.bytes_data, m("bytes.ob_sval")),
            (l.unicode_length, m("unicode.length")),
            (l.unicode_state, m("unicode.state")),
            (l.unicode_ascii_size, m("unicode.ascii_size")),
            (l.unicode_compact_size, m("unicode.compact_size")),
        ];
        for (i, (ours, theirs)) in pairs.iter().enumerate() {
            assert_eq!(ours, theirs, "3.{minor} field #{i} of the comparison");
        }
        if minor >= 11 {
            assert_eq!(
                l.tstate_native_thread_id,
                Some(m("tstate.native_thread_id"))
            );
            assert_eq!(l.code_qualname, Some(m("code.co_qualname")));
            assert_eq!(l.frame_owner, Some(m("iframe.owner")));
        }
        if minor == 11 {
            assert_eq!(l.frame_is_entry, Some(m("iframe.is_entry")));
        }
        if let gputrace::stacks::python::FrameModel::CFrame { current_frame } = l.model {
            assert_eq!(current_frame, m("cframe.current_frame"));
        }
        covered.push(format!("3.{minor} ({include})"));
    }
    assert!(!covered.is_empty(), "no interpreter with internal headers");
    eprintln!("offsets checked against: {}", covered.join(", "));
    let _ = std::fs::remove_dir_all(&dir);
}
