use crate::graphs::book::*;
use crate::model::call::Launch;
use crate::model::call::Memcpy;
use crate::model::graph::GraphLaunch;
use crate::model::types::Direction;

mod unseen;

const S: u64 = 0x5100;
const S2: u64 = 0x5200;

/// Names handles `0xf<n>` as `k<n>`; reads executable graphs from a table.
#[derive(Default)]
struct Env {
    memory: HashMap<u64, Vec<Node>>,
    reads: usize,
    /// When the call observed began, and returned (0: when it began).
    now: u64,
    end: u64,
    /// When the busy probes were off (an overhead budget sampling).
    off: Vec<(u64, u64)>,
}

impl GraphEnv for Env {
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn end_ns(&self) -> u64 {
        if self.end == 0 {
            self.now
        } else {
            self.end
        }
    }
    fn busy_traced(&self, from_ns: u64, to_ns: u64) -> bool {
        !self.off.iter().any(|&(a, b)| a <= to_ns && b > from_ns)
    }
    fn kernel_name(&mut self, handle: u64) -> Option<Arc<str>> {
        (handle >> 8 == 0xf).then(|| Arc::from(format!("k{}", handle & 0xff)))
    }
    fn read_exec(&mut self, exec: u64) -> Option<Vec<Node>> {
        self.reads += 1;
        self.memory.get(&exec).cloned()
    }
}

fn kernel(f: u64, gx: u32) -> Node {
    Node::Kernel(KernelNode {
        function: f,
        cukernel: 0,
        kernel: None,
        grid: [gx, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
    })
}

fn named(f: u64, gx: u32) -> Node {
    let Node::Kernel(mut k) = kernel(f, gx) else {
        unreachable!()
    };
    k.kernel = Some(Arc::from(format!("k{}", f & 0xff)));
    Node::Kernel(k)
}

fn launch(f: u64, gx: u32, stream: u64) -> Args {
    Args::Launch(Launch {
        function: f,
        stub: 0,
        kernel: Some(Arc::from(format!("k{}", f & 0xff))),
        grid: [gx, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
        stream,
        captured: None,
    })
}

fn copy(bytes: u64, direction: Direction, stream: u64, memset: bool) -> Args {
    Args::Memcpy(Memcpy {
        dst: 1,
        src: (!memset).then_some(2),
        bytes,
        direction: if memset { Direction::Memset } else { direction },
        stream: Some(stream),
        value: None,
        readable: (false, false),
        captured: None,
    })
}

fn sync(stream: u64, event: u64) -> Args {
    Args::Sync {
        stream: Some(stream),
        event: Some(event),
    }
}

fn glaunch(exec: u64) -> Args {
    Args::Graph(GraphLaunch {
        exec,
        stream: S,
        contents: None,
        captured: None,
    })
}

struct T {
    book: GraphBook,
    env: Env,
}

impl T {
    fn new() -> Self {
        Self {
            book: GraphBook::default(),
            env: Env::default(),
        }
    }
    fn call(&mut self, api: &str, mut args: Args) -> (Args, Option<ExecNews>) {
        let news = self.book.observe(api, &mut args, Some(0), &mut self.env);
        (args, news)
    }
    fn g(&mut self, call: GraphCall) {
        self.call("cuGraphX", Args::GraphApi(call));
    }
    fn failed(&mut self, call: GraphCall, ret: i64) {
        let mut args = Args::GraphApi(call);
        self.book
            .observe("cuGraphX", &mut args, Some(ret), &mut self.env);
    }
    /// Launches `exec`: what it runs, and whether a record came first.
    fn run(&mut self, exec: u64) -> (Option<Vec<Node>>, bool) {
        let (args, news) = self.call("cuGraphLaunch", glaunch(exec));
        let Args::Graph(g) = args else { unreachable!() };
        if let Some(n) = &news {
            assert_eq!((n.exec, &n.contents), (exec, &g.contents));
        }
        (g.contents.map(|c| c.nodes.clone()), news.is_some())
    }
    fn add(&mut self, graph: u64, node: u64, spec: Node) {
        self.g(GraphCall::AddNode {
            graph,
            node: Some(node),
            spec,
        });
    }
    fn begin_capture(&mut self, stream: u64) {
        self.g(GraphCall::BeginCapture {
            stream,
            mode: Some(1),
            graph: None,
        });
    }
    fn end_capture(&mut self, stream: u64, graph: u64) {
        self.g(GraphCall::EndCapture {
            stream,
            graph: Some(graph),
        });
    }
    fn instantiate(&mut self, graph: u64, exec: u64) {
        self.g(GraphCall::Instantiate {
            graph,
            exec: Some(exec),
        });
    }
    fn captured(&mut self, api: &str, args: Args) -> Option<u64> {
        match self.call(api, args).0 {
            Args::Launch(l) => l.captured,
            Args::Memcpy(m) => m.captured,
            _ => unreachable!(),
        }
    }
}

/// What PyTorch's CUDAGraph does: capture across two streams, instantiate,
/// destroy the graph, replay.
#[test]
fn capture_instantiate_replay() {
    let mut t = T::new();
    t.g(GraphCall::BeginCapture {
        stream: S,
        mode: Some(1),
        graph: None,
    });
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf00, 64, S)), Some(1));
    t.call("cuEventRecord", sync(S, 0xe1));
    t.call("cuStreamWaitEvent", sync(S2, 0xe1));
    assert_eq!(
        t.captured("cuLaunchKernelEx", launch(0xf03, 32, S2)),
        Some(1)
    );
    assert_eq!(
        t.captured("cuMemsetD32Async", copy(1024, Direction::Memset, S2, true)),
        Some(1)
    );
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf01, 16, S)), Some(1));
    assert_eq!(
        t.captured(
            "cuMemcpyHtoDAsync_v2",
            copy(4096, Direction::HtoD, S, false)
        ),
        Some(1)
    );
    t.call("cuEventRecordWithFlags", sync(S2, 0xe2));
    t.call("cuStreamWaitEvent", sync(S, 0xe2));
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf02, 8, S)), Some(1));
    // Another stream is not in the capture: its launch runs.
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf02, 8, 0x9999)), None);
    t.g(GraphCall::EndCapture {
        stream: S,
        graph: Some(0x6a),
    });
    // The capture is over: launches on S run again.
    assert_eq!(t.captured("cuLaunchKernel", launch(0xf02, 8, S)), None);
    t.g(GraphCall::Instantiate {
        graph: 0x6a,
        exec: Some(0xea),
    });
    t.g(GraphCall::Destroy { graph: 0x6a });
    let want = vec![
        named(0xf00, 64),
        named(0xf03, 32),
        Node::Memset { bytes: 1024 },
        named(0xf01, 16),
        Node::Memcpy {
            bytes: 4096,
            direction: Direction::HtoD,
        },
        named(0xf02, 8),
    ];
    assert_eq!(t.run(0xea), (Some(want.clone()), true));
    assert_eq!(t.run(0xea), (Some(want), false));
    assert_eq!(t.book.held().0, 0, "the graph was freed");
    t.g(GraphCall::ExecDestroy { exec: 0xea });
    assert_eq!(t.book.held(), (0, 0, 0));
    assert!(t.book.take_notes().is_empty());
}

/// What XLA does: nodes one by one, a child graph (cloned when added), a
/// node made from a CUkernel, parameters set before instantiation.
fn build_nodes(t: &mut T) {
    t.g(GraphCall::Create { graph: Some(0x6c) });
    t.add(0x6c, 0xc0, kernel(0xf02, 4));
    t.add(0x6c, 0xc1, kernel(0xf02, 2));
    t.g(GraphCall::Create { graph: Some(0x6b) });
    t.add(0x6b, 0xb0, kernel(0xf00, 10));
    let Node::Kernel(mut by_kernel) = kernel(0, 32) else {
        unreachable!()
    };
    by_kernel.cukernel = 0xf03;
    t.add(0x6b, 0xb1, Node::Kernel(by_kernel));
    t.add(0x6b, 0xb2, Node::Memset { bytes: 4096 });
    t.add(
        0x6b,
        0xb4,
        Node::Child {
            graph: 0x6c,
            moved: false,
        },
    );
    t.add(0x6b, 0xb5, Node::Empty);
    t.g(GraphCall::SetNode {
        node: 0xb0,
        spec: kernel(0xf00, 12),
    });
    // The child was copied: changing or destroying the original does nothing.
    t.add(0x6c, 0xc2, kernel(0xf01, 99));
    t.g(GraphCall::Destroy { graph: 0x6c });
    t.g(GraphCall::Instantiate {
        graph: 0x6b,
        exec: Some(0xeb),
    });
}

fn k3(gx: u32) -> Node {
    let Node::Kernel(mut k) = kernel(0, 32) else {
        unreachable!()
    };
    k.cukernel = 0xf03;
    k.kernel = Some(Arc::from("k3"));
    k.grid = [gx, 1, 1];
    Node::Kernel(k)
}

#[test]
fn node_by_node_with_a_child_graph() {
    let mut t = T::new();
    build_nodes(&mut t);
    let want = vec![
        named(0xf00, 12),
        k3(32),
        Node::Memset { bytes: 4096 },
        named(0xf02, 4),
        named(0xf02, 2),
        Node::Empty,
    ];
    assert_eq!(t.run(0xeb), (Some(want), true));
}

#[test]
fn executable_graph_updates() {
    let mut t = T::new();
    build_nodes(&mut t);
    t.run(0xeb);
    // Per-node setters: a new record once, none for the same again.
    t.g(GraphCall::ExecSetNode {
        exec: 0xeb,
        node: 0xb0,
        spec: kernel(0xf02, 20),
    });
    let (nodes, said) = t.run(0xeb);
    assert!(said);
    assert_eq!(nodes.unwrap()[0], named(0xf02, 20));
    t.g(GraphCall::ExecSetNode {
        exec: 0xeb,
        node: 0xb0,
        spec: kernel(0xf02, 20),
    });
    assert!(!t.run(0xeb).1, "same parameters again: nothing new to say");
    // A child graph swapped in place.
    t.g(GraphCall::Create { graph: Some(0x6d) });
    t.add(0x6d, 0xd0, kernel(0xf02, 5));
    t.add(0x6d, 0xd1, kernel(0xf02, 3));
    t.add(0x6d, 0xd2, kernel(0xf02, 1));
    t.g(GraphCall::ExecSetNode {
        exec: 0xeb,
        node: 0xb4,
        spec: Node::Child {
            graph: 0x6d,
            moved: false,
        },
    });
    t.g(GraphCall::Destroy { graph: 0x6d });
    t.g(GraphCall::ExecSetEnabled {
        exec: 0xeb,
        node: 0xb5,
        enabled: false,
    });
    let (nodes, said) = t.run(0xeb);
    assert!(said);
    let nodes = nodes.unwrap();
    assert_eq!(nodes.len(), 6, "3 child kernels, the empty node disabled");
    assert_eq!(
        nodes[3..],
        [named(0xf02, 5), named(0xf02, 3), named(0xf02, 1)]
    );
    // A whole-graph update pairs nodes by position; enabled stays as set.
    t.g(GraphCall::Create { graph: Some(0x6c) });
    t.add(0x6c, 0xc0, kernel(0xf01, 1));
    t.g(GraphCall::Create { graph: Some(0x6e) });
    t.add(0x6e, 0xe0, kernel(0xf01, 7));
    t.add(0x6e, 0xe1, kernel(0xf01, 8));
    t.add(0x6e, 0xe2, Node::Memset { bytes: 8 });
    t.add(
        0x6e,
        0xe3,
        Node::Child {
            graph: 0x6c,
            moved: false,
        },
    );
    t.add(0x6e, 0xe4, Node::Empty);
    t.g(GraphCall::ExecUpdate {
        exec: 0xeb,
        graph: 0x6e,
    });
    let (nodes, said) = t.run(0xeb);
    assert!(said);
    assert_eq!(
        nodes.unwrap(),
        vec![
            named(0xf01, 7),
            named(0xf01, 8),
            Node::Memset { bytes: 8 },
            named(0xf01, 1)
        ]
    );
    // Kinds changed (a child graph became an empty node): the driver would
    // refuse it; the book does not pretend to know the result.
    t.g(GraphCall::Create { graph: Some(0x71) });
    for (i, n) in [
        kernel(0xf01, 7),
        kernel(0xf01, 8),
        Node::Memset { bytes: 8 },
        Node::Empty,
        Node::Empty,
    ]
    .into_iter()
    .enumerate()
    {
        t.add(0x71, 0x710 + i as u64, n);
    }
    t.g(GraphCall::ExecUpdate {
        exec: 0xeb,
        graph: 0x71,
    });
    assert_eq!(t.run(0xeb), (None, true));
    assert_eq!(t.env.reads, 1);
}

/// Two threads: one destroys its graph and executable graph while the
/// other makes new ones that get the freed handles. The maker's calls
/// return first, so their records come before the destroys': the destroys
/// began before the new graphs were made, so they name the old ones and
/// leave the new ones followed.
#[test]
fn a_destroy_recorded_after_its_handle_was_made_again_leaves_the_new_one() {
    let (g, e) = (0x6100, 0x6200);
    let mut t = T::new();
    let at = |t: &mut T, now: u64, end: u64| {
        t.env.now = now;
        t.env.end = end;
    };
    // Thread A: graph g, executable graph e, long ago.
    at(&mut t, 100, 110);
    t.g(GraphCall::Create { graph: Some(g) });
    t.add(g, 0xa1, kernel(0xf01, 8));
    at(&mut t, 120, 130);
    t.instantiate(g, e);
    // Thread B, inside A's destroys (which began at 200 and 300): the
    // same handles made again, with other nodes.
    at(&mut t, 210, 220);
    t.g(GraphCall::Create { graph: Some(g) });
    t.add(g, 0xb1, kernel(0xf02, 16));
    at(&mut t, 310, 320);
    t.instantiate(g, e);
    // A's destroys, recorded at their returns.
    at(&mut t, 200, 400);
    t.g(GraphCall::Destroy { graph: g });
    at(&mut t, 300, 410);
    t.g(GraphCall::ExecDestroy { exec: e });
    // B's launch runs what B made, followed from its calls.
    at(&mut t, 500, 510);
    assert_eq!(t.run(e), (Some(vec![named(0xf02, 16)]), true));
    assert_eq!(t.env.reads, 0);
    // A destroy that began after they were made removes them.
    at(&mut t, 600, 610);
    t.g(GraphCall::ExecDestroy { exec: e });
    t.g(GraphCall::Destroy { graph: g });
    assert_eq!(t.book.held(), (0, 0, 0));
}
