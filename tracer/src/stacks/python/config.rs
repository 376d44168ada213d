//! The probe's per-process configuration of the Python walk
//! ([`tracer_common::stack::PyConfig`]), from a [`Layout`].

use tracer_common::stack::{PyConfig, PyModel, NO_OFFSET, PY_FRAME_HEAD};

use crate::stacks::python::FrameModel;
use crate::stacks::python::Layout;

/// The configuration for a process whose `_PyRuntime` is at `runtime`.
pub(crate) fn probe_config(l: &Layout, runtime: u64) -> PyConfig {
    let (model, cframe_current_frame) = match l.model {
        FrameModel::FrameObject => (PyModel::FrameObject, NO_OFFSET),
        FrameModel::CFrame { current_frame } => (PyModel::CFrame, current_frame),
        FrameModel::Direct => (PyModel::Direct, NO_OFFSET),
    };
    // The walk reads one block per frame, up to its farthest field (3.10's
    // f_lasti is an int; the probe reads 8 bytes there and keeps 4).
    let instr_len = if l.model == FrameModel::FrameObject {
        4
    } else {
        8
    };
    let ends = [
        l.frame_previous + 8,
        l.frame_code + 8,
        l.frame_instr + instr_len,
        l.frame_owner.map_or(0, |o| o + 1),
        l.frame_is_entry.map_or(0, |o| o + 1),
    ];
    let head = ends.into_iter().max().unwrap_or(0).next_multiple_of(8);
    PyConfig {
        runtime,
        model: model as u32,
        runtime_interpreters_head: l.runtime_interpreters_head,
        interp_next: l.interp_next,
        interp_threads_head: l.interp_threads_head,
        tstate_next: l.tstate_next,
        tstate_thread_id: l.tstate_thread_id,
        tstate_frame: l.tstate_frame,
        cframe_current_frame,
        frame_previous: l.frame_previous,
        frame_code: l.frame_code,
        frame_instr: l.frame_instr,
        frame_owner: l.frame_owner.unwrap_or(NO_OFFSET),
        frame_is_entry: l.frame_is_entry.unwrap_or(NO_OFFSET),
        frame_head_len: head,
    }
}

/// Whether the probe can walk this layout: every frame field lies within
/// the block it reads per frame (`frame_head_len` is past the farthest).
pub(crate) fn probe_can_walk(c: &PyConfig) -> bool {
    c.frame_head_len as usize <= PY_FRAME_HEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_version_fits_the_probe() {
        let heads = [(10, 104), (11, 72), (12, 72), (13, 72)];
        for (minor, head) in heads {
            let l = Layout::for_version(3, minor).unwrap();
            let c = probe_config(&l, 0x1000);
            assert_eq!(c.frame_head_len, head, "3.{minor}");
            assert!(probe_can_walk(&c), "3.{minor}");
            assert_eq!(c.runtime, 0x1000);
        }
        let c = probe_config(&Layout::for_version(3, 12).unwrap(), 0);
        assert_eq!(
            (
                c.model,
                c.cframe_current_frame,
                c.frame_owner,
                c.frame_is_entry
            ),
            (PyModel::CFrame as u32, 0, 70, NO_OFFSET)
        );
        let c = probe_config(&Layout::for_version(3, 10).unwrap(), 0);
        assert_eq!((c.model, c.frame_instr), (PyModel::FrameObject as u32, 96));
        let mut far = Layout::for_version(3, 13).unwrap();
        far.frame_owner = Some(200);
        assert!(!probe_can_walk(&probe_config(&far, 0)));
    }
}
