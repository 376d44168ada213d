//! Where an executable CUDA graph (`CUgraphExec`) keeps its kernel nodes in
//! a given libcuda build, and reading them from a process's memory with it:
//! for graphs built before gputrace attached, whose construction it never
//! saw. The layout is found by calibration (`exec_search`) on graphs of
//! known kernels, never assumed; a read that does not fit it gives nothing.

pub(crate) mod known;
pub(crate) mod search;

use serde::{Deserialize, Serialize};

use crate::host::memory::read_exact;

/// How the elements (one per node) follow each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Walk {
    /// A linked list: the next element's address at `element + link`; it
    /// ends at NULL or back at the first element.
    List { link: i32 },
    /// An array of `stride` bytes per element (needs the count).
    Array { stride: i32 },
}

/// Where the number of elements is: a u32 at `off` from the address
/// reached after the first `level` offsets of the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CountField {
    pub level: u8,
    pub off: i32,
}

/// What calibration saw of a graph with copies, a memset, an empty node and
/// a child graph besides its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mixed {
    /// Read right: every kernel, and one element without a function per
    /// other node.
    Exact,
    /// Not read right, but the count field then disagrees with what the
    /// walk finds, so such graphs are refused (opaque), never misread.
    Refused,
    /// The walk finds no element at all: such graphs read as opaque.
    Empty,
}

/// Path from a `CUgraphExec` handle to its kernel nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExecLayout {
    /// Offsets followed from the handle: `p = *(p + off)` for each. A list
    /// starts at the element reached; an array at the base reached.
    pub prefix: Vec<i32>,
    pub walk: Walk,
    /// From an element (list) or the array base, further offsets followed;
    /// for an array the first of them is indexed (`+ i * stride`), or, when
    /// there are none, the function offset is.
    pub inner: Vec<i32>,
    /// The element's function handle (`CUfunction`) at `slot`, reached with
    /// `inner` then `+ func`; the other fields are relative to the slot.
    pub func: i32,
    pub grid: i32,
    pub block: i32,
    pub shared_mem: Option<i32>,
    pub count: Option<CountField>,
    pub mixed: Mixed,
    /// How to tell a kernel node's element from the others, where the walk
    /// also meets elements of other kinds that hold a function (driver
    /// 580: every record of the exec is on one list, with records of the
    /// driver's own before runs of kernels and for copies).
    #[serde(default)]
    pub kinds: Option<Kinds>,
}

/// Fields that tell elements apart, all u32 relative to the function
/// slot, with the values calibration saw on graphs of known nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Kinds {
    /// The node kind (driver 580: the `CUgraphNodeType`).
    pub kind: i32,
    /// Its value on every kernel node.
    pub kernel: u32,
    /// Its values on the elements of other nodes (memsets, copies).
    pub others: Vec<u32>,
    /// Where elements of the kernel kind that are not kernel nodes (run
    /// heads, copies the driver runs as a kernel of its own) differ.
    pub flags: Option<Flags>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Flags {
    pub off: i32,
    /// The value on every kernel node.
    pub kernel: u32,
    /// The values on the driver's own elements.
    pub driver: Vec<u32>,
}

/// What an element is, by the layout's [`Kinds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Element {
    Kernel,
    /// A node of another kind (memset, copy).
    Other,
    /// The driver's own (no node of the graph).
    Driver,
}

/// Most distinct values a kind or flags field may list.
const MAX_KIND_VALUES: usize = 8;

impl Kinds {
    /// The element at function slot `slot`; `None` when it is of no kind
    /// calibration saw (then the graph is not read at all).
    pub(crate) fn element(&self, mem: &dyn Mem, slot: u64) -> Option<Element> {
        let kind = mem.u32_at(add(slot, self.kind)?)?;
        if self.others.contains(&kind) {
            return Some(Element::Other);
        }
        if kind != self.kernel {
            return None;
        }
        let Some(f) = &self.flags else {
            return Some(Element::Kernel);
        };
        match mem.u32_at(add(slot, f.off)?)? {
            v if v == f.kernel => Some(Element::Kernel),
            v if f.driver.contains(&v) => Some(Element::Driver),
            _ => None,
        }
    }

    fn is_plausible(&self, off: &dyn Fn(&i32) -> bool) -> bool {
        off(&self.kind)
            && !self.others.contains(&self.kernel)
            && self.others.len() <= MAX_KIND_VALUES
            && self.flags.as_ref().is_none_or(|f| {
                off(&f.off) && f.driver.len() <= MAX_KIND_VALUES && !f.driver.contains(&f.kernel)
            })
    }
}

/// Most elements read from one executable graph.
pub(crate) const MAX_ELEMENTS: usize = 1 << 16;

/// A kernel node as read from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawKernel {
    pub function: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

/// Memory to read: another process's, or this one's.
pub(crate) trait Mem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    fn u64_at(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_ne_bytes(b))
    }

    fn u32_at(&self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b).then(|| u32::from_ne_bytes(b))
    }

    fn dims_at(&self, addr: u64) -> Option<[u32; 3]> {
        let mut b = [0u8; 12];
        self.read(addr, &mut b).then(|| {
            let w = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
            [w(0), w(4), w(8)]
        })
    }
}

/// A process's memory (process_vm_readv: a bad address is an error).
pub(crate) struct ProcessMem(pub u32);

impl Mem for ProcessMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        read_exact(self.0, addr, buf)
    }
}

/// `p + off` for a signed offset; `None` on overflow.
pub(crate) fn add(p: u64, off: i32) -> Option<u64> {
    p.checked_add_signed(off as i64)
}

/// Follows `offs` from `p`: `p = *(p + off)`, each non-NULL.
pub(crate) fn follow(mem: &dyn Mem, p: u64, offs: &[i32]) -> Option<u64> {
    follow_nullable(mem, p, offs).flatten()
}

/// [`follow`], telling a NULL pointer on the way (`Some(None)`: nothing
/// there) from memory that cannot be read (`None`).
pub(crate) fn follow_nullable(mem: &dyn Mem, mut p: u64, offs: &[i32]) -> Option<Option<u64>> {
    for off in offs {
        p = mem.u64_at(add(p, *off)?)?;
        if p == 0 {
            return Some(None);
        }
        if p < 4096 {
            return None;
        }
    }
    Some(Some(p))
}

/// What a walk found: each element's function slot.
pub(crate) struct Walked {
    pub slots: Vec<u64>,
    /// The count field's value, when the layout has one.
    pub count: Option<u32>,
}

impl ExecLayout {
    /// The count field of `exec`.
    pub(crate) fn count_of(&self, mem: &dyn Mem, exec: u64) -> Option<u32> {
        let c = self.count?;
        let base = follow(mem, exec, self.prefix.get(..c.level as usize)?)?;
        mem.u32_at(add(base, c.off)?)
    }

    /// The function slots of up to `max` elements of `exec`, in order.
    pub(crate) fn walk(&self, mem: &dyn Mem, exec: u64, max: usize) -> Option<Walked> {
        let count = match self.count {
            Some(_) => Some(self.count_of(mem, exec)?),
            None => None,
        };
        let limit = count.map_or(max, |c| (c as usize).saturating_add(1).min(max));
        let mut slots = Vec::new();
        let Some(base) = follow_nullable(mem, exec, &self.prefix)? else {
            // A NULL on the way: no element at all.
            return Some(Walked { slots, count });
        };
        match self.walk {
            Walk::List { link } => {
                let mut seen = std::collections::HashSet::new();
                let mut e = base;
                while e != 0 && slots.len() < limit {
                    if !seen.insert(e) {
                        // Back at the first element ends a ring; anything
                        // else is not a list of this layout.
                        if e == base {
                            break;
                        }
                        return None;
                    }
                    let slot = add(follow(mem, e, &self.inner)?, self.func)?;
                    slots.push(slot);
                    e = mem.u64_at(add(e, link)?)?;
                }
            }
            Walk::Array { stride } => {
                // Without a count an array runs on into whatever follows it.
                let n = count? as usize;
                for i in 0..n.min(limit) {
                    let step = i64::from(stride).checked_mul(i as i64)?;
                    let slot = match self.inner.split_first() {
                        Some((first, rest)) => {
                            let at = base.checked_add_signed(i64::from(*first) + step)?;
                            let p = mem.u64_at(at)?;
                            if p < 4096 {
                                return None;
                            }
                            add(follow(mem, p, rest)?, self.func)?
                        }
                        None => add(base, self.func)?.checked_add_signed(step)?,
                    };
                    slots.push(slot);
                }
            }
        }
        Some(Walked { slots, count })
    }

    /// The kernel node at a function slot (`None` for an element with no
    /// function: a node of another kind).
    pub(crate) fn kernel_at(&self, mem: &dyn Mem, slot: u64) -> Option<RawKernel> {
        let function = mem.u64_at(slot)?;
        if function == 0 {
            return None;
        }
        Some(RawKernel {
            function,
            grid: mem.dims_at(add(slot, self.grid)?)?,
            block: mem.dims_at(add(slot, self.block)?)?,
            shared_mem_bytes: match self.shared_mem {
                Some(off) => mem.u32_at(add(slot, off)?)?,
                None => 0,
            },
        })
    }

    /// The kernel nodes of executable graph `exec`, in order; `None` when
    /// what is there does not fit the layout (then nothing is said).
    pub(crate) fn read(&self, mem: &dyn Mem, exec: u64) -> Option<Vec<RawKernel>> {
        let walked = self.walk(mem, exec, MAX_ELEMENTS)?;
        if walked.slots.is_empty() {
            return None;
        }
        if let Some(c) = walked.count {
            if walked.slots.len() != c as usize {
                // More or fewer elements than nodes: a graph this layout
                // does not describe (e.g. with copies, for some drivers).
                return None;
            }
        }
        let mut out = Vec::new();
        for slot in walked.slots {
            if let Some(kinds) = &self.kinds {
                match kinds.element(mem, slot)? {
                    Element::Kernel => {}
                    Element::Other | Element::Driver => continue,
                }
            }
            match mem.u64_at(slot)? {
                // (A kernel by its kind fields holds a function.)
                0 if self.mixed == Mixed::Exact && self.kinds.is_none() => continue,
                0 => return None,
                _ => {
                    let k = self.kernel_at(mem, slot)?;
                    if !plausible(&k) {
                        return None;
                    }
                    out.push(k);
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// What calibration can find (anything else, from a hostile helper or a
    /// tampered cache, is refused).
    pub(crate) fn is_plausible(&self) -> bool {
        let off = |o: &i32| (-4096..=65536).contains(o);
        self.prefix.len() <= 5
            && self.inner.len() <= 4
            && self.prefix.iter().chain(&self.inner).all(off)
            && [self.func, self.grid, self.block].iter().all(off)
            && self.shared_mem.is_none_or(|o| off(&o))
            && self.kinds.as_ref().is_none_or(|k| k.is_plausible(&off))
            && self
                .count
                .is_none_or(|c| c.level as usize <= self.prefix.len() && off(&c.off))
            && match self.walk {
                Walk::List { link } => off(&link),
                Walk::Array { stride } => (8..=65536).contains(&stride) && self.count.is_some(),
            }
    }

    pub(crate) fn describe(&self) -> String {
        let path: Vec<String> = self.prefix.iter().map(|o| format!("->[{o:+}]")).collect();
        let inner: Vec<String> = self.inner.iter().map(|o| format!("->[{o:+}]")).collect();
        let walk = match self.walk {
            Walk::List { link } => format!("list (next at {link:+})"),
            Walk::Array { stride } => format!("array (stride {stride})"),
        };
        format!(
            "exec {} {walk} {} function at {:+}, grid {:+}, block {:+}{}{}",
            path.join(" "),
            inner.join(" "),
            self.func,
            self.grid,
            self.block,
            self.shared_mem
                .map(|o| format!(", shared memory {o:+}"))
                .unwrap_or_default(),
            self.count
                .map(|c| format!(", count u32 at level {} {:+}", c.level, c.off))
                .unwrap_or_default(),
        ) + &self.kinds.as_ref().map(Kinds::describe).unwrap_or_default()
    }
}

impl Kinds {
    fn describe(&self) -> String {
        let hex = |v: &[u32]| {
            v.iter()
                .map(|x| format!("{x:#x}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        format!(
            ", kind u32 at {:+} (kernel {:#x}, other nodes {})",
            self.kind,
            self.kernel,
            hex(&self.others)
        ) + &self
            .flags
            .as_ref()
            .map(|f| {
                format!(
                    ", flags u32 at {:+} (kernel {:#x}, the driver's own {})",
                    f.off,
                    f.kernel,
                    hex(&f.driver)
                )
            })
            .unwrap_or_default()
    }
}

/// Grid and block sizes a launch can have.
pub(crate) fn plausible(k: &RawKernel) -> bool {
    k.function.is_multiple_of(8)
        && k.grid.iter().all(|d| *d >= 1)
        && k.grid[0] < (1 << 31)
        && k.grid[1] <= 65535
        && k.grid[2] <= 65535
        && k.block.iter().all(|d| *d >= 1)
        && k.block.iter().map(|d| u64::from(*d)).product::<u64>() <= 1024
}

#[cfg(test)]
mod real580;
#[cfg(test)]
pub(crate) mod tests;
