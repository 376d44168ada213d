//! Bytes per event and write/read speed of each timeline format, on a
//! synthetic stream shaped like a 2-rank DDP training job (launch-heavy:
//! about 1,500 calls per 40 ms step per rank, three quarters of them
//! launches of ~150 kernels), or on the calls of a `.jsonl` file given
//! with `--input`. Each file is read back with `gputrace stats`'s reader
//! and its summary compared with the one of the calls written.
//!
//! `cargo xtask bench --formats` runs it (release build); by hand:
//! `cargo run --release -p tracer --example timeline_formats -- --events 2000000`.

#![allow(clippy::print_stderr)] // tests say what they measured

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use gputrace::catalogue::api_by_name;
use gputrace::model::call::*;
use gputrace::model::types::Direction;
use gputrace::outputs::timeline::jsonl_zst::JsonlZstWriter;
use gputrace::outputs::timeline::perfetto::PerfettoWriter;
use gputrace::outputs::timeline::Timeline;
use gputrace::outputs::timeline::TimelineFile;
use gputrace::read::read_timeline;
use gputrace::summary::render::render_json;
use gputrace::summary::render::render_text;
use gputrace::summary::Summary;

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn call(
    api: &'static str,
    ts: u64,
    dur: u64,
    pid: u32,
    tid: u32,
    comm: &Arc<str>,
    args: Args,
) -> Call {
    Call {
        ts_ns: ts,
        dur_ns: Some(dur),
        pid,
        tid,
        comm: comm.clone(),
        api,
        family: api_by_name(api).map(|a| a.family),
        ret: Some(0),
        args,
        stack: None,
    }
}

/// `n` calls of two ranks (a main and an autograd thread each), with the
/// device memory in use after the calls that change it.
fn synthetic(n: usize) -> Vec<(Call, Option<u64>)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let kernels: Vec<Arc<str>> = (0..150)
        .map(|k| {
            Arc::from(match k % 3 {
                0 => format!("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>) #{k}"),
                1 => format!("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas_{k}"),
                _ => format!("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int) #{k}"),
            })
        })
        .collect();
    let comm: Arc<str> = Arc::from("python3");
    let mut out = Vec::with_capacity(n);
    let mut ts = [1_795_000_000_000_000_000u64; 4];
    let mut mem = [0u64; 2];
    let stream = 0x5555_5a00_0000u64;
    while out.len() < n {
        let lane = rng.below(4) as usize; // (rank, thread)
        let (pid, tid) = (1000 + (lane / 2) as u32, 1000 + lane as u32 * 7);
        let t = ts[lane];
        let r = rng.below(1000);
        let (c, dev) = if r < 750 {
            let k = rng.below(150);
            let api = if k % 3 == 1 {
                "cuLaunchKernelEx"
            } else {
                "cuLaunchKernel"
            };
            let shape = rng.below(4) as u32;
            let l = Launch {
                function: 0x7f00_1000_0000 + k * 0x40,
                stub: 0,
                kernel: Some(kernels[k as usize].clone()),
                grid: [(k as u32 % 50 + 1) * (shape + 1), 1 + shape % 2, 1],
                block: [128 << (k % 3), 1, 1],
                shared_mem_bytes: if k % 3 == 1 { 98304 } else { 0 },
                stream: stream + (k % 2) * 0x100,
                captured: None,
            };
            (
                call(
                    api,
                    t,
                    4_000 + rng.below(6_000),
                    pid,
                    tid,
                    &comm,
                    Args::Launch(l),
                ),
                None,
            )
        } else if r < 850 {
            let api = if r < 800 {
                "cuEventRecord"
            } else {
                "cuStreamWaitEvent"
            };
            let a = Args::Sync {
                stream: Some(stream),
                event: Some(0x7f00_2000_0000 + rng.below(64) * 0x20),
            };
            (
                call(api, t, 1_000 + rng.below(1_000), pid, tid, &comm, a),
                None,
            )
        } else if r < 880 {
            let n = Nccl {
                op: gputrace::model::types::NcclOp::AllReduce,
                count: 6_553_600,
                datatype: 9,
                redop: Some(0),
                root: None,
                peer: None,
                comm: 0x7f00_3000_0000,
                stream: stream + 0x200,
                ident: Default::default(),
                unaligned: None,
            };
            (
                call(
                    "ncclAllReduce",
                    t,
                    2_000 + rng.below(3_000),
                    pid,
                    tid,
                    &comm,
                    Args::Nccl(n),
                ),
                None,
            )
        } else if r < 950 {
            let m = Memcpy {
                dst: 0x7f80_0000_0000 + rng.below(1 << 20) * 256,
                src: Some(0x7f00_4000_0000 + rng.below(1 << 20) * 256),
                bytes: 4096 * (1 + rng.below(64)),
                direction: if r < 920 {
                    Direction::HtoD
                } else {
                    Direction::DtoD
                },
                stream: Some(stream),
                value: None,
                readable: (false, false),
                captured: None,
            };
            (
                call(
                    "cuMemcpyAsync",
                    t,
                    3_000 + rng.below(4_000),
                    pid,
                    tid,
                    &comm,
                    Args::Memcpy(m),
                ),
                None,
            )
        } else if r < 990 {
            let bytes = 1 << (20 + rng.below(6));
            let rank = lane / 2;
            mem[rank] += bytes;
            let a = Alloc {
                dptr: Some(0x7f90_0000_0000 + mem[rank]),
                bytes,
                kind: gputrace::model::types::AllocKind::Device,
                stream: None,
                pitch: None,
            };
            (
                call(
                    "cuMemAlloc_v2",
                    t,
                    8_000 + rng.below(20_000),
                    pid,
                    tid,
                    &comm,
                    Args::Alloc(a),
                ),
                Some(mem[rank]),
            )
        } else {
            let a = Args::Sync {
                stream: Some(stream),
                event: None,
            };
            (
                call(
                    "cuStreamSynchronize",
                    t,
                    20_000 + rng.below(2_000_000),
                    pid,
                    tid,
                    &comm,
                    a,
                ),
                None,
            )
        };
        ts[lane] = t + c.dur_ns.unwrap_or(0) + 15_000 + rng.below(25_000);
        out.push((c, dev));
    }
    out
}

fn from_jsonl(path: &Path) -> Vec<(Call, Option<u64>)> {
    let f = std::io::BufReader::new(std::fs::File::open(path).expect("the input file"));
    f.lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .filter(|v| v.get("type").is_none())
        .filter_map(|v| gputrace::schema::parse::parse_call(&v).ok())
        .map(|c| (c, None))
        .collect()
}

struct Row {
    name: String,
    bytes: u64,
    write_s: f64,
    read_s: f64,
    same: bool,
}

fn main() {
    let mut events = 1_000_000usize;
    let mut input: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--events" => {
                events = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--events N")
            }
            "--input" => input = args.next().map(PathBuf::from),
            other => {
                eprintln!(
                    "timeline_formats: unknown argument `{other}` (--events N, --input FILE.jsonl)"
                );
                std::process::exit(2);
            }
        }
    }
    let calls = match &input {
        Some(p) => from_jsonl(p),
        None => synthetic(events),
    };
    let mut summary = Summary::default();
    for (c, _) in &calls {
        summary.record(c);
    }
    let json = render_json(&summary);
    let want = render_text(&summary);
    let dir = std::env::temp_dir().join(format!("gputrace-formats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let origin = calls.iter().map(|(c, _)| c.ts_ns).min().unwrap_or(0);
    let mut rows = Vec::new();
    let mut measure = |name: &str, path: &Path, write: &mut dyn FnMut(&Path)| {
        let t = Instant::now();
        write(path);
        let write_s = t.elapsed().as_secs_f64();
        let bytes = std::fs::metadata(path).unwrap().len();
        let t = Instant::now();
        let back = read_timeline(std::fs::File::open(path).unwrap()).unwrap();
        let read_s = t.elapsed().as_secs_f64();
        rows.push(Row {
            name: name.into(),
            bytes,
            write_s,
            read_s,
            same: back.problems.count == 0 && render_text(&back.summary) == want,
        });
        let _ = std::fs::remove_file(path);
    };
    for ext in ["jsonl", "json", "jsonl.zst", "pftrace"] {
        measure(ext, &dir.join(format!("t.{ext}")), &mut |p| {
            let mut t = Timeline::create(p, origin).unwrap();
            for (c, d) in &calls {
                t.write(c, *d).unwrap();
            }
            t.finish(Some(&json)).unwrap();
        });
    }
    measure("pftrace plain", &dir.join("p.pftrace"), &mut |p| {
        let f = BufWriter::with_capacity(1 << 20, std::fs::File::create(p).unwrap());
        let mut w = PerfettoWriter::new(f, origin, false, false).unwrap();
        for (c, d) in &calls {
            w.write(c, *d).unwrap();
        }
        w.finish(&json).unwrap().flush().unwrap();
    });
    for level in [3, 9] {
        measure(
            &format!("jsonl.zst -{level}"),
            &dir.join("l.jsonl.zst"),
            &mut |p| {
                let f = BufWriter::with_capacity(1 << 20, std::fs::File::create(p).unwrap());
                let mut w = JsonlZstWriter::with_level(f, level).unwrap();
                for (c, _) in &calls {
                    w.write(c).unwrap();
                }
                w.finish(&json).unwrap().flush().unwrap();
            },
        );
    }
    // The Perfetto encoder alone, into memory (no file system).
    let t = Instant::now();
    let mut w = PerfettoWriter::new(std::io::sink(), origin, false, false).unwrap();
    for (c, d) in &calls {
        w.write(c, *d).unwrap();
    }
    let encode_s = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);

    let n = calls.len() as f64;
    let launches = calls
        .iter()
        .filter(|(c, _)| matches!(c.args, Args::Launch(_)))
        .count();
    println!(
        "{} calls ({:.0}% launches), {}",
        calls.len(),
        100.0 * launches as f64 / n,
        match &input {
            Some(p) => format!("from {}", p.display()),
            None => "synthetic 2-rank DDP-like stream".into(),
        }
    );
    println!(
        "{:<14} {:>12} {:>10} {:>14} {:>10} {:>14} {:>9}",
        "format", "bytes", "B/event", "write ev/s", "write MB/s", "read ev/s", "summary"
    );
    for r in &rows {
        println!(
            "{:<14} {:>12} {:>10.1} {:>14.0} {:>10.1} {:>14.0} {:>9}",
            r.name,
            r.bytes,
            r.bytes as f64 / n,
            n / r.write_s,
            r.bytes as f64 / r.write_s / 1e6,
            n / r.read_s,
            if r.same { "same" } else { "DIFFERS" }
        );
    }
    println!(
        "pftrace encoder alone, uncompressed, to a sink: {:.0} events/s",
        n / encode_s
    );
    if rows.iter().any(|r| !r.same) {
        std::process::exit(1);
    }
}
