//! Call stacks of traced calls (issue 12).
//!
//! - [`native`]: unwinding a copied user-stack window with the registers at
//!   the probe, through `.eh_frame`/`.debug_frame` (framehop), and
//!   symbolizing from ELF symbols ([`elf`], [`symbols`]); files cached per
//!   build id.
//! - [`memory`]: reading a live process or a copied window.
//!
//! Nothing here is wired to the probes yet: these are the userspace halves,
//! tested against real processes.

pub mod elf;
pub mod memory;
pub mod native;
pub mod symbols;
