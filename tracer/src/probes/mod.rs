//! Finding libraries and symbols, and attaching the probes.

pub mod attach;
pub mod catalogue;
pub mod cgroup;
pub mod discover;
pub mod multi;
pub mod privileges;
pub mod spawn;
pub mod symbols;
pub mod trust;
