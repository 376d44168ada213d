//! CUDA graphs: stream capture and graph construction followed from the
//! calls, what each executable graph runs, and where a libcuda build keeps
//! an executable graph's nodes (read from memory for graphs made before
//! attach).

pub(crate) mod book;
pub(crate) mod capture;
pub(crate) mod decode;
pub mod json;
pub(crate) mod layout;
