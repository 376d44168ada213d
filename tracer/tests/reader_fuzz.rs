//! Issue 14: the timeline reader (`gputrace stats`) fuzzed from real
//! traces, JSONL and Chrome JSON: truncation, byte flips, huge and negative
//! numbers, wrong types, NaN, deep nesting, invalid UTF-8, empty input,
//! lines repeated, cut and swapped. The reader must never panic, always
//! answer, and give line numbers within the input.
//!
//! Time-boxed: `GPUTRACE_FUZZ_SECONDS` (default 5; `cargo xtask fuzz
//! --seconds N` runs it longer), seeded by `GPUTRACE_FUZZ_SEED` (default:
//! the clock; the seed is printed, and an input that fails is saved: put
//! it in tests/fuzz-corpus/ with the fix, and it is read on every run).

#![allow(clippy::print_stderr)] // tests say what they measured

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gputrace::outputs::timeline::TimelineFile;
use gputrace::read::read_timeline;
use gputrace::summary::render::render_json;
use serde_json::Value;

/// xorshift64*: enough randomness, no dependency, reproducible from a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn golden_jsonl() -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/input.jsonl"))
        .unwrap()
}

/// The golden input written as gputrace writes a Chrome trace.
fn golden_chrome() -> Vec<u8> {
    let input = golden_jsonl();
    let s = read_timeline(&input[..]).unwrap();
    let dir = std::env::temp_dir().join(format!("gputrace-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.json");
    let mut w =
        gputrace::outputs::timeline::Timeline::create(&path, 1_700_000_000_000_000_000 - 1_000_000)
            .unwrap();
    for line in std::str::from_utf8(&input).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v.get("type").is_some() {
            continue;
        }
        w.write(&gputrace::schema::parse::parse_call(&v).unwrap(), None)
            .unwrap();
    }
    w.finish(Some(&render_json(&s.summary))).unwrap();
    let data = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    data
}

/// Values put where a value was: out of range, of the wrong type, not JSON.
const VALUES: &[&str] = &[
    "0",
    "-1",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e400",
    "-1e400",
    "1.5",
    "-0.0",
    "NaN",
    "Infinity",
    "null",
    "true",
    "\"\"",
    "\"0x\"",
    "\"0xffffffffffffffffff\"",
    "\"\\ud800\"",
    "[]",
    "{}",
    "[1,2]",
    "[-1,-1,-1]",
    "[4294967296,1,1]",
    "{\"a\":",
    "\"",
];

/// One mutation of `data`.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    let n = data.len();
    match rng.below(12) {
        // Truncation.
        0 => data.truncate(rng.below(n + 1)),
        // Byte flips.
        1 => {
            for _ in 0..1 + rng.below(8) {
                if !data.is_empty() {
                    let i = rng.below(data.len());
                    data[i] ^= 1 << rng.below(8);
                }
            }
        }
        // A value (after `:` or `,` or `[`) replaced.
        2..=4 => {
            let starts: Vec<usize> = data
                .iter()
                .enumerate()
                .filter(|(_, b)| matches!(b, b':' | b'[' | b','))
                .map(|(i, _)| i + 1)
                .collect();
            if starts.is_empty() {
                return;
            }
            let at = *rng.pick(&starts);
            let end = data[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b'\n'))
                .map_or(data.len(), |p| at + p);
            let v = rng.pick(VALUES).as_bytes().to_vec();
            data.splice(at..end, v);
        }
        // Deep nesting in place of a value.
        5 => {
            let depth = 1 + rng.below(5000);
            let at = rng.below(n + 1);
            let mut v = vec![b'['; depth];
            v.extend(std::iter::repeat_n(b']', rng.below(depth + 1)));
            data.splice(at..at, v);
        }
        // Invalid UTF-8.
        6 => {
            let at = rng.below(n + 1);
            const BAD: [&[u8]; 4] = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"];
            let bad = *rng.pick(&BAD);
            data.splice(at..at, bad.iter().copied());
        }
        // Empty, or only whitespace.
        7 => {
            data.clear();
            data.extend(
                rng.pick(&[&b""[..], b"\n", b"\n\n\n", b"   ", b"\r\n"])
                    .iter(),
            );
        }
        // Lines repeated, dropped, swapped.
        8 | 9 => {
            let mut lines: Vec<Vec<u8>> = data.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
            let k = lines.len();
            let (i, j) = (rng.below(k), rng.below(k));
            match rng.below(3) {
                0 => {
                    let l = lines[i].clone();
                    lines.insert(j, l);
                }
                1 => {
                    lines.remove(i);
                }
                _ => lines.swap(i, j),
            }
            *data = lines.join(&b'\n');
        }
        // A long line (not the 16 MiB limit: that is its own test below).
        10 => {
            let at = rng.below(n + 1);
            let len = rng.below(200_000);
            data.splice(at..at, std::iter::repeat_n(b'7', len));
        }
        // A number's digits multiplied.
        _ => {
            if let Some(i) = (0..n)
                .map(|k| (k + rng.below(n)) % n)
                .find(|i| data[*i].is_ascii_digit())
            {
                data.splice(i..i, std::iter::repeat_n(b'9', 1 + rng.below(40)));
            }
        }
    }
}

/// Reads `data`; panics (with the input saved) on a panic or an answer
/// that does not fit the input.
fn check(data: &[u8], seed: u64, iteration: u64) {
    let r = std::panic::catch_unwind(|| read_timeline(data));
    let problem = match r {
        Err(_) => Some("the reader panicked".to_string()),
        Ok(Err(e)) => Some(format!("the reader failed on an in-memory input: {e}")),
        Ok(Ok(s)) => {
            let lines = data.split(|b| *b == b'\n').count() as u64;
            let bad_line = s
                .problems
                .first
                .iter()
                .find(|(l, _)| *l < 1 || *l > lines)
                .map(|(l, w)| format!("problem at line {l} of {lines}: {w}"));
            let too_many = (s.summary.events() + s.problems.count > lines).then(|| {
                format!(
                    "{} events + {} problems in {lines} lines",
                    s.summary.events(),
                    s.problems.count
                )
            });
            bad_line.or(too_many)
        }
    };
    if let Some(p) = problem {
        let path = std::env::temp_dir().join(format!("gputrace-fuzz-failure-{seed}-{iteration}"));
        let _ = std::fs::write(&path, data);
        panic!(
            "{p} (seed {seed}, iteration {iteration}; input saved to {})",
            path.display()
        );
    }
}

#[test]
fn reader_survives_mutated_traces() {
    let seconds: f64 = std::env::var("GPUTRACE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let seed: u64 = std::env::var("GPUTRACE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1;
    let corpus = [golden_jsonl(), golden_chrome()];
    // Inputs that once made the reader panic (tests/fuzz-corpus/), then
    // every fixed kind of input once, whatever the seed.
    let saved = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    for e in std::fs::read_dir(saved).unwrap() {
        check(&std::fs::read(e.unwrap().path()).unwrap(), seed, 0);
    }
    for base in &corpus {
        check(base, seed, 0);
        check(&[], seed, 0);
        check(b"\xff\xfe\n", seed, 0);
        check(&vec![b'['; 100_000], seed, 0);
        check(&vec![b'{'; 100_000], seed, 0);
    }
    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut iterations = 0u64;
    while Instant::now() < deadline {
        iterations += 1;
        let mut data = rng.pick(&corpus).clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut data);
        }
        check(&data, seed, iterations);
    }
    eprintln!("reader fuzz: {iterations} inputs in {seconds} s, seed {seed}");
    assert!(iterations > 0);
}
