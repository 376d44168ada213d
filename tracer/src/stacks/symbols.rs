//! Function symbols of one ELF file: nearest-symbol lookup and demangling.

use std::ops::Range;

/// One function symbol; its name is a byte range of the file mapping, so a
/// library with a million symbols costs 32 bytes each, not a copy of its
/// string table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    addr: u64,
    size: u64,
    name: Range<usize>,
}

/// Sorted function symbols of one file (SVMAs).
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    entries: Vec<Entry>,
}

/// A symbol found for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Byte range of the raw (mangled) name in the file.
    pub name: (usize, usize),
    /// Offset of the address from the symbol's start.
    pub offset: u64,
}

impl SymbolTable {
    /// Builds from `(address, size, name)` where every `name` borrows from
    /// the file mapping that starts at `base`. `.symtab` entries should come
    /// first: for two names at one address the first is kept (`.symtab`
    /// holds local functions and the unversioned names).
    pub fn from_symbols<'a>(
        base: *const u8,
        syms: impl Iterator<Item = (u64, u64, &'a str)>,
    ) -> Self {
        let base = base as usize;
        let mut entries: Vec<Entry> = syms
            .filter(|(addr, _, name)| *addr != 0 && !name.is_empty())
            .map(|(addr, size, name)| {
                let start = name.as_ptr() as usize - base;
                Entry {
                    addr,
                    size,
                    name: start..start + name.len(),
                }
            })
            .collect();
        // Stable: keeps the caller's order among entries at one address.
        entries.sort_by_key(|e| e.addr);
        entries.dedup_by_key(|e| e.addr);
        Self { entries }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The symbol holding SVMA `addr`: the last one starting at or before
    /// it, if `addr` is inside its size (symbols without a size, as some
    /// assembly has, hold everything up to the next symbol).
    pub fn lookup(&self, addr: u64) -> Option<Hit> {
        let i = self
            .entries
            .partition_point(|e| e.addr <= addr)
            .checked_sub(1)?;
        let e = &self.entries[i];
        let inside = if e.size > 0 {
            addr < e.addr + e.size
        } else {
            self.entries.get(i + 1).is_none_or(|n| addr < n.addr)
        };
        inside.then_some(Hit {
            name: (e.name.start, e.name.end),
            offset: addr - e.addr,
        })
    }
}

/// A readable function name: Rust (legacy and v0) and C++ (Itanium) names
/// demangled without parameter lists or return types (a stack of libtorch
/// frames with full template parameters is unreadable, and the parameters
/// rarely tell two frames of one stack apart); anything else as it is.
pub(crate) fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        // `{:#}` drops the hash suffix of legacy Rust names.
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw) {
            let opts = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(s) = sym.demangle(&opts) {
                return s;
            }
        }
    }
    raw.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(names: &'static str, syms: &[(u64, u64, Range<usize>)]) -> SymbolTable {
        SymbolTable::from_symbols(
            names.as_ptr(),
            syms.iter().map(|(a, s, r)| (*a, *s, &names[r.clone()])),
        )
    }

    #[test]
    fn lookup_finds_the_holding_symbol_and_respects_sizes() {
        let names = "alphabetagammadelta";
        let t = table(
            names,
            &[
                (0x2000, 0x10, 5..9),    // beta
                (0x1000, 0x100, 0..5),   // alpha
                (0x1000, 0x100, 14..19), // delta, alias of alpha: dropped
                (0x3000, 0, 9..14),      // gamma, no size
            ],
        );
        assert_eq!(t.len(), 3);
        let name = |h: Hit| &names[h.name.0..h.name.1];
        assert_eq!(name(t.lookup(0x1000).unwrap()), "alpha");
        assert_eq!(t.lookup(0x10ff).unwrap().offset, 0xff);
        assert_eq!(t.lookup(0x1100), None, "past alpha's size, before beta");
        assert_eq!(name(t.lookup(0x200f).unwrap()), "beta");
        assert_eq!(
            name(t.lookup(0x9999).unwrap()),
            "gamma",
            "sizeless: up to the end"
        );
        assert_eq!(t.lookup(0xfff), None);
    }

    #[test]
    fn demangles_cpp_rust_and_keeps_c() {
        assert_eq!(demangle("cuLaunchKernel"), "cuLaunchKernel");
        assert_eq!(
            demangle("_ZN2at6native12_GLOBAL__N_113launch_kernelEPKvi"),
            "at::native::(anonymous namespace)::launch_kernel"
        );
        assert_eq!(
            demangle("_ZN3std2rt10lang_start17h0123456789abcdefE"),
            "std::rt::lang_start"
        );
        assert_eq!(demangle("_Znotvalid"), "_Znotvalid");
    }
}
