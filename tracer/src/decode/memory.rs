//! Device and host memory a process was seen to allocate: for copy
//! directions and for device memory in use (live and peak).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use crate::model::call::Alloc;
use crate::model::call::Args;
use crate::model::types::AllocKind;

/// Where an address lives, as far as the trace knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Device,
    Host,
    Unknown,
}

#[derive(Clone, Copy, Debug)]
struct Physical {
    bytes: u64,
    released: bool,
    maps: u32,
}

/// Live allocations of one process.
#[derive(Clone, Debug, Default)]
pub struct MemoryBook {
    /// start → (bytes, kind) for address-returning allocations.
    ranges: BTreeMap<u64, (u64, AllocKind)>,
    /// cuMemMap'd virtual ranges (device memory reached through a VA):
    /// start → (bytes, handle).
    mapped: BTreeMap<u64, (u64, u64)>,
    /// cuMemCreate handles. Their memory is freed once released and no
    /// longer mapped (the CUDA virtual memory rules).
    physical: HashMap<u64, Physical>,
    in_use: u64,
    peak: u64,
    /// Successful allocations seen (device and host).
    pub allocations: u64,
    /// Bytes those allocations asked for.
    pub allocated_bytes: u64,
    /// Successful frees of known allocations.
    pub frees: u64,
}

impl MemoryBook {
    /// Device memory in use (allocations seen and not yet freed).
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    pub fn peak(&self) -> u64 {
        self.peak
    }

    fn add(&mut self, bytes: u64) {
        self.in_use = self.in_use.saturating_add(bytes);
        self.peak = self.peak.max(self.in_use);
    }

    /// Applies a call's effect. Returns true when device memory in use changed.
    /// Frees of addresses allocated before tracing began are ignored: only
    /// what the trace saw is counted.
    pub fn apply(&mut self, args: &Args, ok: bool) -> bool {
        if !ok {
            return false;
        }
        match args {
            Args::Alloc(Alloc {
                dptr: Some(p),
                bytes,
                kind,
                ..
            }) => {
                self.allocations += 1;
                self.allocated_bytes = self.allocated_bytes.saturating_add(*bytes);
                if let Some((old, old_kind)) = self.ranges.insert(*p, (*bytes, *kind)) {
                    // The address was reused without a free we saw.
                    if old_kind.on_device() {
                        self.in_use = self.in_use.saturating_sub(old);
                    }
                }
                if kind.on_device() {
                    self.add(*bytes);
                    return true;
                }
                false
            }
            Args::Free { dptr, .. } => match self.ranges.remove(dptr) {
                Some((bytes, kind)) => {
                    self.frees += 1;
                    if kind.on_device() {
                        self.in_use = self.in_use.saturating_sub(bytes);
                        return true;
                    }
                    false
                }
                None => false,
            },
            Args::MemCreate {
                handle: Some(h),
                bytes,
            } => {
                self.allocations += 1;
                self.allocated_bytes = self.allocated_bytes.saturating_add(*bytes);
                let new = Physical {
                    bytes: *bytes,
                    released: false,
                    maps: 0,
                };
                if let Some(old) = self.physical.insert(*h, new) {
                    self.in_use = self.in_use.saturating_sub(old.bytes);
                }
                self.add(*bytes);
                true
            }
            Args::MemRelease { handle } => {
                // A second release (after cuMemRetainAllocationHandle, which
                // is not traced) changes nothing we can see.
                let Some(p) = self.physical.get_mut(handle).filter(|p| !p.released) else {
                    return false;
                };
                p.released = true;
                self.frees += 1;
                self.free_physical_if_unused(*handle)
            }
            Args::MemMap { ptr, bytes, handle } => {
                self.mapped.insert(*ptr, (*bytes, *handle));
                if let Some(p) = self.physical.get_mut(handle) {
                    p.maps += 1;
                }
                false
            }
            Args::MemUnmap { ptr, .. } => match self.mapped.remove(ptr) {
                Some((_, handle)) => {
                    if let Some(p) = self.physical.get_mut(&handle) {
                        p.maps = p.maps.saturating_sub(1);
                    }
                    self.free_physical_if_unused(handle)
                }
                None => false,
            },
            _ => false,
        }
    }

    fn free_physical_if_unused(&mut self, handle: u64) -> bool {
        match self.physical.get(&handle) {
            Some(p) if p.released && p.maps == 0 => {
                self.in_use = self.in_use.saturating_sub(p.bytes);
                self.physical.remove(&handle);
                true
            }
            _ => false,
        }
    }

    /// Where `addr` lives according to the allocations seen.
    pub fn place(&self, addr: u64) -> Place {
        if let Some((start, (bytes, kind))) = self.ranges.range(..=addr).next_back() {
            if addr < start.saturating_add(*bytes) {
                return if kind.on_device() {
                    Place::Device
                } else {
                    Place::Host
                };
            }
        }
        if let Some((start, (bytes, _))) = self.mapped.range(..=addr).next_back() {
            if addr < start.saturating_add(*bytes) {
                return Place::Device;
            }
        }
        Place::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(p: u64, bytes: u64, kind: AllocKind) -> Args {
        Args::Alloc(Alloc {
            dptr: Some(p),
            bytes,
            kind,
            stream: None,
            pitch: None,
        })
    }

    #[test]
    fn live_and_peak() {
        let mut m = MemoryBook::default();
        assert!(m.apply(&alloc(0x1000, 100, AllocKind::Device), true));
        assert!(m.apply(&alloc(0x2000, 50, AllocKind::Managed), true));
        assert!(!m.apply(&alloc(0x9000, 70, AllocKind::Host), true));
        assert!(
            !m.apply(&alloc(0x5000, 999, AllocKind::Device), false),
            "failed call"
        );
        assert_eq!((m.in_use(), m.peak()), (150, 150));
        assert!(m.apply(
            &Args::Free {
                dptr: 0x1000,
                stream: None
            },
            true
        ));
        assert!(
            !m.apply(
                &Args::Free {
                    dptr: 0x7777,
                    stream: None
                },
                true
            ),
            "unknown pointer"
        );
        assert!(m.apply(
            &Args::MemCreate {
                handle: Some(7),
                bytes: 200
            },
            true
        ));
        assert_eq!((m.in_use(), m.peak()), (250, 250));
        assert!(m.apply(&Args::MemRelease { handle: 7 }, true));
        assert_eq!(
            (m.in_use(), m.peak(), m.allocations, m.frees),
            (50, 250, 4, 2)
        );
    }

    #[test]
    fn mapped_physical_memory_lives_until_released_and_unmapped() {
        let mut m = MemoryBook::default();
        m.apply(
            &Args::MemCreate {
                handle: Some(1),
                bytes: 100,
            },
            true,
        );
        m.apply(
            &Args::MemMap {
                ptr: 0x1000,
                bytes: 100,
                handle: 1,
            },
            true,
        );
        // PyTorch releases right after mapping: the memory stays in use.
        assert!(!m.apply(&Args::MemRelease { handle: 1 }, true));
        assert!(
            !m.apply(&Args::MemRelease { handle: 1 }, true),
            "a second release"
        );
        assert_eq!(m.in_use(), 100);
        assert_eq!(m.place(0x1010), Place::Device);
        assert!(m.apply(
            &Args::MemUnmap {
                ptr: 0x1000,
                bytes: 100
            },
            true
        ));
        assert_eq!((m.in_use(), m.frees), (0, 1));
    }

    #[test]
    fn places() {
        let mut m = MemoryBook::default();
        m.apply(&alloc(0x1000, 0x100, AllocKind::Device), true);
        m.apply(&alloc(0x8000, 0x100, AllocKind::Host), true);
        m.apply(
            &Args::MemMap {
                ptr: 0x10000,
                bytes: 0x1000,
                handle: 1,
            },
            true,
        );
        assert_eq!(m.place(0x1000), Place::Device);
        assert_eq!(m.place(0x10ff), Place::Device);
        assert_eq!(m.place(0x1100), Place::Unknown);
        assert_eq!(m.place(0x8010), Place::Host);
        assert_eq!(m.place(0x10800), Place::Device);
        assert_eq!(m.place(0x11000), Place::Unknown);
    }
}
