//! NCCL across ranks: who a communicator is (the id NCCL itself prints),
//! where a libnccl build keeps its identity and counters, and which rank of
//! a collective came last or never came.

pub mod hash;
pub mod layout;
pub mod libs;
pub mod ranks;
pub mod tracker;
mod x86;
