//! The agent's side of the region: lays out the header, publishes records
//! into the ring and names into the name area. Single producer: the caller
//! serialises every `&mut self` method.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::{
    name_entry_size, region_layout, AgentState, Header, RecordBytes, HEADER_SIZE, MAGIC,
    MAX_NAME_LEN, MESSAGE_LEN, NAMES_RESERVED, PROTOCOL_VERSION, RECORD_SIZE,
};

/// Writes into a mapped region it does not own.
pub struct RingWriter {
    base: *mut u8,
    capacity: u64,
    names_offset: u64,
    names_size: u64,
    head: u64,
    names_used: u64,
}

// SAFETY: the writer only holds a pointer to memory shared between
// processes; every access is to atomics or through raw pointers, and the
// caller serialises producers.
unsafe impl Send for RingWriter {}

impl RingWriter {
    /// Lays out a zero-filled region of `len` bytes at `base` for a ring of
    /// `capacity` records (a power of two) and `names_size` bytes of names,
    /// and writes the header (state `Starting`). `None` if the geometry
    /// does not fit `len` or `capacity` is not a power of two.
    ///
    /// # Safety
    /// `base` must be 8-byte aligned, point to `len` writable bytes that
    /// stay mapped for the writer's lifetime, and no other writer may use
    /// the region.
    pub unsafe fn init(
        base: *mut u8,
        len: usize,
        capacity: u64,
        names_size: u64,
        page: u64,
    ) -> Option<Self> {
        if !capacity.is_power_of_two() || base.is_null() || !(base as usize).is_multiple_of(8) {
            return None;
        }
        let (names_offset, region) = region_layout(capacity, names_size, page)?;
        if region > len as u64 {
            return None;
        }
        let w = Self {
            base,
            capacity,
            names_offset,
            names_size,
            head: 0,
            names_used: NAMES_RESERVED.min(names_size),
        };
        let h = w.header();
        h.version.store(PROTOCOL_VERSION, Relaxed);
        h.header_size.store(HEADER_SIZE as u32, Relaxed);
        h.record_size.store(RECORD_SIZE as u32, Relaxed);
        h.state.store(AgentState::Starting as u32, Relaxed);
        h.ring_offset.store(HEADER_SIZE as u64, Relaxed);
        h.ring_capacity.store(capacity, Relaxed);
        h.names_offset.store(names_offset, Relaxed);
        h.names_size.store(names_size, Relaxed);
        h.region_size.store(region, Relaxed);
        h.names_used.store(w.names_used, Relaxed);
        h.magic.store(MAGIC, Release);
        Some(w)
    }

    /// The header (atomics only).
    pub fn header(&self) -> &Header {
        // SAFETY: `init`'s contract: `base` is aligned and mapped for at
        // least HEADER_SIZE bytes (region_layout includes the header) while
        // `self` lives; `Header` is made of atomics, so shared access to
        // memory another process writes is sound.
        unsafe { &*(self.base as *const Header) }
    }

    pub fn set_state(&self, s: AgentState) {
        self.header().state.store(s as u32, Release);
    }

    /// Writes `msg` (cut to MESSAGE_LEN - 1 bytes) NUL-padded.
    pub fn set_message(&self, msg: &[u8]) {
        let h = self.header();
        for (i, slot) in h.message.iter().enumerate() {
            let b = if i < MESSAGE_LEN - 1 {
                msg.get(i).copied().unwrap_or(0)
            } else {
                0
            };
            slot.store(b, Relaxed);
        }
    }

    /// Publishes one record; `false` (and `ring_dropped` + 1) when the ring
    /// is full.
    pub fn push(&mut self, rec: &RecordBytes) -> bool {
        let h = self.header();
        let tail = h.tail.load(Acquire);
        // A reader that wrote a tail beyond head is broken: treat the ring
        // as full rather than overwrite unread records.
        if tail > self.head || self.head - tail >= self.capacity {
            h.ring_dropped.fetch_add(1, Relaxed);
            return false;
        }
        let slot = (self.head & (self.capacity - 1)) as usize;
        let at = HEADER_SIZE + slot * RECORD_SIZE;
        // SAFETY: `at + RECORD_SIZE <= names_offset <= region` (init checked
        // the geometry against `len`); the slot is not being read (the
        // reader only reads below `head`, and its published tail says it is
        // done with this slot's previous record).
        unsafe { core::ptr::copy_nonoverlapping(rec.as_ptr(), self.base.add(at), RECORD_SIZE) };
        self.head += 1;
        let h = self.header();
        h.records_written.store(self.head, Relaxed);
        h.head.store(self.head, Release);
        true
    }

    /// Appends a name, returning its id (offset in the name area), or 0
    /// (and `names_dropped` + 1) when it does not fit. Names longer than
    /// MAX_NAME_LEN are cut.
    pub fn add_name(&mut self, name: &[u8]) -> u32 {
        let name = &name[..name.len().min(MAX_NAME_LEN)];
        let need = name_entry_size(name.len()) as u64;
        let h = self.header();
        if self.names_used + need > self.names_size || self.names_used > u32::MAX as u64 {
            h.names_dropped.fetch_add(1, Relaxed);
            return 0;
        }
        let id = self.names_used;
        let at = (self.names_offset + id) as usize;
        let len = (name.len() as u16).to_le_bytes();
        // SAFETY: `at + need <= names_offset + names_size <= region` (checked
        // above and at init); bytes at and above `names_used` are not yet
        // published, so no reader relies on them.
        unsafe {
            let p = self.base.add(at);
            core::ptr::copy_nonoverlapping(len.as_ptr(), p, 2);
            core::ptr::copy_nonoverlapping(name.as_ptr(), p.add(2), name.len());
            *p.add(2 + name.len()) = 0;
        }
        self.names_used += need;
        self.header().names_used.store(self.names_used, Release);
        id as u32
    }

    /// Whether the name stored at `id` is `name` (ids come from `add_name`).
    pub fn name_is(&self, id: u32, name: &[u8]) -> bool {
        let id = id as u64;
        if id < NAMES_RESERVED || id + 2 > self.names_used {
            return false;
        }
        let name = &name[..name.len().min(MAX_NAME_LEN)];
        let at = (self.names_offset + id) as usize;
        // SAFETY: every byte read lies below `names_used`, inside the name
        // area (checked); volatile reads, as the other process may write
        // the shared pages.
        unsafe {
            let p = self.base.add(at);
            let len = u16::from_le_bytes([p.read_volatile(), p.add(1).read_volatile()]) as usize;
            if len != name.len() || id + 2 + len as u64 > self.names_used {
                return false;
            }
            name.iter()
                .enumerate()
                .all(|(i, b)| p.add(2 + i).read_volatile() == *b)
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}
