//! Kernel names: from the CUfunction handle itself (with a layout found by
//! calibration on each libcuda build), from intercepted name lookups, and
//! from the runtime's host stubs; demangled for people.

pub mod cache;
pub mod calibrate;
pub mod demangle;
pub mod landlock;
pub mod memory;
pub mod namer;
pub mod sandbox;
pub mod seccomp;
pub mod stubs;
