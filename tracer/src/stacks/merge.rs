//! One stack from native and Python frames, in call order.
//!
//! Each native `_PyEval_EvalFrameDefault` frame is a C-level evaluation of
//! one or more Python frames: from 3.11 Python-to-Python calls stay inside
//! one evaluation, and the frame that started it is marked (`is_entry` in
//! 3.11, the shim frame below it from 3.12); in 3.10 every Python frame has
//! its own evaluation. So the merge replaces the n-th evaluation frame of
//! the native stack by the n-th group of Python frames.

use crate::stacks::native::NativeFrame;
use crate::stacks::python::PyFrame;

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
    let native: Vec<StackFrame> = native.iter().cloned().map(StackFrame::Native).collect();
    let python: Vec<(StackFrame, bool)> = python
        .iter()
        .map(|(f, e)| (StackFrame::Python(f.clone()), *e))
        .collect();
    merge_by(
        native,
        |f| matches!(f, StackFrame::Native(n) if n.function.as_deref() == Some(EVAL_FUNCTION)),
        python,
        None,
    )
}

/// [`merge`] over any frame type: `is_eval` tells the native evaluation
/// frames. With `gap` (the native unwind stopped short of the stack's
/// end), Python frames left over go after every native frame, behind the
/// `gap` marker: the native frames between are missing, but both parts
/// stay in call order.
pub fn merge_by<T>(
    native: Vec<T>,
    is_eval: impl Fn(&T) -> bool,
    python: Vec<(T, bool)>,
    gap: Option<T>,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(native.len() + python.len() + 1);
    let mut python = python.into_iter().peekable();
    let mut after_last_group: Option<usize> = None;
    for n in native {
        if is_eval(&n) && python.peek().is_some() {
            for (frame, entry) in python.by_ref() {
                out.push(frame);
                if entry {
                    break;
                }
            }
            after_last_group = Some(out.len());
        } else {
            out.push(n);
        }
    }
    let rest: Vec<T> = python.map(|(f, _)| f).collect();
    if rest.is_empty() {
        return out;
    }
    match (gap, after_last_group) {
        (Some(marker), _) => {
            out.push(marker);
            out.extend(rest);
        }
        (None, Some(at)) => {
            let tail = out.split_off(at);
            out.extend(rest);
            out.extend(tail);
        }
        (None, None) => out.extend(rest),
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

    #[test]
    fn a_native_unwind_cut_short_puts_the_rest_behind_a_gap() {
        let t = |s: &str| s.to_string();
        let native = vec![t("cuLaunchKernel"), t("eval"), t("PyObject_Call")];
        let python = vec![(t("a"), true), (t("b"), false), (t("c"), true)];
        assert_eq!(
            merge_by(
                native.clone(),
                |f| f == "eval",
                python.clone(),
                Some(t("[gap]"))
            ),
            ["cuLaunchKernel", "a", "PyObject_Call", "[gap]", "b", "c"]
        );
        // No evaluation reached at all.
        assert_eq!(
            merge_by(
                vec![t("cuLaunchKernel")],
                |f| f == "eval",
                python,
                Some(t("[gap]"))
            ),
            ["cuLaunchKernel", "[gap]", "a", "b", "c"]
        );
        // Nothing left over: no marker.
        assert_eq!(
            merge_by(
                native,
                |f| f == "eval",
                vec![(t("a"), true)],
                Some(t("[gap]"))
            ),
            ["cuLaunchKernel", "a", "PyObject_Call"]
        );
    }
}
