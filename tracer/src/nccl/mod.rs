//! NCCL across ranks: who a communicator is (the id NCCL itself prints),
//! where a libnccl build keeps its identity and counters, and which rank of
//! a collective came last or never came.

pub mod enrich;
pub mod hash;
pub mod json;
pub mod layout;
pub mod libs;
pub mod ranks;
pub mod stall;
pub mod summary;
pub mod tracker;
mod x86;
