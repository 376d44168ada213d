//! Facts of the host and its processes: procfs (processes, the libraries
//! they map), cgroups, reading another process's memory, starting a command
//! held at a gate, our own privileges, whether a file may be trusted, files
//! opened by descriptor, and the sandbox that runs untrusted code.

pub mod cgroup;
pub mod clock;
pub mod discover;
pub mod fd;
pub mod memory;
pub mod privileges;
pub mod sandbox;
pub mod spawn;
pub mod trust;
