//! Stacks as the outputs show them: lists of frame strings, innermost
//! first (Python frames `function (path:line)`, native ones
//! `symbol (library)`), interned so a stack seen again is one id; and what
//! the views derive from them: the call site (the innermost user frame,
//! Python first) and folded lines for flame graphs.

use crate::model::capped::Overflow;
use crate::model::stack::CallStack;
use crate::model::stack::Frames;
use crate::model::stack::GAP;
use std::collections::HashMap;
use std::sync::Arc;

impl CallStack {
    /// The innermost user frame (see [`call_site`]).
    pub fn call_site(&self) -> Option<&str> {
        call_site(&self.frames)
    }
}

/// Libraries whose frames are never a call site: the traced GPU libraries
/// and NVIDIA's libraries around them.
const GPU_LIBRARY_PREFIXES: &[&str] = &[
    "libcuda.so",
    "libcudart.so",
    "libnccl.so",
    "libcublas",
    "libcudnn",
    "libcufft",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libnvrtc",
    "libnvJitLink",
    "libcupti",
    "libnvToolsExt",
];

/// The text in the frame's trailing parentheses: `path:line` or `path`
/// (Python), the library (native).
fn location(frame: &str) -> Option<&str> {
    frame.strip_suffix(')')?.rsplit_once(" (").map(|(_, l)| l)
}

/// A Python frame: `function (path:line)`, or `function (file.py)` when
/// the instruction has no line. Library names never end in `:digits`.
pub(crate) fn is_python_frame(frame: &str) -> bool {
    location(frame).is_some_and(|loc| {
        loc.ends_with(".py")
            || loc
                .rsplit_once(':')
                .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// A native frame in one of NVIDIA's libraries.
pub(crate) fn is_gpu_library_frame(frame: &str) -> bool {
    location(frame).is_some_and(|lib| GPU_LIBRARY_PREFIXES.iter().any(|p| lib.starts_with(p)))
}

/// The innermost user frame: the innermost Python frame if there is one,
/// else the innermost native frame outside NVIDIA's libraries.
pub(crate) fn call_site<S: AsRef<str>>(frames: &[S]) -> Option<&str> {
    let frames = || frames.iter().map(AsRef::as_ref);
    frames()
        .find(|f| is_python_frame(f))
        .or_else(|| frames().find(|f| *f != GAP && !is_gpu_library_frame(f)))
}

/// One line of the folded format (flamegraph.pl, inferno, speedscope):
/// frames outermost first joined by `;`, a space, the weight.
pub(crate) fn folded_line<S: AsRef<str>>(frames: &[S], weight: u64) -> String {
    let mut line = String::new();
    for (i, f) in frames.iter().rev().enumerate() {
        if i > 0 {
            line.push(';');
        }
        // `;` separates frames; a frame's own (rare in C++ names) would split it.
        line.extend(f.as_ref().chars().map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        }));
    }
    line.push(' ');
    line.push_str(&weight.to_string());
    line
}

/// Distinct stacks a table holds (interned live, summed for `--folded`,
/// remembered as said by a timeline, read back by `stats`); past it the
/// live table and the said sets start again, and `--folded` sums the rest
/// in one line.
pub(crate) const MAX_STACKS: usize = 1 << 16;

/// The first frame of the `--folded` line of stacks past [`MAX_STACKS`].
pub(crate) const OTHER_STACKS: &str = "(other stacks)";

/// Whether a timeline must say stack `id` now (its record before the first
/// call naming it): `said` holds the ids said, at most [`MAX_STACKS`]; past
/// it the set starts again, as a reader's table does after as many
/// records, so a stack is said again before a reader could have dropped it.
pub(crate) fn say_once(said: &mut rustc_hash::FxHashSet<u32>, id: u32) -> bool {
    if said.contains(&id) {
        return false;
    }
    if said.len() >= MAX_STACKS {
        said.clear();
    }
    said.insert(id)
}

/// Host time per stack, written as folded lines (`gputrace stats
/// --folded`): one line per distinct stack, heaviest first; stacks past
/// [`MAX_STACKS`] summed in one [`OTHER_STACKS`] line.
#[derive(Default)]
pub struct FoldedStacks {
    weights: HashMap<Frames, u64>,
    other: Overflow,
    other_weight: u64,
}

impl FoldedStacks {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, frames: &Frames, weight: u64) {
        if let Some(w) = self.weights.get_mut(frames) {
            *w += weight;
        } else if self.weights.len() >= MAX_STACKS {
            self.other.add(frames);
            self.other_weight += weight;
        } else {
            self.weights.insert(frames.clone(), weight);
        }
    }

    /// Distinct stacks past [`MAX_STACKS`], summed in one line.
    pub fn over(&self) -> &Overflow {
        &self.other
    }

    /// The lines, heaviest first (ties by text); stacks of weight 0 left out.
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<(u64, String)> = self
            .weights
            .iter()
            .filter(|(_, w)| **w > 0)
            .map(|(f, w)| (*w, folded_line(f, *w)))
            .collect();
        if self.other_weight > 0 {
            let other = folded_line(&[OTHER_STACKS], self.other_weight);
            v.push((self.other_weight, other));
        }
        v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        v.into_iter().map(|(_, l)| l).collect()
    }
}

/// Interns stacks: the same frames get the same [`CallStack`]. Holds at
/// most [`MAX_STACKS`]; past it the table starts again (ids are never
/// given twice: a stack seen again then gets a new one).
#[derive(Default)]
pub(crate) struct StackTable {
    by_frames: HashMap<Frames, Arc<CallStack>>,
    next_id: u32,
}

impl StackTable {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The stack with these frames, made the first time they are seen.
    pub(crate) fn intern(&mut self, frames: Vec<Arc<str>>) -> Arc<CallStack> {
        let frames: Frames = frames.into();
        if let Some(s) = self.by_frames.get(&frames) {
            return s.clone();
        }
        if self.by_frames.len() >= MAX_STACKS {
            self.by_frames.clear();
        }
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let stack = Arc::new(CallStack {
            id: self.next_id,
            frames: frames.clone(),
        });
        self.by_frames.insert(frames, stack.clone());
        stack
    }

    /// Distinct stacks held.
    pub(crate) fn len(&self) -> usize {
        self.by_frames.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_told_apart() {
        assert!(is_python_frame("train_step (/w/train.py:42)"));
        assert!(is_python_frame("<module> (<frozen runpy>:88)"));
        assert!(is_python_frame("f (t.py)"));
        assert!(!is_python_frame("cuLaunchKernel (libcuda.so.1)"));
        assert!(!is_python_frame(
            "at::native::(anonymous namespace)::f(int) (libtorch_cuda.so)"
        ));
        assert!(!is_python_frame("0x7f00123"));
        assert!(!is_python_frame(GAP));
        assert!(is_gpu_library_frame("0x1234 (libcuda.so.1)"));
        assert!(is_gpu_library_frame("cublasLtMatmul (libcublasLt.so.13)"));
        assert!(!is_gpu_library_frame("main (gputrace-workload)"));
    }

    #[test]
    fn the_call_site_is_the_innermost_user_frame_python_first() {
        let native_only = [
            "cuLaunchKernel (libcuda.so.1)",
            "cudaLaunchKernel (libcudart.so.13)",
            "launch_step (app)",
            "main (app)",
        ];
        assert_eq!(call_site(&native_only), Some("launch_step (app)"));
        let mixed = [
            "cuStreamSynchronize (libcuda.so.1)",
            "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
            "step (/w/train.py:20)",
            "main (/w/train.py:30)",
            "_start (python3.12)",
        ];
        assert_eq!(call_site(&mixed), Some("step (/w/train.py:20)"));
        let gap_first = ["cuLaunchKernel (libcuda.so.1)", GAP];
        assert_eq!(call_site(&gap_first), None);
        assert_eq!(call_site::<&str>(&[]), None);
    }

    #[test]
    fn folded_lines_go_outermost_first() {
        assert_eq!(
            folded_line(&["leaf (l.so)", "mid;x (m.so)", "root (t.py:1)"], 1500),
            "root (t.py:1);mid:x (m.so);leaf (l.so) 1500"
        );
    }

    #[test]
    fn folded_stacks_add_up_per_stack() {
        let f = |v: &[&str]| -> Frames { v.iter().map(|s| Arc::<str>::from(*s)).collect() };
        let mut folded = FoldedStacks::new();
        folded.add(&f(&["b", "a"]), 10);
        folded.add(&f(&["c", "a"]), 30);
        folded.add(&f(&["b", "a"]), 25);
        folded.add(&f(&["d"]), 0);
        assert_eq!(folded.lines(), ["a;b 35", "a;c 30"]);
    }

    #[test]
    fn interning_gives_one_stack_per_frame_list() {
        let mut t = StackTable::new();
        let f = |v: &[&str]| v.iter().map(|s| Arc::<str>::from(*s)).collect::<Vec<_>>();
        let a = t.intern(f(&["a", "b"]));
        let b = t.intern(f(&["a", "c"]));
        let a2 = t.intern(f(&["a", "b"]));
        assert!(Arc::ptr_eq(&a, &a2));
        assert_ne!(a.id, b.id);
        assert_eq!(t.len(), 2);
    }

    /// Past the bound the table starts again with new ids (an id is never
    /// given to two stacks); `--folded` sums the rest in one line; a said
    /// set starts again where a reader's table would.
    #[test]
    fn stack_tables_are_bounded() {
        let mut t = StackTable::new();
        let f = |i: usize| vec![Arc::<str>::from(format!("f{i}"))];
        let first = t.intern(f(0));
        for i in 1..MAX_STACKS + 10 {
            t.intern(f(i));
        }
        assert_eq!(t.len(), 10);
        let again = t.intern(f(0));
        assert_ne!(again.id, first.id);
        assert_eq!(again.id as usize, MAX_STACKS + 11);

        let mut folded = FoldedStacks::new();
        for i in 0..MAX_STACKS + 3 {
            folded.add(&f(i).into(), 1 + i as u64);
        }
        assert_eq!(folded.over().keys(), 3);
        let lines = folded.lines();
        assert_eq!(lines.len(), MAX_STACKS + 1);
        let other: u64 = (MAX_STACKS..MAX_STACKS + 3).map(|i| 1 + i as u64).sum();
        assert_eq!(lines[0], format!("{OTHER_STACKS} {other}"));

        let mut said = rustc_hash::FxHashSet::default();
        for id in 1..=MAX_STACKS as u32 {
            assert!(say_once(&mut said, id));
        }
        assert!(!say_once(&mut said, 1));
        assert!(say_once(&mut said, 0));
        assert_eq!(said.len(), 1);
        assert!(
            say_once(&mut said, 1),
            "said again after the set started again"
        );
    }
}
