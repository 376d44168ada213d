//! What one probe hit costs the calling thread on this machine: the
//! breakpoint trap, gputrace's real entry (and return) program with the
//! cookie of a cheap samplable API (`cuEventRecord`), its map and ring
//! buffer work. Measured on two functions of gputrace's own, called in a
//! loop with and without probes, with memory read between two calls so
//! the caches are as cold as a real caller leaves them: one whose first
//! instruction the kernel single-steps out of line (a second trap), one
//! whose first instruction it emulates (`push`;
//! `probes::symbols::Prologue`). Kept in the cache directory by a key of
//! the kernel release, the CPU model and the eBPF object, so only the
//! first run on a machine pays the few seconds it takes.

use std::time::Instant;

use anyhow::{anyhow, Context};
use sha2::{Digest, Sha256};

use crate::cache::Cache;
use crate::catalogue::api_by_name;
use crate::catalogue::ProbeSelection;
use crate::config::Config;
use crate::model::sampling::HitCost;
use crate::probes::attach::Probes;
use crate::probes::links::detach_many;
use crate::probes::links::Attachment;
use crate::probes::links::Link;
use crate::probes::symbols::Prologue;

/// Calls per timed run.
const CALLS: u32 = 2_500;
/// Between two calls each run reads this much memory, a line at a time:
/// a traced program runs its own code between two calls (the Python
/// interpreter and a framework's dispatcher between two launches) and
/// leaves the kernel's trap path, the eBPF program and its maps out of the
/// first caches. Measured hot, in a loop of calls alone, a hit cost about
/// two thirds of what it cost in a PyTorch training step (issue 13).
const POLLUTE_BYTES: usize = 1 << 20;
/// Rounds of three runs (unprobed, entry probe, entry and return probes):
/// each round's differences are taken, and their median kept: runs side
/// by side drift least.
const ROUNDS: usize = 9;

impl HitCost {
    pub fn is_plausible(&self) -> bool {
        let ok = |v: f64| v.is_finite() && v > 0.0 && v < 1e6;
        ok(self.entry_ns)
            && ok(self.entry_return_ns)
            && ok(self.emulated_entry_ns)
            && ok(self.emulated_entry_return_ns)
    }

    /// (entry, entry and return) in seconds, for a function of this class.
    pub fn seconds(&self, p: Prologue) -> (f64, f64) {
        match p {
            Prologue::Stepped => (self.entry_ns * 1e-9, self.entry_return_ns * 1e-9),
            Prologue::Emulated => (
                self.emulated_entry_ns * 1e-9,
                self.emulated_entry_return_ns * 1e-9,
            ),
        }
    }
}

/// The function the probes are put on (its first instruction, a store to
/// the stack, is single-stepped; `Prologue::of` checks it).
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn gputrace_hit_cost_target(event: u64, stream: u64) -> u64 {
    std::hint::black_box(event).wrapping_add(std::hint::black_box(stream))
}

// The same sum behind a `push %rbp`, which x86's uprobes emulate.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".globl gputrace_hit_cost_push_target",
    ".type gputrace_hit_cost_push_target,@function",
    "gputrace_hit_cost_push_target:",
    "push rbp",
    "mov rax, rdi",
    "add rax, rsi",
    "pop rbp",
    "ret",
    ".size gputrace_hit_cost_push_target, . - gputrace_hit_cost_push_target",
);

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    // SAFETY: a leaf function (the global_asm above): it reads two integer
    // registers, restores rbp and returns their sum.
    safe fn gputrace_hit_cost_push_target(event: u64, stream: u64) -> u64;
}

/// The emulated-prologue target (elsewhere the single-stepped one: no
/// other class is told apart there).
#[cfg(target_arch = "x86_64")]
const PUSH_TARGET: Target = gputrace_hit_cost_push_target;
#[cfg(not(target_arch = "x86_64"))]
const PUSH_TARGET: Target = gputrace_hit_cost_target;

type Target = extern "C" fn(u64, u64) -> u64;

/// The cache key of this machine and build.
fn key() -> String {
    let mut h = Sha256::new();
    h.update(std::fs::read("/proc/sys/kernel/osrelease").unwrap_or_default());
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find(|l| l.starts_with("model name"))
        .unwrap_or_default();
    h.update(model.as_bytes());
    h.update(crate::EBPF_OBJECT);
    // Bumped when what is measured changes.
    h.update(b"hit cost v4: stepped and emulated prologues, caches cold, each call timed");
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The cost of a probe hit on this machine, in the cache, by a key of the
/// kernel, the CPU and the eBPF programs.
const HIT_COST_FILE: &str = "probe-hit-cost-v1.json";
/// The hit cost in place over the measured figure, as an overhead budget
/// last read it on this machine.
const IN_PLACE_FILE: &str = "probe-cost-in-place-v1.json";

/// What an in-place ratio can be: at least 1, at most 4.
fn plausible_ratio(r: &f64) -> bool {
    (1.0..=4.0).contains(r)
}

/// Where the in-place cost ratio of this machine is kept: a budget starts
/// from the last one read (a real program's hits cost more than the
/// figure measured on gputrace's own loop, and reading how much more in
/// place takes a minute or more of sampling), and keeps what it reads.
pub(crate) struct InPlaceStore {
    /// The cache opened at start (saving writes through its directory,
    /// without reading the calibration files again).
    cache: Cache,
    key: String,
    /// The ratio last read on this machine, if any.
    pub last: Option<f64>,
}

impl InPlaceStore {
    pub(crate) fn save(&self, ratio: f64) {
        self.cache
            .put(IN_PLACE_FILE, &self.key, ratio, plausible_ratio);
    }
}

/// The cost from the cache, else measured now (and cached). `fresh`: the
/// second value says whether it was measured by this call. The third is
/// where the in-place ratio is kept, under the same key, with the last one
/// read.
pub(crate) fn get(config: &Config) -> anyhow::Result<(HitCost, bool, InPlaceStore)> {
    let key = key();
    let cache = Cache::open(&config.cache_dir);
    let last = cache.get(IN_PLACE_FILE, &key, plausible_ratio);
    let (c, fresh) = match cache.get(HIT_COST_FILE, &key, HitCost::is_plausible) {
        Some(c) => (c, false),
        None => {
            let c = measure(config)?;
            cache.put(HIT_COST_FILE, &key, c, HitCost::is_plausible);
            (c, true)
        }
    };
    Ok((c, fresh, InPlaceStore { cache, key, last }))
}

/// Where the function at `addr` lies in the file mapped as our code.
fn own_offset(addr: u64) -> anyhow::Result<(std::path::PathBuf, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").context("reading /proc/self/maps")?;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (lo, hi) = (u64::from_str_radix(lo, 16)?, u64::from_str_radix(hi, 16)?);
        if addr >= lo && addr < hi {
            let off = u64::from_str_radix(off, 16)?;
            return Ok((std::fs::read_link("/proc/self/exe")?, addr - lo + off));
        }
    }
    Err(anyhow!("our own code is not in /proc/self/maps"))
}

/// What one call of `target` takes, in nanoseconds: each call is timed
/// on its own, the memory read between two calls left out of the time
/// (its pace drifts with the machine's load far more than a hit costs).
/// The slowest 2% of calls are dropped (an interrupt or a preemption
/// landing in a call); the rest are averaged, so a cost that only some
/// calls pay is still counted.
fn timed_run(target: Target, memory: &[u8]) -> f64 {
    let mut sum = 0u64;
    let mut times = Vec::with_capacity(CALLS as usize);
    for i in 0..CALLS {
        for line in memory.iter().step_by(64) {
            sum = sum.wrapping_add(u64::from(*line));
        }
        std::hint::black_box(sum);
        let t = Instant::now();
        std::hint::black_box(target(u64::from(i), 7));
        times.push(t.elapsed().as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    times.truncate(times.len() - times.len() / 50);
    times.iter().sum::<f64>() / times.len() as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Measures the cost: runs of the loop unprobed, with the entry probe, and
/// with entry and return probes, interleaved, on each target.
pub(crate) fn measure(config: &Config) -> anyhow::Result<HitCost> {
    let mut cfg = config.clone();
    // Room for every record of a run below the wakeup threshold (a
    // quarter of the ring), so no run pays wakeups a drained ring would not.
    cfg.ring_bytes = 32 << 20;
    let mut probes = Probes::load(ProbeSelection::default(), &cfg, None)?;
    let mut ring = probes.take_ring()?;
    let api = api_by_name("cuEventRecord")
        .ok_or_else(|| anyhow!("cuEventRecord not in the catalogue"))?;
    let cookie = api.cookie();
    let pid = std::process::id();
    let memory = vec![1u8; POLLUTE_BYTES];
    let mut one = |target: Target| -> anyhow::Result<(f64, f64)> {
        let (exe, offset) = own_offset(target as *const () as u64)?;
        let mut entry = Vec::new();
        let mut both = Vec::new();
        for _ in 0..ROUNDS {
            let bare = timed_run(target, &memory);
            for with_ret in [false, true] {
                let att = attach_raw(&mut probes, &exe, offset, cookie.0, pid, with_ret)?;
                let ns = timed_run(target, &memory);
                detach_many(vec![att]);
                while ring.next().is_some() {}
                if with_ret {
                    both.push(ns - bare);
                } else {
                    entry.push(ns - bare);
                }
            }
        }
        let entry = median(entry).max(1.0);
        // A return probe adds a second trap: never cheaper than the entry
        // alone.
        Ok((entry, median(both).max(entry)))
    };
    let (entry_ns, entry_return_ns) = one(gputrace_hit_cost_target)?;
    let (emulated_entry_ns, emulated_entry_return_ns) = one(PUSH_TARGET)?;
    Ok(HitCost {
        entry_ns,
        entry_return_ns,
        emulated_entry_ns,
        emulated_entry_return_ns,
    })
}

/// Attaches the real entry (and return) program at `offset` of `path` for
/// one process.
fn attach_raw(
    probes: &mut Probes,
    path: &std::path::Path,
    offset: u64,
    cookie: u64,
    pid: u32,
    with_ret: bool,
) -> anyhow::Result<Attachment> {
    let mut att = Attachment {
        per_task: probes.inflight_per_task(),
        ..Attachment::default()
    };
    if let Some(multi) = probes.multi_programs() {
        if with_ret {
            att.ret.push(Link::Multi(multi.attach(
                path,
                &[offset],
                &[cookie],
                Some(pid),
                true,
            )?));
        }
        att.entry.push(Link::Multi(multi.attach(
            path,
            &[offset],
            &[cookie],
            Some(pid),
            false,
        )?));
        return Ok(att);
    }
    use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
    let scope =
        UProbeScope::OneProcess(std::num::NonZeroU32::new(pid).ok_or_else(|| anyhow!("pid 0"))?);
    for is_ret in if with_ret {
        &[true, false][..]
    } else {
        &[false][..]
    } {
        let prog = probes.uprobe_program(*is_ret)?;
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(offset),
            cookie: Some(cookie),
        };
        let id = prog.attach(point, path, scope)?;
        let link = Link::Perf(prog.take_link(id)?);
        if *is_ret {
            att.ret.push(link);
        } else {
            att.entry.push(link);
        }
    }
    Ok(att)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calibration's two targets start with the instruction of the
    /// class they stand for (a compiler that started the Rust one with a
    /// push would measure the emulated class twice).
    #[test]
    fn the_targets_prologues_are_of_their_classes() {
        let first = |t: Target| {
            let (exe, off) = own_offset(t as *const () as u64).unwrap();
            let data = std::fs::read(exe).unwrap();
            Prologue::of(&data[off as usize..])
        };
        assert_eq!(first(gputrace_hit_cost_target), Prologue::Stepped);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(first(PUSH_TARGET), Prologue::Emulated);
        }
    }

    #[test]
    fn each_class_has_its_cost() {
        let c = HitCost {
            entry_ns: 4000.0,
            entry_return_ns: 5000.0,
            emulated_entry_ns: 900.0,
            emulated_entry_return_ns: 1500.0,
        };
        let near =
            |(a, b): (f64, f64), (x, y): (f64, f64)| (a - x).abs() < 1e-15 && (b - y).abs() < 1e-15;
        assert!(near(c.seconds(Prologue::Stepped), (4e-6, 5e-6)));
        assert!(near(c.seconds(Prologue::Emulated), (9e-7, 1.5e-6)));
        assert!(c.is_plausible());
        // A cache entry written before the emulated class was measured.
        let old: HitCost =
            serde_json::from_str(r#"{"entry_ns": 4000.0, "entry_return_ns": 5000.0}"#).unwrap();
        assert!(!old.is_plausible());
    }

    /// Five calibrations in a row, printed (root: it attaches real
    /// probes). How far they spread is what the budget's charge per hit
    /// rests on: `cargo test -p tracer --lib hitcost -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs root; prints figures, asserts only their order"]
    fn calibrations_agree() {
        let config = Config::default();
        for _ in 0..5 {
            let c = measure(&config).unwrap();
            eprintln!("{c:?}");
            assert!(c.is_plausible());
            assert!(c.entry_return_ns >= c.entry_ns);
            assert!(c.emulated_entry_return_ns >= c.emulated_entry_ns);
        }
    }
}
