//! The probes' counters of calls they could not record.

use std::collections::HashMap;

use aya::maps::{MapData, PerCpuArray, PerCpuHashMap};
use tracer_common::{LostReason, LOST_SLOTS};

use crate::model::types::LostCounts;

/// Calls not recorded (ring full, in-flight map full, unpaired), per process.
pub struct LostByPid(pub(super) PerCpuHashMap<MapData, u32, u64>);

impl LostByPid {
    /// Every process with calls lost, and how many. The map is LRU: a
    /// process is forgotten only after 4096 others have lost calls since.
    pub fn read(&self) -> HashMap<u32, u64> {
        self.0
            .iter()
            .filter_map(Result::ok)
            .map(|(pid, v)| (pid, v.iter().sum()))
            .collect()
    }
}

/// The per-CPU counters of `LostReason`.
pub struct LostCounter(pub(super) PerCpuArray<MapData, u64>);

impl LostCounter {
    pub fn read(&self) -> LostCounts {
        let slot = |r: LostReason| -> u64 {
            self.0
                .get(&(r as u32), 0)
                .map(|v| v.iter().sum())
                .unwrap_or(0)
        };
        let _: [(); 6] = [(); LOST_SLOTS as usize];
        LostCounts {
            ring_full: slot(LostReason::RingFull),
            inflight_full: slot(LostReason::InflightFull),
            unpaired: slot(LostReason::Unpaired),
            read_failed: slot(LostReason::ReadFailed),
            stacks_dropped: slot(LostReason::StackDropped),
            counts_full: slot(LostReason::CountsFull),
        }
    }
}
