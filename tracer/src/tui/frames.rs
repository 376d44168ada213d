//! Snapshot tests of whole frames: a fixed model drawn on ratatui's
//! `TestBackend`, compared with the text in `snapshots/`.

use std::path::PathBuf;

use ratatui::backend::TestBackend;
use ratatui::Terminal;

use crate::model::call::Args;
use crate::model::call::Nccl;
use crate::model::types::Direction;
use crate::model::types::NcclOp;
use crate::tui::app::Action;
use crate::tui::app::App;
use crate::tui::app::Scope;
use crate::tui::fixtures::call;
use crate::tui::fixtures::copy;
use crate::tui::fixtures::launch;
use crate::tui::gpu::GpuStat;
use crate::tui::gpu::GpuStatus;
use crate::tui::view::draw;

const NS: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * NS;

/// Two busy processes, one idle, one exited, over 10 whole seconds:
/// "train" (PID 4242) per second: 1000 launches (800 of gemm at 4 us,
/// 200 of relu at 2 us), 100 HtoD copies of 1 MiB, 10 DtoH of 4 KiB,
/// 50 AllReduce of 4 MiB, one 250 ms cuStreamSynchronize; 256 MiB
/// allocated, 1 GiB at peak. "infer" (PID 31337): 100 launches per second.
fn busy_app() -> App {
    let scope = Scope {
        what: "every process".into(),
        probes: 164,
        lost: 3,
    };
    let mut app = App::new(
        scope,
        GpuStatus::Unavailable("libnvidia-ml.so.1: cannot open shared object file".into()),
        1,
    );
    let m = &mut app.model;
    for s in 0..10 {
        let base = T0 + s * NS;
        for i in 0..1000u64 {
            let (k, d) = if i % 5 == 4 {
                ("relu(float*, int)", 2_000)
            } else {
                ("gemm_kernel<128>", 4_000)
            };
            m.feed(
                &call(
                    4242,
                    "train",
                    "cuLaunchKernel",
                    base + i * 100_000,
                    d,
                    launch(Some(k), 64),
                ),
                T0,
            );
        }
        for i in 0..100 {
            m.feed(
                &call(
                    4242,
                    "train",
                    "cuMemcpyHtoDAsync_v2",
                    base + i * 1_000_000,
                    3_000,
                    copy(Direction::HtoD, 1 << 20),
                ),
                T0,
            );
        }
        for i in 0..10 {
            m.feed(
                &call(
                    4242,
                    "train",
                    "cuMemcpyDtoH_v2",
                    base + i * 1_000_000,
                    9_000,
                    copy(Direction::DtoH, 4096),
                ),
                T0,
            );
        }
        for i in 0..50 {
            let nccl = Args::Nccl(Nccl {
                op: NcclOp::AllReduce,
                count: 1 << 20,
                datatype: 7,
                redop: Some(0),
                root: None,
                peer: None,
                comm: 0xc0ffee,
                stream: 0,
                ident: Default::default(),
                unaligned: None,
            });
            m.feed(
                &call(
                    4242,
                    "train",
                    "ncclAllReduce",
                    base + i * 2_000_000,
                    5_000,
                    nccl,
                ),
                T0,
            );
        }
        let sync = Args::Sync {
            stream: Some(1),
            event: None,
        };
        m.feed(
            &call(
                4242,
                "train",
                "cuStreamSynchronize",
                base + 600_000_000,
                250_000_000,
                sync,
            ),
            T0,
        );
        for i in 0..100 {
            m.feed(
                &call(
                    31337,
                    "infer",
                    "cuLaunchKernel",
                    base + i * 1_000_000,
                    3_000,
                    launch(Some("decode"), 8),
                ),
                T0,
            );
        }
    }
    let mut alloc = call(4242, "train", "cuMemAlloc_v2", T0, 1_000, Args::NcclGroup);
    alloc.device_bytes = Some(1 << 30);
    m.feed(&alloc, T0);
    alloc.device_bytes = Some(256 << 20);
    m.feed(&alloc, T0);
    let init = Args::CommInit {
        comm: Some(0xc0ffee),
        nranks: 8,
        rank: Some(3),
        unique_id: None,
        comm_id: None,
        own_id: false,
    };
    m.feed(
        &call(4242, "train", "ncclCommInitRank", T0, 1_000, init),
        T0,
    );
    m.seen(77, "idle-python", T0);
    m.feed(
        &call(
            99,
            "done",
            "cuLaunchKernel",
            T0,
            1_000,
            launch(Some("x"), 1),
        ),
        T0,
    );
    let now = T0 + 10 * NS + SETTLE;
    m.gone(99, now);
    m.advance(now);
    m.set_lost(&[(31337, 12)]);
    app.refresh(now, "12:00:00".into());
    app
}

const SETTLE: u64 = crate::tui::model::SETTLE_NS;

fn render(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| draw(f, app)).unwrap();
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let mut line = String::new();
        for x in 0..w {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Compares with `snapshots/NAME.txt`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn check(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/tui/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (UPDATE_SNAPSHOTS=1 writes it); the frame:\n{text}",
            path.display()
        )
    });
    assert!(
        want == text,
        "frame differs from {} (UPDATE_SNAPSHOTS=1 rewrites it)\n--- want\n{want}\n--- got\n{text}",
        path.display()
    );
}

#[test]
fn full_frame_with_known_numbers() {
    let app = busy_app();
    let text = render(&app, 120, 40);
    // The numbers the fixture implies, whatever the layout.
    let train = text
        .lines()
        .find(|l| l.contains("4242") && l.contains("train"))
        .unwrap();
    for want in [
        "1.00k", "100Mi", "40.0Ki", "256Mi", "1.00Gi", "50", "200Mi", "25%",
    ] {
        assert!(train.contains(want), "{want} missing from {train:?}");
    }
    assert!(text.contains("✗ done"));
    check("full_120x40", &text);
}

#[test]
fn narrow_terminal() {
    let app = busy_app();
    let text = render(&app, 80, 24);
    assert!(text.lines().all(|l| l.chars().count() <= 80));
    check("narrow_80x24", &text);
}

#[test]
fn empty_state() {
    let scope = Scope {
        what: "every process".into(),
        probes: 0,
        lost: 0,
    };
    let mut app = App::new(
        scope,
        GpuStatus::Unavailable("libnvidia-ml.so.1: cannot open shared object file".into()),
        1,
    );
    app.refresh(T0, "12:00:00".into());
    check("empty_80x24", &render(&app, 80, 24));
}

#[test]
fn help_overlay() {
    let mut app = busy_app();
    app.apply(Action::ToggleHelp);
    check("help_80x24", &render(&app, 80, 24));
}

#[test]
fn filter_active_and_other_panes() {
    let mut app = busy_app();
    app.apply(Action::StartFilter);
    for c in "inf".chars() {
        app.apply(Action::FilterChar(c));
    }
    let text = render(&app, 100, 30);
    assert!(text.contains("31337") && !text.contains("4242"));
    check("filter_100x30", &text);
    app.apply(Action::FilterClear);
    app.apply(Action::Top);
    app.apply(Action::NextPane);
    app.apply(Action::NextPane);
    check("kernels_100x30", &render(&app, 100, 30));
    app.apply(Action::NextPane);
    assert!(render(&app, 100, 30).contains("no cuBLAS GEMM in the last 10 s"));
    app.apply(Action::NextPane);
    check("nccl_100x30", &render(&app, 100, 30));
}

#[test]
fn gpu_header_from_nvml() {
    let mut app = busy_app();
    let gpu = |index, util| GpuStat {
        index,
        name: "NVIDIA H200".into(),
        util_pct: Some(util),
        mem_used: Some(12 << 30),
        mem_total: Some(140 << 30),
        power_mw: Some(250_000),
        power_limit_mw: Some(700_000),
    };
    app.gpus = GpuStatus::Gpus(vec![gpu(0, 97), gpu(1, 3)]);
    let text = render(&app, 100, 30);
    assert!(text.contains(" GPU1 NVIDIA H200  util   3%  mem 12.0 / 140.0 GiB  power 250 / 700 W"));
    check("gpus_100x30", &text);
}

#[test]
fn call_sites_of_the_api_under_the_cursor() {
    use crate::stacks::table::StackTable;
    let scope = Scope {
        what: "every process".into(),
        probes: 164,
        lost: 0,
    };
    let gpus = GpuStatus::Unavailable("no NVML".into());
    let mut app = App::new(scope, gpus, 1);
    let mut table = StackTable::new();
    let frames = |v: &[&str]| v.iter().map(|s| std::sync::Arc::<str>::from(*s)).collect();
    let hot = table.intern(frames(&[
        "cuLaunchKernel (libcuda.so.1)",
        "forward (/w/train.py:12)",
        "main (/w/train.py:30)",
    ]));
    let cold = table.intern(frames(&[
        "cuLaunchKernel (libcuda.so.1)",
        "evaluate (/w/train.py:20)",
    ]));
    for s in 0..3 {
        for i in 0..100u64 {
            let mut c = call(
                7,
                "train",
                "cuLaunchKernel",
                T0 + s * NS + i * 1_000_000,
                if i % 4 == 0 { 1_000 } else { 3_000 },
                launch(Some("k"), 1),
            );
            c.call.stack = Some(if i % 4 == 0 {
                cold.clone()
            } else {
                hot.clone()
            });
            app.model.feed(&c, T0);
        }
    }
    let now = T0 + 3 * NS + SETTLE;
    app.model.advance(now);
    app.refresh(now, "12:00:00".into());
    // Only while the APIs table has the cursor.
    assert!(!render(&app, 100, 30).contains("Top call sites"));
    app.apply(Action::NextPane);
    let text = render(&app, 100, 30);
    let at = text
        .find("Top call sites of cuLaunchKernel")
        .unwrap_or_else(|| panic!("{text}"));
    let lines: Vec<&str> = text[at..].lines().take(3).collect();
    // 75 calls/s at 3 us against 25 at 1 us: 90% and 10% of host time.
    assert!(
        lines[1].contains("90.0%")
            && lines[1].contains("75")
            && lines[1].ends_with("forward (/w/train.py:12)"),
        "{lines:#?}"
    );
    assert!(
        lines[2].contains("10.0%") && lines[2].ends_with("evaluate (/w/train.py:20)"),
        "{lines:#?}"
    );
}

/// The GEMMs pane: two shapes of one process with their GPU spans
/// (`--gpu-time`), and cuBLASLt matmuls of unknown descriptors.
#[test]
fn gemms_pane_by_shape() {
    use crate::model::fixtures::{gemm_args, gpu_kernel, launched_by};
    use crate::model::lt::LtCall;
    let scope = Scope {
        what: "pid 7".into(),
        probes: 300,
        lost: 0,
    };
    let mut app = App::new(scope, GpuStatus::Unavailable("no NVML".into()), 1);
    let m = &mut app.model;
    for s in 0..3u64 {
        for i in 0..20u64 {
            let t = T0 + s * NS + i * 10_000_000;
            // Every other GEMM is 4x as large in m: 20 µs on the GPU.
            let (mm, gpu) = if i % 2 == 0 {
                (64, 5_000)
            } else {
                (256, 20_000)
            };
            m.feed(
                &call(
                    7,
                    "train",
                    "cuLaunchKernel",
                    t + 100,
                    2_000,
                    launch(Some("nvjet"), 4),
                ),
                T0,
            );
            m.feed(
                &call(
                    7,
                    "train",
                    "cublasGemmStridedBatchedEx",
                    t,
                    6_000,
                    gemm_args(mm),
                ),
                T0,
            );
            let mut w = launched_by(gpu_kernel("nvjet", t + 50_000, gpu), 7, t + 100);
            w.pid = 7;
            m.gpu(&w, T0);
        }
        let lt = Args::Lt(LtCall::Matmul {
            desc: 1,
            a: 2,
            b: 3,
            c: 4,
        });
        m.feed(
            &call(
                7,
                "train",
                "cublasLtMatmul",
                T0 + s * NS + 500_000_000,
                9_000,
                lt,
            ),
            T0,
        );
    }
    let now = T0 + 3 * NS + SETTLE;
    m.advance(now);
    app.refresh(now, "12:00:00".into());
    for _ in 0..3 {
        app.apply(Action::NextPane);
    }
    let text = render(&app, 100, 24);
    assert!(text.contains("[GEMMs]"), "{text}");
    check("gemms_100x24", &text);
}
