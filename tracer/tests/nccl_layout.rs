//! The static layout decoder against the simulated libnccl (built here from
//! tests/sim), whose `struct ncclComm` is laid out unlike NCCL's: the
//! offsets asserted are those of tests/sim/nccl_comm.h.

use std::path::{Path, PathBuf};
use std::process::Command;

use gputrace::nccl::hash::NcclVersion;
use gputrace::nccl::layout::decode_file;

fn build_sim(test: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!(
        "gputrace-nccl-layout-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("scratch dir");
    let sim = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sim");
    let status = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&sim)
        .arg(format!("OUT={}", out.display()))
        .arg(out.join("libnccl.so.2"))
        .arg(out.join("libcuda.so.1"))
        .status()
        .expect("running make");
    assert!(status.success(), "building the simulated libnccl failed");
    out
}

#[test]
fn decodes_the_simulated_communicator() {
    let dir = build_sim("sim");
    let l = decode_file(&dir.join("libnccl.so.2")).expect("an ELF file");
    assert_eq!(l.version, Some(NcclVersion(2, 28, 3)));
    assert_eq!(l.comm_hash, Some(0x2a8), "{:?}", l.notes);
    assert_eq!(l.rank, Some(0x2b0));
    assert_eq!(l.nranks, Some(0x1c8));
    assert_eq!(l.cuda_dev, Some(0x140));
    assert_eq!(l.seq_number, Some(0x520));
    assert_eq!(l.usable_seq(), Some(0x520));
    // No endMagic in the simulator: the size is unknown, and said so.
    assert_eq!(l.size, None);
    assert_eq!(l.notes.len(), 1, "{:?}", l.notes);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_library_without_nccl_gives_nothing() {
    let dir = build_sim("cuda");
    let l = decode_file(&dir.join("libcuda.so.1")).expect("an ELF file");
    assert_eq!(
        (
            l.version,
            l.comm_hash,
            l.rank,
            l.nranks,
            l.cuda_dev,
            l.seq_number,
            l.size
        ),
        (None, None, None, None, None, None, None)
    );
    assert!(
        l.notes.iter().any(|n| n.contains("ncclCommUserRank")),
        "{:?}",
        l.notes
    );
    let junk = dir.join("junk.so");
    std::fs::write(&junk, b"not an ELF file").unwrap();
    assert!(decode_file(&junk).is_err());
    assert!(decode_file(&dir.join("missing.so")).is_err());
    let _ = std::fs::remove_dir_all(dir);
}
