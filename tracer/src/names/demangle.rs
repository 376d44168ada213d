//! Kernel names as people read them: C++ names demangled and spelled the
//! way c++filt, Nsight Systems and torch.profiler spell them.

use std::sync::Arc;

/// A kernel's readable name: demangled C++ where it is mangled, spelled as
/// c++filt, Nsight Systems and torch.profiler spell it.
pub(crate) fn demangle(name: &str) -> Arc<str> {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return Arc::from(literal_suffixes(&s));
            }
        }
    }
    Arc::from(name)
}

/// cpp_demangle writes integer template arguments as `(unsigned long)2`;
/// libiberty (c++filt, nsys, torch.profiler) writes `2ul`.
fn literal_suffixes(s: &str) -> String {
    const CASTS: [(&str, &str); 5] = [
        ("(unsigned long long)", "ull"),
        ("(unsigned long)", "ul"),
        ("(unsigned int)", "u"),
        ("(long long)", "ll"),
        ("(long)", "l"),
    ];
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    'outer: while !rest.is_empty() {
        for (cast, suffix) in CASTS {
            if let Some(after) = rest.strip_prefix(cast) {
                let neg = after.starts_with('-') as usize;
                let digits = after[neg..].bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 {
                    out.push_str(&after[..neg + digits]);
                    out.push_str(suffix);
                    rest = &after[neg + digits..];
                    continue 'outer;
                }
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_keeps_c_names() {
        assert_eq!(&*demangle("_Z4reluPfi"), "relu(float*, int)");
        // As torch.profiler and c++filt name PyTorch's add kernel.
        assert_eq!(
            &*demangle("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_"),
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)"
        );
        assert_eq!(
            literal_suffixes("f<(long)-3, (unsigned int)7, (long)x>"),
            "f<-3l, 7u, (long)x>"
        );
        assert_eq!(&*demangle("plain_c_kernel"), "plain_c_kernel");
        assert_eq!(&*demangle("_Znot valid"), "_Znot valid");
    }
}
