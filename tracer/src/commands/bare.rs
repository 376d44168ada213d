//! Hidden developer commands: the symbol inventory of a library, and a bare
//! counting uprobe (the floor against which gputrace's overhead is measured).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use aya::maps::PerCpuArray;
use aya::programs::UProbe;
use aya::EbpfLoader;

use crate::catalogue::Lib;
use crate::cli::BareArgs;
use crate::error::Failure;
use crate::error::Result;
use crate::host::discover::classify;
use crate::host::privileges;
use crate::probes::multi::MultiPrograms;
use crate::probes::symbols::resolve_symbols;

/// `gputrace __symbols LIB`: which catalogue APIs the file exports.
pub(crate) fn symbols(path: &std::path::Path) -> Result<ExitCode> {
    let lib = classify(path).unwrap_or(Lib::Cuda);
    let found = resolve_symbols(path, lib).map_err(|e| Failure::runtime(e.to_string()))?;
    for s in &found {
        println!(
            "{:#010x}  {:<8}  {}",
            s.file_offset,
            s.api.family.name(),
            s.api.name
        );
    }
    println!("{} of the catalogue's {} symbols", found.len(), lib.label());
    Ok(ExitCode::SUCCESS)
}

/// Finds a symbol's file offset with the same resolver gputrace uses.
fn offset_of(path: &std::path::Path, name: &str) -> Result<u64> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let data =
        std::fs::read(path).map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))?;
    let file = object::File::parse(&*data).map_err(|e| Failure::runtime(e.to_string()))?;
    let sym = file
        .dynamic_symbols()
        .chain(file.symbols())
        .find(|s| {
            s.name()
                .map(|n| n.split('@').next() == Some(name))
                .unwrap_or(false)
                && s.address() != 0
        })
        .ok_or_else(|| Failure::runtime(format!("{name} not found in {}", path.display())))?;
    file.segments()
        .find_map(|seg| {
            let (off, size) = seg.file_range();
            let a = sym.address();
            (a >= seg.address() && a < seg.address() + size).then(|| a - seg.address() + off)
        })
        .ok_or_else(|| Failure::runtime(format!("{name}: no segment")))
}

pub(crate) fn run(a: &BareArgs) -> Result<ExitCode> {
    privileges::check().map_err(Failure::runtime)?;
    let mut ebpf = EbpfLoader::new()
        // The object holds a task storage map (calls in flight), which aya
        // 0.14 creates but has no type for; the bare probes do not use it.
        .allow_unsupported_maps()
        .load(crate::EBPF_OBJECT)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    for name in ["bare_entry", "bare_return"] {
        let p: &mut UProbe = ebpf
            .program_mut(name)
            .ok_or_else(|| Failure::runtime("missing program"))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| Failure::runtime(e.to_string()))?;
        p.load().map_err(|e| Failure::runtime(e.to_string()))?;
    }
    let multi = MultiPrograms::load_named(&ebpf, crate::EBPF_OBJECT, "bare_entry", "bare_return")?;
    let offsets: Vec<u64> = a
        .symbols
        .iter()
        .map(|s| offset_of(&a.library, s))
        .collect::<Result<_>>()?;
    let cookies = vec![0u64; offsets.len()];
    let _entry = multi
        .attach(&a.library, &offsets, &cookies, a.pid, false)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    let _ret = if a.with_return {
        Some(
            multi
                .attach(&a.library, &offsets, &cookies, a.pid, true)
                .map_err(|e| Failure::runtime(e.to_string()))?,
        )
    } else {
        None
    };
    crate::say!(
        "attached {} bare probes",
        offsets.len() * if a.with_return { 2 } else { 1 }
    );
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let start = Instant::now();
    while !STOP.load(std::sync::atomic::Ordering::Relaxed)
        && a.duration.is_none_or(|d| start.elapsed() < d)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let counts: PerCpuArray<_, u64> = PerCpuArray::try_from(
        ebpf.map("BARE_COUNT")
            .ok_or_else(|| Failure::runtime("map"))?,
    )
    .map_err(|e| Failure::runtime(e.to_string()))?;
    let read = |i: u32| {
        counts
            .get(&i, 0)
            .map(|v| v.iter().sum::<u64>())
            .unwrap_or(0)
    };
    println!("{{\"entries\":{},\"returns\":{}}}", read(0), read(1));
    Ok(ExitCode::SUCCESS)
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}
