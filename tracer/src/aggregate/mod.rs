//! Turning calls into statistics: the summary and its histograms.

pub mod histogram;
pub mod nccl;
pub mod render;
pub mod sampling;
pub mod summary;
