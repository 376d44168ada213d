//! Executable graphs: instantiated from a graph, changed by updates and
//! per-node setters, and what each launch of one runs.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use crate::graphs::book::ExecNews;
use crate::graphs::book::GraphBook;
use crate::graphs::book::GraphEnv;
use crate::graphs::book::GraphNote;
use crate::graphs::book::MAX_EXECS;
use crate::graphs::book::MAX_NODES;
use crate::model::graph::ExecContents;
use crate::model::graph::GraphCall;
use crate::model::graph::Node;

/// A node of an executable graph.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Item {
    /// The node of the graph it was instantiated from (what setters name).
    handle: Option<u64>,
    node: Node,
    enabled: bool,
    /// A child graph's nodes, in place of the child-graph node.
    children: Vec<Item>,
}

#[derive(Debug)]
pub(super) enum ExecState {
    /// Followed from the calls that made it.
    Traced(Vec<Item>),
    /// Not followed: read from memory at the next launch when `dirty`.
    Unknown {
        dirty: bool,
        /// Parameters last set per node (so that setting the same again,
        /// as XLA does before every launch, needs no new read).
        set: HashMap<u64, Node>,
    },
}

#[derive(Debug)]
pub(super) struct ExecDef {
    state: ExecState,
    /// What it runs, as last built or read.
    contents: Option<Arc<ExecContents>>,
    built: bool,
    /// What the last record said (`Some(None)`: opaque).
    said: Option<Option<Arc<ExecContents>>>,
    /// When the call that made it returned (`GraphBook::older_than`).
    born_ns: u64,
}

impl ExecDef {
    fn new(state: ExecState) -> Self {
        Self {
            state,
            contents: None,
            built: false,
            said: None,
            born_ns: 0,
        }
    }

    fn unknown() -> Self {
        Self::new(ExecState::Unknown {
            dirty: true,
            set: HashMap::default(),
        })
    }

    /// Forget what was built: something changed.
    fn touch(&mut self) {
        self.built = false;
    }

    fn make_unknown(&mut self) {
        self.state = ExecState::Unknown {
            dirty: true,
            set: HashMap::default(),
        };
        self.built = false;
    }
}

impl GraphBook {
    /// The calls on executable graphs.
    pub(super) fn apply_exec(&mut self, call: &GraphCall) {
        match call {
            GraphCall::Instantiate {
                graph,
                exec: Some(e),
            } => {
                self.remove_exec(*e);
                if self.execs.len() >= MAX_EXECS {
                    self.overflowed += 1;
                    return;
                }
                let state = match self.items(*graph) {
                    Some(items) if self.held + count(&items) <= MAX_NODES => {
                        self.held += count(&items);
                        ExecState::Traced(items)
                    }
                    Some(_) => {
                        self.overflowed += 1;
                        ExecState::Unknown {
                            dirty: true,
                            set: HashMap::default(),
                        }
                    }
                    None => ExecState::Unknown {
                        dirty: true,
                        set: HashMap::default(),
                    },
                };
                let def = ExecDef {
                    born_ns: self.end_ns,
                    ..ExecDef::new(state)
                };
                self.execs.insert(*e, def);
            }
            GraphCall::ExecUpdate { exec, graph } => {
                let new = self.items(*graph);
                let e = self.exec_mut(*exec);
                match (&mut e.state, new) {
                    (ExecState::Traced(items), Some(new)) if same_shape(items, &new) => {
                        for (old, new) in items.iter_mut().zip(new) {
                            old.node = new.node;
                            old.children = new.children;
                        }
                        e.touch();
                    }
                    (ExecState::Unknown { dirty, .. }, _) => *dirty = true,
                    _ => e.make_unknown(),
                }
            }
            GraphCall::ExecSetNode { exec, node, spec } => {
                let children = match spec {
                    Node::Child { graph, .. } => self.items(*graph),
                    _ => Some(Vec::new()),
                };
                let e = self.exec_mut(*exec);
                match &mut e.state {
                    ExecState::Traced(items) => {
                        match (items.iter_mut().find(|i| i.handle == Some(*node)), children) {
                            (Some(item), Some(children)) => {
                                item.node = spec.clone();
                                item.children = children;
                                e.touch();
                            }
                            _ => e.make_unknown(),
                        }
                    }
                    ExecState::Unknown { dirty, set } => {
                        let same =
                            !matches!(spec, Node::Child { .. }) && set.get(node) == Some(spec);
                        if !same {
                            *dirty = true;
                            set.insert(*node, spec.clone());
                        }
                    }
                }
            }
            GraphCall::ExecSetEnabled {
                exec,
                node,
                enabled,
            } => {
                let e = self.exec_mut(*exec);
                match &mut e.state {
                    ExecState::Traced(items) => {
                        match items.iter_mut().find(|i| i.handle == Some(*node)) {
                            Some(item) => {
                                item.enabled = *enabled;
                                e.touch();
                            }
                            None => e.make_unknown(),
                        }
                    }
                    ExecState::Unknown { dirty, .. } => *dirty = true,
                }
            }
            GraphCall::ExecDestroy { exec }
                if !self.older_than(self.execs.get(exec).map(|d| d.born_ns)) =>
            {
                self.remove_exec(*exec)
            }
            _ => {}
        }
    }

    /// What executable graph `exec` runs, and the record to write if that
    /// was not said yet.
    pub(super) fn launch(
        &mut self,
        exec: u64,
        env: &mut dyn GraphEnv,
    ) -> (Option<Arc<ExecContents>>, Option<ExecNews>) {
        if !self.execs.contains_key(&exec) && self.execs.len() >= MAX_EXECS {
            self.overflowed += 1;
            return (None, None);
        }
        let e = self.execs.entry(exec).or_insert_with(ExecDef::unknown);
        match &mut e.state {
            ExecState::Traced(items) if !e.built => {
                let mut nodes = Vec::new();
                flatten(items, &mut nodes, env);
                e.contents = Some(Arc::new(ExecContents {
                    nodes,
                    from_memory: false,
                }));
                e.built = true;
            }
            ExecState::Unknown { dirty, .. } if *dirty || !e.built => {
                let read = env.read_exec(exec);
                if read.is_none() && env.exec_layout_pending() {
                    // Read at a launch once the layout is known.
                    return (None, None);
                }
                *dirty = false;
                e.contents = read.map(|nodes| {
                    Arc::new(ExecContents {
                        nodes,
                        from_memory: true,
                    })
                });
                e.built = true;
            }
            _ => {}
        }
        let contents = e.contents.clone();
        let same = match &e.said {
            Some(Some(s)) => contents
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(s, c) || **s == **c),
            Some(None) => contents.is_none(),
            None => false,
        };
        if same {
            return (contents, None);
        }
        if contents.is_none() && e.said.is_none() {
            self.notes.push(GraphNote::Opaque { exec });
        }
        e.said = Some(contents.clone());
        (contents.clone(), Some(ExecNews { exec, contents }))
    }

    fn exec_mut(&mut self, exec: u64) -> &mut ExecDef {
        self.execs.entry(exec).or_insert_with(ExecDef::unknown)
    }

    pub(super) fn remove_exec(&mut self, exec: u64) {
        if let Some(e) = self.execs.remove(&exec) {
            if let ExecState::Traced(items) = e.state {
                self.held = self.held.saturating_sub(count(&items));
            }
        }
    }

    /// The nodes an executable graph instantiated from `graph` has, if every
    /// one of them is known.
    pub(super) fn items(&self, graph: u64) -> Option<Vec<Item>> {
        let def = self.graphs.get(&graph)?;
        if !def.complete || def.tainted_ns.is_some_and(|t| t <= self.now_ns) {
            return None;
        }
        def.nodes
            .iter()
            .map(|e| {
                let children = match e.child {
                    Some(c) => self.items(c)?,
                    None => Vec::new(),
                };
                Some(Item {
                    handle: e.handle,
                    node: e.node.clone(),
                    enabled: true,
                    children,
                })
            })
            .collect()
    }
}

pub(super) fn count(items: &[Item]) -> usize {
    items.iter().map(|i| 1 + count(&i.children)).sum()
}

/// Same number of nodes, same kinds in the same places (what
/// `cuGraphExecUpdate` requires; the driver refuses anything else).
fn same_shape(a: &[Item], b: &[Item]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| std::mem::discriminant(&x.node) == std::mem::discriminant(&y.node))
}

/// The nodes that run, in order: child graphs in place, disabled nodes out,
/// kernels named.
fn flatten(items: &[Item], out: &mut Vec<Node>, env: &mut dyn GraphEnv) {
    for i in items.iter().filter(|i| i.enabled) {
        match &i.node {
            Node::Child { .. } => flatten(&i.children, out, env),
            Node::Kernel(k) => {
                let mut k = k.clone();
                if k.kernel.is_none() {
                    k.kernel = env.kernel_name(k.handle());
                }
                out.push(Node::Kernel(k));
            }
            n => out.push(n.clone()),
        }
    }
}
