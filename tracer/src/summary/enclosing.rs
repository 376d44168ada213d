//! Calls that launch kernels inside them (a cuBLAS GEMM, an NCCL
//! collective) joined to those kernels, on the host and on the GPU.
//!
//! An enclosing call owns the kernels its thread launched while it was on
//! the stack: a launch whose interval lies inside the call's, on the same
//! thread. Calls come in the order they returned (the enclosing call after
//! its launches) from a live trace and a JSONL file, in start order from a
//! Perfetto file (the enclosing call before its launches): each thread
//! keeps its last few launches and its last few enclosing calls, so either
//! order joins.
//!
//! A call's GPU time is the span of its kernels on the GPU, from the first
//! one's start to the last one's end (what CUDA events around the call
//! measure). A kernel's GPU record names the launch call that queued it
//! (its thread and start); the launches an enclosing call owns are
//! remembered long enough for their records to come (bounded:
//! [`MAX_OWNED`]). A call's span is whole when a kernel of another call
//! of the thread comes, or when [`Enclosing::close_idle`] finds it
//! quiet, or at the end.
//!
//! `K` is what the caller keeps of an enclosing call (a GEMM's shape, a
//! collective's row and size).

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use crate::model::call::{Args, Call};
use crate::model::gpu::{GpuOp, GpuWork};

/// Launches and enclosing calls kept per thread for joining (a cuBLAS
/// GEMM launches one to three kernels, an NCCL collective one).
pub const RECENT: usize = 16;
/// Threads whose recent calls are kept.
pub const MAX_THREADS: usize = 1024;
/// Launches owned by an enclosing call, remembered for their GPU records.
pub const MAX_OWNED: usize = 1 << 16;

/// A launch seen on a thread: (start, end, kernel).
type Launch = (u64, u64, Option<Arc<str>>);

#[derive(Clone, Debug)]
struct Recent<K> {
    launches: VecDeque<Launch>,
    /// Enclosing calls: (start, end, key).
    calls: VecDeque<(u64, u64, K)>,
}

impl<K> Default for Recent<K> {
    fn default() -> Self {
        Self {
            launches: VecDeque::new(),
            calls: VecDeque::new(),
        }
    }
}

/// An enclosing call's kernels on the GPU so far.
#[derive(Clone, Debug)]
struct Open<K> {
    /// The call's start (what tells its kernels from the next call's).
    call_start: u64,
    key: K,
    first: u64,
    last: u64,
    /// A kernel came since the last [`Enclosing::close_idle`].
    fresh: bool,
}

/// The joining state of one process.
#[derive(Clone, Debug)]
pub struct Enclosing<K> {
    threads: HashMap<u32, Recent<K>>,
    /// (thread, launch start) → (the enclosing call's start, its key,
    /// whether the launch named its kernel).
    owned: HashMap<(u32, u64), (u64, K, bool)>,
    /// The keys of `owned`, oldest first.
    owned_order: VecDeque<(u32, u64)>,
    /// Per thread, the call whose kernels the GPU is reporting.
    open: HashMap<u32, Open<K>>,
}

impl<K> Default for Enclosing<K> {
    fn default() -> Self {
        Self {
            threads: HashMap::default(),
            owned: HashMap::default(),
            owned_order: VecDeque::new(),
            open: HashMap::default(),
        }
    }
}

impl<K: Clone> Enclosing<K> {
    /// An enclosing call (successful) known as `key`: returns the kernels
    /// of the launches seen inside it before it, now its own.
    pub fn call(&mut self, c: &Call, key: K) -> Vec<Option<Arc<str>>> {
        let Some(dur) = c.dur_ns else {
            return Vec::new();
        };
        let end = c.ts_ns.saturating_add(dur);
        let mut mine = Vec::new();
        let r = self.thread(c.tid);
        r.launches.retain(|l| {
            let inside = c.ts_ns <= l.0 && l.1 <= end;
            if inside {
                mine.push(l.clone());
            }
            !inside
        });
        if r.calls.len() >= RECENT {
            r.calls.pop_front();
        }
        r.calls.push_back((c.ts_ns, end, key.clone()));
        mine.into_iter()
            .map(|l| {
                self.own(c.tid, l.0, c.ts_ns, &key, l.2.is_some());
                l.2
            })
            .collect()
    }

    /// A call of any kind: a successful launch that ran (not captured) is
    /// kept for joining; returns the key of the enclosing call seen before
    /// it that owns it, and its kernel.
    pub fn launch(&mut self, c: &Call) -> Option<(K, Option<Arc<str>>)> {
        let Args::Launch(l) = &c.args else {
            return None;
        };
        if l.captured.is_some() || c.failed() {
            return None;
        }
        let end = c.ts_ns.saturating_add(c.dur_ns.unwrap_or(0));
        let r = self.thread(c.tid);
        let owner = r
            .calls
            .iter()
            .rev()
            .find(|e| e.0 <= c.ts_ns && end <= e.1)
            .map(|e| (e.0, e.2.clone()));
        match owner {
            Some((start, key)) => {
                self.own(c.tid, c.ts_ns, start, &key, l.kernel.is_some());
                Some((key, l.kernel.clone()))
            }
            None => {
                if c.dur_ns.is_some() {
                    if r.launches.len() >= RECENT {
                        r.launches.pop_front();
                    }
                    r.launches.push_back((c.ts_ns, end, l.kernel.clone()));
                }
                None
            }
        }
    }

    fn thread(&mut self, tid: u32) -> &mut Recent<K> {
        if !self.threads.contains_key(&tid) && self.threads.len() >= MAX_THREADS {
            // Forget one thread (an arbitrary one: joins are short-lived).
            if let Some(&t) = self.threads.keys().next() {
                self.threads.remove(&t);
            }
        }
        self.threads.entry(tid).or_default()
    }

    /// The launch that started at `launch_start` on `tid` belongs to the
    /// call that started at `start`.
    fn own(&mut self, tid: u32, launch_start: u64, start: u64, key: &K, named: bool) {
        let at = (tid, launch_start);
        if self.owned.insert(at, (start, key.clone(), named)).is_none() {
            self.owned_order.push_back(at);
            while self.owned_order.len() > MAX_OWNED {
                if let Some(old) = self.owned_order.pop_front() {
                    self.owned.remove(&old);
                }
            }
        }
    }

    /// `--gpu-time`: a piece of GPU work. A kernel of a launch an
    /// enclosing call owns adds to that call's span; returns the span it
    /// closed (the thread's previous call's), as (key, ns).
    pub fn gpu(&mut self, w: &GpuWork) -> Option<(K, u64)> {
        if !matches!(w.op, GpuOp::Kernel { .. }) {
            return None;
        }
        let l = w.launch.as_ref()?;
        let (call_start, _) = l.call?;
        let (start, key, _) = self.owned.get(&(l.tid, call_start)).cloned()?;
        match self.open.get_mut(&l.tid) {
            Some(o) if o.call_start == start => {
                o.first = o.first.min(w.start_ns);
                o.last = o.last.max(w.end_ns);
                o.fresh = true;
                None
            }
            _ => {
                let open = Open {
                    call_start: start,
                    key,
                    first: w.start_ns,
                    last: w.end_ns,
                    fresh: true,
                };
                self.open.insert(l.tid, open).map(Open::span)
            }
        }
    }

    /// `--gpu-time`: the name a kernel's GPU record gives a launch an
    /// enclosing call owns whose kernel the launch did not name (loaded
    /// before gputrace attached, its handle not readable): (key, name),
    /// once per launch.
    pub fn named_by_gpu(&mut self, w: &GpuWork) -> Option<(K, Arc<str>)> {
        let GpuOp::Kernel {
            name: Some(name), ..
        } = &w.op
        else {
            return None;
        };
        let l = w.launch.as_ref()?;
        let (call_start, _) = l.call?;
        let (_, key, named) = self.owned.get_mut(&(l.tid, call_start))?;
        if *named {
            return None;
        }
        *named = true;
        Some((key.clone(), name.clone()))
    }

    /// Closes the spans no kernel came to since the last time (the
    /// daemon's metrics, every second); returns them.
    pub fn close_idle(&mut self) -> Vec<(K, u64)> {
        let mut done = Vec::new();
        self.open.retain(|_, o| {
            if !o.fresh {
                done.push(o.clone().span());
            }
            std::mem::replace(&mut o.fresh, false)
        });
        done
    }

    /// Closes every open span (no more work comes); returns them.
    pub fn close_all(&mut self) -> Vec<(K, u64)> {
        self.open.drain().map(|(_, o)| o.span()).collect()
    }

    /// The spans still open, as they stand.
    pub fn open_spans(&self) -> impl Iterator<Item = (&K, u64)> {
        self.open
            .values()
            .map(|o| (&o.key, o.last.saturating_sub(o.first)))
    }
}

impl<K> Open<K> {
    fn span(self) -> (K, u64) {
        (self.key, self.last.saturating_sub(self.first))
    }
}
