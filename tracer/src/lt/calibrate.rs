//! Finding, per libcublasLt build, where its matmul descriptor and matrix
//! layouts keep their fields ([`LtOffsets`]).
//!
//! A short-lived helper process (gputrace itself, hidden subcommand
//! `__calibrate-lt`) loads that libcublasLt (no GPU is needed), makes
//! descriptors and layouts of known values with the library's own
//! `cublasLtMatmulDescCreate`, `cublasLtMatrixLayoutCreate` and their
//! `SetAttribute` calls, three times with different values, copies their
//! first 64 bytes (what the probe copies) and keeps, for each field, the
//! one offset where all three values are found. A field found nowhere, or
//! at more than one place, fails the calibration: no offset is assumed.
//! The helper runs as the libcuda calibration's does (`names::calibrate`:
//! confined, in the sandbox for a library `host::trust` does not trust).

use std::ffi::c_void;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lt::{Field, LtOffsets, PART};
use crate::names::calibrate::{
    dlopen_here, enter_sandbox, helper_sym, run_confined, sanitize, Helper,
};

type LayoutCreate = unsafe extern "C" fn(*mut *mut c_void, i32, u64, u64, i64) -> i32;
type DescCreate = unsafe extern "C" fn(*mut *mut c_void, i32, i32) -> i32;
type SetAttribute = unsafe extern "C" fn(*mut c_void, i32, *const c_void, usize) -> i32;
type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;

/// `cublasLtMatmulDescAttributes_t` and `cublasLtMatrixLayoutAttribute_t`.
const DESC_TRANSA: i32 = 3;
const DESC_TRANSB: i32 = 4;
const LAYOUT_BATCH_COUNT: i32 = 5;

/// Three descriptors: (compute type, scale type, transa, transb): 32F with
/// R_32F, 16F with R_16F, 32F_FAST_TF32 with R_32F.
const DESCS: [(i32, i32, i32, i32); 3] = [(68, 0, 1, 0), (64, 2, 0, 1), (77, 0, 1, 1)];
/// Three layouts: (type, rows, cols, batch count): bf16, fp16, fp32.
const LAYOUTS: [(i32, u64, u64, i32); 3] =
    [(14, 1031, 2053, 7), (2, 3079, 5113, 11), (0, 4099, 6151, 3)];
/// Rows and columns past 32 bits, to tell a 64-bit field from a 32-bit one.
const WIDE: u64 = (1 << 32) + 1031;

/// The one place where `values[i]` is in `copies[i]` for every i.
fn find(copies: &[[u8; PART]], values: &[u64], name: &str) -> Result<Field, String> {
    let at = |off: usize, c: &[u8; PART]| u32::from_le_bytes(c[off..off + 4].try_into().unwrap());
    let hits: Vec<usize> = (0..=PART - 4)
        .step_by(4)
        .filter(|&off| {
            copies
                .iter()
                .zip(values)
                .all(|(c, v)| u64::from(at(off, c)) == *v)
        })
        .collect();
    match hits[..] {
        [off] => Ok(Field {
            off: off as u16,
            wide: false,
        }),
        [] => Err(format!("{name} not found in the first {PART} bytes")),
        _ => Err(format!("{name} found at {} places", hits.len())),
    }
}

/// Runs in the helper process: loads the library and finds the offsets.
fn calibrate_here(path: &Path) -> Result<LtOffsets, String> {
    let lib = dlopen_here(path)?;
    // Each with its signature in cublasLt.h.
    macro_rules! sym {
        ($name:literal, $ty:ty) => {
            helper_sym!(lib, $name, $ty)
        };
    }
    let layout_create = sym!("cublasLtMatrixLayoutCreate", LayoutCreate);
    let layout_set = sym!("cublasLtMatrixLayoutSetAttribute", SetAttribute);
    let layout_destroy = sym!("cublasLtMatrixLayoutDestroy", Destroy);
    let desc_create = sym!("cublasLtMatmulDescCreate", DescCreate);
    let desc_set = sym!("cublasLtMatmulDescSetAttribute", SetAttribute);
    let desc_destroy = sym!("cublasLtMatmulDescDestroy", Destroy);
    let check = |what: &str, r: i32| {
        if r == 0 {
            Ok(())
        } else {
            Err(format!("{what} returned cublasStatus_t {r}"))
        }
    };
    let set_i32 = |set: SetAttribute, h: *mut c_void, attr: i32, v: i32, what: &str| {
        // SAFETY: a live descriptor, and a 4-byte value as the attribute takes.
        check(what, unsafe { set(h, attr, (&v as *const i32).cast(), 4) })
    };
    // SAFETY: each copy is of the first PART bytes of an object the library
    // just made (its opaque structs are 64 and 256 bytes, cublasLt.h).
    let copy = |h: *mut c_void| unsafe { *(h as *const [u8; PART]) };
    let mut descs = Vec::new();
    for (compute, scale, ta, tb) in DESCS {
        let mut d = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, the types cublasLt.h describes.
        check("cublasLtMatmulDescCreate", unsafe {
            desc_create(&mut d, compute, scale)
        })?;
        set_i32(desc_set, d, DESC_TRANSA, ta, "setting TRANSA")?;
        set_i32(desc_set, d, DESC_TRANSB, tb, "setting TRANSB")?;
        descs.push(copy(d));
        // SAFETY: the descriptor made above.
        unsafe { desc_destroy(d) };
    }
    let mut layouts = Vec::new();
    let make = |ty: i32, rows: u64, cols: u64, batch: i32| -> Result<[u8; PART], String> {
        let mut l = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; ld past rows (column-major), and
        // not equal to it, so that the two are told apart.
        check("cublasLtMatrixLayoutCreate", unsafe {
            layout_create(&mut l, ty, rows, cols, rows as i64 + 8)
        })?;
        let set = set_i32(
            layout_set,
            l,
            LAYOUT_BATCH_COUNT,
            batch,
            "setting BATCH_COUNT",
        );
        let bytes = copy(l);
        // SAFETY: the layout made above.
        unsafe { layout_destroy(l) };
        set.map(|()| bytes)
    };
    for (ty, rows, cols, batch) in LAYOUTS {
        layouts.push(make(ty, rows, cols, batch)?);
    }
    let mut offsets = LtOffsets {
        compute: find(&descs, &DESCS.map(|d| d.0 as u64), "the compute type")?,
        transa: find(&descs, &DESCS.map(|d| d.2 as u64), "TRANSA")?,
        transb: find(&descs, &DESCS.map(|d| d.3 as u64), "TRANSB")?,
        dtype: find(&layouts, &LAYOUTS.map(|l| l.0 as u64), "the layout's type")?,
        rows: find(&layouts, &LAYOUTS.map(|l| l.1), "the rows")?,
        cols: find(&layouts, &LAYOUTS.map(|l| l.2), "the columns")?,
        batch: find(&layouts, &LAYOUTS.map(|l| l.3 as u64), "the batch count")?,
    };
    // 64-bit rows and columns: a layout of more than 2^32 of each (a
    // build that refuses it keeps 32 bits, or says so).
    if let Ok(big) = make(14, WIDE, WIDE, 1) {
        for f in [&mut offsets.rows, &mut offsets.cols] {
            let off = usize::from(f.off);
            if off + 8 <= PART && u64::from_le_bytes(big[off..off + 8].try_into().unwrap()) == WIDE
            {
                f.wide = true;
            }
        }
    }
    Ok(offsets)
}

/// The answer the helper prints on stdout (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    offsets: Option<LtOffsets>,
    error: Option<String>,
}

/// The hidden `__calibrate-lt PATH [--sandbox]` subcommand.
pub(crate) fn helper_main(lib: &Path, sandbox: bool) -> std::process::ExitCode {
    let result = if sandbox {
        enter_sandbox(lib).and_then(|_| calibrate_here(lib))
    } else {
        calibrate_here(lib)
    };
    let answer = match result {
        Ok(o) => Answer {
            offsets: Some(o),
            error: None,
        },
        Err(e) => Answer {
            offsets: None,
            error: Some(e),
        },
    };
    println!("{}", serde_json::to_string(&answer).expect("serialisable"));
    std::process::ExitCode::SUCCESS
}

/// Runs the helper on the libcublasLt open in `lib`; its answer, checked
/// as any input from outside.
pub(crate) fn run_helper(
    lib: &File,
    how: Helper,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<LtOffsets, String> {
    let text = run_confined("__calibrate-lt", lib, how, timeout, cancel)?;
    let answer: Answer = serde_json::from_str(text.trim()).map_err(|_| {
        format!(
            "the calibration helper crashed or printed {:?}",
            sanitize(text.trim())
        )
    })?;
    match (answer.offsets, answer.error) {
        (Some(o), _) if o.is_plausible() => Ok(o),
        (Some(_), _) => Err("the calibration helper gave implausible offsets".into()),
        (None, Some(e)) => Err(sanitize(&e)),
        (None, None) => Err("the calibration helper gave no answer".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_the_one_place_every_value_is() {
        let mut copies = [[0u8; PART]; 3];
        for (c, v) in copies.iter_mut().zip([14u32, 2, 0]) {
            c[12..16].copy_from_slice(&v.to_le_bytes());
            // A field that holds 14 once only: not a match.
            c[40..44].copy_from_slice(&14u32.to_le_bytes());
        }
        assert_eq!(
            find(&copies, &[14, 2, 0], "type"),
            Ok(Field {
                off: 12,
                wide: false
            })
        );
        assert!(find(&copies, &[9, 9, 9], "x")
            .unwrap_err()
            .contains("not found"));
        // Zeros everywhere: many places, refused.
        assert!(find(&copies, &[0, 0, 0], "x")
            .unwrap_err()
            .contains("places"));
    }
}
