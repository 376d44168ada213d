//! CUDA graphs: stream capture and graph construction followed from the
//! calls, what each executable graph runs, and where a libcuda build keeps
//! an executable graph's nodes (read from memory for graphs made before
//! attach).

pub mod book;
pub mod capture;
pub mod decode;
pub mod json;
pub mod layout;
