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

struct Builder {
    api: Api,
    ctx: P,
    stream: P,
    funcs: Vec<P>,
}

impl Builder {
    /// A graph of kernel nodes in a chain; the graph is returned with its nodes.
    unsafe fn chain(&self, ks: &[KnownKernel]) -> Result<(P, Vec<P>), String> {
        // SAFETY: the caller's contract (a CUDA context current on this
        // thread, `self.api` resolved from the libcuda being calibrated);
        // every pointer handed to the driver is a local or a node it made.
        unsafe {
            let mut g = null_mut();
            ck("cuGraphCreate", (self.api.graph_create)(&mut g, 0))?;
            let mut nodes: Vec<P> = Vec::new();
            for k in ks {
                let mut n = null_mut();
                let p = params(k, null_mut());
                let (deps, nd) = match nodes.last() {
                    Some(last) => (last as *const P, 1),
                    None => (std::ptr::null(), 0),
                };
                ck(
                    "cuGraphAddKernelNode_v2",
                    (self.api.add_kernel)(&mut n, g, deps, nd, &p),
                )?;
                nodes.push(n);
            }
            Ok((g, nodes))
        }
    }

    /// A kernel, the next ones each on it in parallel, the last on all of
    /// those; instantiated, the graph destroyed.
    unsafe fn fork(&self, ks: &[KnownKernel]) -> Result<P, String> {
        // SAFETY: the caller's contract (a CUDA context current on this
        // thread, `self.api` resolved from the libcuda being calibrated);
        // every pointer handed to the driver is a local or a node it made.
        unsafe {
            let mut g = null_mut();
            ck("cuGraphCreate", (self.api.graph_create)(&mut g, 0))?;
            let mut nodes: Vec<P> = Vec::new();
            for (i, k) in ks.iter().enumerate() {
                let deps: Vec<P> = match i {
                    0 => Vec::new(),
                    _ if i + 1 < ks.len() => vec![nodes[0]],
                    _ => nodes[1..].to_vec(),
                };
                let mut n = null_mut();
                let p = params(k, null_mut());
                ck(
                    "cuGraphAddKernelNode_v2",
                    (self.api.add_kernel)(&mut n, g, deps.as_ptr(), deps.len(), &p),
                )?;
                nodes.push(n);
            }
            let e = self.instantiate(g)?;
            ck("cuGraphDestroy", (self.api.graph_destroy)(g))?;
            Ok(e)
        }
    }

    unsafe fn instantiate(&self, g: P) -> Result<P, String> {
        // SAFETY: the caller's contract (a CUDA context current on this
        // thread, `self.api` resolved from the libcuda being calibrated);
        // every pointer handed to the driver is a local or a node it made.
        unsafe {
            let mut e = null_mut();
            ck(
                "cuGraphInstantiateWithFlags",
                (self.api.instantiate)(&mut e, g, 0),
            )?;
            ck("cuGraphLaunch", (self.api.graph_launch)(e, self.stream))?;
            ck("cuStreamSynchronize", (self.api.stream_sync)(self.stream))?;
            Ok(e)
        }
    }

    unsafe fn captured(&self, ks: &[KnownKernel]) -> Result<P, String> {
        // SAFETY: the caller's contract (a CUDA context current on this
        // thread, `self.api` resolved from the libcuda being calibrated);
        // every pointer handed to the driver is a local or a node it made.
        unsafe {
            ck(
                "cuStreamBeginCapture_v2",
                (self.api.begin_capture)(self.stream, 1),
            )?;
            for k in ks {
                let [gx, gy, gz] = k.grid;
                let [bx, by, bz] = k.block;
                let r = (self.api.launch)(
                    k.func as P,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    k.shared,
                    self.stream,
                    null_mut(),
                    null_mut(),
                );
                ck("cuLaunchKernel (captured)", r)?;
            }
            let mut g = null_mut();
            ck(
                "cuStreamEndCapture",
                (self.api.end_capture)(self.stream, &mut g),
            )?;
            let e = self.instantiate(g)?;
            ck("cuGraphDestroy", (self.api.graph_destroy)(g))?;
            Ok(e)
        }
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
        let mut stream = null_mut();
        ck("cuStreamCreate", (api.stream_create)(&mut stream, 1))?;
        let b = Builder {
            api,
            ctx,
            stream,
            funcs,
        };
        let f = &b.funcs;

        let a_kernels: Vec<KnownKernel> = (0..5u32)
            .map(|i| {
                kernel(
                    f[i as usize],
                    [1000 + 17 * i, 3 + i, 2],
                    [32 * (i + 1), 2, 1],
                    256 * (i + 1),
                )
            })
            .collect();
        let (a_graph, a_nodes) = b.chain(&a_kernels)?;
        let a = KnownGraph {
            name: "A",
            exec: b.instantiate(a_graph)? as u64,
            kernels: a_kernels.clone(),
            others: 0,
        };
        let b_kernels: Vec<KnownKernel> = (0..8u32)
            .map(|i| {
                kernel(
                    f[7 - i as usize],
                    [2000 + 29 * i, 11 + i, 3],
                    [16 * (i + 1), 4, 1],
                    64 * (i + 1),
                )
            })
            .collect();
        let gb = KnownGraph {
            name: "B",
            exec: b.captured(&b_kernels)? as u64,
            kernels: b_kernels,
            others: 0,
        };
        let c = b.mixed(kern, kern_func)?;
        // Churn: graphs made and destroyed, heap blocks of many sizes.
        let mut junk: Vec<Vec<u8>> = (0..200).map(|i| vec![1u8; 16 + (i * 37) % 700]).collect();
        let mut made = Vec::new();
        for (i, j) in junk.iter_mut().enumerate().take(40) {
            let ks: Vec<KnownKernel> = (0..=i % 3)
                .map(|j| kernel(f[j], [7 + j as u32, 1, 1], [32, 1, 1], 0))
                .collect();
            let (g, _) = b.chain(&ks)?;
            made.push((g, b.instantiate(g)?));
            if i % 2 == 1 {
                j.resize(900, 2);
            }
        }
        for (i, (g, e)) in made.iter().enumerate() {
            if i % 2 == 0 {
                ck("cuGraphDestroy", (b.api.graph_destroy)(*g))?;
                ck("cuGraphExecDestroy", (b.api.exec_destroy)(*e))?;
            }
        }
        junk.retain(|v| v.len() % 3 != 0);
        let e_kernels: Vec<KnownKernel> = (0..6u32)
            .map(|i| {
                kernel(
                    f[5 - i as usize],
                    [4000 + 31 * i, 20 + i, 4],
                    [8 * (i + 1), 8, 1],
                    32 * (i + 1),
                )
            })
            .collect();
        let e = KnownGraph {
            name: "E",
            exec: b.captured(&e_kernels)? as u64,
            kernels: e_kernels,
            others: 0,
        };
        // Parallel branches: a list of one branch reads the others wrong.
        let f_kernels: Vec<KnownKernel> = (0..5u32)
            .map(|i| {
                kernel(
                    f[(i as usize + 3) % KERNELS],
                    [6000 + 13 * i, 2 + i, 1],
                    [64, 1 + i, 1],
                    128 * (i + 1),
                )
            })
            .collect();
        let fork = KnownGraph {
            name: "F",
            exec: b.fork(&f_kernels)? as u64,
            kernels: f_kernels,
            others: 0,
        };
        let layout = search(&mem, &a, &[&gb, &e, &fork], &c, until)?;

        // Updates of A: the layout must read what A runs after them.
        let mut a2 = a.clone();
        a2.kernels[2] = kernel(f[7], [4444, 12, 2], [224, 2, 1], a.kernels[2].shared);
        let p = params(&a2.kernels[2], null_mut());
        ck(
            "cuGraphExecKernelNodeSetParams_v2",
            (b.api.exec_set_kernel)(a.exec as P, a_nodes[2], &p),
        )?;
        ck("cuGraphLaunch", (b.api.graph_launch)(a.exec as P, b.stream))?;
        expect(&mem, &layout, &a2, "cuGraphExecKernelNodeSetParams_v2")?;
        let mut a3 = a.clone();
        a3.kernels[3].grid = [5555, 13, 2];
        let (g3, _) = b.chain(&a3.kernels)?;
        let mut info = UpdateInfo {
            result: 0,
            error_node: null_mut(),
            error_from: null_mut(),
        };
        ck(
            "cuGraphExecUpdate_v2",
            (b.api.exec_update)(a.exec as P, g3, &mut info),
        )?;
        ck("cuGraphLaunch", (b.api.graph_launch)(a.exec as P, b.stream))?;
        ck("cuStreamSynchronize", (b.api.stream_sync)(b.stream))?;
        expect(&mem, &layout, &a3, "cuGraphExecUpdate_v2")?;
        drop(junk);
        Ok(layout)
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

impl Builder {
    /// C: kernel, memset, copy, empty, CUkernel node, child graph of two
    /// kernels, kernel.
    unsafe fn mixed(&self, kern: P, kern_func: P) -> Result<KnownGraph, String> {
        // SAFETY: the caller's contract (a CUDA context current on this
        // thread, `self.api` resolved from the libcuda being calibrated);
        // every pointer handed to the driver is a local or a node it made.
        unsafe {
            let f = &self.funcs;
            let (mut d1, mut d2) = (0u64, 0u64);
            ck("cuMemAlloc_v2", (self.api.mem_alloc)(&mut d1, 1 << 20))?;
            ck("cuMemAlloc_v2", (self.api.mem_alloc)(&mut d2, 1 << 20))?;
            let k0 = kernel(f[0], [3000, 5, 5], [64, 1, 1], 512);
            let kl = kernel(kern_func, [3100, 6, 6], [96, 1, 1], 768);
            let c0 = kernel(f[5], [3200, 7, 7], [64, 1, 1], 1024);
            let c1 = kernel(f[6], [3300, 8, 8], [32, 2, 1], 1280);
            let k7 = kernel(f[7], [3400, 9, 9], [128, 1, 1], 1536);
            let (g, first) = self.chain(std::slice::from_ref(&k0))?;
            let mut prev = first[0];
            let mut n = null_mut();
            let ms = MemsetParams {
                dst: d1,
                pitch: 0,
                value: 0x5a,
                element_size: 4,
                width: 1024,
                height: 1,
            };
            ck(
                "cuGraphAddMemsetNode",
                (self.api.add_memset)(&mut n, g, &prev, 1, &ms, self.ctx),
            )?;
            prev = n;
            // SAFETY: all-zero is a valid CUDA_MEMCPY3D to fill in.
            let mut mc: Memcpy3d = std::mem::zeroed();
            (mc.src_type, mc.src_device, mc.dst_type, mc.dst_device) = (2, d1, 2, d2);
            (mc.width, mc.height, mc.depth) = (4096, 1, 1);
            ck(
                "cuGraphAddMemcpyNode",
                (self.api.add_memcpy)(&mut n, g, &prev, 1, &mc, self.ctx),
            )?;
            prev = n;
            ck(
                "cuGraphAddEmptyNode",
                (self.api.add_empty)(&mut n, g, &prev, 1),
            )?;
            prev = n;
            let p = params(&kl, kern);
            ck(
                "cuGraphAddKernelNode_v2",
                (self.api.add_kernel)(&mut n, g, &prev, 1, &p),
            )?;
            prev = n;
            let (child, _) = self.chain(&[c0.clone(), c1.clone()])?;
            ck(
                "cuGraphAddChildGraphNode",
                (self.api.add_child)(&mut n, g, &prev, 1, child),
            )?;
            ck("cuGraphDestroy", (self.api.graph_destroy)(child))?;
            prev = n;
            let p = params(&k7, null_mut());
            ck(
                "cuGraphAddKernelNode_v2",
                (self.api.add_kernel)(&mut n, g, &prev, 1, &p),
            )?;
            Ok(KnownGraph {
                name: "C",
                exec: self.instantiate(g)? as u64,
                kernels: vec![k0, kl, c0, c1, k7],
                others: 3,
            })
        }
    }
}
