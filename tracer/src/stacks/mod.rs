//! Call stacks of traced calls (issue 12).
//!
//! - [`native`]: unwinding a copied user-stack window with the registers at
//!   the probe, through `.eh_frame`/`.debug_frame` (framehop), and
//!   symbolizing from ELF symbols ([`elf`], [`symbols`]); files cached per
//!   build id.
//! - [`python`]: CPython frames (3.10 to 3.13): the walk the probe will do,
//!   and the resolution of code objects to function, file and line.
//! - [`merge`]: native and Python frames in one stack, in call order.
//! - [`kernel`]: `task_struct.thread.fsbase` from the kernel's BTF, for the
//!   probe to find the calling thread's Python thread state.
//! - [`memory`]: reading a live process or a copied window.
//!
//! Nothing here is wired to the probes yet: these are the userspace halves,
//! tested against real processes.

pub mod elf;
pub mod kernel;
pub mod memory;
pub mod merge;
pub mod native;
pub mod python;
pub mod symbols;
