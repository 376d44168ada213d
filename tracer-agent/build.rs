//! Release builds of the agent's shared library drop their symbol tables
//! (the three exported symbols stay in .dynsym): the library is loaded into
//! other people's processes and should be small.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--strip-all");
    }
}
