//! Finding functions in another process: /proc/PID/maps for where a shared
//! object is mapped, the ELF `.dynsym` of the mapped file for the symbol, and
//! the load bias between the two.
//!
//! The file is read through /proc/PID/map_files/START-END (the very file that
//! is mapped, even if it was since replaced or deleted, and whatever mount
//! namespace the target is in), else through /proc/PID/root/PATH.

use std::collections::BTreeMap;
use std::fs;

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader as _, Sym as _};
use object::Endianness;

use crate::maps::Mapping;
use crate::Error;

/// Addresses of the dynamic loader API in the target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DlApi {
    pub(crate) dlopen: u64,
    pub(crate) dlsym: u64,
    pub(crate) dlclose: u64,
    pub(crate) dlerror: u64,
}

const DL_NAMES: [&str; 4] = ["dlopen", "dlsym", "dlclose", "dlerror"];

/// Which mapped objects may hold the dl* functions, in the order searched:
/// glibc >= 2.34 has them in libc.so.6, older glibc in libdl.so.2, musl in
/// its loader.
fn dl_candidate_rank(file_name: &str) -> Option<u8> {
    if file_name.starts_with("libc.so")
        || (file_name.starts_with("libc-") && file_name.ends_with(".so"))
    {
        Some(0)
    } else if file_name.starts_with("libdl.so") || file_name.starts_with("libdl-") {
        Some(1)
    } else if file_name.starts_with("ld-musl-") {
        Some(2)
    } else {
        None
    }
}

/// Mappings grouped by the file they map (device, inode), in address order.
pub(crate) fn file_groups(maps: &[Mapping]) -> Vec<Vec<&Mapping>> {
    let mut groups: BTreeMap<((u32, u32), u64), Vec<&Mapping>> = BTreeMap::new();
    for m in maps.iter().filter(|m| m.is_file()) {
        groups.entry((m.dev, m.inode)).or_default().push(m);
    }
    let mut out: Vec<Vec<&Mapping>> = groups.into_values().collect();
    out.sort_by_key(|g| g.first().map(|m| m.start));
    out
}

/// Finds dlopen, dlsym, dlclose and dlerror in the target.
pub(crate) fn find_dl_api(pid: i32, maps: &[Mapping]) -> Result<DlApi, Error> {
    let mut candidates: Vec<(u8, Vec<&Mapping>)> = file_groups(maps)
        .into_iter()
        .filter(|g| g.iter().any(|m| m.executable()))
        .filter_map(|g| Some((dl_candidate_rank(g.first()?.file_name())?, g)))
        .collect();
    candidates.sort_by_key(|(rank, _)| *rank);
    if candidates.is_empty() {
        return Err(Error::NoDlopen {
            pid,
            reason: "no libc.so, libdl.so or musl loader mapped (statically linked?)".into(),
        });
    }
    let mut found: [Option<u64>; 4] = [None; 4];
    let mut problems = Vec::new();
    for (_, group) in &candidates {
        match resolve(pid, group, &DL_NAMES) {
            Ok(addrs) => {
                for (slot, addr) in found.iter_mut().zip(addrs) {
                    *slot = slot.or(addr);
                }
            }
            Err(e) => problems.push(e),
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    match found {
        [Some(dlopen), Some(dlsym), Some(dlclose), Some(dlerror)] => Ok(DlApi {
            dlopen,
            dlsym,
            dlclose,
            dlerror,
        }),
        _ => {
            let missing: Vec<&str> = DL_NAMES
                .iter()
                .zip(found)
                .filter(|(_, a)| a.is_none())
                .map(|(n, _)| *n)
                .collect();
            let mut reason = format!("{} not found in the mapped C library", missing.join(", "));
            if !problems.is_empty() {
                reason.push_str(&format!(" ({})", problems.join("; ")));
            }
            Err(Error::NoDlopen { pid, reason })
        }
    }
}

/// Reads the file behind a group of mappings.
pub(crate) fn read_mapped_file(pid: i32, group: &[&Mapping]) -> Result<Vec<u8>, String> {
    let first = group.first().ok_or("empty mapping group")?;
    let via_map_files = format!("/proc/{pid}/map_files/{:x}-{:x}", first.start, first.end);
    match fs::read(&via_map_files) {
        Ok(data) => Ok(data),
        Err(e1) => {
            if first.path.ends_with(" (deleted)") {
                return Err(format!("{via_map_files}: {e1}"));
            }
            let via_root = format!("/proc/{pid}/root{}", first.path);
            fs::read(&via_root).map_err(|e2| format!("{via_map_files}: {e1}; {via_root}: {e2}"))
        }
    }
}

/// Absolute addresses in the target of `names` in the file mapped by `group`.
pub(crate) fn resolve(
    pid: i32,
    group: &[&Mapping],
    names: &[&str],
) -> Result<Vec<Option<u64>>, String> {
    let data = read_mapped_file(pid, group)?;
    let file = ElfFile64::<Endianness>::parse(&*data)
        .map_err(|e| format!("{}: {e}", group.first().map_or("", |m| &m.path)))?;
    let bias = load_bias(&file, group).ok_or("cannot compute the load bias")?;
    Ok(dynsym_values(&file, &data, names)
        .into_iter()
        .map(|v| v.map(|v| bias.wrapping_add(v)))
        .collect())
}

/// The load bias: runtime address minus ELF virtual address. Taken from the
/// mapping with the lowest file offset and the PT_LOAD segment holding it.
pub(crate) fn load_bias(file: &ElfFile64<Endianness>, group: &[&Mapping]) -> Option<u64> {
    let endian = file.endian();
    let m = group.iter().min_by_key(|m| m.offset)?;
    file.elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .find_map(|ph| {
            let off: u64 = ph.p_offset(endian);
            let vaddr: u64 = ph.p_vaddr(endian);
            let filesz: u64 = ph.p_filesz(endian);
            let page_off = off & !0xfff;
            (page_off <= m.offset && m.offset < off.saturating_add(filesz.max(1)))
                // Address of file offset m.offset in this segment.
                .then(|| {
                    m.start
                        .wrapping_sub(vaddr.wrapping_sub(off).wrapping_add(m.offset))
                })
        })
}

/// `st_value` of each name among the defined functions and objects of the
/// dynamic symbol table. Where a name has several versions (dlopen@GLIBC_2.2.5
/// and dlopen@@GLIBC_2.34) the default (non-hidden) one wins.
pub(crate) fn dynsym_values(
    file: &ElfFile64<Endianness>,
    data: &[u8],
    names: &[&str],
) -> Vec<Option<u64>> {
    let endian = file.endian();
    let table = file.elf_dynamic_symbol_table();
    let versions = file
        .elf_section_table()
        .versions(endian, data)
        .ok()
        .flatten();
    let mut out: Vec<Option<(u64, bool)>> = vec![None; names.len()];
    for (index, sym) in table.enumerate() {
        let kind = sym.st_type();
        if sym.is_undefined(endian) || !(kind == elf::STT_FUNC || kind == elf::STT_OBJECT) {
            continue;
        }
        let Ok(name) = table.symbol_name(endian, sym) else {
            continue;
        };
        let Some(i) = names.iter().position(|n| n.as_bytes() == name) else {
            continue;
        };
        let hidden = versions
            .as_ref()
            .is_some_and(|v| v.version_index(endian, index).is_hidden());
        let value: u64 = sym.st_value(endian);
        match out[i] {
            Some((_, false)) => {}
            _ => out[i] = Some((value, hidden)),
        }
    }
    out.into_iter().map(|v| v.map(|(value, _)| value)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::read_maps;
    use std::ffi::CString;

    /// The finder, run on this very process, agrees with our own dlsym.
    #[test]
    fn finds_own_dl_functions() {
        let pid = std::process::id() as i32;
        let maps = read_maps(pid).unwrap();
        let api = find_dl_api(pid, &maps).unwrap();
        for (name, addr) in DL_NAMES
            .iter()
            .zip([api.dlopen, api.dlsym, api.dlclose, api.dlerror])
        {
            let c = CString::new(*name).unwrap();
            // SAFETY: dlsym with RTLD_DEFAULT and a valid C string only looks a symbol up.
            let expect = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) } as u64;
            assert_eq!(addr, expect, "{name}");
        }
    }

    #[test]
    fn ranks_candidates() {
        assert_eq!(dl_candidate_rank("libc.so.6"), Some(0));
        assert_eq!(dl_candidate_rank("libc-2.31.so"), Some(0));
        assert_eq!(dl_candidate_rank("libdl.so.2"), Some(1));
        assert_eq!(dl_candidate_rank("ld-musl-x86_64.so.1"), Some(2));
        assert_eq!(dl_candidate_rank("libcuda.so.1"), None);
        assert_eq!(dl_candidate_rank("libc++.so.1"), None);
    }
}
