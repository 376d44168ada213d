//! Where a libnccl build keeps a communicator's identity and counters in
//! `struct ncclComm`, read from the library's own machine code (nothing is
//! run, nothing is hard-coded; offsets move with every release, the 2.28
//! struct is over 1 MiB).
//!
//! - `rank`, `nRanks`, `cudaDev`: the exported getters `ncclCommUserRank`,
//!   `ncclCommCount`, `ncclCommCuDevice` store one field of the
//!   communicator through their second argument.
//! - `commHash`: the collectives' NVTX payload reads `comm->commHash` before
//!   anything else of the communicator; `ncclAllReduce`, `ncclBroadcast`,
//!   `ncclAllGather` and `ncclReduceScatter` must agree.
//! - `seqNumber[5]` (the per-function collective counters, 2.23+; counted
//!   whether or not a profiler is loaded from 2.26): the only atomic add of
//!   `ncclProfilerStartTaskEvents` (a local symbol: needs `.symtab`).
//! - the struct's size: `CommCheck` (called by the getters) compares
//!   `startMagic` and `endMagic` with `NCCL_MAGIC` (2.21+).
//!
//! A field whose rule finds nothing, or finds disagreeing answers, is
//! `None` with the reason in `notes`.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde::{Deserialize, Serialize};

use crate::nccl::hash::NcclVersion;
use crate::nccl::x86::sweep;
use crate::nccl::x86::Fact;

/// `NCCL_MAGIC`, what `startMagic` and `endMagic` hold (2.21+).
pub const NCCL_MAGIC: u64 = 0x0280_0280_0280_0280;

/// The release from which `seqNumber` counts every collective (before, it
/// counts only while a profiler plugin is loaded).
pub const SEQ_ALWAYS_COUNTED: NcclVersion = NcclVersion(2, 26, 0);

/// Field offsets in `struct ncclComm` for one libnccl file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommLayout {
    /// From the `NCCL version X.Y.Z` literal in the file.
    pub version: Option<NcclVersion>,
    pub comm_hash: Option<u32>,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub cuda_dev: Option<u32>,
    /// `seqNumber[0]` (Broadcast); `[func]` is 8 bytes per function further.
    pub seq_number: Option<u32>,
    /// `sizeof(struct ncclComm)`, from `endMagic`.
    pub size: Option<u32>,
    /// Why a field is unknown, one line each.
    pub notes: Vec<String>,
}

impl CommLayout {
    /// `seq_number` when the counters can name collectives across ranks
    /// (known offset, a release that counts without a profiler).
    pub fn usable_seq(&self) -> Option<u32> {
        match self.version {
            Some(v) if v >= SEQ_ALWAYS_COUNTED => self.seq_number,
            _ => None,
        }
    }

    /// One line for logs: what was found.
    pub fn describe(&self) -> String {
        let f = |o: Option<u32>| o.map_or("?".to_string(), |v| format!("{v:#x}"));
        format!(
            "NCCL {} commHash {} rank {} nRanks {} cudaDev {} seqNumber {} size {}",
            self.version.map_or("?".into(), |v| v.to_string()),
            f(self.comm_hash),
            f(self.rank),
            f(self.nranks),
            f(self.cuda_dev),
            f(self.seq_number),
            f(self.size)
        )
    }
}

/// Reads `path` (a libnccl shared library) and decodes its layout.
pub fn decode_file(path: &Path) -> Result<CommLayout, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: a read-only mapping of a library file; libraries are replaced
    // by rename, not rewritten in place, and a torn read only fails a rule.
    let data = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| format!("cannot map {}: {e}", path.display()))?;
    decode(&data)
}

/// A function's bytes and address.
struct Function<'a> {
    addr: u64,
    code: &'a [u8],
}

struct Elf<'a> {
    file: object::File<'a>,
    /// name → (address, size), dynamic symbols first.
    symbols: Vec<(&'a str, u64, u64)>,
}

impl<'a> Elf<'a> {
    fn function(&self, name: &str) -> Option<Function<'a>> {
        let &(_, addr, size) = self.symbols.iter().find(|(n, _, _)| *n == name)?;
        self.code_at(addr, size)
    }

    /// The first function whose name contains `part`.
    fn function_containing(&self, part: &str) -> Option<Function<'a>> {
        let &(_, addr, size) = self.symbols.iter().find(|(n, _, _)| n.contains(part))?;
        self.code_at(addr, size)
    }

    fn code_at(&self, addr: u64, size: u64) -> Option<Function<'a>> {
        // A symbol without a size: read a bounded window.
        let size = if size == 0 { 4096 } else { size.min(1 << 20) };
        for s in self.file.sections() {
            let (start, len) = (s.address(), s.size());
            if addr >= start && addr < start + len {
                let data = s.data().ok()?;
                let from = (addr - start) as usize;
                let to = (from + size as usize).min(data.len());
                return Some(Function {
                    addr,
                    code: data.get(from..to)?,
                });
            }
        }
        None
    }
}

/// Decodes the layout from the bytes of a libnccl file.
pub fn decode(data: &[u8]) -> Result<CommLayout, String> {
    let file =
        object::File::parse(data).map_err(|e| format!("not an ELF file we can read: {e}"))?;
    let mut symbols = Vec::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if sym.is_undefined() || sym.address() == 0 || sym.kind() != SymbolKind::Text {
            continue;
        }
        if let Ok(name) = sym.name() {
            symbols.push((
                name.split('@').next().unwrap_or(name),
                sym.address(),
                sym.size(),
            ));
        }
    }
    let elf = Elf { file, symbols };
    let mut out = CommLayout {
        version: version_of(&elf.file),
        ..CommLayout::default()
    };
    if out.version.is_none() {
        out.notes
            .push("no \"NCCL version\" literal in the file".into());
    }
    out.rank = getter(&elf, "ncclCommUserRank", &mut out.notes);
    out.nranks = getter(&elf, "ncclCommCount", &mut out.notes);
    out.cuda_dev = getter(&elf, "ncclCommCuDevice", &mut out.notes);
    out.size = struct_size(&elf, &mut out.notes);
    out.comm_hash = comm_hash(&elf, out.version, out.rank, &mut out.notes);
    out.seq_number = seq_number(&elf, &mut out.notes);
    let fields = [
        out.comm_hash,
        out.rank,
        out.nranks,
        out.cuda_dev,
        out.seq_number,
    ];
    if let Some(size) = out.size {
        if fields.iter().flatten().any(|&off| off + 8 > size) {
            out.notes.push(format!(
                "a field lies past the struct's end ({size:#x}): layout rejected"
            ));
            return Ok(CommLayout {
                version: out.version,
                notes: out.notes,
                ..CommLayout::default()
            });
        }
    }
    let known: Vec<u32> = fields.iter().flatten().copied().collect();
    for (i, a) in known.iter().enumerate() {
        if known[i + 1..].contains(a) {
            out.notes
                .push(format!("two fields decoded at {a:#x}: layout rejected"));
            return Ok(CommLayout {
                version: out.version,
                notes: out.notes,
                ..CommLayout::default()
            });
        }
    }
    Ok(out)
}

/// The release named by the `NCCL version X.Y.Z` literal (`VERSION_STRING`).
fn version_of(file: &object::File) -> Option<NcclVersion> {
    const NEEDLE: &[u8] = b"NCCL version ";
    for s in file.sections() {
        if !matches!(s.name(), Ok(".rodata")) {
            continue;
        }
        let data = s.data().ok()?;
        let mut from = 0;
        while let Some(i) = find(&data[from..], NEEDLE) {
            let at = from + i;
            let tail = &data[at..data.len().min(at + 40)];
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            if let Some(v) = std::str::from_utf8(&tail[..end])
                .ok()
                .and_then(NcclVersion::parse)
            {
                return Some(v);
            }
            from = at + 1;
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn single<T: PartialEq + Copy>(found: &[T]) -> Result<Option<T>, ()> {
    match found.first() {
        None => Ok(None),
        Some(&first) if found.iter().all(|&x| x == first) => Ok(Some(first)),
        Some(_) => Err(()),
    }
}

fn to_offset(disp: i64) -> Option<u32> {
    u32::try_from(disp).ok().filter(|&d| d > 0)
}

/// `getter(comm, int* out)`: the 4-byte field of argument 0 stored through
/// argument 1.
fn getter(elf: &Elf, name: &str, notes: &mut Vec<String>) -> Option<u32> {
    let Some(f) = elf.function(name) else {
        notes.push(format!("{name}: not in the file"));
        return None;
    };
    let found: Vec<i64> = sweep(f.code, f.addr, &[0, 1])
        .into_iter()
        .filter_map(|fact| match fact {
            Fact::StoreField {
                to: 1,
                from: 0,
                disp,
                size: 4,
            } => Some(disp),
            _ => None,
        })
        .collect();
    match single(&found) {
        Ok(Some(d)) => to_offset(d),
        Ok(None) => {
            notes.push(format!("{name}: no store of a communicator field found"));
            None
        }
        Err(()) => {
            notes.push(format!("{name}: stores of different fields ({found:x?})"));
            None
        }
    }
}

/// `endMagic`'s offset + 8, from the first function `ncclCommUserRank`
/// calls that compares both ends of the struct with `NCCL_MAGIC`.
fn struct_size(elf: &Elf, notes: &mut Vec<String>) -> Option<u32> {
    let f = elf.function("ncclCommUserRank")?;
    for fact in sweep(f.code, f.addr, &[0, 1]) {
        let Fact::Call { target } = fact else {
            continue;
        };
        let Some(callee) = elf.code_at(target, 0) else {
            continue;
        };
        let magic: Vec<i64> = sweep(
            &callee.code[..callee.code.len().min(256)],
            callee.addr,
            &[0],
        )
        .into_iter()
        .filter_map(|f| match f {
            Fact::CompareConst {
                arg: 0,
                disp,
                value,
            } if value == NCCL_MAGIC => Some(disp),
            _ => None,
        })
        .collect();
        if magic.contains(&0) {
            if let Some(end) = magic.iter().copied().filter(|&d| d > 0).max() {
                return u32::try_from(end + 8).ok();
            }
        }
    }
    notes.push("no CommCheck with start and end magic found: struct size unknown".into());
    None
}

/// The collectives whose first 8-byte load from the communicator is
/// `commHash` (NVTX payload), with the communicator's argument number.
const HASH_READERS: [(&str, u8); 4] = [
    ("ncclAllReduce", 5),
    ("ncclBroadcast", 5),
    ("ncclAllGather", 4),
    ("ncclReduceScatter", 5),
];

/// Releases whose `struct ncclComm` declares `uint64_t commHash;` right
/// before `int rank;` (checked in the comm.h of every tag 2.18.1 .. 2.30.x).
fn hash_before_rank(version: Option<NcclVersion>) -> bool {
    version.is_some_and(|v| v >= NcclVersion(2, 18, 0) && v < NcclVersion(2, 31, 0))
}

/// `commHash` from the collectives' NVTX payload (2.26+ have it), checked
/// against (or, for older releases, taken from) the field order.
fn comm_hash(
    elf: &Elf,
    version: Option<NcclVersion>,
    rank: Option<u32>,
    notes: &mut Vec<String>,
) -> Option<u32> {
    let by_order = rank
        .filter(|_| hash_before_rank(version))
        .and_then(|r| r.checked_sub(8));
    match (nvtx_comm_hash(elf, notes), by_order) {
        (Some(n), Some(o)) if n != o => {
            notes.push(format!(
                "commHash: the NVTX payload reads {n:#x}, the field order puts it at {o:#x}: unknown"
            ));
            None
        }
        (Some(n), _) => Some(n),
        (None, Some(o)) => {
            notes.push(format!(
                "commHash: {o:#x} from the field order (right before rank)"
            ));
            Some(o)
        }
        (None, None) => None,
    }
}

fn nvtx_comm_hash(elf: &Elf, notes: &mut Vec<String>) -> Option<u32> {
    let mut found = Vec::new();
    for (name, arg) in HASH_READERS {
        let Some(f) = elf.function(name) else {
            notes.push(format!("commHash: {name} not in the file"));
            return None;
        };
        let first = sweep(f.code, f.addr, &[arg])
            .into_iter()
            .find_map(|fact| match fact {
                Fact::Load {
                    arg: a,
                    disp,
                    size: 8,
                } if a == arg && disp > 0 => Some(disp),
                _ => None,
            });
        match first {
            Some(d) => found.push(d),
            None => {
                notes.push(format!(
                    "commHash: {name} reads no 8-byte communicator field"
                ));
                return None;
            }
        }
    }
    match single(&found) {
        Ok(Some(d)) => to_offset(d),
        _ => {
            notes.push(format!("commHash: the collectives disagree ({found:x?})"));
            None
        }
    }
}

fn seq_number(elf: &Elf, notes: &mut Vec<String>) -> Option<u32> {
    let Some(f) = elf.function_containing("ncclProfilerStartTaskEvents") else {
        notes.push(
            "seqNumber: no ncclProfilerStartTaskEvents symbol (stripped file, or NCCL < 2.23)"
                .into(),
        );
        return None;
    };
    let found: Vec<i64> = sweep(f.code, f.addr, &[0])
        .into_iter()
        .filter_map(|fact| match fact {
            Fact::LockAdd {
                scale: 8,
                disp,
                imm: 1,
            } => Some(disp),
            _ => None,
        })
        .collect();
    match single(&found) {
        Ok(Some(d)) => to_offset(d),
        Ok(None) => {
            notes.push("seqNumber: no counter update found".into());
            None
        }
        Err(()) => {
            notes.push(format!("seqNumber: several counter updates ({found:x?})"));
            None
        }
    }
}
