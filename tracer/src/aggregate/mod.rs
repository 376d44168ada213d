//! Turning calls into state and statistics.

pub mod enrich;
pub mod histogram;
pub mod memory;
pub mod render;
pub mod summary;
