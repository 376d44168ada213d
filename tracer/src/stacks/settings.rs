//! What `--stacks` asks of the probes, and the handle through which the
//! resolver configures the Python walk of each process.

use aya::maps::{HashMap as BpfHashMap, MapData};
use tracer_common::stack::{PyConfig, DEFAULT_STACK_BYTES, MAX_STACK_BYTES};

use crate::stacks::kernel::KernelOffsets;
use crate::stacks::resolve::PyConfigs;

/// `--stacks` settings, given to the probes at load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSettings {
    /// Bytes of user stack copied per stack (`--stack-bytes`).
    pub window: u32,
    /// One launch in `every` gets a stack (`--stacks-every`); other
    /// families always do.
    pub every: u32,
    /// Offsets in the running kernel's structures (from its BTF).
    pub kernel: KernelOffsets,
}

impl StackSettings {
    /// Settings for this kernel; `window` is checked against what the probe
    /// can copy.
    pub fn new(window: Option<u32>, every: u32, kernel: KernelOffsets) -> Result<Self, String> {
        let window = window.unwrap_or(DEFAULT_STACK_BYTES);
        if window as usize > MAX_STACK_BYTES || !window.is_multiple_of(8) {
            return Err(format!(
                "--stack-bytes {window}: a multiple of 8 up to {MAX_STACK_BYTES}"
            ));
        }
        if every == 0 {
            return Err("--stacks-every 0: use 1 for every call".into());
        }
        Ok(Self {
            window,
            every,
            kernel,
        })
    }

    /// The globals of the eBPF object, by name.
    pub fn globals(&self) -> [(&'static str, u64); 8] {
        let u = self.kernel.uretprobe;
        [
            ("STACK_BYTES", u64::from(self.window)),
            ("STACK_EVERY", u64::from(self.every)),
            ("FSBASE_OFFSET", self.kernel.fsbase.unwrap_or(0)),
            ("UTASK_OFFSET", u.map_or(0, |u| u.task_utask)),
            ("RI_HEAD_OFFSET", u.map_or(0, |u| u.utask_return_instances)),
            ("RI_STACK_OFFSET", u.map_or(0, |u| u.ri_stack)),
            ("RI_ORIG_OFFSET", u.map_or(0, |u| u.ri_orig_ret_vaddr)),
            ("RI_NEXT_OFFSET", u.map_or(0, |u| u.ri_next)),
        ]
    }
}

/// The probe's map of Python processes.
pub struct PyProcMap(pub BpfHashMap<MapData, u32, PyConfig>);

impl PyConfigs for PyProcMap {
    fn insert(&mut self, pid: u32, config: &PyConfig) {
        // A full map (4096 Python processes) leaves this one without
        // Python frames; its stacks say so (status "not Python").
        let _ = self.0.insert(pid, *config, 0);
    }

    fn remove(&mut self, pid: u32) {
        let _ = self.0.remove(&pid);
    }
}
