//! The agent's ring records turned into the model's [`GpuWork`] (on Unix
//! time, names demangled) and API records, before they are joined.

use std::collections::HashMap;
use std::sync::Arc;

use tracer_common::gpu::reader::Ring;
use tracer_common::gpu::{
    epoch_of, ApiRecord, ClockKind, Common, KernelRecord, MemcpyRecord, MemsetRecord,
    API_DOMAIN_RUNTIME, FLAG_NO_TIMESTAMPS,
};

use crate::host::clock::Clock;
use crate::model::gpu::{GpuOp, GpuWork, GraphNodeRef};
use crate::model::types::Direction;

/// Kernel names kept per agent (the agent's name area bounds them too).
const MAX_NAMES: usize = 1 << 16;

/// From the agent's clock to Unix ns.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AgentClock {
    pub(crate) clock: Clock,
    /// Added to an agent timestamp to get CLOCK_MONOTONIC (0 when the agent
    /// gives CLOCK_MONOTONIC itself).
    pub(crate) offset_ns: i64,
}

impl AgentClock {
    pub(crate) fn new(clock: Clock, kind: Option<ClockKind>, offset_ns: i64) -> Self {
        let offset_ns = match kind {
            Some(ClockKind::Cupti) => offset_ns,
            _ => 0,
        };
        Self { clock, offset_ns }
    }

    pub(crate) fn unix(&self, agent_ns: u64) -> u64 {
        self.clock
            .to_unix_ns((agent_ns as i128 + i128::from(self.offset_ns)).max(0) as u64)
    }
}

/// An API call as CUPTI recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ApiCall {
    pub(crate) tid: u32,
    pub(crate) api: &'static str,
    /// Made through the runtime (libcudart), which calls libcuda inside it.
    pub(crate) runtime: bool,
    pub(crate) correlation: u32,
    /// See `GpuWork::epoch`.
    pub(crate) epoch: u8,
    /// Unix ns.
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
}

pub(crate) fn api(r: &ApiRecord, clock: &AgentClock) -> ApiCall {
    let runtime = r.domain == API_DOMAIN_RUNTIME;
    let name = if runtime {
        tracer_common::gpu::runtime_cbid_name(r.cbid)
    } else {
        tracer_common::gpu::cbid_name(r.cbid)
    };
    ApiCall {
        tid: r.tid,
        api: name.unwrap_or(if runtime { "cuda?" } else { "cu?" }),
        runtime,
        correlation: r.common.correlation,
        epoch: epoch_of(r.common.flags),
        start_ns: clock.unix(r.common.start),
        end_ns: clock.unix(r.common.end),
    }
}

/// CUPTI's `CUpti_ActivityMemcpyKind` as the model's copy direction.
fn direction(kind: u8) -> Direction {
    match kind {
        1 => Direction::HtoD,
        2 | 4 => Direction::DtoH,
        3 | 6 => Direction::HtoD,
        5 | 7 | 8 => Direction::DtoD,
        9 => Direction::HtoH,
        10 => Direction::PtoP,
        _ => Direction::Unknown,
    }
}

fn graph(graph_id: u32, node_id: u64) -> Option<GraphNodeRef> {
    (graph_id != 0 || node_id != 0).then_some(GraphNodeRef { graph_id, node_id })
}

/// Kernel names by the agent's name id, demangled once.
#[derive(Default)]
pub(crate) struct Names {
    by_id: HashMap<u32, Arc<str>>,
}

impl Names {
    fn get(&mut self, ring: &Ring, id: u32) -> Option<Arc<str>> {
        if let Some(n) = self.by_id.get(&id) {
            return Some(n.clone());
        }
        let mut buf = [0u8; tracer_common::gpu::MAX_NAME_LEN];
        let raw = ring.name(id, &mut buf)?;
        let name = crate::names::demangle::demangle(&String::from_utf8_lossy(raw));
        if self.by_id.len() >= MAX_NAMES {
            self.by_id.clear();
        }
        self.by_id.insert(id, name.clone());
        Some(name)
    }
}

fn work(pid: u32, c: &Common, op: GpuOp, clock: &AgentClock) -> Option<GpuWork> {
    if c.flags & FLAG_NO_TIMESTAMPS != 0 {
        return None;
    }
    Some(GpuWork {
        pid,
        device: c.device,
        context: c.context,
        stream: c.stream,
        correlation: c.correlation,
        epoch: epoch_of(c.flags),
        start_ns: clock.unix(c.start),
        end_ns: clock.unix(c.end.max(c.start)),
        op,
        launch: None,
    })
}

pub(crate) fn kernel(
    pid: u32,
    k: &KernelRecord,
    ring: &Ring,
    names: &mut Names,
    clock: &AgentClock,
) -> Option<GpuWork> {
    let op = GpuOp::Kernel {
        name: names.get(ring, k.name_id),
        grid: k.grid,
        block: k.block,
        shared_mem_bytes: k.static_shared.saturating_add(k.dynamic_shared),
        registers: k.registers,
        graph: graph(k.graph_id, k.graph_node_id),
    };
    work(pid, &k.common, op, clock)
}

pub(crate) fn memcpy(pid: u32, m: &MemcpyRecord, clock: &AgentClock) -> Option<GpuWork> {
    let op = GpuOp::Memcpy {
        bytes: m.bytes,
        direction: direction(m.copy_kind),
        graph: graph(m.graph_id, m.graph_node_id),
    };
    work(pid, &m.common, op, clock)
}

pub(crate) fn memset(pid: u32, m: &MemsetRecord, clock: &AgentClock) -> Option<GpuWork> {
    let op = GpuOp::Memset {
        bytes: m.bytes,
        value: m.value,
        graph: graph(m.graph_id, m.graph_node_id),
    };
    work(pid, &m.common, op, clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_kinds_are_directions() {
        assert_eq!(direction(1), Direction::HtoD);
        assert_eq!(direction(2), Direction::DtoH);
        assert_eq!(direction(8), Direction::DtoD);
        assert_eq!(direction(10), Direction::PtoP);
        assert_eq!(direction(0), Direction::Unknown);
    }

    #[test]
    fn the_cupti_clock_is_moved_onto_the_probes_clock() {
        let clock = Clock::measure();
        let mono = Clock::now_mono_ns();
        let same = AgentClock::new(clock, Some(ClockKind::Monotonic), 12345);
        assert_eq!(same.unix(mono), clock.to_unix_ns(mono));
        let shifted = AgentClock::new(clock, Some(ClockKind::Cupti), -1000);
        assert_eq!(shifted.unix(mono + 1000), clock.to_unix_ns(mono));
    }
}
