use std::process::Command;

use gputrace::stacks::memory::Window;
use gputrace::stacks::native::ElfCache;
use gputrace::stacks::native::ProcessUnwinder;
use gputrace::stacks::native::Regs;
use gputrace::stacks::native::StackEnd;

use crate::support::{fixture, run, scratch, stop_and_copy, Fixture};

/// Builds main -> chain_a -> chain_b -> chain_c, the last two in a shared
/// library, all -O2 -fomit-frame-pointer.
fn build_chain(dir: &std::path::Path) -> std::path::PathBuf {
    let flags = ["-O2", "-fomit-frame-pointer", "-g0"];
    run(Command::new("cc")
        .args(flags)
        .args(["-fPIC", "-shared", "-o"])
        .arg(dir.join("libstackchain.so"))
        .arg(fixture("chain_lib.c")));
    let exe = dir.join("stackchain");
    run(Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(fixture("chain_main.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lstackchain", "-Wl,-rpath,$ORIGIN"]));
    exe
}

fn names(frames: &[gputrace::stacks::native::NativeFrame]) -> Vec<String> {
    frames.iter().map(|f| f.to_string()).collect()
}

#[test]
fn unwinds_a_chain_built_without_frame_pointers() {
    let dir = scratch("native-chain");
    let exe = build_chain(&dir);
    let child = Fixture::start(&mut Command::new(&exe));
    let pid = child.pid();

    let mut cache = ElfCache::new();
    let mut unwinder = ProcessUnwinder::for_pid(pid, &mut cache).expect("reading maps");
    assert!(
        unwinder.skipped.is_empty(),
        "skipped: {:?}",
        unwinder.skipped
    );
    let in_chain_c = |r: &libc::user_regs_struct| {
        unwinder
            .module_at(r.rip)
            .is_some_and(|m| m.name() == "libstackchain.so")
    };
    let stopped = stop_and_copy(pid, pid, 64 * 1024, in_chain_c);
    let regs = Regs {
        ip: stopped.regs.rip,
        sp: stopped.regs.rsp,
        bp: stopped.regs.rbp,
    };
    let window = Window {
        base: regs.sp,
        bytes: &stopped.stack,
    };
    let (frames, end) = unwinder.stack(regs, &window);
    let got = names(&frames);
    assert_eq!(
        got[..4],
        [
            "chain_c (libstackchain.so)",
            "chain_b (libstackchain.so)",
            "chain_a (stackchain)",
            "main (stackchain)",
        ],
        "all frames: {got:#?}"
    );
    // Past main: glibc's start code, then the executable's _start, where the
    // CFI marks the end of the stack.
    assert!(
        got[4..].iter().any(|f| f.contains("libc.so")),
        "libc frames after main: {got:#?}"
    );
    assert_eq!(
        got.last().map(String::as_str),
        Some("_start (stackchain)"),
        "{got:#?}"
    );
    assert_eq!(end, StackEnd::Complete, "{got:#?}");

    // A window too small for the whole stack cuts it, and says so; the frames
    // it holds are still right.
    let small = Window {
        base: regs.sp,
        bytes: &stopped.stack[..256],
    };
    let (frames, end) = unwinder.stack(regs, &small);
    let got = names(&frames);
    assert_eq!(
        got[..2],
        ["chain_c (libstackchain.so)", "chain_b (libstackchain.so)"],
        "{got:#?}"
    );
    assert!(
        got.len() < 4,
        "256 bytes cannot hold chain_a's return: {got:#?}"
    );
    assert!(matches!(end, StackEnd::Truncated(_)), "{end:?}");

    // One cache entry per file, shared by a second process of the same files.
    let files = cache.len();
    let again = ProcessUnwinder::for_pid(pid, &mut cache).expect("reading maps");
    assert_eq!(cache.len(), files);
    assert_eq!(again.modules().len(), unwinder.modules().len());
    let _ = std::fs::remove_dir_all(&dir);
}
