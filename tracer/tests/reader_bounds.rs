//! Issue 26: `gputrace stats` on a file with very many distinct names holds
//! bounded tables, says what went past them, and peaks at a bounded RSS:
//! a JSONL (and the same as `.jsonl.zst`) of 200,000 distinct kernel names
//! and 200,000 API names gputrace does not know, and a `.pftrace` of 1,000
//! sequences each interning 200 names of 200 bytes, each used by a call
//! (the files `bench/memory/gen_names.py` writes).

#![allow(clippy::print_stderr)] // tests say what they measured

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

const T0: u64 = 1_700_000_000_000_000_000;
/// The summary's bounds (tracer/src/summary, schema/parse.rs).
const MAX_KERNEL_NAMES: u64 = 10_000;
const MAX_UNKNOWN_APIS: u64 = 256;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gputrace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_jsonl(out: &mut impl Write, kernels: u64, apis: u64) {
    for i in 0..kernels {
        writeln!(
            out,
            r#"{{"ts_ns":{},"dur_ns":1000,"pid":100,"tid":101,"comm":"trainer","api":"cuLaunchKernel","ret":0,"args":{{"function":"0x10","kernel":"void kernel_{i:09}<float, 128>(float const*, float*, int)","grid":[64,2,1],"block":[256,1,1],"shared_mem_bytes":0,"stream":"0x5000"}}}}"#,
            T0 + i * 1000
        )
        .unwrap();
    }
    for i in 0..apis {
        writeln!(
            out,
            r#"{{"ts_ns":{},"dur_ns":500,"pid":100,"tid":101,"comm":"trainer","api":"fakeApi{i:09}","ret":0,"args":{{}}}}"#,
            T0 + (kernels + i) * 1000
        )
        .unwrap();
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn field_varint(out: &mut Vec<u8>, tag: u64, v: u64) {
    varint(out, tag << 3);
    varint(out, v);
}

fn field_bytes(out: &mut Vec<u8>, tag: u64, b: &[u8]) {
    varint(out, tag << 3 | 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A Perfetto trace as gputrace's reader takes it: its format attribute,
/// one thread track, then `seqs` sequences each interning `names` event
/// names of `len` bytes, each name used by one instant event.
fn write_pftrace(out: &mut impl Write, seqs: u32, names: u32, len: usize) {
    let mut put = |body: &[u8]| {
        let mut p = Vec::new();
        field_bytes(&mut p, 1, body);
        out.write_all(&p).unwrap();
    };
    let (mut attr, mut attrs, mut pkt) = (Vec::new(), Vec::new(), Vec::new());
    field_bytes(&mut attr, 1, b"gputrace.format");
    field_varint(&mut attr, 2, 1);
    field_bytes(&mut attrs, 1, &attr);
    field_bytes(&mut pkt, 126, &attrs);
    put(&pkt);
    let (mut thread, mut desc, mut pkt) = (Vec::new(), Vec::new(), Vec::new());
    field_varint(&mut thread, 1, 5);
    field_varint(&mut thread, 2, 5);
    field_varint(&mut desc, 1, 9);
    field_bytes(&mut desc, 4, &thread);
    field_bytes(&mut pkt, 60, &desc);
    put(&pkt);
    let mut n = 0u64;
    for s in 1..=seqs {
        let mut interned = Vec::new();
        for i in 0..names {
            let mut name = format!("{s:09}_{i:09}").into_bytes();
            name.resize(len, b'x');
            let mut entry = Vec::new();
            field_varint(&mut entry, 1, u64::from(i) + 1);
            field_bytes(&mut entry, 2, &name);
            field_bytes(&mut interned, 2, &entry);
        }
        let mut pkt = Vec::new();
        field_varint(&mut pkt, 10, u64::from(s));
        field_varint(&mut pkt, 13, 1);
        field_bytes(&mut pkt, 12, &interned);
        put(&pkt);
        for i in 0..names {
            let (mut event, mut pkt) = (Vec::new(), Vec::new());
            field_varint(&mut event, 9, 3);
            field_varint(&mut event, 11, 9);
            field_varint(&mut event, 10, u64::from(i) + 1);
            field_varint(&mut pkt, 8, T0 + n * 1000);
            field_varint(&mut pkt, 58, 1);
            field_varint(&mut pkt, 10, u64::from(s));
            field_bytes(&mut pkt, 11, &event);
            put(&pkt);
            n += 1;
        }
    }
}

/// `gputrace stats --format json FILE`: the summary and the peak RSS (KiB).
fn stats(path: &Path) -> (Value, String, u64) {
    let child = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["stats", "--format", "json"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err, peak) = wait_rusage(child);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    (v, err, peak)
}

/// Its stdout, stderr and peak RSS (KiB), waited for with wait4.
fn wait_rusage(mut child: Child) -> (String, String, u64) {
    let pid = child.id() as i32;
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut so, &mut s).unwrap();
        s
    });
    let mut err = String::new();
    std::io::Read::read_to_string(&mut se, &mut err).unwrap();
    let out = t.join().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child by its pid.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    (out, err, ru.ru_maxrss as u64)
}

fn near(got: &Value, want: u64) -> bool {
    let g = got.as_u64().unwrap() as f64;
    (g - want as f64).abs() <= want as f64 * 0.05
}

/// The JSONL's summary: the rows kept, and what went past them.
fn check_names_summary(j: &Value, kernels: u64, apis: u64) {
    let p = &j["processes"][0];
    assert_eq!(
        p["kernels"].as_array().unwrap().len() as u64,
        MAX_KERNEL_NAMES
    );
    let other = &p["kernels_other"];
    assert_eq!(other["launches"], kernels - MAX_KERNEL_NAMES);
    assert!(near(&other["names"], kernels - MAX_KERNEL_NAMES), "{other}");
    assert!(p["apis"].as_array().unwrap().len() as u64 <= MAX_UNKNOWN_APIS + 2);
    let names = &j["api_names_other"];
    assert_eq!(names["calls"], apis - MAX_UNKNOWN_APIS);
    assert!(near(&names["names"], apis - MAX_UNKNOWN_APIS), "{names}");
    assert_eq!(j["events"], kernels + apis);
}

#[test]
fn stats_on_many_distinct_names_is_bounded_and_says_the_rest() {
    let dir = scratch("reader-bounds");
    let (kernels, apis) = (200_000, 200_000);
    let jsonl = dir.join("names.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&jsonl).unwrap());
    write_jsonl(&mut f, kernels, apis);
    f.flush().unwrap();
    drop(f);
    let zst = dir.join("names.jsonl.zst");
    // Streamed: a child's peak RSS starts from this process's (Linux
    // carries the peak across fork and exec), so this one stays small.
    zstd::stream::copy_encode(
        std::fs::File::open(&jsonl).unwrap(),
        std::fs::File::create(&zst).unwrap(),
        3,
    )
    .unwrap();
    let pftrace = dir.join("seqs.pftrace");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&pftrace).unwrap());
    write_pftrace(&mut f, 1000, 200, 200);
    f.flush().unwrap();
    drop(f);

    let mut peaks = Vec::new();
    for path in [&jsonl, &zst] {
        let (j, err, peak) = stats(path);
        eprintln!("{}: peak RSS {} MiB", path.display(), peak / 1024);
        check_names_summary(&j, kernels, apis);
        assert!(!err.contains("unreadable"), "{err}");
        peaks.push(peak);
    }
    let (j, err, peak) = stats(&pftrace);
    eprintln!("{}: peak RSS {} MiB", pftrace.display(), peak / 1024);
    let _ = std::fs::remove_dir_all(&dir);
    // Every call read; names of 200 bytes are longer than an API name
    // kept (128): all in one row.
    assert_eq!(j["events"], 200_000, "{err}");
    assert_eq!(j["processes"][0]["apis"].as_array().unwrap().len(), 1);
    assert_eq!(j["processes"][0]["apis"][0]["name"], "(other APIs)");
    assert_eq!(j["api_names_other"]["calls"], 200_000);
    assert!(near(&j["api_names_other"]["names"], 200_000));
    peaks.push(peak);
    // Before the bounds: 3.7, 3.7 and 2.1 GiB (docs/performance.md).
    for p in peaks {
        assert!(p < 200 * 1024, "peak RSS {p} KiB");
    }
}

/// A Chrome trace that names more processes than the reader keeps: the
/// names past the bound are problems said, the calls are still read.
#[test]
fn chrome_process_names_are_bounded() {
    let dir = scratch("reader-bounds-chrome");
    let path = dir.join("names.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(
        f,
        r#"{{"displayTimeUnit":"ns","otherData":{{"tool":"gputrace","version":"0","origin_unix_ns":{T0}}},"#
    )
    .unwrap();
    writeln!(f, r#""traceEvents":["#).unwrap();
    let n = (1u32 << 16) + 3;
    for pid in 1..=n {
        writeln!(
            f,
            r#"{{"ph":"M","name":"process_name","pid":{pid},"tid":{pid},"args":{{"name":"p{pid}"}}}},"#
        )
        .unwrap();
    }
    writeln!(
        f,
        r#"{{"ph":"X","name":"cuCtxSynchronize","pid":1,"tid":1,"ts":1.0,"dur":2.0,"args":{{}}}}"#
    )
    .unwrap();
    writeln!(f, "]").unwrap();
    f.flush().unwrap();
    drop(f);
    let (j, err, _) = stats(&path);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(j["events"], 1, "{err}");
    assert_eq!(j["processes"][0]["comm"], "p1");
    assert_eq!(j["unreadable_lines"], 3, "{err}");
    assert!(err.contains("over 65536 processes named"), "{err}");
}
