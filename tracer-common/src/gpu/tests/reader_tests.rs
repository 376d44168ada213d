//! The reader against a writer, and against hostile headers.
extern crate std;
use core::sync::atomic::Ordering::Relaxed;
use std::vec::Vec;

use super::super::reader::{Ring, RingError};
use super::super::*;
use super::{region, samples, writer};

/// `Ring::new` over a test's own region.
fn ring(base: *mut u8, len: usize) -> Result<Ring, RingError> {
    // SAFETY: every caller passes its own `mem` buffer (aligned, `len`
    // bytes or fewer), which outlives the view in that test.
    unsafe { Ring::new(base, len) }
}

fn setup(cap: u64, names: u64) -> (Vec<u64>, usize) {
    let (_, len) = region_layout(cap, names, 4096).unwrap();
    (region(len as usize), len as usize)
}

#[test]
fn round_trip_through_the_ring() {
    let (mut mem, len) = setup(8, 256);
    let base: *mut u8 = mem.as_mut_ptr().cast();
    let mut w = writer(base, len, 8, 256, 4096).unwrap();
    let mut r = ring(base, len).unwrap();
    let recs = samples();
    let mut got = Vec::new();
    for chunk in recs.chunks(5) {
        for rec in chunk {
            assert!(w.push(&rec.to_bytes()));
        }
        r.poll(|x| got.push(x.unwrap())).unwrap();
    }
    assert_eq!(got, recs);
    assert_eq!(r.snapshot().records_written, recs.len() as u64);
    assert_eq!(r.header().tail.load(Relaxed), recs.len() as u64);
    let id = w.add_name(b"_Z10vector_addPKfS0_Pfi");
    let mut buf = [0u8; 64];
    assert_eq!(r.name(id, &mut buf), Some(&b"_Z10vector_addPKfS0_Pfi"[..]));
    let mut short = [0u8; 4];
    assert_eq!(r.name(id, &mut short), Some(&b"_Z10"[..]));
    w.set_message(b"refused: multiple subscribers");
    let mut m = [0u8; MESSAGE_LEN];
    assert_eq!(r.message(&mut m), b"refused: multiple subscribers");
    w.set_state(AgentState::Stopped);
    assert_eq!(r.snapshot().agent_state(), Some(AgentState::Stopped));
}

#[test]
fn overflow_accounting() {
    let (mut mem, len) = setup(4, 64);
    let base: *mut u8 = mem.as_mut_ptr().cast();
    let mut w = writer(base, len, 4, 64, 4096).unwrap();
    let mut r = ring(base, len).unwrap();
    let rec = samples()[1].to_bytes();
    let produced = 11;
    let written = (0..produced).filter(|_| w.push(&rec)).count() as u64;
    let s = r.snapshot();
    assert_eq!((written, s.records_written, s.ring_dropped), (4, 4, 7));
    assert_eq!(s.records_written + s.ring_dropped, produced);
    assert_eq!(r.poll(|_| ()).unwrap(), 4);
    assert!(w.push(&rec));
    assert_eq!(r.poll(|_| ()).unwrap(), 1);
}

#[test]
fn hostile_headers_are_refused() {
    let (mut mem, len) = setup(4, 64);
    let base: *mut u8 = mem.as_mut_ptr().cast();
    let w = writer(base, len, 4, 64, 4096).unwrap();
    let h = w.header();
    assert_eq!(ring(base, 100).err(), Some(RingError::TooSmall));
    assert!(ring(base.wrapping_add(1), len - 8).is_err());
    h.magic.store(1, Relaxed);
    assert_eq!(ring(base, len).err(), Some(RingError::BadMagic(1)));
    h.magic.store(MAGIC, Relaxed);
    h.version.store(77, Relaxed);
    assert_eq!(ring(base, len).err(), Some(RingError::BadVersion(77)));
    h.version.store(PROTOCOL_VERSION, Relaxed);
    for (cap, off, size) in [
        (3u64, 4096 + 288, 64u64),
        (1 << 40, 4096 + 384, 64),
        (4, 4096 + 384, u64::MAX),
        (4, u64::MAX - 8, 64),
        (4, 4096, 64),
        (4, 4096 + 384, 1 << 30),
        (0, 4096, 64),
    ] {
        h.ring_capacity.store(cap, Relaxed);
        h.names_offset.store(off, Relaxed);
        h.names_size.store(size, Relaxed);
        assert_eq!(
            ring(base, len).err(),
            Some(RingError::BadGeometry),
            "{cap} {off} {size}"
        );
    }
    h.ring_capacity.store(4, Relaxed);
    h.names_offset.store(4096 + 384, Relaxed);
    h.names_size.store(64, Relaxed);
    h.record_size.store(64, Relaxed);
    assert_eq!(ring(base, len).err(), Some(RingError::BadGeometry));
    h.record_size.store(RECORD_SIZE as u32, Relaxed);
    assert!(ring(base, len).is_ok());
}

#[test]
fn hostile_head_and_names_never_panic() {
    let (mut mem, len) = setup(4, 64);
    let base: *mut u8 = mem.as_mut_ptr().cast();
    let mut w = writer(base, len, 4, 64, 4096).unwrap();
    let mut r = ring(base, len).unwrap();
    let id = w.add_name(b"abc");
    let h = w.header();
    let mut buf = [0u8; 16];
    for head in [5u64, u64::MAX, 1 << 63] {
        h.head.store(head, Relaxed);
        assert!(matches!(r.poll(|_| ()), Err(RingError::Corrupt { .. })));
        assert!(r.skip_all().is_err());
    }
    h.head.store(3, Relaxed);
    // Garbage in the slots decodes to errors or records, never a panic.
    for (i, b) in mem[512..560].iter_mut().enumerate() {
        *b = 0x0123_4567_89ab_cdef_u64.rotate_left(i as u32);
    }
    let mut n = 0;
    r.poll(|_| n += 1).unwrap();
    assert_eq!(n, 3);
    h.head.store(1, Relaxed);
    assert!(r.poll(|_| ()).is_err(), "head went backwards");
    // Names: hostile ids, lengths and names_used.
    let h = r.header();
    for used in [0u64, 9, 64, u64::MAX] {
        h.names_used.store(used, Relaxed);
        for id in [0u32, 1, 7, id, 63, 64, u32::MAX] {
            let _ = r.name(id, &mut buf);
        }
    }
    h.names_used.store(16, Relaxed);
    assert_eq!(r.name(id, &mut buf), Some(&b"abc"[..]));
    // A length running past names_used is refused.
    let names_at = (4096 + 4 * RECORD_SIZE + id as usize) / 8;
    mem[names_at] = 0xffff;
    assert_eq!(r.name(id, &mut buf), None);
}
