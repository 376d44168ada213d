#![no_std]
// This crate's artifact is the `tracer` binary (the eBPF object); the library
// target exists so the userspace crate can name it as a build dependency.
