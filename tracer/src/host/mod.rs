//! Facts of the host and its processes: procfs (processes, the libraries
//! they map), cgroups, reading another process's memory, starting a command
//! held at a gate, our own privileges, whether a file may be trusted, files
//! opened by descriptor, directories opened with no link on the way, and
//! the sandbox (and the confinement, `confine`) that run untrusted code.

pub(crate) mod cgroup;
pub(crate) mod clock;
pub(crate) mod confine;
pub(crate) mod dirs;
pub mod discover;
pub(crate) mod fd;
pub mod mapwatch;
pub(crate) mod memory;
pub(crate) mod privileges;
pub(crate) mod sandbox;
pub(crate) mod spawn;
pub(crate) mod trust;
