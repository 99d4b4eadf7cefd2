//! Loop replays (rule 30) on CUDA: a WHILE conditional node whose body runs the captured
//! graph and then the loop setter, in a graph of its own per executable, built at the
//! executable's first loop replay and kept with it.
//!
//! The loop graph, built by explicit node calls (never by capturing into a body, which
//! the driver cannot recover from on failure):
//!
//! ```text
//! memset flag = 0 ───────┐
//! memset counter = 0 ────┼─▶ WHILE (handle: default 1, set at each launch)
//! memset max word = max ─┘     body: child graph (a clone of the captured graph) ─▶ setter
//! ```
//!
//! The setter (`kernels/loop_setter.cu`) counts the iteration into the counter and sets
//! the handle to `flag == 0 && counter < max`, so no iteration starts after the one that
//! set the flag, nor after the `max`-th. The `max` a loop runs to is the value its launch's
//! own memset writes to a device word the setter reads (one word per loop graph, from a
//! slab the device keeps): a later call's `max` is set in the executable
//! (`cuGraphExecMemsetNodeSetParams`) before its launch, which leaves queued loops theirs.
//!
//! A slot's update (rule 26) reaches the loop graph through the child graph node: the
//! captured graph's own kernel node is set (`cuGraphKernelNodeSetParams`), then the loop
//! executable's child node is set from that graph (`cuGraphExecChildGraphNodeSetParams`,
//! which sets every node of the clone from the graph's, recursively); as every exec
//! update, it reaches only loops enqueued after it.
//!
//! Loops need CUDA 12.3 (driver 545; conditional nodes and `cuGraphAddNode`) and a
//! setter image for the device: the setter calls the device runtime
//! (`cudaGraphSetConditional`), so it ships only as cubins linked against libcudadevrt
//! (sm_80, which the 8.x devices run, and sm_90); its PTX cannot be loaded alone.

use std::sync::{Arc, Mutex, Weak};

use capture_core::{DeviceLoops, MemoryKind, PoolKind, PoolName, ServerError};

use crate::raw;

/// The loop setter's CUDA C source.
pub const LOOP_SETTER_CU: &str = include_str!("../kernels/loop_setter.cu");
/// The loop setter's PTX for compute_80 (NVRTC with `-rdc=true`): shipped for the
/// record and checked, never loaded (it calls the device runtime, linked in the cubins).
pub const LOOP_SETTER_SM80: &str = include_str!("../kernels/loop_setter.sm_80.ptx");
/// The loop setter's PTX for compute_90, as [`LOOP_SETTER_SM80`].
pub const LOOP_SETTER_SM90: &str = include_str!("../kernels/loop_setter.sm_90.ptx");
/// The loop setter's cubin for compute capability 8.x, linked with libcudadevrt.
pub const LOOP_SETTER_SM80_CUBIN: &[u8] = include_bytes!("../kernels/loop_setter.sm_80.cubin");
/// The loop setter's cubin for compute capability 9.0, linked with libcudadevrt.
pub const LOOP_SETTER_SM90_CUBIN: &[u8] = include_bytes!("../kernels/loop_setter.sm_90.cubin");

/// Compiles the loop setter's CUDA C with NVRTC as relocatable device code
/// (`-rdc=true`, `--fmad=false`, no headers), as the shipped images were made: PTX for
/// `compute_80` or `compute_90`, or the relocatable cubin for `sm_80` or `sm_90` that
/// nvJitLink links against the pinned libcudadevrt.a into the shipped cubin (the
/// crate's loop setter test does, and compares).
///
/// # Errors
///
/// NVRTC's refusal, with its log.
pub fn compile_loop_setter(arch: &str) -> Result<Vec<u8>, ServerError> {
    let output = if arch.starts_with("sm_") {
        raw::Output::Cubin
    } else {
        raw::Output::Ptx
    };
    raw::compile_with(LOOP_SETTER_CU, arch, "loop_setter.cu", output, true)
}

/// The setter's entry point.
const SETTER_ENTRY: &std::ffi::CStr = c"capture_loop_setter";

/// The oldest driver (`cuDriverGetVersion`) with conditional nodes: CUDA 12.3.
pub(crate) const LOOP_DRIVER: i32 = 12030;

/// Why the user's own work may not be in a loop body on CUDA.
const WORK_IN_BODY: &str = "the user's own work may record nodes a CUDA conditional body \
     refuses (host, event and memory nodes, among others), which the driver would refuse \
     only at the loop's first replay";

/// The setter's cubin for a device of compute capability `compute`, if one runs there.
fn setter_image(compute: (i32, i32)) -> Option<&'static [u8]> {
    match compute {
        (8, _) => Some(LOOP_SETTER_SM80_CUBIN),
        (9, 0) => Some(LOOP_SETTER_SM90_CUBIN),
        _ => None,
    }
}

/// Whether a device of compute capability `compute` under a driver of version `driver`
/// runs loop replays, and what their bodies may not hold: CUDA 12.3 or newer, and a
/// setter cubin for the device.
pub(crate) fn device_loops(compute: (i32, i32), driver: i32) -> DeviceLoops {
    loops_for(compute, driver, raw::conditional_nodes())
}

/// As [`device_loops`], `api` saying whether the driver exports the conditional nodes'
/// entry points.
fn loops_for(compute: (i32, i32), driver: i32, api: bool) -> DeviceLoops {
    if driver < LOOP_DRIVER || !api {
        DeviceLoops::Unsupported(
            "this CUDA driver has no conditional graph nodes, which a loop replay runs on \
             (CUDA 12.3, driver 545, or newer has them)",
        )
    } else if setter_image(compute).is_none() {
        DeviceLoops::Unsupported(
            "the loop setter ships as cubins for compute capability 8.x and 9.0 only (it \
             calls the device runtime, so its PTX cannot be loaded alone)",
        )
    } else {
        DeviceLoops::Supported {
            copies: None,
            work: Some(WORK_IN_BODY),
        }
    }
}

/// Device words a slab holds, each a loop graph's `max`.
const SLAB_WORDS: u64 = 256;

/// Where a device finds its loop pool: the one its streams hold, while any does.
#[derive(Debug, Default)]
pub(crate) struct LoopSupport {
    pool: Mutex<Weak<LoopPool>>,
}

impl LoopSupport {
    /// The loop pool of the device in `context`, of compute capability `compute` under
    /// a driver of version `driver`: made (the setter loaded) if no stream holds one,
    /// where loops run on it, holding `device` (what keeps the context alive) until it
    /// goes; `None` where loops do not run. Called where a module load may happen (a
    /// kernel's load, which no capture of the context overlaps).
    pub(crate) fn pool(
        &self,
        device: Arc<dyn Send + Sync>,
        context: usize,
        compute: (i32, i32),
        driver: i32,
    ) -> Option<Arc<LoopPool>> {
        if !matches!(device_loops(compute, driver), DeviceLoops::Supported { .. }) {
            return None;
        }
        let image = setter_image(compute)?;
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = pool.upgrade() {
            return Some(live);
        }
        let setter = raw::module_load(image)
            .and_then(|module| {
                raw::module_function(module, SETTER_ENTRY)
                    .map(|function| (module, function))
                    .inspect_err(|_| raw::module_unload(module))
            })
            .map_err(|e| e.to_string());
        let made = Arc::new(LoopPool {
            _device: device,
            context,
            setter,
            words: Mutex::default(),
        });
        *pool = Arc::downgrade(&made);
        Some(made)
    }

    /// The device's loop pool, if a stream holds one.
    pub(crate) fn live(&self) -> Option<Arc<LoopPool>> {
        self.pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }
}

/// What a device's loops share: the setter's module, loaded with the device's first
/// kernel, and slabs of device words the loop graphs' `max` is written to. Each stream
/// that loaded a kernel holds it, and each loop graph, so it goes with the device's last
/// stream and its last loop graph: the module unloaded and the slabs freed then, as the
/// device's kernels are.
pub(crate) struct LoopPool {
    /// The device, kept (and its context with it) until the pool goes.
    _device: Arc<dyn Send + Sync>,
    context: usize,
    /// The setter's module and function, or why it did not load.
    setter: Result<(usize, usize), String>,
    words: Mutex<Words>,
}

#[derive(Debug, Default)]
struct Words {
    slabs: Vec<u64>,
    /// Words no loop graph holds.
    free: Vec<u64>,
}

impl LoopPool {
    /// The setter's function.
    fn setter(&self) -> Result<usize, ServerError> {
        match &self.setter {
            Ok((_, function)) => Ok(*function),
            Err(why) => Err(loop_error(format!("the loop setter did not load: {why}"))),
        }
    }

    /// A device word for a loop graph's `max`.
    fn take_word(&self) -> Result<u64, ServerError> {
        let mut words = self.words.lock().unwrap_or_else(|p| p.into_inner());
        if words.free.is_empty() {
            // An allocation leaves a relaxed-mode capture valid.
            let slab = raw::mem_alloc(
                SLAB_WORDS * 4,
                PoolName {
                    memory: MemoryKind::Device,
                    pool: PoolKind::Persistent,
                },
            )?;
            words.slabs.push(slab);
            words
                .free
                .extend((0..SLAB_WORDS).rev().map(|i| slab + 4 * i));
        }
        Ok(words.free.pop().expect("a slab was just made"))
    }

    /// Gives a word back, once no loop graph holding it can run again.
    fn give_word(&self, word: u64) {
        let mut words = self.words.lock().unwrap_or_else(|p| p.into_inner());
        words.free.push(word);
    }
}

impl std::fmt::Debug for LoopPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopPool")
            .field("setter", &self.setter)
            .finish_non_exhaustive()
    }
}

impl Drop for LoopPool {
    /// Unloads the setter and frees the slabs: no stream and no loop graph holds them.
    fn drop(&mut self) {
        let words = self.words.get_mut().unwrap_or_else(|p| p.into_inner());
        if self.setter.is_err() && words.slabs.is_empty() {
            return;
        }
        let _current = match raw::Current::enter(self.context) {
            Ok(current) => current,
            Err(error) => {
                tracing::warn!(target: "capture", %error, "the CUDA loop setter could not be released");
                return;
            }
        };
        if let Ok((module, _)) = self.setter {
            raw::module_unload(module);
        }
        for slab in words.slabs.drain(..) {
            raw::mem_free(slab);
        }
    }
}

fn loop_error(why: String) -> ServerError {
    ServerError::driver("loop replay", std::io::Error::other(why))
}

/// One executable's loop graph: the graph, its executable, and the nodes a later call
/// sets (the `max` memset, the child graph node in the body).
#[derive(Debug)]
pub(crate) struct LoopGraph {
    /// The setter and the `max` word it holds; released after the executable.
    pool: Arc<LoopPool>,
    graph: usize,
    exec: usize,
    /// The memset node writing `max`, and the word it writes.
    max_node: usize,
    max_word: u64,
    /// The `max` the executable's memset writes now.
    max: u32,
    /// The child graph node running the captured graph, in the body.
    child: usize,
    /// The stop flag and the counter it was built over.
    flag: u64,
    counter: u64,
}

impl LoopGraph {
    /// Builds the loop graph of `captured` (the executable's graph) over `flag` and
    /// `counter`, running to `max`, with `pool`'s setter, and instantiates it. The context
    /// is current.
    pub(crate) fn build(
        pool: Option<Arc<LoopPool>>,
        captured: usize,
        flag: u64,
        counter: u64,
        max: u32,
    ) -> Result<Self, ServerError> {
        let pool = pool.ok_or_else(|| {
            loop_error(
                "the loop setter loads with the device's first kernel, and no stream of the \
                 device loaded one"
                    .into(),
            )
        })?;
        let setter = pool.setter()?;
        let max_word = pool.take_word()?;
        let graph = match raw::graph_create() {
            Ok(graph) => graph,
            Err(e) => {
                pool.give_word(max_word);
                return Err(e);
            }
        };
        let context = pool.context;
        let built = (|| {
            let handle = raw::conditional_handle(graph, context, 1)?;
            let zero_flag = raw::add_memset_node(graph, &[], context, flag, 0, 1)?;
            let zero_counter = raw::add_memset_node(graph, &[], context, counter, 0, 1)?;
            let max_node = raw::add_memset_node(graph, &[], context, max_word, max, 1)?;
            let (_, body) =
                raw::add_while_node(graph, &[zero_flag, zero_counter, max_node], context, handle)?;
            let child = raw::add_child_node(body, &[], captured)?;
            raw::add_kernel_node(
                body,
                &[child],
                setter,
                [1, 1, 1],
                [1, 1, 1],
                &[
                    raw::Argument::Word(handle),
                    raw::Argument::Word(flag),
                    raw::Argument::Word(counter),
                    raw::Argument::Word(max_word),
                ],
            )?;
            let exec = raw::instantiate(graph)?;
            Ok((exec, max_node, child))
        })();
        match built {
            Ok((exec, max_node, child)) => Ok(Self {
                pool,
                graph,
                exec,
                max_node,
                max_word,
                max,
                child,
                flag,
                counter,
            }),
            Err(e) => {
                raw::graph_destroy(graph);
                pool.give_word(max_word);
                Err(e)
            }
        }
    }

    /// Whether it was built over this flag and counter.
    pub(crate) fn serves(&self, flag: u64, counter: u64) -> bool {
        self.flag == flag && self.counter == counter
    }

    /// Enqueues a loop to `max` on `stream`: `max` set in the executable first where it
    /// differs (loops already enqueued keep theirs).
    pub(crate) fn launch(&mut self, stream: usize, max: u32) -> Result<(), ServerError> {
        if max != self.max {
            raw::set_memset_node(
                self.exec,
                self.max_node,
                self.pool.context,
                self.max_word,
                max,
                1,
            )?;
            self.max = max;
        }
        raw::launch_graph(self.exec, stream)
    }

    /// Sets the body's clone of the captured graph from `captured`, whose nodes hold the
    /// parameters now (a slot's update): later loops run with them.
    pub(crate) fn refresh(&self, captured: usize) -> Result<(), ServerError> {
        raw::set_child_node(self.exec, self.child, captured)
    }
}

impl Drop for LoopGraph {
    /// Destroys the executable (freed by the driver after any launch in flight) and the
    /// graph, then lets go of the pool. The core drops a graph's executable only behind
    /// the fence after its last replay, loops included, so the `max` word is free again.
    /// The context is current (the executable's drop made it so).
    fn drop(&mut self) {
        raw::exec_destroy(self.exec);
        raw::graph_destroy(self.graph);
        self.pool.give_word(self.max_word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_come_with_cuda_12_3_and_a_setter_cubin() {
        for compute in [(8, 0), (8, 6), (8, 9), (9, 0)] {
            for driver in [12030, 12090, 13000] {
                assert!(matches!(
                    loops_for(compute, driver, true),
                    DeviceLoops::Supported {
                        copies: None,
                        work: Some(_)
                    }
                ));
            }
            let DeviceLoops::Unsupported(why) = loops_for(compute, 12020, true) else {
                panic!("CUDA 12.2 has no conditional nodes");
            };
            assert!(why.contains("CUDA 12.3"), "{why}");
            assert!(matches!(
                loops_for(compute, 12090, false),
                DeviceLoops::Unsupported(_)
            ));
        }
        for compute in [(7, 5), (10, 0), (12, 0)] {
            let DeviceLoops::Unsupported(why) = loops_for(compute, 12090, true) else {
                panic!("{compute:?} has no setter cubin");
            };
            assert!(why.contains("8.x and 9.0"), "{why}");
        }
    }
}
