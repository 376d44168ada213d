//! The JSON of CUDA graphs: the arguments of the graph APIs, of
//! `cuGraphLaunch`, and the `{"type":"graph",...}` record that says what an
//! executable graph runs; and reading them back.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::json::dims;
use crate::json::field;
use crate::json::get_dim;
use crate::json::get_hex;
use crate::json::get_opt_hex;
use crate::json::get_opt_u32;
use crate::json::get_opt_u64;
use crate::json::get_u64;
use crate::json::hex;
use crate::json::num;
use crate::json::opt_hex;
use crate::json::opt_string;
use crate::json::string;
use crate::json::ParseError;
use crate::model::graph::ExecContents;
use crate::model::graph::GraphCall;
use crate::model::graph::GraphLaunch;
use crate::model::graph::GraphOp;
use crate::model::graph::GraphRecord;
use crate::model::graph::KernelNode;
use crate::model::graph::Node;
use crate::model::record::Record;
use crate::model::types::Direction;

/// Appends a node as a JSON object.
pub(crate) fn write_node(out: &mut String, n: &Node) {
    out.push_str("{\"kind\":\"");
    out.push_str(n.kind());
    out.push('"');
    match n {
        Node::Kernel(k) => {
            out.push_str(",\"kernel\":");
            opt_string(out, k.kernel.as_deref());
            out.push_str(",\"function\":");
            hex(out, k.function);
            if k.cukernel != 0 {
                out.push_str(",\"cukernel\":");
                hex(out, k.cukernel);
            }
            out.push_str(",\"grid\":");
            dims(out, k.grid);
            out.push_str(",\"block\":");
            dims(out, k.block);
            out.push_str(",\"shared_mem_bytes\":");
            num(out, k.shared_mem_bytes);
        }
        Node::Memcpy { bytes, direction } => {
            out.push_str(",\"bytes\":");
            num(out, *bytes);
            out.push_str(",\"direction\":\"");
            out.push_str(direction.name());
            out.push('"');
        }
        Node::Memset { bytes } => {
            out.push_str(",\"bytes\":");
            num(out, *bytes);
        }
        Node::Child { graph, moved } => {
            out.push_str(",\"graph\":");
            hex(out, *graph);
            out.push_str(if *moved { ",\"moved\":true" } else { "" });
        }
        Node::EventRecord { event } | Node::EventWait { event } => {
            out.push_str(",\"event\":");
            hex(out, *event);
        }
        Node::Other { node_type } => {
            out.push_str(",\"node_type\":");
            num(out, *node_type);
        }
        Node::Empty | Node::Conditional | Node::Unread => {}
    }
    out.push('}');
}

pub(crate) fn parse_node(v: &Value) -> Result<Node, ParseError> {
    let m = v.as_object().ok_or(ParseError::Field("nodes"))?;
    let kind = field(m, "kind")?
        .as_str()
        .ok_or(ParseError::Field("kind"))?;
    Ok(match kind {
        "kernel" => Node::Kernel(KernelNode {
            function: get_hex(m, "function")?,
            cukernel: get_opt_hex(m, "cukernel")?.unwrap_or(0),
            kernel: m.get("kernel").and_then(Value::as_str).map(Arc::from),
            grid: get_dim(m, "grid")?,
            block: get_dim(m, "block")?,
            shared_mem_bytes: u32::try_from(get_u64(m, "shared_mem_bytes")?)
                .map_err(|_| ParseError::Field("shared_mem_bytes"))?,
        }),
        "memcpy" => Node::Memcpy {
            bytes: get_u64(m, "bytes")?,
            direction: m
                .get("direction")
                .and_then(Value::as_str)
                .and_then(Direction::parse)
                .ok_or(ParseError::Field("direction"))?,
        },
        "memset" => Node::Memset {
            bytes: get_u64(m, "bytes")?,
        },
        "graph" => Node::Child {
            graph: get_hex(m, "graph")?,
            moved: m.get("moved").and_then(Value::as_bool).unwrap_or(false),
        },
        "empty" => Node::Empty,
        "event_record" => Node::EventRecord {
            event: get_hex(m, "event")?,
        },
        "event_wait" => Node::EventWait {
            event: get_hex(m, "event")?,
        },
        "conditional" => Node::Conditional,
        "unread" => Node::Unread,
        other => {
            let t = u32::try_from(get_u64(m, "node_type")?)
                .map_err(|_| ParseError::Field("node_type"))?;
            if other != "other" && Node::other_type(other) != Some(t) {
                return Err(ParseError::Field("kind"));
            }
            Node::Other { node_type: t }
        }
    })
}

/// The arguments of `cuGraphLaunch`: the executable graph and how many
/// nodes it runs (`null` when not known).
pub(crate) fn write_launch(out: &mut String, g: &GraphLaunch) {
    out.push_str("{\"graph_exec\":");
    hex(out, g.exec);
    out.push_str(",\"stream\":");
    hex(out, g.stream);
    out.push_str(",\"nodes\":");
    match &g.contents {
        Some(c) => num(out, c.nodes.len()),
        None => out.push_str("null"),
    }
    if let Some(n) = g.captured {
        out.push_str(",\"captured\":true,\"capture\":");
        num(out, n);
    }
    out.push('}');
}

/// The nodes as a JSON array under `nodes`, with where they came from
/// under `source`.
fn write_nodes(out: &mut String, c: &ExecContents, source: &str, nodes: &str) {
    let _ = write!(
        out,
        ",\"{source}\":\"{}\",\"{nodes}\":[",
        if c.from_memory { "memory" } else { "traced" }
    );
    for (i, n) in c.nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_node(out, n);
    }
    out.push(']');
}

fn parse_nodes(
    m: &Map<String, Value>,
    source: &str,
    key: &'static str,
) -> Result<Option<Arc<ExecContents>>, ParseError> {
    match field(m, key)? {
        Value::Null => Ok(None),
        Value::Array(nodes) => Ok(Some(Arc::new(ExecContents {
            nodes: nodes.iter().map(parse_node).collect::<Result<_, _>>()?,
            from_memory: m.get(source).and_then(Value::as_str) == Some("memory"),
        }))),
        _ => Err(ParseError::Field(key)),
    }
}

/// A launch with what it runs (`"graph_nodes"`, where known): the
/// arguments of a graph launch in a Perfetto trace, which has no place for
/// the `graph` records of JSONL (interned there, so the nodes cost once).
pub(crate) fn write_launch_with_nodes(out: &mut String, g: &GraphLaunch) {
    write_launch(out, g);
    if let (Some(c), None) = (&g.contents, g.captured) {
        out.pop();
        // Named apart from the launch's own `nodes` (the count).
        write_nodes(out, c, "graph_source", "graph_nodes");
        out.push('}');
    }
}

/// Reads a launch back; its contents come from the `graph` record before it
/// (JSONL) or from its own `graph_nodes` (Perfetto).
pub(crate) fn parse_launch(a: &Map<String, Value>) -> Result<GraphLaunch, ParseError> {
    // Timelines of earlier versions called the executable graph `graph`.
    let exec = match a.get("graph_exec") {
        Some(_) => get_hex(a, "graph_exec")?,
        None => get_hex(a, "graph")?,
    };
    let contents = match a.get("graph_nodes") {
        None => None,
        Some(_) => parse_nodes(a, "graph_source", "graph_nodes")?,
    };
    Ok(GraphLaunch {
        exec,
        stream: get_hex(a, "stream")?,
        contents,
        captured: parse_captured(a)?,
    })
}

/// Appends `,"key":"0x…"`.
fn key_hex(out: &mut String, key: &str, v: u64) {
    out.push_str(",\"");
    out.push_str(key);
    out.push_str("\":");
    hex(out, v);
}

fn key_opt_hex(out: &mut String, key: &str, v: Option<u64>) {
    out.push_str(",\"");
    out.push_str(key);
    out.push_str("\":");
    opt_hex(out, v);
}

/// Appends the `args` of a graph API call. (Long: one arm per graph API
/// shape, each a few lines.)
pub(crate) fn write_call(out: &mut String, c: &GraphCall) {
    // Every object starts with a handle; the rest follow as `,"key":…`.
    let start = |out: &mut String, key: &str, v: u64| {
        out.push_str("{\"");
        out.push_str(key);
        out.push_str("\":");
        hex(out, v);
    };
    match c {
        GraphCall::BeginCapture {
            stream,
            mode,
            graph,
        } => {
            start(out, "stream", *stream);
            out.push_str(",\"mode\":");
            match mode {
                Some(m) => num(out, *m),
                None => out.push_str("null"),
            }
            key_opt_hex(out, "graph", *graph);
        }
        GraphCall::EndCapture { stream, graph } => {
            start(out, "stream", *stream);
            key_opt_hex(out, "graph", *graph);
        }
        GraphCall::CaptureStatus { stream, status, id } => {
            start(out, "stream", *stream);
            out.push_str(",\"status\":");
            match status {
                Some(s) => num(out, *s),
                None => out.push_str("null"),
            }
            out.push_str(",\"capture_id\":");
            match id {
                Some(i) => num(out, *i),
                None => out.push_str("null"),
            }
        }
        GraphCall::Create { graph } => {
            out.push_str("{\"graph\":");
            opt_hex(out, *graph);
        }
        GraphCall::AddNode { graph, node, spec } => {
            start(out, "graph", *graph);
            key_opt_hex(out, "node", *node);
            out.push_str(",\"params\":");
            write_node(out, spec);
        }
        GraphCall::SetNode { node, spec } => {
            start(out, "node", *node);
            out.push_str(",\"params\":");
            write_node(out, spec);
        }
        GraphCall::Clone { original, clone } => {
            start(out, "original", *original);
            key_opt_hex(out, "clone", *clone);
        }
        GraphCall::FindInClone {
            original,
            clone,
            node,
        } => {
            start(out, "original", *original);
            key_hex(out, "clone", *clone);
            key_opt_hex(out, "node", *node);
        }
        GraphCall::ChildGraph { node, graph } => {
            start(out, "node", *node);
            key_opt_hex(out, "graph", *graph);
        }
        GraphCall::DestroyNode { node } => start(out, "node", *node),
        GraphCall::Destroy { graph } => start(out, "graph", *graph),
        GraphCall::Instantiate { graph, exec } => {
            start(out, "graph", *graph);
            key_opt_hex(out, "graph_exec", *exec);
        }
        GraphCall::ExecUpdate { exec, graph } => {
            start(out, "graph_exec", *exec);
            key_hex(out, "graph", *graph);
        }
        GraphCall::ExecSetNode { exec, node, spec } => {
            start(out, "graph_exec", *exec);
            key_hex(out, "node", *node);
            out.push_str(",\"params\":");
            write_node(out, spec);
        }
        GraphCall::ExecSetEnabled {
            exec,
            node,
            enabled,
        } => {
            start(out, "graph_exec", *exec);
            key_hex(out, "node", *node);
            out.push_str(if *enabled {
                ",\"enabled\":true"
            } else {
                ",\"enabled\":false"
            });
        }
        GraphCall::Upload { exec, stream } => {
            start(out, "graph_exec", *exec);
            key_hex(out, "stream", *stream);
        }
        GraphCall::ExecDestroy { exec } => start(out, "graph_exec", *exec),
    }
    out.push('}');
}

fn params(a: &Map<String, Value>) -> Result<Node, ParseError> {
    parse_node(field(a, "params")?)
}

/// Reads the `args` of a graph API call back.
pub(crate) fn parse_call(op: GraphOp, a: &Map<String, Value>) -> Result<GraphCall, ParseError> {
    Ok(match op {
        GraphOp::BeginCapture { .. } => GraphCall::BeginCapture {
            stream: get_hex(a, "stream")?,
            mode: get_opt_u32(a, "mode")?,
            graph: get_opt_hex(a, "graph")?,
        },
        GraphOp::EndCapture => GraphCall::EndCapture {
            stream: get_hex(a, "stream")?,
            graph: get_opt_hex(a, "graph")?,
        },
        GraphOp::IsCapturing | GraphOp::CaptureInfo => GraphCall::CaptureStatus {
            stream: get_hex(a, "stream")?,
            status: get_opt_u32(a, "status")?,
            id: get_opt_u64(a, "capture_id")?,
        },
        GraphOp::Create => GraphCall::Create {
            graph: get_opt_hex(a, "graph")?,
        },
        GraphOp::AddNode { .. } => GraphCall::AddNode {
            graph: get_hex(a, "graph")?,
            node: get_opt_hex(a, "node")?,
            spec: params(a)?,
        },
        GraphOp::SetNode { .. } => GraphCall::SetNode {
            node: get_hex(a, "node")?,
            spec: params(a)?,
        },
        GraphOp::Clone => GraphCall::Clone {
            original: get_hex(a, "original")?,
            clone: get_opt_hex(a, "clone")?,
        },
        GraphOp::FindInClone => GraphCall::FindInClone {
            original: get_hex(a, "original")?,
            clone: get_hex(a, "clone")?,
            node: get_opt_hex(a, "node")?,
        },
        GraphOp::ChildGraph => GraphCall::ChildGraph {
            node: get_hex(a, "node")?,
            graph: get_opt_hex(a, "graph")?,
        },
        GraphOp::DestroyNode => GraphCall::DestroyNode {
            node: get_hex(a, "node")?,
        },
        GraphOp::Destroy => GraphCall::Destroy {
            graph: get_hex(a, "graph")?,
        },
        GraphOp::Instantiate => GraphCall::Instantiate {
            graph: get_hex(a, "graph")?,
            exec: get_opt_hex(a, "graph_exec")?,
        },
        GraphOp::ExecUpdate => GraphCall::ExecUpdate {
            exec: get_hex(a, "graph_exec")?,
            graph: get_hex(a, "graph")?,
        },
        GraphOp::ExecSetNode { .. } => GraphCall::ExecSetNode {
            exec: get_hex(a, "graph_exec")?,
            node: get_hex(a, "node")?,
            spec: params(a)?,
        },
        GraphOp::ExecSetEnabled => GraphCall::ExecSetEnabled {
            exec: get_hex(a, "graph_exec")?,
            node: get_hex(a, "node")?,
            enabled: field(a, "enabled")?
                .as_bool()
                .ok_or(ParseError::Field("enabled"))?,
        },
        GraphOp::Upload => GraphCall::Upload {
            exec: get_hex(a, "graph_exec")?,
            stream: get_hex(a, "stream")?,
        },
        GraphOp::ExecDestroy => GraphCall::ExecDestroy {
            exec: get_hex(a, "graph_exec")?,
        },
    })
}

/// Appends the `{"type":"graph",…}` record (no newline): what an executable
/// graph of a process runs, `"nodes":null` when that is not known.
pub(crate) fn write_record(out: &mut String, r: &GraphRecord) {
    out.push_str("{\"type\":\"graph\",\"ts_ns\":");
    num(out, r.ts_ns);
    out.push_str(",\"pid\":");
    num(out, r.pid);
    out.push_str(",\"comm\":");
    string(out, &r.comm);
    out.push_str(",\"exec\":");
    hex(out, r.exec);
    match &r.contents {
        Some(c) => write_nodes(out, c, "source", "nodes"),
        None => out.push_str(",\"source\":null,\"nodes\":null"),
    }
    out.push('}');
}

/// What an executable graph runs, as a timeline record (kind `graph`): its
/// JSONL line is [`write_record`]'s.
pub fn graph_record(r: &GraphRecord) -> Record {
    let mut line = String::with_capacity(256);
    write_record(&mut line, r);
    let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    Record::from_object("graph", "ts_ns", v)
}

/// Reads a `{"type":"graph",…}` record back.
pub(crate) fn parse_record(v: &Value) -> Result<GraphRecord, ParseError> {
    let m = v
        .as_object()
        .ok_or(ParseError::Json("not an object".into()))?;
    let pid = u32::try_from(get_u64(m, "pid")?).map_err(|_| ParseError::Field("pid"))?;
    let contents = parse_nodes(m, "source", "nodes")?;
    Ok(GraphRecord {
        ts_ns: get_u64(m, "ts_ns")?,
        pid,
        comm: Arc::from(m.get("comm").and_then(Value::as_str).unwrap_or("?")),
        exec: get_hex(m, "exec")?,
        contents,
    })
}

/// `captured` and `capture` of a launch or copy read back.
pub(crate) fn parse_captured(a: &Map<String, Value>) -> Result<Option<u64>, ParseError> {
    match a.get("captured") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => get_u64(a, "capture").map(Some),
        Some(_) => Err(ParseError::Field("captured")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: Option<&str>, f: u64) -> Node {
        Node::Kernel(KernelNode {
            function: f,
            cukernel: if f == 0 { 0x77 } else { 0 },
            kernel: name.map(Arc::from),
            grid: [5, 1, 1],
            block: [64, 2, 1],
            shared_mem_bytes: 256,
        })
    }

    #[test]
    fn record_round_trips() {
        let nodes = vec![
            kernel(Some("relu(float*, int)"), 0xf00),
            kernel(None, 0),
            Node::Memcpy {
                bytes: 8192,
                direction: Direction::DtoH,
            },
            Node::Memset { bytes: 4096 },
            Node::Empty,
            Node::EventRecord { event: 0xe0 },
            Node::EventWait { event: 0xe1 },
            Node::Conditional,
            Node::Other { node_type: 3 },
            Node::Other { node_type: 99 },
            Node::Unread,
        ];
        for contents in [
            Some(Arc::new(ExecContents {
                nodes,
                from_memory: false,
            })),
            Some(Arc::new(ExecContents {
                nodes: vec![kernel(Some("k"), 1)],
                from_memory: true,
            })),
            None,
        ] {
            let r = GraphRecord {
                ts_ns: 17,
                pid: 42,
                comm: Arc::from("python3"),
                exec: 0xe000,
                contents,
            };
            let mut s = String::new();
            write_record(&mut s, &r);
            let v: Value = serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}"));
            assert_eq!(v["type"], "graph");
            assert_eq!(parse_record(&v).unwrap(), r, "{s}");
        }
    }

    #[test]
    fn launch_reads_old_and_new_names() {
        let g = GraphLaunch {
            exec: 0xabc,
            stream: 0x5,
            contents: Some(Arc::new(ExecContents {
                nodes: vec![Node::Empty, Node::Empty],
                from_memory: false,
            })),
            captured: None,
        };
        let mut s = String::new();
        write_launch(&mut s, &g);
        assert_eq!(s, r#"{"graph_exec":"0xabc","stream":"0x5","nodes":2}"#);
        let v: Value = serde_json::from_str(&s).unwrap();
        let back = parse_launch(v.as_object().unwrap()).unwrap();
        assert_eq!((back.exec, back.stream), (0xabc, 5));
        let old: Value = serde_json::from_str(r#"{"graph":"0xabc","stream":"0x5"}"#).unwrap();
        assert_eq!(parse_launch(old.as_object().unwrap()).unwrap().exec, 0xabc);
    }

    #[test]
    fn bad_nodes_are_errors() {
        for bad in [
            r#"{"kind":"spaceship"}"#,
            r#"{"kind":"kernel","function":"0x1"}"#,
            r#"{"kind":"memcpy","bytes":1,"direction":"sideways"}"#,
            r#"[1]"#,
        ] {
            let v: Value = serde_json::from_str(bad).unwrap();
            assert!(parse_node(&v).is_err(), "{bad}");
        }
    }
}
