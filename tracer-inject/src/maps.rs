//! /proc/PID/maps, parsed.

use std::fs;
use std::io;

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// `rwxp` / `r-xs` ...
    pub(crate) perms: String,
    pub(crate) offset: u64,
    /// Device as `major:minor` in hexadecimal, as the kernel prints it.
    pub(crate) dev: (u32, u32),
    pub(crate) inode: u64,
    /// File path, `[vdso]`-like pseudo name, `/memfd:NAME (deleted)`, or empty.
    pub(crate) path: String,
}

impl Mapping {
    pub(crate) fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// The file name without the directory and without a ` (deleted)` tail.
    pub(crate) fn file_name(&self) -> &str {
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        path.rsplit('/').next().unwrap_or(path)
    }

    /// A mapping of a file (not anonymous, not [heap]/[stack]/[vdso]).
    pub(crate) fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }
}

pub(crate) fn read_maps(pid: i32) -> io::Result<Vec<Mapping>> {
    let text = fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(&text))
}

/// Lines that do not parse are skipped (the format has been stable for decades).
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field().to_string();
    let offset = u64::from_str_radix(field(), 16).ok()?;
    let (major, minor) = field().split_once(':')?;
    let dev = (
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = field().parse().ok()?;
    let path = rest.trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        dev,
        inode,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines() {
        let text = "\
7f0000000000-7f0000028000 r--p 00000000 fe:01 1234     /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000028000-7f000017d000 r-xp 00028000 fe:01 1234     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000000000-7f1000001000 r-xp 00001000 00:01 99       /memfd:gputrace agent (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0        [vdso]
7ffd10000000-7ffd10001000 rw-p 00000000 00:00 0 
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].start, 0x7f0000028000);
        assert_eq!(m[1].offset, 0x28000);
        assert_eq!(m[1].dev, (0xfe, 1));
        assert_eq!(m[1].inode, 1234);
        assert!(m[1].executable() && m[1].is_file());
        assert_eq!(m[1].file_name(), "libc.so.6");
        assert_eq!(m[2].path, "/memfd:gputrace agent (deleted)");
        assert_eq!(m[2].file_name(), "memfd:gputrace agent");
        assert_eq!(m[3].path, "[vdso]");
        assert!(!m[3].is_file());
        assert_eq!(m[4].path, "");
        assert!(!m[0].executable());
    }

    #[test]
    fn own_maps_readable() {
        let m = read_maps(std::process::id() as i32).unwrap();
        assert!(m.iter().any(|m| m.path == "[vdso]"));
    }
}
