//! Events: the probe records, their decoding, and the JSON schema.

pub mod capture;
pub mod decode;
pub mod graph;
pub mod graph_book;
pub mod graph_json;
pub mod json;
pub mod model;
