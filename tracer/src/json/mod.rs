//! JSON's pieces as gputrace writes them, straight into a String (numbers,
//! hex handles, escaped strings), and read back from `serde_json` values
//! with errors that name the field ([`parse`]). The schemas built from them
//! are each feature's (`schema`, `graphs::json`, `nccl::json`).

pub(crate) mod parse;

pub(crate) use parse::{
    field, get_dim, get_hex, get_opt_hex, get_opt_u32, get_opt_u64, get_u64, ParseError,
};

use std::fmt::Write as _;

/// Appends `"0x…"` (lowercase, no leading zeros), without `core::fmt`:
/// this is the hot path of every event.
pub(crate) fn hex(out: &mut String, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.push_str("\"0x");
    // SAFETY: only ASCII hex digits were written.
    out.push_str(unsafe { std::str::from_utf8_unchecked(&buf[i..]) });
    out.push('"');
}

/// Appends `[x,y,z]`.
pub(crate) fn dims(out: &mut String, d: [u32; 3]) {
    out.push('[');
    num(out, d[0]);
    out.push(',');
    num(out, d[1]);
    out.push(',');
    num(out, d[2]);
    out.push(']');
}

/// Appends a decimal integer without `core::fmt`.
pub(crate) fn num<I: itoa::Integer>(out: &mut String, v: I) {
    out.push_str(itoa::Buffer::new().format(v));
}

pub(crate) fn opt_hex(out: &mut String, v: Option<u64>) {
    match v {
        Some(v) => hex(out, v),
        None => out.push_str("null"),
    }
}

pub(crate) fn opt_int(out: &mut String, v: Option<i64>) {
    match v {
        Some(v) => num(out, v),
        None => out.push_str("null"),
    }
}

/// Appends a JSON string literal.
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    // Kernel names are long and almost never need escaping: copy them whole.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub(crate) fn opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.push_str("null"),
    }
}
