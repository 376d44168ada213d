//! Finding libraries and symbols, and attaching the probes.

pub mod attach;
pub mod catalogue;
pub mod cgroup;
pub mod discover;
pub mod graph_apis;
pub mod hitcost;
pub mod lost;
pub mod multi;
pub mod privileges;
pub mod sampler;
pub mod spawn;
pub mod symbols;
pub mod trust;
