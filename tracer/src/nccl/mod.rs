//! NCCL across ranks: who a communicator is (the id NCCL itself prints),
//! where a libnccl build keeps its identity and counters, and which rank of
//! a collective came last or never came.

pub(crate) mod enrich;
pub mod hash;
pub(crate) mod json;
pub mod layout;
pub(crate) mod libs;
pub(crate) mod ranks;
pub(crate) mod stall;
pub(crate) mod summary;
pub(crate) mod tracker;
mod x86;
