//! Attaching the probes: the eBPF object, the symbols of each library file,
//! the links (one per symbol, or one multi-link per file), and the counts of
//! calls the probes could not record.

pub mod attach;
pub(crate) mod counts;
pub(crate) mod hot;
pub(crate) mod links;
pub(crate) mod lost;
pub(crate) mod multi;
pub(crate) mod symbols;
