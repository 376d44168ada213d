//! One ELF file as the unwinder and the symbolizer need it: mapped once,
//! its unwind sections handed out as slices of the mapping (no copy: the
//! `.eh_frame` of libtorch_cuda is tens of MiB), its symbols indexed lazily.

use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use framehop::ExplicitModuleSectionInfo;
use object::elf::{PT_LOAD, PT_TLS, SHF_COMPRESSED};
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::stacks::symbols::SymbolTable;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a 64-bit ELF file we can read: {source}")]
    Parse {
        path: PathBuf,
        source: object::Error,
    },
}

/// A byte range of a mapped file, handed to framehop as section data.
#[derive(Clone)]
pub struct FileBytes {
    map: Arc<memmap2::Mmap>,
    range: Range<usize>,
}

impl Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// A `PT_LOAD` segment: where file bytes land in the file's own address
/// space (its SVMAs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub executable: bool,
}

/// A section the unwinder reads: its SVMA range and where it is in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Section {
    svma: Range<u64>,
    file: Range<usize>,
}

/// The `PT_TLS` segment (for thread-local variables such as CPython's
/// `_Py_tss_tstate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsSegment {
    pub memsz: u64,
    pub align: u64,
}

pub struct ElfFile {
    path: PathBuf,
    map: Arc<memmap2::Mmap>,
    build_id: Option<Vec<u8>>,
    loads: Vec<Load>,
    tls: Option<TlsSegment>,
    text: Option<Section>,
    got: Option<Section>,
    eh_frame: Option<Section>,
    eh_frame_hdr: Option<Section>,
    debug_frame: Option<Section>,
    symbols: OnceLock<SymbolTable>,
}

impl std::fmt::Debug for ElfFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfFile")
            .field("path", &self.path)
            .field("build_id", &self.build_id_hex())
            .finish_non_exhaustive()
    }
}

impl ElfFile {
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        let read_err = |source| ElfError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        // SAFETY: the mapping is read-only and private. A library replaced on
        // disk while mapped is the one way its bytes could change under us;
        // package managers write a new file and rename it, which leaves this
        // mapping on the old inode.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(read_err)?;
        Self::from_map(path, Arc::new(map))
    }

    fn from_map(path: &Path, map: Arc<memmap2::Mmap>) -> Result<Self, ElfError> {
        let parse_err = |source| ElfError::Parse {
            path: path.to_owned(),
            source,
        };
        let elf = ElfFile64::<Endianness>::parse(&map[..]).map_err(parse_err)?;
        let endian = elf.endian();
        let mut loads = Vec::new();
        let mut tls = None;
        for ph in elf.elf_program_headers() {
            match ph.p_type(endian) {
                PT_LOAD => loads.push(Load {
                    vaddr: ph.p_vaddr(endian),
                    memsz: ph.p_memsz(endian),
                    offset: ph.p_offset(endian),
                    filesz: ph.p_filesz(endian),
                    executable: ph.p_flags(endian) & object::elf::PF_X != 0,
                }),
                PT_TLS => {
                    tls = Some(TlsSegment {
                        memsz: ph.p_memsz(endian),
                        align: ph.p_align(endian).max(1),
                    })
                }
                _ => {}
            }
        }
        let section = |name: &str| -> Option<Section> {
            let s = elf.section_by_name(name)?;
            // A compressed section (SHF_COMPRESSED, seen on .debug_* of
            // separate debug files) would need inflating: not supported, so
            // treated as absent rather than fed to the parser as garbage.
            if let object::SectionFlags::Elf { sh_flags } = s.flags() {
                if sh_flags & u64::from(SHF_COMPRESSED) != 0 {
                    return None;
                }
            }
            let (off, size) = s.file_range()?;
            let file = usize::try_from(off).ok()?..usize::try_from(off + size).ok()?;
            (file.end <= map.len()).then_some(())?;
            Some(Section {
                svma: s.address()..s.address() + s.size(),
                file,
            })
        };
        Ok(Self {
            build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
            text: section(".text"),
            got: section(".got"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame: section(".debug_frame"),
            loads,
            tls,
            path: path.to_owned(),
            map,
            symbols: OnceLock::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    pub fn build_id_hex(&self) -> Option<String> {
        self.build_id
            .as_ref()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
    }

    pub fn loads(&self) -> &[Load] {
        &self.loads
    }

    pub fn tls(&self) -> Option<TlsSegment> {
        self.tls
    }

    /// Which unwind tables the file carries: `.eh_frame`, `.eh_frame_hdr`,
    /// `.debug_frame` (for reports and the exploration of real libraries).
    pub fn unwind_tables(&self) -> (bool, bool, bool) {
        (
            self.eh_frame.is_some(),
            self.eh_frame_hdr.is_some(),
            self.debug_frame.is_some(),
        )
    }

    /// The SVMA that file offset `offset` is loaded at, through the
    /// `PT_LOAD` segment holding it.
    pub fn svma_of_offset(&self, offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| offset >= l.offset && offset < l.offset + l.filesz.max(1))
            .map(|l| l.vaddr + (offset - l.offset))
    }

    fn bytes(&self, s: &Option<Section>) -> Option<FileBytes> {
        s.as_ref().map(|s| FileBytes {
            map: self.map.clone(),
            range: s.file.clone(),
        })
    }

    /// What framehop needs to unwind through this file. ELF's base SVMA is 0.
    pub fn section_info(&self) -> ExplicitModuleSectionInfo<FileBytes> {
        let svma = |s: &Option<Section>| s.as_ref().map(|s| s.svma.clone());
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: svma(&self.text),
            text: self.bytes(&self.text),
            got_svma: svma(&self.got),
            eh_frame_svma: svma(&self.eh_frame),
            eh_frame: self.bytes(&self.eh_frame),
            eh_frame_hdr_svma: svma(&self.eh_frame_hdr),
            eh_frame_hdr: self.bytes(&self.eh_frame_hdr),
            debug_frame: self.bytes(&self.debug_frame),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        }
    }

    /// The address (SVMA) of a defined symbol, from `.dynsym` then
    /// `.symtab`; versioned names (`name@@VER`) match their base name.
    pub fn symbol_address(&self, name: &str) -> Option<u64> {
        let elf = ElfFile64::<Endianness>::parse(&self.map[..]).ok()?;
        elf.dynamic_symbols()
            .chain(elf.symbols())
            .find(|s| {
                s.is_definition()
                    && s.name()
                        .is_ok_and(|n| n.split('@').next() == Some(name) && !n.is_empty())
            })
            .map(|s| s.address())
    }

    /// A symbol's SVMA and whether it is in `.dynsym` (exported), or `None`.
    pub fn symbol_in_dynsym(&self, name: &str) -> Option<bool> {
        let elf = ElfFile64::<Endianness>::parse(&self.map[..]).ok()?;
        let matches = |s: &object::read::elf::ElfSymbol64<'_, '_, Endianness>| {
            s.is_definition() && s.name().is_ok_and(|n| n.split('@').next() == Some(name))
        };
        if elf.dynamic_symbols().any(|s| matches(&s)) {
            return Some(true);
        }
        elf.symbols().any(|s| matches(&s)).then_some(false)
    }

    /// The bytes of the file's image at SVMA range `addr..addr+len`, where
    /// they come from the file (initialised data and code).
    pub fn read_svma(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let l = self
            .loads
            .iter()
            .find(|l| addr >= l.vaddr && addr + len as u64 <= l.vaddr + l.filesz)?;
        let off = usize::try_from(l.offset + (addr - l.vaddr)).ok()?;
        self.map.get(off..off + len)
    }

    /// The function symbols, built on first use (sorting a large library's
    /// symbols takes a while, and most files never need symbolizing).
    pub fn symbols(&self) -> &SymbolTable {
        self.symbols
            .get_or_init(|| match ElfFile64::<Endianness>::parse(&self.map[..]) {
                Ok(elf) => SymbolTable::from_symbols(
                    self.map.as_ptr(),
                    elf.symbols()
                        .chain(elf.dynamic_symbols())
                        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
                        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?))),
                ),
                Err(_) => SymbolTable::default(),
            })
    }

    /// The name of a symbol table entry (names point into the mapping).
    pub(crate) fn name_at(&self, range: Range<usize>) -> &str {
        self.map
            .get(range)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }
}
