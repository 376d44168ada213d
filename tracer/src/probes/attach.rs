//! Loading the eBPF object and attaching its two programs to library symbols.

use std::collections::HashMap;
use std::num::NonZeroU32;

use anyhow::{anyhow, Context};
use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope};
use aya::programs::UProbe;
use aya::{Ebpf, EbpfLoader};
use tracer_common::{LostReason, LOST_SLOTS};

use super::catalogue::ProbeSelection;
use super::discover::LibraryFile;
use super::symbols::{resolve_symbols, ResolvedSymbol};

const ENTRY: &str = "call_entry";
const RETURN: &str = "call_return";

/// Default ring buffer size: 16 MiB holds ~80,000 call records.
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;

/// Who a set of probes fires for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One process: the kernel plants breakpoints in that process only.
    Process(u32),
    /// Every process that maps the file.
    All,
}

impl Scope {
    fn uprobe_scope(self) -> anyhow::Result<UProbeScope> {
        Ok(match self {
            Scope::All => UProbeScope::AllProcesses,
            Scope::Process(pid) => {
                UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or_else(|| anyhow!("pid 0"))?)
            }
        })
    }
}

/// The links made for one library file in one scope.
#[derive(Debug, Default)]
pub struct Attachment {
    entry: Vec<UProbeLinkId>,
    ret: Vec<UProbeLinkId>,
}

impl Attachment {
    /// Number of probes (entry and return) in this attachment.
    pub fn probes(&self) -> usize {
        self.entry.len() + self.ret.len()
    }
}

/// Counts of what the probes could not record, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LostCounts {
    /// The ring buffer was full.
    pub ring_full: u64,
    /// The in-flight map could not take an entry record.
    pub inflight_full: u64,
    /// Returns whose entry record had been evicted.
    pub unpaired: u64,
    /// Stack/struct reads that failed (the call was still recorded).
    pub read_failed: u64,
}

impl LostCounts {
    /// Calls that were made but are missing from the trace.
    pub fn events_lost(&self) -> u64 {
        self.ring_full + self.inflight_full + self.unpaired
    }
}

/// The loaded eBPF programs and every attachment made with them.
pub struct Probes {
    ebpf: Ebpf,
    selection: ProbeSelection,
    symbols: HashMap<(u64, u64), Vec<ResolvedSymbol>>,
}

impl Probes {
    /// Loads and verifies the programs; attaches nothing yet.
    pub fn load(selection: ProbeSelection, ring_bytes: u32) -> anyhow::Result<Self> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("EVENTS", ring_bytes)
            .load(crate::EBPF_OBJECT)
            .context("loading the eBPF object")?;
        for name in [ENTRY, RETURN] {
            let prog: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?
                .try_into()?;
            prog.load().with_context(|| format!("verifying eBPF program {name}"))?;
        }
        Ok(Self { ebpf, selection, symbols: HashMap::new() })
    }

    /// The catalogue symbols of `file` that the selection asks for.
    pub fn symbols(&mut self, file: &LibraryFile) -> anyhow::Result<Vec<ResolvedSymbol>> {
        let key = (file.dev, file.inode);
        if !self.symbols.contains_key(&key) {
            let found = resolve_symbols(&file.path, file.lib)?;
            self.symbols.insert(key, found);
        }
        Ok(self.symbols[&key]
            .iter()
            .filter(|s| self.selection.mode(s.api.family).is_some())
            .cloned()
            .collect())
    }

    /// Attaches an entry probe (and a return probe unless the family is
    /// `:args`) to every selected symbol of `file`.
    pub fn attach(&mut self, file: &LibraryFile, scope: Scope) -> anyhow::Result<Attachment> {
        let symbols = self.symbols(file)?;
        let mut att = Attachment::default();
        let result = self.attach_symbols(file, scope, &symbols, &mut att);
        if let Err(e) = result {
            self.detach(att);
            return Err(e);
        }
        Ok(att)
    }

    fn attach_symbols(
        &mut self,
        file: &LibraryFile,
        scope: Scope,
        symbols: &[ResolvedSymbol],
        att: &mut Attachment,
    ) -> anyhow::Result<()> {
        let uscope = scope.uprobe_scope()?;
        for sym in symbols {
            let args_only = self.selection.mode(sym.api.family) == Some(true);
            let mut cookie = sym.api.cookie();
            if args_only {
                cookie = cookie.with_entry_only();
            }
            let point = |c: u64| UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(sym.file_offset),
                cookie: Some(c),
            };
            let entry = self.program(ENTRY)?;
            att.entry.push(entry.attach(point(cookie.0), &file.path, uscope).with_context(|| {
                format!("attaching a uprobe to {} in {}", sym.api.name, file.path.display())
            })?);
            if !args_only {
                let ret = self.program(RETURN)?;
                att.ret.push(ret.attach(point(cookie.0), &file.path, uscope).with_context(|| {
                    format!("attaching a uretprobe to {} in {}", sym.api.name, file.path.display())
                })?);
            }
        }
        Ok(())
    }

    /// Removes the probes of an attachment. Errors are ignored: the target
    /// may be gone, which removes them anyway.
    pub fn detach(&mut self, att: Attachment) {
        if let Ok(p) = self.program(ENTRY) {
            for id in att.entry {
                let _ = p.detach(id);
            }
        }
        if let Ok(p) = self.program(RETURN) {
            for id in att.ret {
                let _ = p.detach(id);
            }
        }
    }

    fn program(&mut self, name: &str) -> anyhow::Result<&mut UProbe> {
        Ok(self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow!("program {name} missing"))?
            .try_into()?)
    }

    /// Takes the ring buffer the programs write to (once).
    pub fn take_ring(&mut self) -> anyhow::Result<RingBuf<aya::maps::MapData>> {
        let map = self.ebpf.take_map("EVENTS").ok_or_else(|| anyhow!("EVENTS map missing"))?;
        Ok(RingBuf::try_from(map)?)
    }

    /// A handle on the lost-event counters, read at any time.
    pub fn take_lost(&mut self) -> anyhow::Result<LostCounter> {
        let map = self.ebpf.take_map("LOST").ok_or_else(|| anyhow!("LOST map missing"))?;
        Ok(LostCounter(PerCpuArray::try_from(map)?))
    }
}

/// The per-CPU counters of `LostReason`.
pub struct LostCounter(PerCpuArray<MapData, u64>);

impl LostCounter {
    pub fn read(&self) -> LostCounts {
        let slot = |r: LostReason| -> u64 {
            self.0.get(&(r as u32), 0).map(|v| v.iter().sum()).unwrap_or(0)
        };
        let _: [(); 4] = [(); LOST_SLOTS as usize];
        LostCounts {
            ring_full: slot(LostReason::RingFull),
            inflight_full: slot(LostReason::InflightFull),
            unpaired: slot(LostReason::Unpaired),
            read_failed: slot(LostReason::ReadFailed),
        }
    }
}
