//! From an instruction's byte offset in a code object to its source line:
//! CPython's `PyCode_Addr2Line`, for the two table formats of 3.10+.

/// The line of the instruction at byte offset `addrq` (`f_lasti * 2` in
/// 3.10, `(instr - co_code_adaptive)` in 3.11+), as CPython computes it; a
/// negative offset (a frame that has not started) is the first line.
/// `None` when the table gives that instruction no line.
pub fn addr2line(minor: u8, table: &[u8], firstlineno: i32, addrq: i64) -> Option<i32> {
    if addrq < 0 {
        return Some(firstlineno);
    }
    let ranges = if minor >= 11 {
        location_ranges(table, firstlineno)
    } else {
        line_ranges_310(table, firstlineno)
    };
    ranges
        .into_iter()
        .find(|r| addrq >= r.start && addrq < r.end)
        .and_then(|r| r.line)
}

/// Byte range `start..end` of instructions that share a line (`None`: no
/// line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRange {
    pub start: i64,
    pub end: i64,
    pub line: Option<i32>,
}

/// 3.10 (PEP 626, Objects/lnotab_notes.txt): pairs of (unsigned byte-offset
/// delta, signed line delta); a line delta of -128 means "no line". Empty
/// ranges are skipped, as `PyLineTable_NextAddressRange` does.
fn line_ranges_310(table: &[u8], firstlineno: i32) -> Vec<LineRange> {
    let mut out = Vec::new();
    let mut line = firstlineno;
    let mut end: i64 = 0;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i64::from(pair[0]);
        let ldelta = pair[1] as i8;
        let this = if ldelta == -128 {
            None
        } else {
            line += i32::from(ldelta);
            Some(line)
        };
        if start != end {
            out.push(LineRange {
                start,
                end,
                line: this,
            });
        }
    }
    out
}

/// 3.11+ location table (Objects/locations.md): entries start with a byte
/// whose top bit is set; bits 3-6 are the kind, bits 0-2 the length in code
/// units minus one. Kinds 0-9: same line (one column byte follows); 10-12:
/// line + (kind - 10), two column bytes; 13: signed-varint line delta, no
/// columns; 14: long form, signed-varint line delta then three varints;
/// 15: no location.
fn location_ranges(table: &[u8], firstlineno: i32) -> Vec<LineRange> {
    let mut out = Vec::new();
    let mut line = firstlineno;
    let mut end: i64 = 0;
    let mut i = 0;
    while i < table.len() {
        let head = table[i];
        let kind = (head >> 3) & 15;
        let units = i64::from(head & 7) + 1;
        let delta = match kind {
            13 | 14 => signed_varint(&table[i + 1..]),
            10..=12 => i32::from(kind - 10),
            _ => 0,
        };
        line += delta;
        let start = end;
        end += units * 2;
        out.push(LineRange {
            start,
            end,
            line: (kind != 15).then_some(line),
        });
        // The entry's other bytes have the top bit clear.
        i += 1;
        while i < table.len() && table[i] & 0x80 == 0 {
            i += 1;
        }
    }
    out
}

/// 6-bit little-endian chunks, bit 6 set on all but the last.
fn varint(bytes: &[u8]) -> u32 {
    let mut v: u32 = 0;
    let mut shift = 0;
    for b in bytes {
        v |= u32::from(b & 63) << shift;
        shift += 6;
        if b & 64 == 0 || shift > 30 {
            break;
        }
    }
    v
}

/// Sign in the lowest bit, magnitude above it.
fn signed_varint(bytes: &[u8]) -> i32 {
    let v = varint(bytes);
    if v & 1 != 0 {
        -((v >> 1) as i32)
    } else {
        (v >> 1) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_310_pairs() {
        // 6 bytes at line 10, 4 bytes at 12, an empty range, 2 bytes with no
        // line, 2 bytes at 11.
        let t = [6, 0, 4, 2, 0, 5, 2, 0x80, 2, (-6i8) as u8];
        assert_eq!(addr2line(10, &t, 10, 0), Some(10));
        assert_eq!(addr2line(10, &t, 10, 4), Some(10));
        assert_eq!(addr2line(10, &t, 10, 6), Some(12));
        assert_eq!(addr2line(10, &t, 10, 10), None);
        assert_eq!(addr2line(10, &t, 10, 12), Some(11));
        assert_eq!(addr2line(10, &t, 10, 14), None, "past the table");
        assert_eq!(addr2line(10, &t, 10, -2), Some(10));
    }

    #[test]
    fn location_table_kinds() {
        let t = [
            0x80 | (13 << 3),     // no columns, 1 unit, line += varint
            4,                    // +2
            0x80 | (10 << 3) | 1, // one-line form, +0, 2 units
            5,
            9,
            0x80 | (12 << 3), // one-line form, +2, 1 unit
            1,
            2,
            0x80 | (15 << 3), // no location, 1 unit
            0x80 | (14 << 3), // long form
            3,                // -1
            0,
            1,
            1,
            0x80 | (13 << 3), // varint over two chunks: 0x41 | 0x01<<6 = 65 -> -32
            0x41,
            0x01,
        ];
        let r = location_ranges(&t, 100);
        let lines: Vec<_> = r.iter().map(|x| (x.start, x.end, x.line)).collect();
        assert_eq!(
            lines,
            [
                (0, 2, Some(102)),
                (2, 6, Some(102)),
                (6, 8, Some(104)),
                (8, 10, None),
                (10, 12, Some(103)),
                (12, 14, Some(71)),
            ]
        );
        assert_eq!(addr2line(11, &t, 100, 4), Some(102));
        assert_eq!(addr2line(12, &t, 100, 8), None);
        assert_eq!(addr2line(13, &t, 100, 12), Some(71));
    }
}
