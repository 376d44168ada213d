//! The one kernel offset the Python walk in the probe needs: where
//! `task_struct` keeps the thread's `fs` base (`thread.fsbase` on x86-64).
//! The probe reads it from `bpf_get_current_task()` with
//! `bpf_probe_read_kernel` to find the calling thread's `PyThreadState`
//! (whose `thread_id` is `pthread_self()`, the same `fs` base). The offset
//! changes with the kernel's configuration, so it is read from the
//! kernel's own BTF (`/sys/kernel/btf/vmlinux`), never hard-coded.
//!
//! A small reader of the BTF format (include/uapi/linux/btf.h): aya-obj
//! parses BTF but keeps its type accessors private.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("not BTF data: {0}")]
    Format(&'static str),
    #[error("the kernel's BTF has no {0}")]
    Missing(String),
}

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// Byte offset of `task_struct.thread.fsbase` in the running kernel.
pub fn fsbase_offset() -> Result<u64, BtfError> {
    let path = Path::new("/sys/kernel/btf/vmlinux");
    let data = std::fs::read(path).map_err(|e| BtfError::Read(path.display().to_string(), e))?;
    member_path_offset(&data, "task_struct", &["thread", "fsbase"])
}

/// One type of the blob: where its record starts, its kind, name and, for
/// structs and unions, its members.
struct TypeRef {
    at: usize,
    kind: u32,
    vlen: usize,
    kflag: bool,
}

/// Byte offset of a member path (`thread`, `fsbase`) inside struct `root`.
pub fn member_path_offset(data: &[u8], root: &str, path: &[&str]) -> Result<u64, BtfError> {
    let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        data.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if u16_at(0) != Some(BTF_MAGIC) {
        return Err(BtfError::Format("bad magic (or not little-endian)"));
    }
    let hdr_len = u32_at(4).ok_or(BtfError::Format("short header"))? as usize;
    let field = |i: usize| {
        u32_at(8 + i * 4)
            .map(|v| v as usize)
            .ok_or(BtfError::Format("short header"))
    };
    let (type_off, type_len, str_off, str_len) = (field(0)?, field(1)?, field(2)?, field(3)?);
    let types_start = hdr_len + type_off;
    let types_end = types_start + type_len;
    let strs = data
        .get(hdr_len + str_off..hdr_len + str_off + str_len)
        .ok_or(BtfError::Format("string section out of bounds"))?;
    let name = |off: u32| -> &[u8] {
        let s = strs.get(off as usize..).unwrap_or(&[]);
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    };

    // Index every type (ids start at 1), following each kind's trailer.
    let mut types: Vec<TypeRef> = Vec::new();
    let mut at = types_start;
    while at + 12 <= types_end {
        let info = u32_at(at + 4).ok_or(BtfError::Format("truncated type"))?;
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        let trailer = match kind {
            1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
            3 => 12,                      // ARRAY
            4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
            6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
            2 | 7..=12 | 16 | 18 => 0,    // PTR, FWD, TYPEDEF, qualifiers, FUNC, FLOAT, TYPE_TAG
            _ => return Err(BtfError::Format("unknown type kind")),
        };
        types.push(TypeRef {
            at,
            kind,
            vlen,
            kflag: info >> 31 != 0,
        });
        at += 12 + trailer;
    }
    let by_id = |id: u32| types.get((id as usize).checked_sub(1)?);

    let mut current = types
        .iter()
        .find(|t| t.kind == KIND_STRUCT && u32_at(t.at).is_some_and(|n| name(n) == root.as_bytes()))
        .ok_or_else(|| BtfError::Missing(format!("struct {root}")))?;
    let mut bits: u64 = 0;
    for (depth, want) in path.iter().enumerate() {
        let mut found = None;
        for i in 0..current.vlen {
            let m = current.at + 12 + i * 12;
            let (Some(n), Some(ty), Some(off)) = (u32_at(m), u32_at(m + 4), u32_at(m + 8)) else {
                return Err(BtfError::Format("truncated member"));
            };
            if name(n) == want.as_bytes() {
                let off = if current.kflag { off & 0xff_ffff } else { off };
                found = Some((ty, u64::from(off)));
                break;
            }
        }
        let (mut ty, off) = found.ok_or_else(|| BtfError::Missing(path[..=depth].join(".")))?;
        bits += off;
        if depth + 1 < path.len() {
            // Through typedefs and qualifiers to the struct/union.
            loop {
                let t = by_id(ty).ok_or(BtfError::Format("bad type id"))?;
                if t.kind == KIND_STRUCT || t.kind == KIND_UNION {
                    current = t;
                    break;
                }
                if !matches!(t.kind, 8..=11 | 18) {
                    return Err(BtfError::Missing(format!(
                        "struct at {}",
                        path[..=depth].join(".")
                    )));
                }
                ty = u32_at(t.at + 8).ok_or(BtfError::Format("truncated type"))?;
            }
        }
    }
    if !bits.is_multiple_of(8) {
        return Err(BtfError::Format("member is a bit field"));
    }
    Ok(bits / 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up blob: `struct outer { int a; struct inner in; }` with
    /// `struct inner { long x; long fsbase; }` behind a typedef.
    fn blob() -> Vec<u8> {
        let strs = b"\0outer\0a\0in\0inner\0x\0fsbase\0inner_t\0int\0";
        let s = |n: &str| {
            let needle = format!("\0{n}\0");
            strs.windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .unwrap() as u32
                + 1
        };
        let mut types: Vec<u8> = Vec::new();
        let mut push = |vals: &[u32]| {
            for v in vals {
                types.extend_from_slice(&v.to_le_bytes());
            }
        };
        // 1: int (kind 1), 4 bytes, trailer
        push(&[s("int"), 1 << 24, 4, 32]);
        // 2: struct inner { x @0, fsbase @64 bits }
        push(&[s("inner"), (4 << 24) | 2, 16]);
        push(&[s("x"), 1, 0, s("fsbase"), 1, 64]);
        // 3: typedef inner_t -> 2
        push(&[s("inner_t"), 8 << 24, 2]);
        // 4: struct outer { a @0, in @128 bits (type 3) }
        push(&[s("outer"), (4 << 24) | 2, 32]);
        push(&[s("a"), 1, 0, s("in"), 3, 128]);
        let mut b = Vec::new();
        b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&24u32.to_le_bytes());
        for v in [
            0u32,
            types.len() as u32,
            types.len() as u32,
            strs.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&types);
        b.extend_from_slice(strs);
        b
    }

    #[test]
    fn finds_nested_member_through_typedefs() {
        let b = blob();
        assert_eq!(
            member_path_offset(&b, "outer", &["in", "fsbase"]).unwrap(),
            16 + 8
        );
        assert_eq!(member_path_offset(&b, "outer", &["a"]).unwrap(), 0);
        assert!(matches!(
            member_path_offset(&b, "outer", &["in", "nope"]),
            Err(BtfError::Missing(_))
        ));
        assert!(matches!(
            member_path_offset(&b, "nostruct", &["a"]),
            Err(BtfError::Missing(_))
        ));
        assert!(matches!(
            member_path_offset(&b[2..], "outer", &["a"]),
            Err(BtfError::Format(_))
        ));
    }

    /// The running kernel (x86-64 with BTF, as gputrace requires) has the
    /// member, 8-byte aligned, inside the task_struct.
    #[test]
    fn running_kernel_has_task_struct_thread_fsbase() {
        let off = fsbase_offset().expect("task_struct.thread.fsbase in /sys/kernel/btf/vmlinux");
        eprintln!("task_struct.thread.fsbase at byte {off}");
        assert!(off.is_multiple_of(8));
        assert!(off > 1024 && off < 64 * 1024, "{off}");
    }
}
