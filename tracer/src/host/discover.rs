//! Finding processes and the CUDA/NCCL libraries they map.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::catalogue::Lib;
use crate::text::printable;

/// A library file, identified by device and inode so that the same file seen
/// through different paths (containers, symlinks) is probed once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LibraryFile {
    pub lib: Lib,
    /// A path this process can open (through `/proc/PID/root` for containers).
    pub path: PathBuf,
    pub dev: u64,
    pub inode: u64,
    /// Where it was found: `/proc/PID/root/...` for a process's mapping, or
    /// the path given. Stays when `path` is replaced by a held descriptor's
    /// `/proc/self/fd/N` (what `probes::trust` judges the file by).
    pub found_at: PathBuf,
}

impl LibraryFile {
    pub fn open(lib: Lib, path: PathBuf) -> std::io::Result<Self> {
        let meta = std::fs::metadata(&path)?;
        Ok(Self {
            lib,
            found_at: path.clone(),
            path,
            dev: meta.dev(),
            inode: meta.ino(),
        })
    }

    /// Opens the file to read it: never blocks (a FIFO put in its place is
    /// refused), and it must still be this file.
    pub fn open_checked(&self) -> std::io::Result<std::fs::File> {
        crate::host::fd::open_regular(&self.path, Some((self.dev, self.inode)))
    }
}

/// Which library a mapped file is, judged by its basename.
pub fn classify(path: &Path) -> Option<Lib> {
    let name = path.file_name()?.to_str()?;
    Lib::ALL
        .into_iter()
        .find(|lib| name.starts_with(lib.file_prefix()))
}

/// The paths of every file mapped executable by `pid`, as `/proc/PID/maps` shows them.
pub fn mapped_files(pid: u32) -> std::io::Result<Vec<PathBuf>> {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", reader_id(pid)))?;
    Ok(parse_maps(&maps))
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping<'a> {
    pub start: u64,
    pub end: u64,
    pub perms: &'a str,
    /// Offset of `start` in the mapped file.
    pub offset: u64,
    pub inode: &'a str,
    /// The file (or `[heap]`, …), empty for anonymous memory; may contain spaces.
    pub path: &'a str,
}

impl<'a> Mapping<'a> {
    /// Parses `start-end perms offset dev inode path`; `None` if malformed.
    pub fn parse(line: &'a str) -> Option<Self> {
        let mut f = line.splitn(6, ' ');
        let (range, perms, offset, _dev, inode) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let (start, end) = range.split_once('-')?;
        Some(Self {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            perms,
            offset: u64::from_str_radix(offset, 16).ok()?,
            inode,
            path: f.next().unwrap_or("").trim_start(),
        })
    }

    /// Every well-formed line of a maps text.
    pub fn all(maps: &'a str) -> impl Iterator<Item = Mapping<'a>> {
        maps.lines().filter_map(Mapping::parse)
    }

    /// A file still on disk (not anonymous, not a pseudo-file, not deleted).
    pub fn is_file(&self) -> bool {
        self.inode != "0" && self.path.starts_with('/') && !self.path.ends_with(" (deleted)")
    }
}

/// The executable file mappings of a maps text; lines that do not parse
/// are skipped.
pub fn parse_maps(maps: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in Mapping::all(maps).filter(|m| m.perms.contains('x') && m.is_file()) {
        let path = PathBuf::from(m.path);
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// The CUDA/NCCL libraries `pid` maps, opened through `/proc/PID/root` so a
/// process in another mount namespace (a container) is handled too.
pub fn process_libraries(pid: u32) -> std::io::Result<Vec<LibraryFile>> {
    let via = reader_id(pid);
    let root = PathBuf::from(format!("/proc/{via}/root"));
    let maps = std::fs::read_to_string(format!("/proc/{via}/maps"))?;
    let mut out = Vec::new();
    for path in parse_maps(&maps) {
        let Some(lib) = classify(&path) else { continue };
        let host_path = root.join(path.strip_prefix("/").unwrap_or(&path));
        if let Ok(file) = LibraryFile::open(lib, host_path) {
            if !out
                .iter()
                .any(|f: &LibraryFile| f.dev == file.dev && f.inode == file.inode)
            {
                out.push(file);
            }
        }
    }
    Ok(out)
}

/// What `/proc/PID/stat` says of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The kernel's name of the process (15 characters at most).
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    pub ppid: u32,
    /// Time its threads spent in the kernel so far, in clock ticks.
    pub stime_ticks: u64,
    /// When it started, in clock ticks since boot: with the PID, what
    /// tells a process from a later one given the same PID.
    pub start_ticks: u64,
    /// Its wait status (field 52, `exit_code`): meaningful once it exited
    /// and while it is a zombie (its parent has not reaped it).
    pub exit_code: Option<i32>,
}

impl ProcStat {
    /// Parses the one line of `/proc/PID/stat`. The name is in parentheses
    /// and may itself hold spaces and parentheses: it ends at the last `)`.
    pub fn parse(line: &str) -> Option<Self> {
        let open = line.find('(')?;
        let (head, rest) = line.rsplit_once(')')?;
        // Another user chose it: no escape sequence for a terminal.
        let comm = printable(head.get(open + 1..)?).into_owned();
        // Fields from the 3rd on: state, ppid, ..., stime is the 15th,
        // starttime the 22nd.
        let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
        Some(Self {
            comm,
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            stime_ticks: fields.get(12)?.parse().ok()?,
            start_ticks: fields.get(19)?.parse().ok()?,
            exit_code: fields.get(49).and_then(|f| f.parse().ok()),
        })
    }

    /// Whether the process has exited (a zombie has).
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

fn stat_at(path: &str) -> Option<ProcStat> {
    ProcStat::parse(&std::fs::read_to_string(path).ok()?)
}

/// `/proc/PID/stat`, or `None` when there is no such process. A process
/// is alive while any of its threads is: when its thread-group leader has
/// exited (`pthread_exit` in `main`: the leader is a zombie) while other
/// threads go on, `state` is that of one of those (not `Z`).
pub fn stat(pid: u32) -> Option<ProcStat> {
    let mut s = stat_at(&format!("/proc/{pid}/stat"))?;
    if s.exited() {
        if let Some((_, state)) = live_thread(pid) {
            s.state = state;
        }
    }
    Some(s)
}

/// A thread of `pid` other than its leader that has not exited, and its state.
fn live_thread(pid: u32) -> Option<(u32, char)> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if tid == pid {
            continue;
        }
        if let Some(t) = stat_at(&format!("/proc/{pid}/task/{tid}/stat")) {
            if !t.exited() {
                return Some((tid, t.state));
            }
        }
    }
    None
}

/// The id to read a process's own files (`/proc/ID/maps`, `root`,
/// `status`) and memory through: `pid`, or, when its thread-group leader
/// has exited while other threads go on, one of those threads (the
/// leader's `maps` then read empty, its `root` cannot be read and its
/// memory cannot be: it has no address space any more).
pub fn reader_id(pid: u32) -> u32 {
    match stat_at(&format!("/proc/{pid}/stat")) {
        Some(s) if s.exited() => live_thread(pid).map_or(pid, |(tid, _)| tid),
        _ => pid,
    }
}

/// Whether a process exists and has not exited: a zombie has, unless it is
/// only its thread-group leader while other threads go on ([`stat`]).
pub fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|s| !s.exited())
}

/// The process's command name (`/proc/PID/comm`), printable.
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| printable(s.trim_end()).into_owned())
}

/// Every process id under /proc.
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Where the dynamic loader would find `soname` for `exe` run with `env_path`
/// (LD_LIBRARY_PATH): the executable's RPATH/RUNPATH (with `$ORIGIN`), then
/// LD_LIBRARY_PATH, the ld.so cache and the default directories. Used to
/// attach before a command started with `-- CMD` loads its libraries.
pub fn find_library(
    soname: &str,
    exe: Option<&Path>,
    ld_library_path: Option<&OsStr>,
) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(exe) = exe {
        dirs.extend(elf_search_dirs(exe));
    }
    if let Some(lp) = ld_library_path {
        dirs.extend(std::env::split_paths(lp).filter(|p| !p.as_os_str().is_empty()));
    }
    for dir in &dirs {
        let candidate = dir.join(soname);
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    if let Some(p) = ld_cache().remove(soname) {
        return Some(p);
    }
    for dir in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/local/nvidia/lib64",
        "/usr/local/cuda/lib64",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ] {
        let candidate = Path::new(dir).join(soname);
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    None
}

/// RPATH/RUNPATH entries of an ELF executable, `$ORIGIN` expanded.
fn elf_search_dirs(exe: &Path) -> Vec<PathBuf> {
    use object::read::elf::{Dyn, FileHeader};
    let Ok(data) = std::fs::read(exe) else {
        return Vec::new();
    };
    let Ok(elf) = object::read::elf::ElfFile64::<object::Endianness>::parse(&*data) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let Ok(sections) = elf.elf_header().sections(endian, &*data) else {
        return Vec::new();
    };
    let Ok(Some((dynamic, link))) = sections.dynamic(endian, &*data) else {
        return Vec::new();
    };
    let Ok(strings) = sections.strings(endian, &*data, link) else {
        return Vec::new();
    };
    let origin = exe
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let mut out = Vec::new();
    for d in dynamic {
        let tag = d.tag32(endian).unwrap_or(0);
        if tag != object::elf::DT_RPATH && tag != object::elf::DT_RUNPATH {
            continue;
        }
        let Ok(value) = d.string(endian, strings) else {
            continue;
        };
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        for entry in value.split(':').filter(|e| !e.is_empty()) {
            let expanded = match &origin {
                Some(o) => entry
                    .replace("${ORIGIN}", &o.to_string_lossy())
                    .replace("$ORIGIN", &o.to_string_lossy()),
                None => entry.to_string(),
            };
            out.push(PathBuf::from(expanded));
        }
    }
    out
}

/// soname → path from `ldconfig -p`.
fn ld_cache() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let Ok(output) = std::process::Command::new("ldconfig").arg("-p").output() else {
        return out;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        if !left.contains("x86-64") {
            continue;
        }
        let name = left.trim().split(' ').next().unwrap_or("");
        out.entry(name.to_string())
            .or_insert_with(|| PathBuf::from(path.trim()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::printable_path;

    #[test]
    fn classify_by_basename() {
        assert_eq!(
            classify(Path::new("/usr/lib/libcuda.so.580.1")),
            Some(Lib::Cuda)
        );
        assert_eq!(
            classify(Path::new("/x/nvidia/nccl/lib/libnccl.so.2")),
            Some(Lib::Nccl)
        );
        assert_eq!(classify(Path::new("/x/libcudart.so.13")), Some(Lib::Cudart));
        assert_eq!(classify(Path::new("/x/libcudnn.so.9")), None);
    }

    #[test]
    fn maps_lines_that_do_not_parse_are_skipped() {
        let maps = "\
7f00-7f10 r-xp 00000000 fd:00 123 /usr/lib/libcuda.so.1
garbage
7f10-7f20 r-xp 00000000
7f20-7f30 rw-p 00000000 fd:00 123 /usr/lib/libcuda.so.1
7f30-7f40 r-xp 00000000 00:00 0 [vdso]
7f40-7f50 r-xp 00000000 fd:00 124 /opt/my libs/libnccl.so.2
7f50-7f60 r-xp 00000000 fd:00 125 /tmp/libcuda.so.1 (deleted)
7f60-7f70 r-xp 00000000 fd:00 123 /usr/lib/libcuda.so.1
\u{0}\u{ff} r-xp
";
        assert_eq!(
            parse_maps(maps),
            vec![
                PathBuf::from("/usr/lib/libcuda.so.1"),
                PathBuf::from("/opt/my libs/libnccl.so.2")
            ]
        );
        assert!(parse_maps("").is_empty());
        let m = Mapping::parse(
            "7f00-7f80 r-xp 00003000 fe:00 5333101                    /opt/my lib/libcuda.so.1",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.perms, m.offset, m.inode, m.path),
            (
                0x7f00,
                0x7f80,
                "r-xp",
                0x3000,
                "5333101",
                "/opt/my lib/libcuda.so.1"
            )
        );
        assert!(m.is_file());
        let anon = Mapping::parse("1000-2000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((anon.path, anon.is_file()), ("", false));
        assert_eq!(Mapping::parse("garbage"), None);
    }

    #[test]
    fn a_process_that_is_gone_gives_an_error_not_a_panic() {
        assert!(mapped_files(u32::MAX - 1).is_err());
        assert!(process_libraries(u32::MAX - 1).is_err());
        assert_eq!(comm(u32::MAX - 1), None);
    }

    #[test]
    fn control_characters_are_not_printed() {
        assert_eq!(printable("python3"), "python3");
        assert_eq!(printable("w\u{1b}[2J\u{7}\u{9b}x"), "w?[2J??x");
        assert_eq!(printable_path(Path::new("/a\nb/é")), "/a?b/é");
    }

    #[test]
    fn own_process_is_alive_and_maps_libc() {
        let me = std::process::id();
        assert!(is_alive(me));
        assert!(mapped_files(me)
            .unwrap()
            .iter()
            .any(|p| p.to_string_lossy().contains("libc")));
        assert!(!is_alive(u32::MAX - 1));
    }

    #[test]
    fn stat_lines_with_odd_names() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 3 0 987654 10000 200 18446744073709551615";
        let s = ProcStat::parse(line).unwrap();
        assert_eq!(s.comm, "my (odd) name");
        assert_eq!((s.state, s.ppid, s.start_ticks), ('S', 1, 987654));
        assert_eq!(s.stime_ticks, 3);
        assert!(!s.exited());
        assert!(ProcStat::parse("12 (x) Z 1").is_none());
        let me = stat(std::process::id()).unwrap();
        assert!(!me.exited());
        assert_eq!(Some(me.comm), comm(std::process::id()));
    }
}
