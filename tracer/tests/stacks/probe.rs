//! The probe's stack capture, end to end below the command line: the eBPF
//! programs loaded with `--stacks` settings and attached to the simulated
//! libcuda/libcudart in a fixture process, their stack records resolved.
//! Root: loads eBPF programs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::Arc;

use gputrace::catalogue::api;
use gputrace::catalogue::ProbeSelection;
use gputrace::decode::record::parse_record;
use gputrace::host::discover::process_libraries;
use gputrace::model::stack::CallStack;
use gputrace::probes::attach::Probes;
use gputrace::probes::attach::Scope;
use gputrace::stacks::kernel::kernel_offsets;
use gputrace::stacks::record::parse_stack_record;
use gputrace::stacks::resolve::StackResolver;
use gputrace::stacks::settings::StackSettings;
use tracer_common::stack::{PyStatus, MAX_STACK_BYTES};
use tracer_common::EventKind;

use crate::support::{run, scratch, Fixture};

fn require_root() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "the probe tests load eBPF programs: run them as root (`cargo xtask test`)"
    );
}

/// The simulator (libraries and stack fixtures) built into `dir`.
pub(crate) fn build_sim(dir: &Path) -> PathBuf {
    let sim = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sim");
    let out = dir.join("sim");
    run(Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&sim)
        .arg(format!("OUT={}", out.display())));
    out
}

/// A fixture started with `--wait`: it says "ready", runs when told, says
/// "done ...", and exits when told again.
struct Waiting {
    child: Fixture,
    out: BufReader<ChildStdout>,
}

impl Waiting {
    fn start(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut w = Self {
            child: Fixture(child),
            out,
        };
        assert_eq!(w.line(), "ready");
        w
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("reading the fixture");
        line.trim().to_string()
    }

    fn go(&mut self) {
        let stdin = self.child.0.stdin.as_mut().expect("piped stdin");
        stdin.write_all(b"go\n").expect("writing to the fixture");
        stdin.flush().expect("flushing");
    }

    fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// Every traced call of the fixture with the stack its probe captured:
/// (API name, stack), in the order the calls were made.
struct Traced {
    calls: Vec<(String, Option<Arc<CallStack>>, PyStatus)>,
    resolver: StackResolver,
}

/// Attaches to the fixture's libraries with `--stacks`, lets it run its
/// steps, and resolves every stack while it is still alive.
fn trace_fixture(app: &mut Waiting, window: Option<u32>) -> Traced {
    require_root();
    let pid = app.pid();
    let settings = StackSettings::new(window, 1, kernel_offsets().expect("kernel BTF"))
        .expect("default settings");
    let config = gputrace::config::Config {
        ring_bytes: 16 << 20,
        ..Default::default()
    };
    let mut probes = Probes::load(ProbeSelection::default(), &config, Some(settings))
        .expect("loading the probes with --stacks");
    let mut attachments = Vec::new();
    for lib in process_libraries(pid).expect("the fixture's libraries") {
        attachments.push(
            probes
                .attach(&lib, Scope::Process(pid), false)
                .expect("attaching"),
        );
    }
    assert!(!attachments.is_empty(), "no CUDA library in the fixture");
    let mut ring = probes.take_ring().expect("ring");
    let mut py = probes.take_py_procs().expect("py map");
    let mut resolver = StackResolver::new();
    // Python is configured before the calls (as the session does when it
    // first sees a process).
    let _ = resolver.prepare(pid, &mut py);
    app.go();
    let done = app.line();
    assert!(done.starts_with("done"), "{done}");
    let mut pending: HashMap<(u32, u64), (Arc<CallStack>, PyStatus)> = HashMap::new();
    let mut calls = Vec::new();
    while let Some(item) = ring.next() {
        let kind = u32::from_ne_bytes(item[..4].try_into().unwrap());
        if kind == EventKind::Stack as u32 {
            let raw = parse_stack_record(&item).expect("a well-formed stack record");
            assert_eq!(raw.pid, pid);
            let stack = resolver
                .resolve(&raw, &mut py)
                .expect("the process is alive");
            pending.insert((raw.tid, raw.start_ns), (stack, raw.py_status));
            continue;
        }
        let call = parse_record(&item).expect("a call record");
        let e = call.event;
        let name = api(e.api).expect("a known API").name.to_string();
        match pending.remove(&(e.tid, e.start_ns)) {
            Some((s, status)) => calls.push((name, Some(s), status)),
            None => calls.push((name, None, PyStatus::NotPython)),
        }
    }
    assert!(
        pending.is_empty(),
        "stacks without a call: {}",
        pending.len()
    );
    drop(attachments);
    app.go();
    Traced { calls, resolver }
}

fn frames(s: &CallStack) -> Vec<&str> {
    s.frames.iter().map(|f| &**f).collect()
}

/// The frames from the first one of `module` on, up to `upto` frames.
fn from_module<'a>(s: &'a CallStack, module: &str, upto: usize) -> Vec<&'a str> {
    let f = frames(s);
    let at = f
        .iter()
        .position(|x| x.ends_with(&format!("({module})")))
        .unwrap_or_else(|| panic!("no {module} frame in {f:#?}"));
    f[at..].iter().take(upto).copied().collect()
}

#[test]
fn probe_stacks_of_a_program_without_frame_pointers() {
    let dir = scratch("probe-native");
    let sim = build_sim(&dir);
    let mut app = Waiting::start(
        Command::new(sim.join("gputrace-stackapp"))
            .args(["4", "--wait"])
            .current_dir(&sim),
    );
    // The largest window the probe copies (the Python test uses the default).
    let traced = trace_fixture(&mut app, Some(MAX_STACK_BYTES as u32));
    let app_name = "gputrace-stackapp";
    let of = |name: &str| -> Vec<Arc<CallStack>> {
        traced
            .calls
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, s, _)| {
                s.clone()
                    .unwrap_or_else(|| panic!("{name} without a stack"))
            })
            .collect()
    };
    let launches = of("cuLaunchKernel");
    let syncs = of("cuStreamSynchronize");
    let runtime = of("cudaLaunchKernel");
    assert_eq!(
        (launches.len(), syncs.len(), runtime.len()),
        (8, 4, 4),
        "{:?}",
        traced.calls.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    // Every stack of one call site is the same interned stack (steps differ
    // only in arguments).
    let sync = &syncs[0];
    assert!(syncs.iter().all(|s| Arc::ptr_eq(s, sync)));
    assert_eq!(
        frames(sync)[..4],
        [
            "cuStreamSynchronize (libcuda.so.1)",
            &format!("app_sync ({app_name})"),
            &format!("app_step ({app_name})"),
            &format!("main ({app_name})"),
        ],
        "{:#?}",
        frames(sync)
    );
    assert_eq!(
        frames(sync).last().copied(),
        Some(&*format!("_start ({app_name})"))
    );
    assert_eq!(sync.call_site(), Some(&*format!("app_sync ({app_name})")));
    // Direct launches and the launches the runtime makes inside
    // cudaLaunchKernel: the latter cross the return address the outer
    // call's uretprobe replaced with its trampoline.
    let direct: Vec<_> = launches
        .iter()
        .filter(|s| frames(s)[1] == format!("app_launch ({app_name})"))
        .collect();
    assert_eq!(direct.len(), 4, "{launches:#?}");
    let nested: Vec<_> = launches
        .iter()
        .filter(|s| frames(s)[1].ends_with("(libcudart.so.13)"))
        .collect();
    assert_eq!(nested.len(), 4, "{launches:#?}");
    let n = nested[0];
    assert_eq!(
        from_module(n, app_name, 3),
        [
            &*format!("app_runtime ({app_name})"),
            &format!("app_step ({app_name})"),
            &format!("main ({app_name})"),
        ],
        "{:#?}",
        frames(n)
    );
    assert_eq!(n.call_site(), Some(&*format!("app_runtime ({app_name})")));
    assert_eq!(
        frames(&runtime[0])[..3],
        [
            "cudaLaunchKernel (libcudart.so.13)",
            &format!("app_runtime ({app_name})"),
            &format!("app_step ({app_name})"),
        ]
    );
    let counts = traced.resolver.counts();
    assert_eq!(counts.native_cut_short, 0, "{counts:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The line of `source` marked `# line: NAME`.
fn line_of(source: &str, name: &str) -> usize {
    let tag = format!("# line: {name}");
    source
        .lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .unwrap_or_else(|| panic!("no `{tag}` in the script"))
        + 1
}

#[test]
fn probe_stacks_of_python_calling_through_ctypes() {
    let dir = scratch("probe-python");
    let sim = build_sim(&dir);
    let script = sim.join("stack_ctypes.py");
    let source = std::fs::read_to_string(&script).unwrap();
    let path = script.display().to_string();
    let at = |func: &str, mark: &str| format!("{func} ({path}:{})", line_of(&source, mark));
    for python in crate::python::interpreters() {
        let minor = crate::python::minor_of(&python);
        let qual = |q: &'static str, plain: &'static str| if minor >= 11 { q } else { plain };
        let mut app = Waiting::start(
            Command::new(&python)
                .arg(&script)
                .arg(&sim)
                .args(["3", "--wait"]),
        );
        let traced = trace_fixture(&mut app, None);
        let who = python.display();
        let stacks = |name: &str| -> Vec<(Arc<CallStack>, PyStatus)> {
            traced
                .calls
                .iter()
                .filter(|(n, _, _)| n == name)
                .map(|(_, s, st)| {
                    (
                        s.clone()
                            .unwrap_or_else(|| panic!("{who}: {name} without a stack")),
                        *st,
                    )
                })
                .collect()
        };
        let launches = stacks("cuLaunchKernel");
        let syncs = stacks("cuStreamSynchronize");
        assert_eq!((launches.len(), syncs.len()), (3, 3), "{who}");
        for (calls, api, leaf, step_mark) in [
            (
                &launches,
                "cuLaunchKernel",
                at("launch_kernel", "launch"),
                "step-launch",
            ),
            (
                &syncs,
                "cuStreamSynchronize",
                at("synchronize", "sync"),
                "step-sync",
            ),
        ] {
            let (s, status) = &calls[0];
            assert_eq!(*status, PyStatus::Complete, "{who} {api}");
            let f = frames(s);
            let expected_python = [
                leaf.clone(),
                at(qual("Trainer.step", "step"), step_mark),
                at("main", "main-step"),
                at("<module>", "module"),
            ];
            let first_py = f
                .iter()
                .position(|x| **x == *expected_python[0])
                .unwrap_or_else(|| panic!("{who}: no {leaf} in {f:#?}"));
            // In order (3.10 has an evaluation frame between each two).
            let python: Vec<&str> = f.iter().copied().filter(|x| x.contains(".py:")).collect();
            assert_eq!(
                python,
                expected_python
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                "{who} {api}: {f:#?}"
            );
            let last_py = f.iter().rposition(|x| x.contains(".py:")).unwrap();
            // Innermost the API, then ctypes' native frames, then Python.
            assert_eq!(f[0], format!("{api} (libcuda.so.1)"), "{who}: {f:#?}");
            assert!(first_py >= 2, "{who}: native frames before Python: {f:#?}");
            assert!(
                f[1..first_py].iter().all(|x| !x.contains(".py")),
                "{who}: {f:#?}"
            );
            // After <module>: the interpreter's native frames, to _start.
            assert!(f.len() > last_py + 1, "{who}: {f:#?}");
            assert!(f.last().unwrap().starts_with("_start ("), "{who}: {f:#?}");
            assert!(!f.contains(&gputrace::model::stack::GAP), "{who}: {f:#?}");
            assert_eq!(s.call_site(), Some(leaf.as_str()), "{who}");
            // The same line gives the same interned stack each step.
            assert!(calls.iter().all(|(c, _)| Arc::ptr_eq(c, s)), "{who} {api}");
        }
        let counts = traced.resolver.counts();
        assert_eq!(
            (counts.native_cut_short, counts.python_unresolved),
            (0, 0),
            "{who}: {counts:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
