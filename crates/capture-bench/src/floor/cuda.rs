//! [`Floor`] on CUDA: the benchmark's hand-written eager floor, the same work as the
//! library's chain benchmark with no runtime in between. A bare `cuLaunchKernel` loop
//! of `kernels` dependent launches of the shipped builtin `add_scalar` (capture-cuda's
//! own image, [`SHIPPED_CUBINS`] or [`SHIPPED`], its argument layout and info words,
//! adding 1.0, in blocks of 64 threads as the library launches it) over `elements`
//! floats ping-ponging between device buffers A and B (launch `i` reads A and writes B
//! when `i` is even, the other way when odd), all on one stream, then a copy of all of
//! A into pinned host memory enqueued behind them, and one `cuStreamSynchronize`.
//!
//! There is no replay floor here: the benchmark compares replays against PyTorch's CUDA
//! graph instead (`xtask/gpu/torch_graph.py`).
//!
//! It talks to the driver itself (`libcuda.so.1`, loaded at run time: `cuda/raw.rs`),
//! in the device's primary context, retained as the library retains it (shared with any
//! backend on the same ordinal in the process); its module, stream and buffers are its
//! own. A module load or a free may not overlap a capture of the context, so it is made
//! and dropped only while no window of the library's records there: `capture bench`
//! makes it between rows, on the thread that runs them.

use std::ffi::{CString, c_int};
use std::time::Instant;

use capture_graphs::Builtin;
use capture_graphs::cuda::{SHIPPED, SHIPPED_CUBINS};

use super::{FloorError, FloorPass};

mod raw;

/// Elements per block the floor launches: `ceil(elements / 256)` blocks (of 64 threads,
/// with a grid-stride loop), the grid the benchmark's library launches use.
pub const ELEMENTS_PER_BLOCK: u64 = 256;

/// Threads per block: the library's block for its builtins.
const BLOCK: [u32; 3] = [64, 1, 1];

/// The add-one chain's scalar.
const ONE: f32 = 1.0;

/// A failed driver call during `step`.
fn at(step: &'static str) -> impl Fn(raw::Call) -> FloorError {
    move |call| FloorError::Failed {
        step,
        why: call.to_string(),
    }
}

/// What the floor made in the context, freed on drop (the context current).
#[derive(Debug, Default)]
struct Objects {
    module: raw::Object,
    function: raw::Object,
    stream: raw::Object,
    a: u64,
    b: u64,
    info: u64,
    /// Pinned host memory A is copied into.
    pinned: raw::Object,
}

/// The floor: the driver, the retained primary context, a stream, buffers A and B, the
/// info words and the builtins' module.
pub struct Floor {
    driver: raw::Driver,
    device: c_int,
    context: raw::Object,
    objects: Objects,
    elements: u64,
    kernels: usize,
    grid: [u32; 3],
    output: Vec<f32>,
    /// A's bytes as the last pass copied them back.
    readback: Vec<u8>,
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

/// The shipped image for compute capability `major.minor`: the cubin built for it, else
/// the PTX of the newest virtual architecture it runs (NUL-terminated), else none.
fn image(major: c_int, minor: c_int) -> Option<Vec<u8>> {
    let arch = major * 10 + minor;
    if let Some((_, cubin)) = SHIPPED_CUBINS
        .iter()
        .find(|(a, _)| *a == format!("sm_{arch}"))
    {
        return Some(cubin.to_vec());
    }
    SHIPPED
        .iter()
        .filter_map(|(a, ptx)| Some((a.strip_prefix("compute_")?.parse::<c_int>().ok()?, ptx)))
        .filter(|(a, _)| *a <= arch)
        .max_by_key(|(a, _)| *a)
        .and_then(|(_, ptx)| CString::new(*ptx).ok())
        .map(CString::into_bytes_with_nul)
}

impl Floor {
    /// Loads the driver, retains device `ordinal`'s primary context, loads the builtins'
    /// image for it, and makes a non-blocking stream, buffers A and B of `elements`
    /// floats (both zeroed) and the info words `[elements, bits of 1.0]`. Make it only
    /// while no capture of the device's context records (see the module's docs).
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] naming the step for `kernels` zero or odd (the chain must
    /// end in A) or `elements` zero or needing more blocks than a grid holds, before the
    /// driver is touched; [`FloorError::Unavailable`] when the driver cannot be loaded,
    /// is the toolkit's stub or finds no device; [`FloorError::Failed`] for a failed
    /// driver call or no shipped image for the device. Whatever was made is freed.
    pub fn new(ordinal: i32, elements: u64, kernels: usize) -> Result<Self, FloorError> {
        let invalid = |why: String| FloorError::Failed {
            step: "checking its shape",
            why,
        };
        if kernels == 0 || kernels % 2 == 1 {
            return Err(invalid(format!(
                "kernel count {kernels}: the chain takes a positive even number of kernels, \
                 so it ends in A"
            )));
        }
        let blocks = elements.div_ceil(ELEMENTS_PER_BLOCK);
        if elements == 0 || blocks > i32::MAX as u64 {
            return Err(invalid(format!(
                "element count {elements}: the chain covers 1 to 2^31 - 1 blocks of 256 floats"
            )));
        }
        let driver = raw::Driver::load().map_err(FloorError::Unavailable)?;
        match driver.init() {
            Ok(()) => {}
            Err(e) if matches!(e.code, raw::NO_DEVICE | raw::STUB_LIBRARY) => {
                return Err(FloorError::Unavailable(e.to_string()));
            }
            Err(e) => return Err(at("initialising the driver")(e)),
        }
        let device = driver.device(ordinal).map_err(at("opening its device"))?;
        let capability = driver
            .attribute(device, raw::CAPABILITY.0)
            .and_then(|major| Ok((major, driver.attribute(device, raw::CAPABILITY.1)?)))
            .map_err(at("reading its compute capability"))?;
        let context = driver
            .retain_primary(device)
            .map_err(at("retaining the primary context"))?;
        let mut floor = Floor {
            driver,
            device,
            context,
            objects: Objects::default(),
            elements,
            kernels,
            grid: [blocks as u32, 1, 1],
            output: vec![0.0; elements as usize],
            readback: vec![0; elements as usize * 4],
        };
        // From here an error drops `floor`, which frees what was made.
        floor.build(capability)?;
        floor.reset(&vec![0.0; elements as usize])?;
        Ok(floor)
    }

    /// Makes every object in the context.
    fn build(&mut self, (major, minor): (c_int, c_int)) -> Result<(), FloorError> {
        let step = "loading the builtins";
        let image = image(major, minor).ok_or_else(|| FloorError::Failed {
            step,
            why: format!("no shipped image runs on compute {major}.{minor}"),
        })?;
        let previous = self
            .driver
            .enter(self.context)
            .map_err(at("entering its context"))?;
        let built = (|| {
            let (d, o) = (&self.driver, &mut self.objects);
            o.module = d.load_module(&image).map_err(at(step))?;
            let name = CString::new(Builtin::AddScalar.name()).expect("no NUL");
            o.function = d.function(o.module, &name).map_err(at(step))?;
            o.stream = d.stream().map_err(at("creating its stream"))?;
            let bytes = self.elements * 4;
            o.a = d.alloc(bytes).map_err(at("allocating buffer A"))?;
            o.b = d.alloc(bytes).map_err(at("allocating buffer B"))?;
            let info_bytes = (Builtin::INFO_WORDS * 8) as u64;
            o.info = d
                .alloc(info_bytes)
                .map_err(at("allocating the info words"))?;
            o.pinned = d
                .host_alloc(bytes)
                .map_err(at("allocating pinned read-back"))?;
            Ok(())
        })();
        self.driver.leave(previous);
        built
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
                why: format!(
                    "{} floats given, the floor's buffers hold {} floats",
                    values.len(),
                    self.elements
                ),
            });
        }
        let (d, o) = (&self.driver, &self.objects);
        let previous = d.enter(self.context).map_err(at(step))?;
        let a: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let info: Vec<u8> = Builtin::AddScalar
            .info(self.elements, ONE)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let copied = d
            .upload(o.a, &a, o.stream)
            .and_then(|()| d.upload(o.b, &vec![0; a.len()], o.stream))
            .and_then(|()| d.upload(o.info, &info, o.stream))
            .map_err(at(step));
        d.leave(previous);
        copied
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
        let (d, o) = (&self.driver, &self.objects);
        let previous = d.enter(self.context).map_err(at(step))?;
        let bytes = self.elements * 4;
        // The library's argument layout: a pointer and a length per buffer, the info
        // pointer last.
        let even = [o.a, bytes, o.b, bytes, o.info];
        let odd = [o.b, bytes, o.a, bytes, o.info];
        let mut ran = Ok(());
        for i in 0..self.kernels {
            let words = if i % 2 == 0 { &even } else { &odd };
            ran = d.launch(o.function, self.grid, BLOCK, o.stream, words);
            if ran.is_err() {
                break;
            }
        }
        let enqueue = start.elapsed();
        // The copy goes behind the launches on the same stream: one synchronisation
        // covers both.
        let ran = ran
            .and_then(|()| d.download(o.pinned, o.a, bytes as usize, o.stream))
            .and_then(|()| d.sync(o.stream));
        if ran.is_ok() {
            d.read_pinned(o.pinned, &mut self.readback);
        }
        d.leave(previous);
        ran.map_err(at(step))?;
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
        let (d, o) = (&self.driver, &self.objects);
        match d.enter(self.context) {
            Ok(previous) => {
                if o.stream != 0 {
                    // Nothing may be pending when the buffers go.
                    let _ = d.sync(o.stream);
                }
                for ptr in [o.a, o.b, o.info] {
                    if ptr != 0 {
                        d.free(ptr);
                    }
                }
                if o.pinned != 0 {
                    d.host_free(o.pinned);
                }
                if o.stream != 0 {
                    d.destroy_stream(o.stream);
                }
                if o.module != 0 {
                    d.unload_module(o.module);
                }
                d.leave(previous);
            }
            Err(error) => {
                tracing::warn!(target: "capture", %error, "the CUDA floor could not be freed");
            }
        }
        d.release_primary(self.device);
    }
}
