//! Call-stack tests against real processes: a C program built without frame
//! pointers (native unwinding) and CPython interpreters (frame reading).
//! They stop the fixture's threads with ptrace, which a parent may do to
//! its children; root is not needed.

mod native;
mod python;
mod support;
