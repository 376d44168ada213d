//! What gputrace knows of one process's CUDA graphs, followed from its
//! calls in order: graphs and their nodes (built node by node, by capture,
//! by cloning), executable graphs (instantiated from a graph, then changed
//! by whole-graph updates and per-node setters), and so what each
//! `cuGraphLaunch` runs.
//!
//! Never a guess: a graph or executable graph the trace could not follow
//! (made before gputrace attached, changed through a node it never saw) is
//! *unknown*; an unknown executable graph is read from the process's memory
//! where a calibrated layout allows it (`GraphEnv::read_exec`), else it is
//! opaque (`"nodes":null`); while that layout is still being calibrated its
//! launches say nothing of it, and it is read at a launch once it is known.
//!
//! Bounded: past [`MAX_GRAPHS`] graphs, [`MAX_EXECS`] executable graphs or
//! [`MAX_NODES`] nodes held, new ones are not followed (they become unknown)
//! and [`GraphBook::overflowed`] counts them. Freed on destroy; the book of
//! a process is dropped with its process.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use crate::graphs::capture::CaptureBook;
use crate::model::call::Args;
use crate::model::graph::ExecContents;
use crate::model::graph::GraphCall;
use crate::model::graph::KernelNode;
use crate::model::graph::Node;
use exec::ExecDef;

mod exec;

#[cfg(test)]
mod tests;

pub(crate) const MAX_GRAPHS: usize = 16384;
pub(crate) const MAX_EXECS: usize = 16384;
pub(crate) const MAX_NODES: usize = 1 << 20;

/// Ids of graphs gputrace holds without a handle (a capture's graph before
/// it ends, a child node's copy of its graph): above any user address.
const SYNTHETIC: u64 = 1 << 63;

/// What the book needs from the rest of the tracer.
pub(crate) trait GraphEnv {
    /// The demangled name of a CUfunction or CUkernel handle.
    fn kernel_name(&mut self, handle: u64) -> Option<Arc<str>>;
    /// The nodes of an executable graph read from the process's memory,
    /// `None` where that cannot be done.
    fn read_exec(&mut self, exec: u64) -> Option<Vec<Node>>;
    /// Whether the layout [`GraphEnv::read_exec`] needs is being found now
    /// (calibration runs beside the tracing): an executable graph that
    /// cannot be read yet is read again at its next launch.
    fn exec_layout_pending(&mut self) -> bool {
        false
    }
    /// When the call observed began (CLOCK_MONOTONIC ns; 0 where not
    /// known): calls of different threads can come out of their order.
    fn now_ns(&self) -> u64 {
        0
    }
    /// When the call observed returned (its start where not known).
    fn end_ns(&self) -> u64 {
        self.now_ns()
    }
    /// Whether every call of the samplable APIs (launches, stream copies,
    /// event records and waits) made from `from_ns` to `to_ns` was traced:
    /// false where an overhead budget had their probes off meanwhile.
    fn busy_traced(&self, _from_ns: u64, _to_ns: u64) -> bool {
        true
    }
}

/// Something the user should be told once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum GraphNote {
    /// gputrace attached while `stream` was capturing: work issued to it
    /// before the capture was noticed may have been counted as run.
    MidCapture { stream: u64 },
    /// An executable graph whose contents are not known (`"nodes":null`).
    Opaque { exec: u64 },
    /// A capture into `graph` ran while an overhead budget had the busy
    /// probes off: what it recorded is not all known.
    SampledCapture { graph: u64 },
}

/// A node of a graph.
#[derive(Clone, Debug)]
struct Entry {
    /// Its handle; `None` for nodes the trace never saw a handle of
    /// (recorded by a capture, copied by a clone).
    handle: Option<u64>,
    node: Node,
    /// For a child-graph node: the id of the graph it holds.
    child: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct GraphDef {
    nodes: Vec<Entry>,
    /// Every node of it is known.
    complete: bool,
    /// A call that began then named a node the trace never saw, which may
    /// be one of its nodes held without a handle: what is made of it
    /// from then on is not known (`GraphBook::taint_anonymous`).
    tainted_ns: Option<u64>,
    /// When the call that made it returned (`GraphBook::older_than`).
    born_ns: u64,
}

/// A launch's executable graph became known (or changed): the record to
/// write before the launch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ExecNews {
    pub exec: u64,
    pub contents: Option<Arc<ExecContents>>,
}

/// The CUDA graphs of one process.
#[derive(Debug, Default)]
pub(crate) struct GraphBook {
    graphs: HashMap<u64, GraphDef>,
    /// Node handle → the graph holding it.
    node_graph: HashMap<u64, u64>,
    execs: HashMap<u64, ExecDef>,
    captures: CaptureBook,
    next_synthetic: u64,
    /// Nodes held in graphs and executable graphs.
    held: usize,
    /// Graphs, executable graphs and nodes not followed for the bounds.
    pub overflowed: u64,
    notes: Vec<GraphNote>,
    /// When the call being observed began (`GraphEnv::now_ns`).
    now_ns: u64,
    /// When it returned (`GraphEnv::end_ns`).
    end_ns: u64,
}

/// `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`: the capture goes on.
const WRONG_THREAD: i64 = 908;

impl GraphBook {
    /// Learns from a call (`api` its exported name, `ret` its return code)
    /// and completes it: work recorded by a capture is marked `captured`,
    /// a graph launch gets what it runs. Returns the record to write first
    /// when a launch runs an executable graph not yet said (or changed).
    pub(crate) fn observe(
        &mut self,
        api: &str,
        args: &mut Args,
        ret: Option<i64>,
        env: &mut dyn GraphEnv,
    ) -> Option<ExecNews> {
        let ok = ret.is_none_or(|r| r == 0);
        self.now_ns = env.now_ns();
        self.end_ns = env.end_ns();
        match args {
            Args::Launch(l) if ok => {
                let c = self.captures.of_stream(l.stream)?;
                l.captured = Some(c.seq);
                let graph = c.graph;
                let node = Node::Kernel(KernelNode {
                    function: l.function,
                    cukernel: 0,
                    kernel: l.kernel.clone(),
                    grid: l.grid,
                    block: l.block,
                    shared_mem_bytes: l.shared_mem_bytes,
                });
                self.push(graph, None, node, None);
                None
            }
            Args::Memcpy(m) if ok => {
                let c = self.captures.of_stream(m.stream?)?;
                m.captured = Some(c.seq);
                let graph = c.graph;
                let node = match m.src {
                    Some(_) => Node::Memcpy {
                        bytes: m.bytes,
                        direction: m.direction,
                    },
                    None => Node::Memset { bytes: m.bytes },
                };
                self.push(graph, None, node, None);
                None
            }
            Args::Sync {
                stream: Some(s),
                event: Some(e),
            } if ok => {
                if api.starts_with("cuEventRecord") {
                    self.captures.record(*e, *s);
                } else if api.starts_with("cuStreamWaitEvent") {
                    self.captures.wait(*s, *e);
                }
                None
            }
            Args::Graph(g) if ok => {
                if let Some(c) = self.captures.of_stream(g.stream) {
                    // A graph launched into a capture becomes a child of
                    // its graph: not followed.
                    g.captured = Some(c.seq);
                    let graph = c.graph;
                    if let Some(def) = self.graphs.get_mut(&graph) {
                        def.complete = false;
                    }
                    return None;
                }
                let (contents, news) = self.launch(g.exec, env);
                g.contents = contents;
                news
            }
            Args::GraphApi(call) => {
                self.apply(call, ret, env);
                None
            }
            _ => None,
        }
    }

    /// What the user should be told, once each.
    pub(crate) fn take_notes(&mut self) -> Vec<GraphNote> {
        std::mem::take(&mut self.notes)
    }

    #[cfg(test)]
    /// Graphs and executable graphs held (for status and tests).
    pub(crate) fn held(&self) -> (usize, usize, usize) {
        (self.graphs.len(), self.execs.len(), self.held)
    }

    fn apply(&mut self, call: &GraphCall, ret: Option<i64>, env: &dyn GraphEnv) {
        let ok = ret.is_none_or(|r| r == 0);
        match call {
            GraphCall::BeginCapture { .. }
            | GraphCall::EndCapture { .. }
            | GraphCall::CaptureStatus { .. } => self.apply_capture(call, ret, env),
            _ if !ok => {}
            GraphCall::Create { graph: Some(g) } => {
                self.remove_graph(*g);
                self.new_graph(Some(*g), true);
            }
            GraphCall::AddNode {
                graph,
                node: Some(n),
                spec,
            } => {
                let id = self.graph_or_unknown(*graph);
                let child = self.child_of(spec);
                self.push(id, Some(*n), spec.clone(), child);
            }
            GraphCall::SetNode { .. }
            | GraphCall::Clone { clone: Some(_), .. }
            | GraphCall::FindInClone { node: Some(_), .. }
            | GraphCall::ChildGraph { graph: Some(_), .. }
            | GraphCall::DestroyNode { .. } => self.apply_node(call),
            GraphCall::Destroy { graph } => {
                if !self.older_than(self.graphs.get(graph).map(|d| d.born_ns)) {
                    self.remove_graph(*graph);
                }
            }
            call => self.apply_exec(call),
        }
    }

    /// Stream capture: begun, ended (or failed to end), its status asked.
    fn apply_capture(&mut self, call: &GraphCall, ret: Option<i64>, env: &dyn GraphEnv) {
        let ok = ret.is_none_or(|r| r == 0);
        match call {
            // Failed to end: the capture is over, unless the call came
            // from another thread than the one capturing.
            GraphCall::EndCapture { stream, .. } if !ok && ret != Some(WRONG_THREAD) => {
                if let Some(c) = self.captures.end(*stream) {
                    self.drop_synthetic(c.graph);
                }
            }
            _ if !ok => {}
            GraphCall::BeginCapture { stream, graph, .. } => {
                let id = match graph {
                    Some(g) => self.graph_or_unknown(*g),
                    None => self.new_graph(None, true),
                };
                self.captures.begin(*stream, id, false, self.now_ns);
            }
            GraphCall::EndCapture { stream, graph } => match self.captures.end(*stream) {
                Some(c) => {
                    let id = match graph {
                        Some(g) if *g != c.graph => {
                            self.rename(c.graph, *g);
                            *g
                        }
                        Some(_) => c.graph,
                        None => {
                            self.drop_synthetic(c.graph);
                            return;
                        }
                    };
                    if !env.busy_traced(c.begin_ns, self.now_ns) {
                        // Work recorded while the probes were off was not
                        // seen: its executable graphs are read from memory.
                        if let Some(def) = self.graphs.get_mut(&id) {
                            def.complete = false;
                        }
                        self.notes.push(GraphNote::SampledCapture { graph: id });
                    }
                }
                None => {
                    // Begun before gputrace attached: what it recorded is not known.
                    if let Some(g) = graph {
                        self.remove_graph(*g);
                        self.new_graph(Some(*g), false);
                    }
                    self.notes.push(GraphNote::MidCapture { stream: *stream });
                }
            },
            GraphCall::CaptureStatus { stream, status, .. } => match status {
                Some(1) if self.captures.of_stream(*stream).is_none() => {
                    let id = self.new_graph(None, false);
                    self.captures.begin(*stream, id, true, self.now_ns);
                    self.notes.push(GraphNote::MidCapture { stream: *stream });
                }
                Some(0) => self.captures.not_capturing(*stream),
                _ => {}
            },
            _ => {}
        }
    }

    /// Changes to a graph's nodes: set, cloned, found in a clone, a child
    /// graph, destroyed.
    fn apply_node(&mut self, call: &GraphCall) {
        match call {
            GraphCall::SetNode { node, spec } => match self.find(*node) {
                Some((g, i)) => {
                    let child = self.child_of(spec);
                    let entry = &mut self.graphs.get_mut(&g).expect("found").nodes[i];
                    entry.node = spec.clone();
                    let old = std::mem::replace(&mut entry.child, child);
                    if let Some(old) = old {
                        self.remove_graph(old);
                    }
                }
                None => self.taint_anonymous(),
            },
            GraphCall::Clone {
                original,
                clone: Some(c),
            } => {
                self.remove_graph(*c);
                match self.copy_graph(*original) {
                    Some(copy) => self.rename(copy, *c),
                    None => {
                        self.new_graph(Some(*c), false);
                    }
                }
            }
            GraphCall::FindInClone {
                original,
                clone,
                node: Some(m),
            } => {
                let pos = self.find(*original).map(|(_, i)| i);
                match (pos, self.graphs.get_mut(clone)) {
                    (Some(i), Some(def)) if i < def.nodes.len() => {
                        def.nodes[i].handle = Some(*m);
                        self.node_graph.insert(*m, *clone);
                    }
                    _ => self.taint_anonymous(),
                }
            }
            GraphCall::ChildGraph {
                node,
                graph: Some(h),
            } => match self.find(*node) {
                Some((g, i)) => {
                    let held = self.graphs[&g].nodes[i].child;
                    if let Some(id) = held.filter(|id| id != h) {
                        self.rename(id, *h);
                        self.graphs.get_mut(&g).expect("found").nodes[i].child = Some(*h);
                    }
                }
                None => {
                    self.remove_graph(*h);
                    self.new_graph(Some(*h), false);
                }
            },
            GraphCall::DestroyNode { node } => match self.find(*node) {
                Some((g, i)) => {
                    let entry = self.graphs.get_mut(&g).expect("found").nodes.remove(i);
                    self.held = self.held.saturating_sub(1);
                    self.node_graph.remove(node);
                    if let Some(c) = entry.child {
                        self.remove_graph(c);
                    }
                }
                None => self.taint_anonymous(),
            },
            _ => {}
        }
    }

    /// A new graph: under `handle`, or a synthetic id. Returns its id.
    fn new_graph(&mut self, handle: Option<u64>, complete: bool) -> u64 {
        let id = handle.unwrap_or_else(|| {
            self.next_synthetic += 1;
            SYNTHETIC | self.next_synthetic
        });
        if self.graphs.len() >= MAX_GRAPHS {
            // Not held: it reads as unknown wherever it is used.
            self.overflowed += 1;
            return id;
        }
        self.graphs.insert(
            id,
            GraphDef {
                nodes: Vec::new(),
                complete,
                tainted_ns: None,
                born_ns: self.end_ns,
            },
        );
        id
    }

    /// The id of graph `handle`, held as unknown if it was made before the
    /// trace began.
    fn graph_or_unknown(&mut self, handle: u64) -> u64 {
        if !self.graphs.contains_key(&handle) {
            self.new_graph(Some(handle), false);
        }
        handle
    }

    fn push(&mut self, graph: u64, handle: Option<u64>, node: Node, child: Option<u64>) {
        let full = self.held >= MAX_NODES;
        let Some(def) = self.graphs.get_mut(&graph) else {
            return;
        };
        if full {
            def.complete = false;
            self.overflowed += 1;
            return;
        }
        def.nodes.push(Entry {
            handle,
            node,
            child,
        });
        self.held += 1;
        if let Some(h) = handle {
            self.node_graph.insert(h, graph);
        }
    }

    /// The copy a child-graph node holds of its graph.
    fn child_of(&mut self, spec: &Node) -> Option<u64> {
        match spec {
            Node::Child { graph, moved: true } => {
                self.graph_or_unknown(*graph);
                Some(*graph)
            }
            Node::Child { graph, .. } => Some(
                self.copy_graph(*graph)
                    .unwrap_or_else(|| self.new_graph(None, false)),
            ),
            _ => None,
        }
    }

    /// A deep copy of `graph` under a synthetic id. The driver's copy has
    /// nodes of its own, whose handles the trace does not see.
    fn copy_graph(&mut self, graph: u64) -> Option<u64> {
        let def = self.graphs.get(&graph)?.clone();
        let id = self.new_graph(None, def.complete);
        if let Some(copy) = self.graphs.get_mut(&id) {
            copy.tainted_ns = def.tainted_ns;
        }
        for e in def.nodes {
            let child = e.child.map(|c| {
                self.copy_graph(c)
                    .unwrap_or_else(|| self.new_graph(None, false))
            });
            self.push(id, None, e.node, child);
        }
        Some(id)
    }

    /// Moves graph `from` to id `to` (a capture's or a copy's graph getting
    /// its handle).
    fn rename(&mut self, from: u64, to: u64) {
        let Some(def) = self.graphs.remove(&from) else {
            return;
        };
        self.remove_graph(to);
        let mut def = def;
        def.born_ns = self.end_ns;
        for e in &def.nodes {
            if let Some(h) = e.handle {
                self.node_graph.insert(h, to);
            }
        }
        self.graphs.insert(to, def);
    }

    /// Whether the call being observed began before something born at
    /// `born_ns` (`None`: nothing held): a destroy that began before the
    /// graph or executable graph now under its handle was made names an
    /// older one, freed by that destroy and its memory given to the new one
    /// by another thread, whose call returned (and so was recorded) first.
    fn older_than(&self, born_ns: Option<u64>) -> bool {
        born_ns.is_some_and(|b| self.now_ns != 0 && self.now_ns < b)
    }

    fn drop_synthetic(&mut self, graph: u64) {
        if graph & SYNTHETIC != 0 {
            self.remove_graph(graph);
        }
    }

    /// Frees a graph, its nodes and the copies its child nodes hold.
    fn remove_graph(&mut self, graph: u64) {
        let Some(def) = self.graphs.remove(&graph) else {
            return;
        };
        self.held = self.held.saturating_sub(def.nodes.len());
        for e in def.nodes {
            // A handle held by another graph now (freed and made again by
            // another thread, whose call came first) stays with it.
            if let Some(h) = e.handle {
                if self.node_graph.get(&h) == Some(&graph) {
                    self.node_graph.remove(&h);
                }
            }
            if let Some(c) = e.child {
                self.remove_graph(c);
            }
        }
    }

    /// The graph and position of node `handle`.
    fn find(&self, handle: u64) -> Option<(u64, usize)> {
        let g = *self.node_graph.get(&handle)?;
        let i = self
            .graphs
            .get(&g)?
            .nodes
            .iter()
            .position(|e| e.handle == Some(handle))?;
        Some((g, i))
    }

    /// A call named a node the trace never saw: it may be one of the nodes
    /// held without a handle, so no graph holding such nodes is known from
    /// the time of that call on (an executable graph instantiated earlier
    /// by another thread, whose call came out of the ring later, is), but
    /// for a graph a capture is still recording into (the driver lets no
    /// call change it until the capture ends: another thread's call names
    /// a node of another graph).
    fn taint_anonymous(&mut self) {
        let now = self.now_ns;
        for (id, def) in &mut self.graphs {
            if !self.captures.records_into(*id) && def.nodes.iter().any(|e| e.handle.is_none()) {
                def.tainted_ns = Some(def.tainted_ns.map_or(now, |t| t.min(now)));
            }
        }
    }
}
