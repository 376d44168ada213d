//! gputrace's side of the region: a view over a mapping of the agent's
//! memfd. The agent's process writes the region: nothing read from it is
//! trusted. The geometry is read and checked once, at [`Ring::new`]; every
//! later read is bounded by that copy, and no method panics.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::{
    AgentState, ClockKind, DetachReason, Header, Record, RecordBytes, RecordError, HEADER_SIZE,
    MAGIC, MAX_NAMES_SIZE, MAX_RING_CAPACITY, MESSAGE_LEN, MIN_NAMES_SIZE, MIN_RING_CAPACITY,
    NAMES_RESERVED, PROTOCOL_VERSION, RECORD_SIZE,
};

/// Why a region was refused or the ring stopped making sense.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// Shorter than a header, or not 8-byte aligned.
    TooSmall,
    BadMagic(u64),
    BadVersion(u32),
    /// Header size, record size, ring offset, capacity or name area out of
    /// range or not fitting the mapping.
    BadGeometry,
    /// `head` went backwards or ran more than a ring ahead of our tail.
    Corrupt {
        head: u64,
        tail: u64,
    },
}

/// Counters and state, read at one moment (each field atomically, not the
/// set as a whole).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub state: u32,
    pub error_code: u32,
    pub cupti_result: u32,
    pub detach_reason: u32,
    pub pid: u32,
    pub pipe_fd: i32,
    pub clock: u32,
    pub clock_offset_ns: i64,
    pub clock_error_ns: u64,
    pub cupti_version: u32,
    pub kinds: u32,
    pub features: u32,
    pub started_ns: u64,
    pub heartbeat_ns: u64,
    pub sample_percent: u32,
    pub sampled_on_ns: u64,
    pub pauses: u64,
    pub resume_error: u64,
    pub head: u64,
    pub records_written: u64,
    pub ring_dropped: u64,
    pub cupti_dropped: u64,
    pub names_dropped: u64,
    pub names_used: u64,
    pub buffers_completed: u64,
    pub buffers_refused: u64,
    pub records_skipped: u64,
}

impl Snapshot {
    pub fn agent_state(&self) -> Option<AgentState> {
        AgentState::from_u32(self.state)
    }
    pub fn clock_kind(&self) -> Option<ClockKind> {
        ClockKind::from_u32(self.clock)
    }
    pub fn detach(&self) -> Option<DetachReason> {
        DetachReason::from_u32(self.detach_reason)
    }
}

/// A consumer view over a mapped region.
pub struct Ring {
    base: *mut u8,
    capacity: u64,
    names_offset: u64,
    names_size: u64,
    /// Records consumed (ours; published to the header's `tail`).
    tail: u64,
}

// SAFETY: the view holds a pointer into a shared mapping; all accesses are
// atomics or volatile reads, so moving it across threads is fine.
unsafe impl Send for Ring {}

impl Ring {
    /// Checks the header of the region mapped at `base` (`len` bytes) and
    /// returns a view that starts at the header's current `tail`.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped readable and writable (the view
    /// stores `tail`) for the lifetime of the returned `Ring`.
    pub unsafe fn new(base: *mut u8, len: usize) -> Result<Ring, RingError> {
        if base.is_null() || !(base as usize).is_multiple_of(8) || len < HEADER_SIZE {
            return Err(RingError::TooSmall);
        }
        // SAFETY: aligned and at least HEADER_SIZE mapped bytes (checked);
        // `Header` is atomics only.
        let h = unsafe { &*(base as *const Header) };
        let magic = h.magic.load(Acquire);
        if magic != MAGIC {
            return Err(RingError::BadMagic(magic));
        }
        let version = h.version.load(Relaxed);
        if version != PROTOCOL_VERSION {
            return Err(RingError::BadVersion(version));
        }
        let capacity = h.ring_capacity.load(Relaxed);
        let names_offset = h.names_offset.load(Relaxed);
        let names_size = h.names_size.load(Relaxed);
        let ok = h.header_size.load(Relaxed) as usize == HEADER_SIZE
            && h.record_size.load(Relaxed) as usize == RECORD_SIZE
            && h.ring_offset.load(Relaxed) == HEADER_SIZE as u64
            && capacity.is_power_of_two()
            && (MIN_RING_CAPACITY..=MAX_RING_CAPACITY).contains(&capacity)
            && (MIN_NAMES_SIZE..=MAX_NAMES_SIZE).contains(&names_size)
            && names_offset == HEADER_SIZE as u64 + capacity * RECORD_SIZE as u64
            && names_offset
                .checked_add(names_size)
                .is_some_and(|end| end <= len as u64);
        if !ok {
            return Err(RingError::BadGeometry);
        }
        let tail = h.tail.load(Acquire);
        Ok(Ring {
            base,
            capacity,
            names_offset,
            names_size,
            tail,
        })
    }

    /// The header (atomics only).
    pub fn header(&self) -> &Header {
        // SAFETY: checked at `new`: aligned, mapped, at least HEADER_SIZE.
        unsafe { &*(self.base as *const Header) }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Records consumed so far.
    pub fn tail(&self) -> u64 {
        self.tail
    }

    pub fn snapshot(&self) -> Snapshot {
        let h = self.header();
        Snapshot {
            state: h.state.load(Acquire),
            error_code: h.error_code.load(Relaxed),
            cupti_result: h.cupti_result.load(Relaxed),
            detach_reason: h.detach_reason.load(Relaxed),
            pid: h.pid.load(Relaxed),
            pipe_fd: h.pipe_fd.load(Relaxed),
            clock: h.clock.load(Relaxed),
            clock_offset_ns: h.clock_offset_ns.load(Relaxed),
            clock_error_ns: h.clock_error_ns.load(Relaxed),
            cupti_version: h.cupti_version.load(Relaxed),
            kinds: h.kinds.load(Relaxed),
            features: h.features.load(Relaxed),
            started_ns: h.started_ns.load(Relaxed),
            heartbeat_ns: h.heartbeat_ns.load(Relaxed),
            sample_percent: h.sample_percent.load(Relaxed),
            sampled_on_ns: h.sampled_on_ns.load(Relaxed),
            pauses: h.pauses.load(Relaxed),
            resume_error: h.resume_error.load(Relaxed),
            head: h.head.load(Acquire),
            records_written: h.records_written.load(Relaxed),
            ring_dropped: h.ring_dropped.load(Relaxed),
            cupti_dropped: h.cupti_dropped.load(Relaxed),
            names_dropped: h.names_dropped.load(Relaxed),
            names_used: h.names_used.load(Relaxed),
            buffers_completed: h.buffers_completed.load(Relaxed),
            buffers_refused: h.buffers_refused.load(Relaxed),
            records_skipped: h.records_skipped.load(Relaxed),
        }
    }

    /// The message, up to its NUL, copied into `buf`.
    pub fn message<'a>(&self, buf: &'a mut [u8; MESSAGE_LEN]) -> &'a [u8] {
        let h = self.header();
        let mut n = 0;
        for (i, b) in h.message.iter().enumerate() {
            let v = b.load(Relaxed);
            buf[i] = v;
            if v == 0 {
                break;
            }
            n = i + 1;
        }
        &buf[..n]
    }

    /// Records published and not yet read.
    pub fn available(&self) -> Result<u64, RingError> {
        let head = self.header().head.load(Acquire);
        if head < self.tail || head - self.tail > self.capacity {
            return Err(RingError::Corrupt {
                head,
                tail: self.tail,
            });
        }
        Ok(head - self.tail)
    }

    /// Reads every record published so far (at most one ring's worth),
    /// hands each to `f` (undecodable ones as `Err`), then publishes the new
    /// tail. Returns how many were read.
    pub fn poll(
        &mut self,
        mut f: impl FnMut(Result<Record, RecordError>),
    ) -> Result<u64, RingError> {
        let n = self.available()?;
        for _ in 0..n {
            let rec = self.read_slot(self.tail);
            self.tail += 1;
            f(Record::from_bytes(&rec));
        }
        if n > 0 {
            self.header().tail.store(self.tail, Release);
        }
        Ok(n)
    }

    /// Publishes `tail` without reading (drops everything published so far).
    pub fn skip_all(&mut self) -> Result<u64, RingError> {
        let n = self.available()?;
        self.tail += n;
        self.header().tail.store(self.tail, Release);
        Ok(n)
    }

    fn read_slot(&self, index: u64) -> RecordBytes {
        let slot = (index & (self.capacity - 1)) as usize;
        let mut out = [0u8; RECORD_SIZE];
        // SAFETY: slot < capacity, so the record lies inside the ring, which
        // `new` checked lies inside the mapping; volatile reads because the
        // other process writes the region.
        unsafe {
            let p = self.base.add(HEADER_SIZE + slot * RECORD_SIZE);
            for (i, b) in out.iter_mut().enumerate() {
                *b = p.add(i).read_volatile();
            }
        }
        out
    }

    /// The name with id `id`, copied into `buf` (cut to its length). `None`
    /// for id 0 or an id or length that does not lie inside the part of the
    /// name area published so far.
    pub fn name<'a>(&self, id: u32, buf: &'a mut [u8]) -> Option<&'a [u8]> {
        let id = id as u64;
        let used = self.header().names_used.load(Acquire).min(self.names_size);
        if id < NAMES_RESERVED || id.checked_add(2)? > used {
            return None;
        }
        let at = self.names_offset + id;
        // SAFETY: at + 2 <= names_offset + used <= names_offset + names_size,
        // inside the mapping (checked at `new`).
        let len = unsafe {
            let p = self.base.add(at as usize);
            u16::from_le_bytes([p.read_volatile(), p.add(1).read_volatile()]) as u64
        };
        if id + 2 + len > used {
            return None;
        }
        let n = (len as usize).min(buf.len());
        for (i, b) in buf[..n].iter_mut().enumerate() {
            // SAFETY: at + 2 + i < names_offset + used (checked above).
            *b = unsafe { self.base.add(at as usize + 2 + i).read_volatile() };
        }
        Some(&buf[..n])
    }
}
