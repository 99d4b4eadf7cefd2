//! `Floor`: the benchmark's hand-written eager floor on CUDA, the same work as the
//! library's chain benchmark with no runtime in between. A bare `cuLaunchKernel` loop of
//! `kernels` dependent launches of the shipped builtin `add_scalar` (the library's own
//! image, block size, argument layout and info words, adding 1.0) over `elements`
//! floats ping-ponging between device buffers A and B (launch `i` reads A and writes B
//! when `i` is even, the other way when odd), all on one stream, then a copy of all of
//! A into pinned host memory enqueued behind them, and one `cuStreamSynchronize`.
//!
//! There is no replay floor here: the benchmark compares replays against PyTorch's CUDA
//! graph instead (`xtask/gpu/torch_graph.py`).
//!
//! The device is opened as [`crate::CudaBackend::new`] opens it (its retained primary
//! context, shared with any backend on the same ordinal in the process); the floor's
//! stream, buffers and module are its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capture_core::{Builtin, MemoryKind, PoolKind, PoolName, ServerError};

use crate::driver::CudaBackend;
use crate::error::Unavailable;
use crate::gpu::Gpu;
use crate::kernels::{self, BLOCK, CudaKernel, CudaKernelSource};
use crate::raw;

/// Elements per block the floor launches: `ceil(elements / 256)` blocks (of the
/// library's 64 threads, with a grid-stride loop), the grid the benchmark's library
/// launches use.
pub const FLOOR_ELEMENTS_PER_BLOCK: u64 = 256;

/// The add-one chain's scalar.
const ONE: f32 = 1.0;

/// What went wrong making or running a [`Floor`].
#[derive(Debug)]
pub enum FloorError {
    /// CUDA (or the device asked for) cannot be used here.
    Unavailable(Unavailable),
    /// A step of the floor failed.
    Failed {
        /// What the floor was doing.
        step: &'static str,
        /// Why it failed.
        source: ServerError,
    },
}

impl std::fmt::Display for FloorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FloorError::Unavailable(u) => u.fmt(f),
            FloorError::Failed { step, source } => {
                write!(f, "the CUDA floor failed {step}: {source}")
            }
        }
    }
}

impl std::error::Error for FloorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FloorError::Unavailable(u) => u.source(),
            FloorError::Failed { source, .. } => Some(source),
        }
    }
}

impl From<Unavailable> for FloorError {
    fn from(u: Unavailable) -> Self {
        FloorError::Unavailable(u)
    }
}

/// A `map_err` for `step`.
fn at(step: &'static str) -> impl Fn(ServerError) -> FloorError {
    move |source| FloorError::Failed { step, source }
}

/// One pass's host times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorPass {
    /// From the start of the pass through the last `cuLaunchKernel`.
    pub enqueue: Duration,
    /// From the start of the pass through the copy of A and `cuStreamSynchronize`.
    pub total: Duration,
}

/// The floor: a stream, buffers A and B, the info words and the builtins' module.
pub struct Floor {
    gpu: Arc<Gpu>,
    objects: Option<Objects>,
    elements: u64,
    kernels: usize,
    grid: [u32; 3],
    output: Vec<f32>,
    /// A's bytes as the last pass copied them back.
    readback: Vec<u8>,
}

/// What the floor made in the context, freed on drop: behind the context's capture
/// domain, since a free or a module unload may not overlap any capture of the context
/// (rule 25).
struct Objects {
    gpu: Arc<Gpu>,
    kernel: Option<CudaKernel>,
    stream: usize,
    a: u64,
    b: u64,
    info: u64,
    /// Pinned host memory A is copied into.
    pinned: usize,
}

impl Drop for Objects {
    fn drop(&mut self) {
        match raw::Current::enter(self.gpu.context) {
            Ok(_current) => {
                if self.stream != 0 {
                    // Nothing may be pending when the buffers go.
                    let _ = raw::stream_sync(self.stream);
                }
                for ptr in [self.a, self.b, self.info] {
                    if ptr != 0 {
                        raw::mem_free(ptr);
                    }
                }
                if self.pinned != 0 {
                    raw::host_free(self.pinned);
                }
                if self.stream != 0 {
                    raw::stream_destroy(self.stream);
                }
            }
            Err(error) => {
                tracing::warn!(target: "capture", %error, "the CUDA floor could not be freed");
            }
        }
        // The module goes with the kernel (which enters the context itself).
        self.kernel = None;
    }
}

impl std::fmt::Debug for Floor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Floor")
            .field("elements", &self.elements)
            .field("kernels", &self.kernels)
            .field("grid", &self.grid)
            .finish()
    }
}

impl Floor {
    /// Opens CUDA device `ordinal`, loads the builtins' image for it, and makes a
    /// non-blocking stream, buffers A and B of `elements` floats (both zeroed) and the
    /// info words `[elements, bits of 1.0]`.
    ///
    /// # Errors
    ///
    /// [`FloorError::Unavailable`] when the driver or the device cannot be used;
    /// [`FloorError::Failed`] naming the step otherwise: `kernels` zero or odd (the chain
    /// must end in A), `elements` zero or needing more blocks than a grid holds, or a
    /// failed driver call. Whatever was made is freed.
    pub fn new(ordinal: i32, elements: u64, kernels: usize) -> Result<Self, FloorError> {
        let invalid = |what: &'static str, value: String, why: &'static str| FloorError::Failed {
            step: "checking its shape",
            source: ServerError::invalid(what, value, why),
        };
        if kernels == 0 || kernels % 2 == 1 {
            return Err(invalid(
                "kernel count",
                kernels.to_string(),
                "the chain takes a positive even number of kernels, so it ends in A",
            ));
        }
        let blocks = elements.div_ceil(FLOOR_ELEMENTS_PER_BLOCK);
        if elements == 0 || blocks > i32::MAX as u64 {
            return Err(invalid(
                "element count",
                elements.to_string(),
                "the chain covers 1 to 2^31 - 1 blocks of 256 floats",
            ));
        }
        let gpu = CudaBackend::new(ordinal)?.gpu;
        // A module load may not overlap a capture of the context: made only while no
        // window of it records (rule 25).
        let objects = gpu
            .domain()
            .at_rest(|| Self::build(&gpu, elements))
            .ok_or_else(|| FloorError::Failed {
                step: "loading the builtins",
                source: ServerError::graph_state(
                    "load",
                    "a capture window of the driver context records; a module load now \
                     would break it",
                ),
            })??;
        let mut floor = Floor {
            gpu,
            objects: Some(objects),
            elements,
            kernels,
            grid: [blocks as u32, 1, 1],
            output: vec![0.0; elements as usize],
            readback: vec![0; elements as usize * 4],
        };
        floor.reset(&vec![0.0; elements as usize])?;
        Ok(floor)
    }

    /// Makes every object; on an error, what was made is freed as it drops.
    fn build(gpu: &Arc<Gpu>, elements: u64) -> Result<Objects, FloorError> {
        let _current = raw::Current::enter(gpu.context).map_err(at("entering its context"))?;
        let mut o = Objects {
            gpu: Arc::clone(gpu),
            kernel: None,
            stream: 0,
            a: 0,
            b: 0,
            info: 0,
            pinned: 0,
        };
        let source = CudaKernelSource::builtin(Builtin::AddScalar);
        o.kernel = Some(kernels::load(gpu, &source).map_err(at("loading the builtins"))?);
        o.stream = raw::stream_create().map_err(at("creating its stream"))?;
        let pool = PoolName {
            memory: MemoryKind::Device,
            pool: PoolKind::Dynamic,
        };
        let bytes = elements * 4;
        o.a = raw::mem_alloc(bytes, pool).map_err(at("allocating buffer A"))?;
        o.b = raw::mem_alloc(bytes, pool).map_err(at("allocating buffer B"))?;
        let info_bytes = (Builtin::INFO_WORDS * 8) as u64;
        o.info = raw::mem_alloc(info_bytes, pool).map_err(at("allocating the info words"))?;
        let host = PoolName {
            memory: MemoryKind::Host,
            pool: PoolKind::Dynamic,
        };
        o.pinned = raw::host_alloc(bytes, host).map_err(at("allocating pinned read-back"))?;
        Ok(o)
    }

    fn objects(&self) -> &Objects {
        self.objects
            .as_ref()
            .expect("a floor keeps its objects until it drops")
    }

    /// Writes `values` into A and zeros into B, for a pass to start from (and the info
    /// words again), and waits for the copies.
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] when `values` does not hold exactly `elements` floats, or a
    /// copy fails.
    pub fn reset(&mut self, values: &[f32]) -> Result<(), FloorError> {
        let step = "resetting its buffers";
        if values.len() as u64 != self.elements {
            return Err(FloorError::Failed {
                step,
                source: ServerError::invalid(
                    "values",
                    format!("{} floats", values.len()),
                    format!("the floor's buffers hold {} floats", self.elements),
                ),
            });
        }
        let _current = raw::Current::enter(self.gpu.context).map_err(at(step))?;
        let o = self.objects();
        let a: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        raw::copy_bytes_to_device(o.a, &a, o.stream).map_err(at(step))?;
        raw::copy_bytes_to_device(o.b, &vec![0; a.len()], o.stream).map_err(at(step))?;
        let info = Builtin::AddScalar.info(self.elements, ONE);
        let info: Vec<u8> = info.iter().flat_map(|w| w.to_le_bytes()).collect();
        raw::copy_bytes_to_device(o.info, &info, o.stream).map_err(at(step))
    }

    /// The eager floor: `kernels` launches on the floor's stream, a copy of A into
    /// pinned memory behind them, one `cuStreamSynchronize`, then A into
    /// [`Floor::output`].
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] naming the failed step (a driver call).
    pub fn eager_pass(&mut self) -> Result<FloorPass, FloorError> {
        let step = "running an eager pass";
        let start = Instant::now();
        let _current = raw::Current::enter(self.gpu.context).map_err(at(step))?;
        let o = self.objects();
        let (a, b, info, stream) = (o.a, o.b, o.info, o.stream);
        let function = o.kernel.as_ref().expect("built").function;
        let bytes = self.elements * 4;
        // The library's argument layout: a pointer and a length per buffer, the info
        // pointer last.
        let words = |v: [u64; 5]| v.map(raw::Argument::Word);
        let even = words([a, bytes, b, bytes, info]);
        let odd = words([b, bytes, a, bytes, info]);
        for i in 0..self.kernels {
            let args = if i % 2 == 0 { &even } else { &odd };
            raw::launch(function, self.grid, [BLOCK, 1, 1], 0, stream, args).map_err(at(step))?;
        }
        let enqueue = start.elapsed();
        // The copy goes behind the launches on the same stream: one synchronisation
        // covers both.
        let pinned = o.pinned;
        raw::copy_to_pinned(pinned, a, bytes as usize, stream).map_err(at(step))?;
        raw::stream_sync(stream).map_err(at(step))?;
        raw::read_host(pinned, &mut self.readback);
        for (v, b) in self.output.iter_mut().zip(self.readback.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(FloorPass {
            enqueue,
            total: start.elapsed(),
        })
    }

    /// The last copy of A (zeros before the first pass).
    pub fn output(&self) -> &[f32] {
        &self.output
    }

    /// The floats in each buffer.
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// The launches a pass makes.
    pub fn kernels(&self) -> usize {
        self.kernels
    }

    /// The blocks of each launch: `[ceil(elements / 256), 1, 1]`, of 64 threads each.
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        // Freed now if no window of the context records, else when its last one closes.
        if let Some(objects) = self.objects.take() {
            self.gpu.domain().release_at_rest(Box::new(objects));
        }
    }
}
