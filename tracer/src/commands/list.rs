//! `gputrace list`: processes that map libcuda/libnccl, and the files.

use std::collections::BTreeMap;
use std::process::ExitCode;

use crate::error::Result;
use crate::probes::discover;

pub fn run() -> Result<ExitCode> {
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
        rows.push((pid, comm, names.join(",")));
        for l in libs {
            let shown = l
                .path
                .to_string_lossy()
                .replacen(&format!("/proc/{pid}/root"), "", 1);
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
    println!("{:>8}  {:<16}  LIBRARIES", "PID", "COMMAND");
    for (pid, comm, libs) in &rows {
        println!("{pid:>8}  {comm:<16}  {libs}");
    }
    println!("\n{:<12}  {:>9}  FILE", "DEV:INODE", "PROCESSES");
    for ((dev, ino), (path, pids)) in &files {
        println!("{:<12}  {:>9}  {path}", format!("{dev}:{ino}"), pids.len());
    }
    Ok(ExitCode::SUCCESS)
}
