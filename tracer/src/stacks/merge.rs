//! One stack from native and Python frames, in call order.
//!
//! Each native `_PyEval_EvalFrameDefault` frame is a C-level evaluation of
//! one or more Python frames: from 3.11 Python-to-Python calls stay inside
//! one evaluation, and the frame that started it is marked (`is_entry` in
//! 3.11, the shim frame below it from 3.12); in 3.10 every Python frame has
//! its own evaluation. So the merge replaces the n-th evaluation frame of
//! the native stack by the n-th group of Python frames.

use super::native::NativeFrame;
use super::python::PyFrame;

/// The native function that evaluates Python frames (3.10 to 3.13).
pub const EVAL_FUNCTION: &str = "_PyEval_EvalFrameDefault";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackFrame {
    Native(NativeFrame),
    Python(PyFrame),
}

impl std::fmt::Display for StackFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackFrame::Native(n) => n.fmt(f),
            StackFrame::Python(p) => p.fmt(f),
        }
    }
}

/// Merges, innermost first. `python` pairs each resolved frame with its
/// `entry` flag (the first frame of its evaluation). Python frames left
/// over when the native stack shows fewer evaluations (a stack window too
/// small to reach them, an evaluation frame without a symbol) follow the
/// last Python frame placed, or, when none was, the native frames: the
/// Python frames are outer to whatever native code was reached.
pub fn merge(native: &[NativeFrame], python: &[(PyFrame, bool)]) -> Vec<StackFrame> {
    let mut out: Vec<StackFrame> = Vec::with_capacity(native.len() + python.len());
    let mut next_py = 0;
    let mut after_last_group: Option<usize> = None;
    for n in native {
        let is_eval = n.function.as_deref() == Some(EVAL_FUNCTION);
        if is_eval && next_py < python.len() {
            while next_py < python.len() {
                let (frame, entry) = &python[next_py];
                out.push(StackFrame::Python(frame.clone()));
                next_py += 1;
                if *entry {
                    break;
                }
            }
            after_last_group = Some(out.len());
        } else {
            out.push(StackFrame::Native(n.clone()));
        }
    }
    let rest = python[next_py..]
        .iter()
        .map(|(f, _)| StackFrame::Python(f.clone()));
    match after_last_group {
        Some(at) => {
            let tail = out.split_off(at);
            out.extend(rest);
            out.extend(tail);
        }
        None => out.extend(rest),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nat(name: &str) -> NativeFrame {
        NativeFrame {
            address: 0,
            module: Some("libpython3.11.so.1.0".into()),
            function: Some(name.into()),
            module_offset: 0,
        }
    }

    fn py(name: &str, entry: bool) -> (PyFrame, bool) {
        (
            PyFrame {
                function: name.into(),
                file: "t.py".into(),
                line: Some(1),
            },
            entry,
        )
    }

    fn names(s: &[StackFrame]) -> Vec<String> {
        s.iter()
            .map(|f| match f {
                StackFrame::Native(n) => n.function.clone().unwrap(),
                StackFrame::Python(p) => format!("py:{}", p.function),
            })
            .collect()
    }

    #[test]
    fn groups_replace_evaluation_frames_in_order() {
        let native = [
            nat("cuLaunchKernel"),
            nat(EVAL_FUNCTION),
            nat("PyObject_Call"),
            nat(EVAL_FUNCTION),
            nat("main"),
        ];
        let python = [py("inner", false), py("middle", true), py("callback", true)];
        assert_eq!(
            names(&merge(&native, &python)),
            [
                "cuLaunchKernel",
                "py:inner",
                "py:middle",
                "PyObject_Call",
                "py:callback",
                "main"
            ]
        );
    }

    #[test]
    fn leftover_python_frames_follow_the_last_group_or_the_native_frames() {
        // The window ended after the first evaluation: the outer Python
        // frames go right after the inner ones.
        let native = [nat("cuLaunchKernel"), nat(EVAL_FUNCTION), nat("main")];
        let python = [py("a", true), py("b", true)];
        assert_eq!(
            names(&merge(&native, &python)),
            ["cuLaunchKernel", "py:a", "py:b", "main"]
        );
        // No evaluation frame reached at all.
        let native = [nat("cuLaunchKernel"), nat("at::native::launch")];
        assert_eq!(
            names(&merge(&native, &python)),
            ["cuLaunchKernel", "at::native::launch", "py:a", "py:b"]
        );
        // A thread with no Python frames keeps its native ones.
        assert_eq!(
            names(&merge(&native, &[])),
            ["cuLaunchKernel", "at::native::launch"]
        );
        // Spare evaluation frames (no Python frames left) stay native.
        let native = [nat(EVAL_FUNCTION), nat(EVAL_FUNCTION)];
        assert_eq!(
            names(&merge(&native, &[py("a", true)])),
            ["py:a", EVAL_FUNCTION]
        );
    }
}
