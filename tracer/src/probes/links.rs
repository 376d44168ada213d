//! What attaching makes: the links of a library file in one scope, and
//! detaching them in the order the kernel needs (returns first).

use std::num::NonZeroU32;

use anyhow::anyhow;
use aya::programs::uprobe::{UProbeLink, UProbeScope};

use crate::probes::multi::MultiLink;

/// Who a set of probes fires for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One process: the kernel plants breakpoints in that process only.
    Process(u32),
    /// Every process that maps the file.
    All,
}

impl Scope {
    pub(crate) fn uprobe_scope(self) -> anyhow::Result<UProbeScope> {
        Ok(match self {
            Scope::All => UProbeScope::AllProcesses,
            Scope::Process(pid) => {
                UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or_else(|| anyhow!("pid 0"))?)
            }
        })
    }
}

/// The links made for one library file in one scope. Dropping it detaches
/// (with [`detach_many`], in the right order).
#[derive(Debug, Default)]
pub struct Attachment {
    /// Entry and return links: one multi-uprobe link each, or one perf-event
    /// link per probe (the fallback on older kernels).
    pub(crate) entry: Vec<Link>,
    pub(crate) ret: Vec<Link>,
    /// Calls in flight are in task storage: detach entries first (see
    /// [`detach_many`]).
    pub(crate) per_task: bool,
    /// With `--overhead-budget`: the symbols that may be sampled, not
    /// attached here but handed to the sampler (`probes::sampler`).
    pub(crate) hot: Option<crate::probes::hot::HotSet>,
}

/// Held for its Drop, which detaches.
#[derive(Debug)]
pub(crate) enum Link {
    Multi(MultiLink),
    Perf(#[allow(dead_code)] UProbeLink),
}

impl Link {
    fn probes(&self) -> usize {
        match self {
            Link::Multi(m) => m.probes,
            Link::Perf(_) => 1,
        }
    }
}

impl Attachment {
    /// Number of probes (entry and return) in this attachment.
    pub fn probes(&self) -> usize {
        self.entry.iter().chain(&self.ret).map(Link::probes).sum()
    }
}

/// Detaches in the order that leaves no call half-recorded and counted as
/// lost. With the in-flight map: return probes first (a return probe is
/// armed by its own link at the call's entry, so with the entry probe gone
/// first a call in between would return without an entry record, which the
/// map counts). With task storage: entry probes first (a return without
/// its entry is not counted there; an entry whose return probe is gone
/// stays in its slot and is counted stale by the thread's next call, so
/// detaching returns first would count every call of the tens of
/// milliseconds between the two).
pub(crate) fn detach_many(attachments: Vec<Attachment>) {
    let mut entry = Vec::new();
    let mut ret = Vec::new();
    let mut per_task = false;
    for a in attachments {
        per_task |= a.per_task;
        entry.extend(a.entry);
        ret.extend(a.ret);
    }
    detach_in_order(entry, ret, per_task);
}

/// Detaches entry and return links in the order [`detach_many`] explains
/// (`per_task`: the calls in flight are in task storage).
pub(crate) fn detach_in_order(entry: Vec<Link>, ret: Vec<Link>, per_task: bool) {
    // Within each half, links close in parallel: each multi-uprobe link
    // waits for its own grace period when closed.
    if per_task {
        drop_in_parallel(entry);
        drop_in_parallel(ret);
    } else {
        drop_in_parallel(ret);
        drop_in_parallel(entry);
    }
}

fn drop_in_parallel(links: Vec<Link>) {
    if links.len() <= 1 {
        return; // dropped here
    }
    let per = links.len().div_ceil(64);
    let mut links = links.into_iter();
    std::thread::scope(|s| loop {
        let chunk: Vec<Link> = links.by_ref().take(per).collect();
        if chunk.is_empty() {
            break;
        }
        s.spawn(move || drop(chunk));
    });
}
