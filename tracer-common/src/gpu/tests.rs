//! Protocol tests: record and argument round trips, the writer and (with
//! the `user` feature) the reader, including hostile regions.
extern crate std;
use std::vec;
use std::vec::Vec;

use super::*;

fn common(seed: u64) -> Common {
    Common {
        flags: (seed & 0xffff) as u16,
        device: seed as u32 ^ 1,
        context: (seed >> 3) as u32,
        stream: (seed >> 7) as u32,
        correlation: (seed >> 11) as u32,
        start: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        end: seed.rotate_left(17),
    }
}

pub(super) fn samples() -> Vec<Record> {
    let mut v = Vec::new();
    for s in [0u64, 1, 0xdead_beef, u64::MAX] {
        let c = common(s);
        v.push(Record::Kernel(KernelRecord {
            common: c,
            grid: [s as u32, 2, 3],
            block: [4, u32::MAX, 6],
            static_shared: 7,
            dynamic_shared: 8192,
            registers: 32,
            name_id: 8,
            graph_node_id: s ^ 0x55,
            graph_id: 9,
            launch_type: 1,
        }));
        v.push(Record::Memcpy(MemcpyRecord {
            common: c,
            bytes: s,
            copy_kind: 1,
            src_kind: 2,
            dst_kind: 3,
            copy_flags: 0xff,
            graph_id: 4,
            graph_node_id: !s,
            runtime_correlation: 77,
        }));
        v.push(Record::Memset(MemsetRecord {
            common: c,
            bytes: 1024,
            value: 0xabcd_ef01,
            memory_kind: 3,
            memset_flags: 0x8000,
            graph_node_id: 5,
            graph_id: s as u32,
        }));
        v.push(Record::Api(ApiRecord {
            common: c,
            cbid: 307,
            tid: 1234,
            pid: 99,
            result: 999,
            domain: API_DOMAIN_RUNTIME,
        }));
    }
    v
}

#[test]
fn records_round_trip() {
    for r in samples() {
        let b = r.to_bytes();
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), r.kind() as u16);
        assert_eq!(Record::from_bytes(&b), Ok(r));
    }
}

#[test]
fn record_field_offsets() {
    let r = Record::Kernel(KernelRecord {
        common: Common {
            correlation: 0x11223344,
            start: 0x0102030405060708,
            ..Default::default()
        },
        grid: [64, 2, 1],
        name_id: 0xa0b0c0d0,
        graph_node_id: 0xfeed,
        ..Default::default()
    });
    let b = r.to_bytes();
    assert_eq!(&b[16..20], &0x11223344u32.to_le_bytes());
    assert_eq!(&b[24..32], &0x0102030405060708u64.to_le_bytes());
    assert_eq!(&b[40..44], &64u32.to_le_bytes());
    assert_eq!(&b[76..80], &0xa0b0c0d0u32.to_le_bytes());
    assert_eq!(&b[80..88], &0xfeedu64.to_le_bytes());
    assert!(b[20..24].iter().all(|&x| x == 0));
}

#[test]
fn hostile_record_bytes_never_panic() {
    let mut x = 0x1234_5678_9abc_def0u64;
    for i in 0..20_000u32 {
        let mut b = [0u8; RECORD_SIZE];
        for byte in b.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        b[0] = (i % 7) as u8;
        b[1] = if i % 11 == 0 { 0xff } else { 0 };
        match Record::from_bytes(&b) {
            Ok(r) => assert_eq!(Record::from_bytes(&r.to_bytes()), Ok(r)),
            Err(RecordError::UnknownKind(k)) => assert!(RecordKind::from_u16(k).is_none()),
        }
    }
}

#[test]
fn error_codes_round_trip() {
    assert_eq!(AgentError::from_u16(18), None);
    for v in 1..=17u16 {
        let e = AgentError::from_u16(v).unwrap();
        for detail in [0u32, 39, 0xffff, u32::MAX] {
            let ret = encode_error(e, detail);
            assert!(ret < 0);
            assert_eq!(decode_error(ret), Some((Some(e), detail)));
        }
    }
    assert_eq!(decode_error(0), None);
    assert_eq!(decode_error(5), None);
    assert_eq!(decode_error(i64::MIN), None);
    assert_eq!(decode_error(-999), Some((None, 0)));
}

#[test]
fn args_layout_and_path() {
    let a = AgentArgs::new(b"/x/libcupti.so.13");
    assert_eq!(a.path(), Some(&b"/x/libcupti.so.13"[..]));
    assert_eq!(a.as_bytes().len(), 48 + PATH_LEN);
    assert_eq!(&a.as_bytes()[0..4], &PROTOCOL_VERSION.to_le_bytes());
    let long = vec![b'a'; PATH_LEN + 10];
    let b = AgentArgs::new(&long);
    assert_eq!(b.path().map(|p| p.len()), Some(PATH_LEN - 1));
    let mut c = b;
    c.cupti_path = [b'x'; PATH_LEN];
    assert_eq!(c.path(), None);
}

#[test]
fn layout_math() {
    assert_eq!(region_layout(2, 64, 4096), Some((4096 + 192, 8192)));
    assert_eq!(region_layout(1 << 16, 1 << 20, 4096).unwrap().1 % 4096, 0);
    assert_eq!(region_layout(u64::MAX, 1, 4096), None);
    assert_eq!(region_layout(4, u64::MAX - 10, 4096), None);
    assert_eq!(region_layout(4, 64, 0), None);
    assert_eq!(name_entry_size(0), 8);
    assert_eq!(name_entry_size(5), 8);
    assert_eq!(name_entry_size(6), 16);
}

/// `RingWriter::init` over a test's own region.
pub(super) fn writer(
    base: *mut u8,
    len: usize,
    cap: u64,
    names: u64,
    page: u64,
) -> Option<RingWriter> {
    // SAFETY: every caller passes its own zeroed `mem` buffer (aligned,
    // `len` bytes or fewer), which outlives the writer in that test.
    unsafe { RingWriter::init(base, len, cap, names, page) }
}

/// A zeroed, 8-aligned region of `len` bytes.
pub(super) fn region(len: usize) -> Vec<u64> {
    vec![0u64; len.div_ceil(8)]
}

#[test]
fn writer_ring_full_and_names() {
    let (_, len) = region_layout(4, 64, 4096).unwrap();
    let mut mem = region(len as usize);
    let mut w = writer(mem.as_mut_ptr().cast(), len as usize, 4, 64, 4096).unwrap();
    let rec = samples()[0].to_bytes();
    for _ in 0..4 {
        assert!(w.push(&rec));
    }
    assert!(!w.push(&rec));
    assert_eq!(
        w.header()
            .ring_dropped
            .load(core::sync::atomic::Ordering::Relaxed),
        1
    );
    // 64 bytes, 8 reserved: a 20-byte name takes 24; two fit, the third does not.
    let a = w.add_name(&[b'k'; 20]);
    let b = w.add_name(b"_Z4reluPfi");
    assert_eq!((a, b), (8, 32));
    assert!(w.name_is(a, &[b'k'; 20]) && w.name_is(b, b"_Z4reluPfi"));
    assert!(!w.name_is(b, b"_Z4reluPfx") && !w.name_is(0, b"") && !w.name_is(1000, b"x"));
    assert_eq!(w.add_name(&[b'z'; 30]), 0);
    assert_eq!(
        w.header()
            .names_dropped
            .load(core::sync::atomic::Ordering::Relaxed),
        1
    );
    // A tail beyond head (a broken reader) never lets the writer overwrite.
    w.header()
        .tail
        .store(99, core::sync::atomic::Ordering::Relaxed);
    assert!(!w.push(&rec));
    // Geometry that does not fit is refused.
    assert!(writer(mem.as_mut_ptr().cast(), 4096, 4, 64, 4096).is_none());
    assert!(writer(mem.as_mut_ptr().cast(), len as usize, 3, 64, 4096).is_none());
}

#[test]
fn cbid_table_is_sorted_and_named() {
    assert!(API_CBIDS.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(cbid_name(307), Some("cuLaunchKernel"));
    assert_eq!(cbid_name(442), Some("cuLaunchKernel_ptsz"));
    assert_eq!(cbid_name(514), Some("cuGraphLaunch"));
    assert_eq!(cbid_name(652), Some("cuLaunchKernelEx"));
    assert_eq!(cbid_name(413), Some("cuMemsetD32_v2_ptds"));
    assert_eq!(cbid_name(1), None);
    assert_eq!(API_CBIDS.len(), 114);
    assert!(RUNTIME_API_CBIDS.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(RUNTIME_API_CBIDS.len(), 77);
    assert_eq!(runtime_cbid_name(211), Some("cudaLaunchKernel"));
    assert_eq!(runtime_cbid_name(214), Some("cudaLaunchKernel_ptsz"));
    assert_eq!(runtime_cbid_name(311), Some("cudaGraphLaunch"));
    assert_eq!(runtime_cbid_name(430), Some("cudaLaunchKernelExC"));
    assert_eq!(runtime_cbid_name(212), None);
}

#[cfg(feature = "user")]
mod reader_tests;
