//! A cuBLAS GEMM call: its problem (b × m × n × k), operations and types,
//! as the entry points of cublas_api.h take them.

/// Where a GEMM entry point keeps what it is given (0-based argument
/// positions; 6 and above on the caller's stack). Every form takes
/// (handle, transa, transb, m, n, k) first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmForm {
    /// `cublas{S,D,H}gemm_v2` and their `_64` forms: the element type is
    /// the function's.
    Typed(u32),
    /// `cublas{S,D,H}gemmStridedBatched` (and `_64`): batchCount at 17.
    TypedStrided(u32),
    /// `cublas{S,D,H}gemmBatched` (and `_64`): batchCount at 14.
    TypedBatched(u32),
    /// `cublasSgemmEx` (and `_64`): Atype 8, Btype 11, Ctype 15; computes
    /// in fp32 (no computeType argument).
    SEx,
    /// `cublasGemmEx` (and `_64`): Atype 8, Btype 11, Ctype 15, computeType 17.
    Ex,
    /// `cublasGemmStridedBatchedEx` (and `_64`): Atype 8, Btype 12,
    /// Ctype 17, batchCount 20, computeType 21.
    StridedEx,
    /// `cublasGemmBatchedEx` (and `_64`): Atype 8, Btype 11, Ctype 15,
    /// batchCount 17, computeType 18.
    BatchedEx,
}

impl GemmForm {
    /// Bytes of the caller's stack (from the seventh argument) the probe
    /// copies: up to the last argument read.
    pub fn stack_bytes(self) -> usize {
        let last = match self {
            GemmForm::Typed(_) => return 0,
            GemmForm::TypedStrided(_) => 17,
            GemmForm::TypedBatched(_) => 14,
            GemmForm::SEx => 15,
            GemmForm::Ex => 17,
            GemmForm::StridedEx => 21,
            GemmForm::BatchedEx => 18,
        };
        (last - 6 + 1) * 8
    }

    /// (Atype, Btype, Ctype, computeType, batchCount) positions.
    fn positions(self) -> (Option<[usize; 3]>, Option<usize>, Option<usize>) {
        match self {
            GemmForm::Typed(_) => (None, None, None),
            GemmForm::TypedStrided(_) => (None, None, Some(17)),
            GemmForm::TypedBatched(_) => (None, None, Some(14)),
            GemmForm::SEx => (Some([8, 11, 15]), None, None),
            GemmForm::Ex => (Some([8, 11, 15]), Some(17), None),
            GemmForm::StridedEx => (Some([8, 12, 17]), Some(21), Some(20)),
            GemmForm::BatchedEx => (Some([8, 11, 15]), Some(18), Some(17)),
        }
    }
}

/// cuBLAS's `cublasOperation_t`.
pub fn op_name(op: u32) -> Option<&'static str> {
    match op {
        0 => Some("N"),
        1 => Some("T"),
        2 => Some("C"),
        _ => None,
    }
}

pub fn op_from_name(s: &str) -> Option<u32> {
    (0..3).find(|&o| op_name(o) == Some(s))
}

/// `cudaDataType_t` (library_types.h), the real types a GEMM takes.
const DTYPES: &[(u32, &str)] = &[
    (0, "fp32"),
    (1, "fp64"),
    (2, "fp16"),
    (3, "int8"),
    (10, "int32"),
    (14, "bf16"),
    (28, "fp8e4m3"),
    (29, "fp8e5m2"),
    (4, "complex-fp32"),
    (5, "complex-fp64"),
];

/// `cublasComputeType_t`.
const COMPUTE: &[(u32, &str)] = &[
    (64, "16F"),
    (65, "16F_PEDANTIC"),
    (68, "32F"),
    (69, "32F_PEDANTIC"),
    (70, "64F"),
    (71, "64F_PEDANTIC"),
    (72, "32I"),
    (73, "32I_PEDANTIC"),
    (74, "32F_FAST_16F"),
    (75, "32F_FAST_16BF"),
    (77, "32F_FAST_TF32"),
];

fn name_of(table: &[(u32, &'static str)], v: u32) -> Option<&'static str> {
    table.iter().find(|(c, _)| *c == v).map(|(_, n)| *n)
}

fn code_of(table: &[(u32, &'static str)], s: &str) -> Option<u32> {
    table.iter().find(|(_, n)| *n == s).map(|(c, _)| *c)
}

pub fn dtype_name(v: u32) -> Option<&'static str> {
    name_of(DTYPES, v)
}

pub fn dtype_from_name(s: &str) -> Option<u32> {
    code_of(DTYPES, s)
}

pub fn compute_name(v: u32) -> Option<&'static str> {
    name_of(COMPUTE, v)
}

pub fn compute_from_name(s: &str) -> Option<u32> {
    code_of(COMPUTE, s)
}

/// One GEMM: C = op(A) op(B), `batch` times, A m × k, B k × n.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gemm {
    /// `cublasOperation_t` of A and B (`None`: a value cuBLAS does not define).
    pub transa: Option<u32>,
    pub transb: Option<u32>,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    /// 1 for a single GEMM; `None` where the count could not be read.
    pub batch: Option<i64>,
    /// `cudaDataType_t` codes of A, B and C (`None`: not read, or a type
    /// this build does not name).
    pub a_type: Option<u32>,
    pub b_type: Option<u32>,
    pub c_type: Option<u32>,
    /// `cublasComputeType_t` (`None` for the typed forms, which have none,
    /// and for a value this build does not name).
    pub compute: Option<u32>,
}

impl Gemm {
    /// From the register arguments `regs` (six) and the caller's stack
    /// from the seventh argument (`stack`: what the probe copied, empty when
    /// the read failed). `wide`: the `_64` forms (m, n, k are int64).
    pub fn decode(form: GemmForm, regs: &[u64; 6], stack: &[u8], wide: bool) -> Self {
        let int = |v: u64| {
            if wide {
                v as i64
            } else {
                v as u32 as i32 as i64
            }
        };
        // A stack slot holds an int in its low 4 bytes.
        let slot = |pos: usize| -> Option<u64> {
            let at = (pos - 6) * 8;
            stack
                .get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        let (types, compute, batch) = form.positions();
        let fixed = match form {
            GemmForm::Typed(t) | GemmForm::TypedStrided(t) | GemmForm::TypedBatched(t) => Some(t),
            _ => None,
        };
        let ty = |i: usize| match types {
            Some(p) => slot(p[i])
                .map(|v| v as u32)
                .filter(|t| dtype_name(*t).is_some()),
            None => fixed,
        };
        let op = |v: u64| Some(v as u32).filter(|o| op_name(*o).is_some());
        Self {
            transa: op(regs[1]),
            transb: op(regs[2]),
            m: int(regs[3]),
            n: int(regs[4]),
            k: int(regs[5]),
            batch: match batch {
                None => Some(1),
                Some(p) => slot(p).map(|v| v as u32 as i32 as i64),
            },
            a_type: ty(0),
            b_type: ty(1),
            c_type: ty(2),
            compute: compute
                .and_then(slot)
                .map(|v| v as u32)
                .filter(|c| compute_name(*c).is_some()),
        }
    }

    /// Floating-point operations: 2·b·m·n·k.
    pub fn flops(&self) -> Option<f64> {
        let b = self.batch?;
        Some(2.0 * b as f64 * self.m as f64 * self.n as f64 * self.k as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(words: &[(usize, u64)], len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        for &(pos, w) in words {
            let at = (pos - 6) * 8;
            v[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
        v
    }

    #[test]
    fn strided_batched_ex_reads_its_types_and_batch_from_the_stack() {
        let regs = [0xabc, 1, 0, 64, 64, 128];
        let s = stack(&[(8, 2), (12, 2), (17, 2), (20, 8), (21, 68)], 128);
        let g = Gemm::decode(GemmForm::StridedEx, &regs, &s, false);
        assert_eq!(
            (g.transa, g.transb, g.m, g.n, g.k),
            (Some(1), Some(0), 64, 64, 128)
        );
        assert_eq!(g.batch, Some(8));
        assert_eq!((g.a_type, g.b_type, g.c_type), (Some(2), Some(2), Some(2)));
        assert_eq!(g.compute.and_then(compute_name), Some("32F"));
        assert_eq!(g.flops(), Some(2.0 * 8.0 * 64.0 * 64.0 * 128.0));
        // The stack could not be read: sizes known, the rest not guessed.
        let g = Gemm::decode(GemmForm::StridedEx, &regs, &[], false);
        assert_eq!((g.batch, g.a_type, g.compute), (None, None, None));
        assert_eq!(g.m, 64);
    }

    #[test]
    fn typed_forms_need_no_stack_and_64_bit_forms_keep_their_width() {
        let big = 5_000_000_000u64;
        let regs = [1, 0, 0, big, 3, 4];
        let g = Gemm::decode(GemmForm::Typed(0), &regs, &[], true);
        assert_eq!((g.m, g.batch, g.a_type), (big as i64, Some(1), Some(0)));
        // The 32-bit form reads the low half (as the callee does).
        let g = Gemm::decode(GemmForm::Typed(0), &regs, &[], false);
        assert_eq!(g.m, big as u32 as i32 as i64);
        assert_eq!(GemmForm::Typed(0).stack_bytes(), 0);
        assert_eq!(GemmForm::StridedEx.stack_bytes(), 128);
    }
}
