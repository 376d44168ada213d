//! Units people read and write: durations on the command line, times and
//! sizes in reports.

use std::time::Duration;
/// `10s`, `2m`, `500ms`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if let Ok(d) = Duration::try_from_secs_f64(secs) {
            return Ok(d);
        }
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration like 10s, 2m or 500ms ({e})"))
}

/// `1.23 ms`, `456 ns`.
pub fn fmt_ns(ns: f64) -> String {
    let ns = ns.max(0.0);
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// `912,004`: a count with thousands separated.
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `4.0 KiB`, `12 B`.
pub fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b.max(0.0);
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
