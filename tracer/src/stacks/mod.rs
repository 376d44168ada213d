//! Call stacks of traced calls (issue 12).
//!
//! - [`native`]: unwinding a copied user-stack window with the registers at
//!   the probe, through `.eh_frame`/`.debug_frame` (framehop), and
//!   symbolizing from ELF symbols ([`elf`], [`symbols`]); files cached per
//!   build id.
//! - [`python`]: CPython frames (3.10 to 3.13): the walk the probe will do,
//!   and the resolution of code objects to function, file and line.
//! - [`merge`]: native and Python frames in one stack, in call order.
//! - [`kernel`]: offsets the probe needs from the kernel's BTF:
//!   `task_struct.thread.fsbase` (to find the calling thread's Python thread
//!   state) and the uretprobe return instances (to put back the return
//!   addresses nested probed calls replaced).
//! - [`memory`]: reading a live process or a copied window.
//! - [`modules`]: where a process's modules and their files come from: its
//!   maps while it runs, or the mappings the kernel recorded
//!   (`host::mapwatch`), so that its stacks resolve after it is gone.
//! - [`settings`]: what `--stacks` asks of the probes.
//! - [`record`]: the probe's stack record read back.
//! - [`resolve`]: record to interned stack (unwind, symbolize, Python code
//!   objects, merge), with caches.
//! - [`table`]: stacks as the outputs show them: frame strings, interning,
//!   call sites, folded lines.

pub(crate) mod elf;
pub mod kernel;
pub mod memory;
pub mod merge;
pub mod modules;
pub mod native;
pub mod python;
pub mod record;
pub mod resolve;
pub mod settings;
pub(crate) mod sites;
pub(crate) mod symbols;
pub(crate) mod table;
