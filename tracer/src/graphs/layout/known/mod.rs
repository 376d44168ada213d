//! In the calibration helper: executable graphs of known kernels, built
//! with the libcuda under calibration, for `exec_search` to find where the
//! driver keeps their nodes. A: five kernel nodes added one by one (kept
//! for the updates); B: eight launches captured from a stream, the graph
//! destroyed after instantiation (as PyTorch does); C: a kernel, a memset,
//! a copy, an empty node, a node made from a CUkernel, a child graph of two
//! kernels and a kernel; E: six captured launches after heap churn (a path
//! that worked only because pieces sat side by side fails on E); F: a
//! kernel, three on it in parallel and one joining them (a list of one
//! branch does not read it). Then A is
//! changed with `cuGraphExecKernelNodeSetParams_v2` and `cuGraphExecUpdate_v2`
//! and the layout must still read it.

use std::ffi::{c_char, c_void, CString};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use crate::graphs::layout::search::check;
use crate::graphs::layout::search::search;
use crate::graphs::layout::search::KnownGraph;
use crate::graphs::layout::search::KnownKernel;
use crate::graphs::layout::search::Reading;
use crate::graphs::layout::ExecLayout;
use crate::graphs::layout::ProcessMem;

mod builder;
use builder::Builder;

type P = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy)]
struct KernelParams {
    func: P,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    params: *mut P,
    extra: *mut P,
    kern: P,
    ctx: P,
}

#[repr(C)]
struct MemsetParams {
    dst: u64,
    pitch: usize,
    value: u32,
    element_size: u32,
    width: usize,
    height: usize,
}

/// CUDA_MEMCPY3D, the fields used; the rest zero.
#[repr(C)]
struct Memcpy3d {
    src_x: [usize; 4],
    src_type: u32,
    src_host: P,
    src_device: u64,
    src_array: P,
    reserved0: P,
    src_pitch: [usize; 2],
    dst_x: [usize; 4],
    dst_type: u32,
    dst_host: P,
    dst_device: u64,
    dst_array: P,
    reserved1: P,
    dst_pitch: [usize; 2],
    width: usize,
    height: usize,
    depth: usize,
}

#[repr(C)]
struct UpdateInfo {
    result: u32,
    error_node: P,
    error_from: P,
}

const _: () = assert!(std::mem::size_of::<KernelParams>() == 72);
const _: () = assert!(std::mem::size_of::<Memcpy3d>() == 200);
const _: () = assert!(std::mem::size_of::<MemsetParams>() == 40);

type ModuleLoad = unsafe extern "C" fn(*mut P, *const c_void) -> i32;
type GetFunction = unsafe extern "C" fn(*mut P, P, *const c_char) -> i32;
type LibraryLoad = unsafe extern "C" fn(*mut P, *const c_void, P, P, u32, P, P, u32) -> i32;
type LibraryKernel = unsafe extern "C" fn(*mut P, P, *const c_char) -> i32;
type KernelFunction = unsafe extern "C" fn(*mut P, P) -> i32;
type StreamCreate = unsafe extern "C" fn(*mut P, u32) -> i32;
type StreamSync = unsafe extern "C" fn(P) -> i32;
type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> i32;
type Launch = unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P) -> i32;
type BeginCapture = unsafe extern "C" fn(P, u32) -> i32;
type EndCapture = unsafe extern "C" fn(P, *mut P) -> i32;
type GraphCreate = unsafe extern "C" fn(*mut P, u32) -> i32;
type AddKernel = unsafe extern "C" fn(*mut P, P, *const P, usize, *const KernelParams) -> i32;
type AddMemset = unsafe extern "C" fn(*mut P, P, *const P, usize, *const MemsetParams, P) -> i32;
type AddMemcpy = unsafe extern "C" fn(*mut P, P, *const P, usize, *const Memcpy3d, P) -> i32;
type AddEmpty = unsafe extern "C" fn(*mut P, P, *const P, usize) -> i32;
type AddChild = unsafe extern "C" fn(*mut P, P, *const P, usize, P) -> i32;
type Instantiate = unsafe extern "C" fn(*mut P, P, u64) -> i32;
type ExecSetKernel = unsafe extern "C" fn(P, P, *const KernelParams) -> i32;
type ExecUpdate = unsafe extern "C" fn(P, P, *mut UpdateInfo) -> i32;
type GraphLaunch = unsafe extern "C" fn(P, P) -> i32;
type GraphDestroy = unsafe extern "C" fn(P) -> i32;
type ExecDestroy = unsafe extern "C" fn(P) -> i32;

/// The entry points used, found with dlsym in the library under calibration.
struct Api {
    module_load: ModuleLoad,
    get_function: GetFunction,
    library_load: LibraryLoad,
    library_kernel: LibraryKernel,
    kernel_function: KernelFunction,
    stream_create: StreamCreate,
    stream_sync: StreamSync,
    mem_alloc: MemAlloc,
    launch: Launch,
    begin_capture: BeginCapture,
    end_capture: EndCapture,
    graph_create: GraphCreate,
    add_kernel: AddKernel,
    add_memset: AddMemset,
    add_memcpy: AddMemcpy,
    add_empty: AddEmpty,
    add_child: AddChild,
    instantiate: Instantiate,
    exec_set_kernel: ExecSetKernel,
    exec_update: ExecUpdate,
    graph_launch: GraphLaunch,
    graph_destroy: GraphDestroy,
    exec_destroy: ExecDestroy,
}

impl Api {
    fn load(lib: P) -> Result<Self, String> {
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: a symbol lookup in the library the helper opened.
                let p = unsafe { libc::dlsym(lib, concat!($name, "\0").as_ptr().cast()) };
                if p.is_null() {
                    return Err(format!("it exports no {}", $name));
                }
                // SAFETY: the symbol has the C signature of cuda.h that the
                // type spells out (checked by hand against cuda.h 12.6/13.0).
                unsafe { std::mem::transmute::<P, $ty>(p) }
            }};
        }
        Ok(Self {
            module_load: sym!("cuModuleLoadData", ModuleLoad),
            get_function: sym!("cuModuleGetFunction", GetFunction),
            library_load: sym!("cuLibraryLoadData", LibraryLoad),
            library_kernel: sym!("cuLibraryGetKernel", LibraryKernel),
            kernel_function: sym!("cuKernelGetFunction", KernelFunction),
            stream_create: sym!("cuStreamCreate", StreamCreate),
            stream_sync: sym!("cuStreamSynchronize", StreamSync),
            mem_alloc: sym!("cuMemAlloc_v2", MemAlloc),
            launch: sym!("cuLaunchKernel", Launch),
            begin_capture: sym!("cuStreamBeginCapture_v2", BeginCapture),
            end_capture: sym!("cuStreamEndCapture", EndCapture),
            graph_create: sym!("cuGraphCreate", GraphCreate),
            add_kernel: sym!("cuGraphAddKernelNode_v2", AddKernel),
            add_memset: sym!("cuGraphAddMemsetNode", AddMemset),
            add_memcpy: sym!("cuGraphAddMemcpyNode", AddMemcpy),
            add_empty: sym!("cuGraphAddEmptyNode", AddEmpty),
            add_child: sym!("cuGraphAddChildGraphNode", AddChild),
            instantiate: sym!("cuGraphInstantiateWithFlags", Instantiate),
            exec_set_kernel: sym!("cuGraphExecKernelNodeSetParams_v2", ExecSetKernel),
            exec_update: sym!("cuGraphExecUpdate_v2", ExecUpdate),
            graph_launch: sym!("cuGraphLaunch", GraphLaunch),
            graph_destroy: sym!("cuGraphDestroy", GraphDestroy),
            exec_destroy: sym!("cuGraphExecDestroy", ExecDestroy),
        })
    }
}

fn ck(what: &str, r: i32) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what} returned CUresult {r}"))
    }
}

const PTX: &str = ".version 6.0\n.target sm_50\n.address_size 64\n";
const KERNELS: usize = 8;

fn ptx(prefix: &str, n: usize) -> CString {
    let mut s = PTX.to_string();
    for i in 0..n {
        s.push_str(&format!(".visible .entry {prefix}{i}()\n{{\n\tret;\n}}\n"));
    }
    CString::new(s).expect("no NUL")
}

fn params(k: &KnownKernel, kern: P) -> KernelParams {
    KernelParams {
        func: if kern.is_null() {
            k.func as P
        } else {
            null_mut()
        },
        grid: k.grid,
        block: k.block,
        shared: k.shared,
        params: null_mut(),
        extra: null_mut(),
        kern,
        ctx: null_mut(),
    }
}

fn kernel(f: P, grid: [u32; 3], block: [u32; 3], shared: u32) -> KnownKernel {
    KnownKernel {
        func: f as u64,
        grid,
        block,
        shared,
    }
}

/// Builds the graphs and finds the layout (`lib`: the library, with a
/// context current on this thread).
pub(crate) fn calibrate(lib: P, ctx: P, deadline: Duration) -> Result<ExecLayout, String> {
    let until = Instant::now() + deadline;
    let api = Api::load(lib)?;
    let mem = ProcessMem(std::process::id());
    // SAFETY: every call gets valid out-pointers and the arguments cuda.h
    // describes; handles come from the calls before them.
    unsafe {
        let (funcs, kern, kern_func) = load_kernels(&api)?;
        let mut stream = null_mut();
        ck("cuStreamCreate", (api.stream_create)(&mut stream, 1))?;
        let b = Builder {
            api,
            ctx,
            stream,
            funcs,
        };
        let (a, a_nodes) = b.graph_a()?;
        let gb = b.graph_b()?;
        let c = b.mixed(kern, kern_func)?;
        // Churn: graphs made and destroyed, heap blocks of many sizes.
        let junk = b.churn()?;
        let e = b.graph_e()?;
        let fork = b.graph_f()?;
        let layout = search(&mem, &a, &[&gb, &e, &fork], &c, until)?;
        b.updates(&mem, &layout, &a, &a_nodes)?;
        drop(junk);
        Ok(layout)
    }
}

/// The module of `KERNELS` kernels and the library of one, loaded.
///
/// # Safety
/// A CUDA context current on this thread; `api` resolved from its library.
unsafe fn load_kernels(api: &Api) -> Result<(Vec<P>, P, P), String> {
    // SAFETY: the caller's contract; valid out-pointers, NUL-terminated
    // names and images.
    unsafe {
        let mut module = null_mut();
        let image = ptx("gputrace_graph_k", KERNELS);
        ck(
            "cuModuleLoadData",
            (api.module_load)(&mut module, image.as_ptr().cast()),
        )?;
        let mut funcs = Vec::new();
        for i in 0..KERNELS {
            let name = CString::new(format!("gputrace_graph_k{i}")).expect("no NUL");
            let mut f = null_mut();
            ck(
                "cuModuleGetFunction",
                (api.get_function)(&mut f, module, name.as_ptr()),
            )?;
            funcs.push(f);
        }
        let mut library = null_mut();
        let image = ptx("gputrace_graph_l", 1);
        ck(
            "cuLibraryLoadData",
            (api.library_load)(
                &mut library,
                image.as_ptr().cast(),
                null_mut(),
                null_mut(),
                0,
                null_mut(),
                null_mut(),
                0,
            ),
        )?;
        let (mut kern, mut kern_func) = (null_mut(), null_mut());
        let name = CString::new("gputrace_graph_l0").expect("no NUL");
        ck(
            "cuLibraryGetKernel",
            (api.library_kernel)(&mut kern, library, name.as_ptr()),
        )?;
        ck(
            "cuKernelGetFunction",
            (api.kernel_function)(&mut kern_func, kern),
        )?;
        Ok((funcs, kern, kern_func))
    }
}

fn expect(mem: &ProcessMem, l: &ExecLayout, g: &KnownGraph, after: &str) -> Result<(), String> {
    match check(mem, l, g) {
        Reading::Exact => Ok(()),
        other => Err(format!(
            "the layout found ({}) does not read graph A after {after}: {other:?}",
            l.describe()
        )),
    }
}
