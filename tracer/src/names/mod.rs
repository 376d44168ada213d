//! Kernel names: from the CUfunction handle itself (with a layout found by
//! calibration on each libcuda build), from intercepted name lookups, and
//! from the runtime's host stubs; demangled for people.

pub(crate) mod background;
pub(crate) mod calibrate;
pub(crate) mod demangle;
pub(crate) mod layouts;
pub(crate) mod namer;
pub(crate) mod stubs;
