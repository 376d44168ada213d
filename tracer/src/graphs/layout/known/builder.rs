//! The graphs of known kernels that calibration builds (see the parent's
//! header): one method per graph, and the updates of A.

use std::ptr::null_mut;

use super::*;

pub(super) struct Builder {
    pub(super) api: Api,
    pub(super) ctx: P,
    pub(super) stream: P,
    pub(super) funcs: Vec<P>,
}

impl Builder {
    /// A graph of kernel nodes in a chain; the graph is returned with its nodes.
    pub(super) unsafe fn chain(&self, ks: &[KnownKernel]) -> Result<(P, Vec<P>), String> {
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
    pub(super) unsafe fn fork(&self, ks: &[KnownKernel]) -> Result<P, String> {
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

    pub(super) unsafe fn instantiate(&self, g: P) -> Result<P, String> {
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

    pub(super) unsafe fn captured(&self, ks: &[KnownKernel]) -> Result<P, String> {
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

impl Builder {
    /// A: five kernel nodes added one by one (kept for the updates), with
    /// its nodes.
    ///
    /// # Safety
    /// As [`Builder::chain`].
    pub(super) unsafe fn graph_a(&self) -> Result<(KnownGraph, Vec<P>), String> {
        let f = &self.funcs;
        let kernels: Vec<KnownKernel> = (0..5u32)
            .map(|i| {
                kernel(
                    f[i as usize],
                    [1000 + 17 * i, 3 + i, 2],
                    [32 * (i + 1), 2, 1],
                    256 * (i + 1),
                )
            })
            .collect();
        // SAFETY: the caller's contract.
        unsafe {
            let (graph, nodes) = self.chain(&kernels)?;
            let a = KnownGraph {
                name: "A",
                exec: self.instantiate(graph)? as u64,
                kernels,
                others: 0,
            };
            Ok((a, nodes))
        }
    }

    /// B: eight launches captured from a stream, the graph destroyed after
    /// instantiation (as PyTorch does).
    ///
    /// # Safety
    /// As [`Builder::chain`].
    pub(super) unsafe fn graph_b(&self) -> Result<KnownGraph, String> {
        let f = &self.funcs;
        let kernels: Vec<KnownKernel> = (0..8u32)
            .map(|i| {
                kernel(
                    f[7 - i as usize],
                    [2000 + 29 * i, 11 + i, 3],
                    [16 * (i + 1), 4, 1],
                    64 * (i + 1),
                )
            })
            .collect();
        Ok(KnownGraph {
            name: "B",
            // SAFETY: the caller's contract.
            exec: unsafe { self.captured(&kernels)? } as u64,
            kernels,
            others: 0,
        })
    }

    /// Graphs made and destroyed, heap blocks of many sizes: what is kept
    /// must live until the search is done.
    ///
    /// # Safety
    /// As [`Builder::chain`].
    pub(super) unsafe fn churn(&self) -> Result<Vec<Vec<u8>>, String> {
        let f = &self.funcs;
        let mut junk: Vec<Vec<u8>> = (0..200).map(|i| vec![1u8; 16 + (i * 37) % 700]).collect();
        let mut made = Vec::new();
        // SAFETY: the caller's contract; handles from the calls before.
        unsafe {
            for (i, j) in junk.iter_mut().enumerate().take(40) {
                let ks: Vec<KnownKernel> = (0..=i % 3)
                    .map(|j| kernel(f[j], [7 + j as u32, 1, 1], [32, 1, 1], 0))
                    .collect();
                let (g, _) = self.chain(&ks)?;
                made.push((g, self.instantiate(g)?));
                if i % 2 == 1 {
                    j.resize(900, 2);
                }
            }
            for (i, (g, e)) in made.iter().enumerate() {
                if i % 2 == 0 {
                    ck("cuGraphDestroy", (self.api.graph_destroy)(*g))?;
                    ck("cuGraphExecDestroy", (self.api.exec_destroy)(*e))?;
                }
            }
        }
        junk.retain(|v| v.len() % 3 != 0);
        Ok(junk)
    }

    /// E: six captured launches after heap churn (a path that worked only
    /// because pieces sat side by side fails on E).
    ///
    /// # Safety
    /// As [`Builder::chain`].
    pub(super) unsafe fn graph_e(&self) -> Result<KnownGraph, String> {
        let f = &self.funcs;
        let kernels: Vec<KnownKernel> = (0..6u32)
            .map(|i| {
                kernel(
                    f[5 - i as usize],
                    [4000 + 31 * i, 20 + i, 4],
                    [8 * (i + 1), 8, 1],
                    32 * (i + 1),
                )
            })
            .collect();
        Ok(KnownGraph {
            name: "E",
            // SAFETY: the caller's contract.
            exec: unsafe { self.captured(&kernels)? } as u64,
            kernels,
            others: 0,
        })
    }

    /// F: parallel branches (a list of one branch reads the others wrong).
    ///
    /// # Safety
    /// As [`Builder::chain`].
    pub(super) unsafe fn graph_f(&self) -> Result<KnownGraph, String> {
        let f = &self.funcs;
        let kernels: Vec<KnownKernel> = (0..5u32)
            .map(|i| {
                kernel(
                    f[(i as usize + 3) % KERNELS],
                    [6000 + 13 * i, 2 + i, 1],
                    [64, 1 + i, 1],
                    128 * (i + 1),
                )
            })
            .collect();
        Ok(KnownGraph {
            name: "F",
            // SAFETY: the caller's contract.
            exec: unsafe { self.fork(&kernels)? } as u64,
            kernels,
            others: 0,
        })
    }

    /// Updates of A: the layout must read what A runs after them.
    ///
    /// # Safety
    /// As [`Builder::chain`]; `a` and its nodes made by [`Builder::graph_a`].
    pub(super) unsafe fn updates(
        &self,
        mem: &ProcessMem,
        layout: &ExecLayout,
        a: &KnownGraph,
        a_nodes: &[P],
    ) -> Result<(), String> {
        let f = &self.funcs;
        let mut a2 = a.clone();
        a2.kernels[2] = kernel(f[7], [4444, 12, 2], [224, 2, 1], a.kernels[2].shared);
        let p = params(&a2.kernels[2], null_mut());
        // SAFETY: the caller's contract; valid out-pointers.
        unsafe {
            ck(
                "cuGraphExecKernelNodeSetParams_v2",
                (self.api.exec_set_kernel)(a.exec as P, a_nodes[2], &p),
            )?;
            ck(
                "cuGraphLaunch",
                (self.api.graph_launch)(a.exec as P, self.stream),
            )?;
            expect(mem, layout, &a2, "cuGraphExecKernelNodeSetParams_v2")?;
            let mut a3 = a.clone();
            a3.kernels[3].grid = [5555, 13, 2];
            let (g3, _) = self.chain(&a3.kernels)?;
            let mut info = UpdateInfo {
                result: 0,
                error_node: null_mut(),
                error_from: null_mut(),
            };
            ck(
                "cuGraphExecUpdate_v2",
                (self.api.exec_update)(a.exec as P, g3, &mut info),
            )?;
            ck(
                "cuGraphLaunch",
                (self.api.graph_launch)(a.exec as P, self.stream),
            )?;
            ck("cuStreamSynchronize", (self.api.stream_sync)(self.stream))?;
            expect(mem, layout, &a3, "cuGraphExecUpdate_v2")
        }
    }
}

impl Builder {
    /// C: kernel, memset, copy, empty, CUkernel node, child graph of two
    /// kernels, kernel.
    pub(super) unsafe fn mixed(&self, kern: P, kern_func: P) -> Result<KnownGraph, String> {
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
