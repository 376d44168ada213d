//! Events: the probe records, their decoding, and the JSON schema.

pub mod decode;
pub mod json;
pub mod model;
