//! `gputrace list`: processes that map libcuda/libnccl, and the files.

use std::collections::BTreeMap;
use std::process::ExitCode;

use crate::error::Result;
use crate::host::cgroup;
use crate::host::discover;

pub(crate) fn run() -> Result<ExitCode> {
    let mut files: BTreeMap<(u64, u64), (String, Vec<u32>)> = BTreeMap::new();
    let mut rows = Vec::new();
    for pid in discover::all_pids() {
        let Ok(libs) = discover::process_libraries(pid) else {
            continue;
        };
        if libs.is_empty() {
            continue;
        }
        let comm = discover::comm(pid).unwrap_or_else(|| "?".into());
        let names: Vec<String> = libs.iter().map(|l| l.lib.label().to_string()).collect();
        let c = cgroup::container_of(pid);
        let container = match (&c.container_id, &c.pod_uid) {
            (Some(id), Some(pod)) => format!("{} (pod {pod})", short(id)),
            (Some(id), None) => short(id).to_string(),
            (None, Some(pod)) => format!("pod {pod}"),
            (None, None) => "-".to_string(),
        };
        rows.push((pid, comm, names.join(","), container));
        for l in libs {
            let shown =
                crate::text::printable_path(&l.path).replacen(&format!("/proc/{pid}/root"), "", 1);
            files
                .entry((l.dev, l.inode))
                .or_insert_with(|| (shown, Vec::new()))
                .1
                .push(pid);
        }
    }
    if rows.is_empty() {
        println!("no process maps libcuda or libnccl");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>8}  {:<16}  {:<26}  CONTAINER",
        "PID", "COMMAND", "LIBRARIES"
    );
    for (pid, comm, libs, container) in &rows {
        println!("{pid:>8}  {comm:<16}  {libs:<26}  {container}");
    }
    // One line per distinct file: what `--all` and `daemon` attach to once.
    println!("\n{:<16}  {:>9}  FILE", "DEV:INODE", "PROCESSES");
    for ((dev, ino), (path, pids)) in &files {
        println!("{:<16}  {:>9}  {path}", format!("{dev}:{ino}"), pids.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// A container id shortened as `docker ps` shows it (ids are hex: ASCII).
fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
