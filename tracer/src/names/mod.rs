//! Kernel names: from the CUfunction handle itself (with a layout found by
//! calibration on each libcuda build), from intercepted name lookups, and
//! from the runtime's host stubs; demangled for people.

pub mod calibrate;
pub mod demangle;
pub mod layouts;
pub mod namer;
pub mod stubs;
