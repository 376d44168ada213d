//! Checking, before anything is loaded, that we may load eBPF and open uprobes.

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// What is missing, given the effective capability set.
pub(crate) fn missing_caps(caps: u64) -> Vec<&'static str> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    let admin = has(CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if !has(CAP_BPF) && !admin {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) && !admin {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// `Err` with a one-line explanation when eBPF uprobes cannot be used.
pub(crate) fn check() -> Result<(), String> {
    let caps = effective_caps().unwrap_or(0);
    let missing = missing_caps(caps);
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    Err(format!(
        "missing {} to load eBPF programs and attach uprobes{}: run gputrace as root (sudo gputrace ...) or grant those capabilities",
        missing.join(" and "),
        if root { " (running as root, but without them)" } else { " (not running as root)" }
    ))
}

/// Whether we may ptrace other users' processes (`--gpu-time`).
pub(crate) fn may_ptrace() -> bool {
    effective_caps().is_some_and(|c| c & (1u64 << CAP_SYS_PTRACE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_rules() {
        assert_eq!(missing_caps(0), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert!(missing_caps(1 << CAP_SYS_ADMIN).is_empty());
        assert_eq!(missing_caps(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert!(missing_caps((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
    }
}
