//! Calls counted in the kernel (`--probes FAMILY:counts`): per process and
//! API, summed over CPUs, and handed on as what was added since the last
//! read.

use std::collections::HashMap;

use aya::maps::{MapData, PerCpuHashMap};
use tracer_common::{counted_key, Counted, HISTOGRAM_SLOTS};

use crate::model::CountedCalls;

/// The probes' map of counts.
pub struct CountsMap(pub(super) PerCpuHashMap<MapData, u64, Counted>);

impl CountsMap {
    /// Every (process, API id) counted, with its totals over CPUs.
    fn read(&self) -> Vec<((u32, u16), Counted)> {
        self.0
            .iter()
            .filter_map(Result::ok)
            .map(|(key, per_cpu)| {
                let mut t = Counted::zeroed();
                for c in per_cpu.iter() {
                    add(&mut t, c);
                }
                (((key >> 32) as u32, key as u16), t)
            })
            .collect()
    }

    fn remove(&mut self, pid: u32, api: u16) {
        let _ = self.0.remove(&counted_key(pid, u32::from(api)));
    }
}

fn add(t: &mut Counted, c: &Counted) {
    t.calls = t.calls.wrapping_add(c.calls);
    t.sum_ns = t.sum_ns.wrapping_add(c.sum_ns);
    for (a, b) in t.buckets.iter_mut().zip(c.buckets.iter()) {
        *a = a.wrapping_add(*b);
    }
}

/// What was added to `now` since `then` (each field only grows).
fn since(now: &Counted, then: &Counted) -> Counted {
    let mut buckets = [0u64; HISTOGRAM_SLOTS];
    for (i, b) in buckets.iter_mut().enumerate() {
        *b = now.buckets[i].wrapping_sub(then.buckets[i]);
    }
    Counted {
        calls: now.calls.wrapping_sub(then.calls),
        sum_ns: now.sum_ns.wrapping_sub(then.sum_ns),
        buckets,
    }
}

/// The totals handed on so far, so each read hands on only what is new.
pub(crate) struct Counts {
    map: CountsMap,
    told: HashMap<(u32, u16), Counted>,
}

impl Counts {
    pub(crate) fn new(map: CountsMap) -> Self {
        Self {
            map,
            told: HashMap::new(),
        }
    }

    /// The calls counted since the last read, per process and API.
    pub(crate) fn read(
        &mut self,
        comm_of: &mut dyn FnMut(u32) -> std::sync::Arc<str>,
    ) -> Vec<CountedCalls> {
        let totals = self.map.read();
        news(&mut self.told, totals, comm_of)
    }

    /// `pids` are gone and their last counts read: their entries go, so the
    /// map has room for others.
    pub(crate) fn forget(&mut self, pids: &[u32]) {
        if pids.is_empty() {
            return;
        }
        let keys: Vec<(u32, u16)> = self
            .told
            .keys()
            .filter(|(pid, _)| pids.contains(pid))
            .copied()
            .collect();
        for (pid, api) in keys {
            self.told.remove(&(pid, api));
            self.map.remove(pid, api);
        }
    }
}

/// What each (process, API) in `totals` added since `told`, which is
/// brought up to date; keys with nothing new give nothing.
fn news(
    told: &mut HashMap<(u32, u16), Counted>,
    totals: Vec<((u32, u16), Counted)>,
    comm_of: &mut dyn FnMut(u32) -> std::sync::Arc<str>,
) -> Vec<CountedCalls> {
    let mut out = Vec::new();
    for (key, now) in totals {
        let then = told.get(&key).copied().unwrap_or(Counted::zeroed());
        let d = since(&now, &then);
        let calls = d.calls;
        if calls == 0 && d.timed() == 0 {
            continue;
        }
        told.insert(key, now);
        let Some(api) = crate::catalogue::catalogue().get(usize::from(key.1)) else {
            continue;
        };
        out.push(CountedCalls {
            pid: key.0,
            comm: comm_of(key.0),
            api: api.name,
            calls,
            timed: d.timed(),
            sum_ns: d.sum_ns,
            buckets: d.buckets,
        });
    }
    out.sort_by_key(|c| (c.pid, c.api));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(calls: u64, timed: u64, sum_ns: u64, bucket: usize) -> Counted {
        let mut c = Counted::zeroed();
        c.calls = calls;
        c.sum_ns = sum_ns;
        c.buckets[bucket] = timed;
        c
    }

    #[test]
    fn each_read_hands_on_what_was_added_since_the_last() {
        let launch = crate::catalogue::api_by_name("cuLaunchKernel").unwrap().id;
        let mut told = HashMap::new();
        let mut comm = |_| std::sync::Arc::from("app");
        let first = news(
            &mut told,
            vec![((7, launch), counted(10, 10, 1000, 0))],
            &mut comm,
        );
        assert_eq!(first.len(), 1);
        assert_eq!(
            (
                first[0].pid,
                first[0].api,
                first[0].calls,
                first[0].timed,
                first[0].sum_ns,
                first[0].buckets[0]
            ),
            (7, "cuLaunchKernel", 10, 10, 1000, 10)
        );
        // Nothing new: nothing handed on.
        assert!(news(
            &mut told,
            vec![((7, launch), counted(10, 10, 1000, 0))],
            &mut comm
        )
        .is_empty());
        // One call in a few timed: the calls and the timed apart.
        let second = news(
            &mut told,
            vec![((7, launch), counted(170, 19, 4000, 0))],
            &mut comm,
        );
        assert_eq!(
            (
                second[0].calls,
                second[0].timed,
                second[0].sum_ns,
                second[0].buckets[0]
            ),
            (160, 9, 3000, 9)
        );
        // The buckets of the deltas add up to those timed.
        assert_eq!(second[0].buckets.iter().sum::<u64>(), second[0].timed);
        // A read where only a timed return came (its call counted before).
        let third = news(
            &mut told,
            vec![((7, launch), counted(170, 20, 4100, 0))],
            &mut comm,
        );
        assert_eq!((third[0].calls, third[0].timed), (0, 1));
    }
}
