//! From ring-buffer records to calls: the records checked and decoded
//! ([`record`]), then finished with each process's state ([`enrich`]):
//! wall-clock time, names, copy directions from the allocations seen
//! ([`memory`]), cuBLASLt matmuls' problems from their descriptors ([`lt`]).

pub(crate) mod enrich;
pub(crate) mod lt;
pub(crate) mod memory;
pub mod record;
