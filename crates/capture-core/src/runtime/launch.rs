//! Kernel registration and launches: the launch check against the kernel's signature
//! and the device's limits, lazy loading (never inside a window), info words through the
//! metadata cache, propagation of claimed inputs, and the launch's taint scope.

use std::borrow::Cow;
use std::sync::Arc;

use super::buffer::Arg;
use super::closure::ClosureScope;
use super::device::Device;
use super::inner::Inner;
use super::pooled::PooledStream;
use super::registry::KernelRegistry;
use crate::builtin::{Builtin, Builtins};
use crate::capture::Recording;
use crate::driver::{Backend, DeviceResource, DeviceStream, LaunchBuffer, LaunchParam};
use crate::drop_queue::Pending;
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::info_cache::Inserted;
use crate::kernel::{Dims, KernelSignature};
use crate::memory::{ClaimKey, MemoryLocation};
use crate::range::ByteRange;
use crate::trace::{Event, KernelId, Ran, WorkId};

/// A kernel registered with a device. It is loaded on its first launch, which must come
/// before any capture window that uses it opens (warmup does that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelHandle {
    id: KernelId,
    device: u64,
    /// Copied from the registry, so the launch check takes no lock.
    signature: KernelSignature,
}

impl KernelHandle {
    /// The kernel's id in traces.
    pub fn id(&self) -> KernelId {
        self.id
    }
}

/// A buffer of another pooled stream, resolved there before the launch.
pub(crate) struct Remote<R> {
    arg: usize,
    resource: R,
    location: MemoryLocation,
}

impl<B: Backend> Device<B> {
    /// Registers a kernel with the signature its source declares; it is loaded on its
    /// first launch.
    ///
    /// ```
    /// # use capture_graphs::{Device, DeviceConfig, KernelSignature};
    /// use capture_graphs::mock::{MockBackend, MockKernel};
    ///
    /// // A mock kernel is a Rust function over the launch's buffers and info words.
    /// const NEGATE: MockKernel = MockKernel {
    ///     name: "negate",
    ///     signature: KernelSignature::new(1, 0),
    ///     f: |bufs, _info| bufs[0].iter_mut().for_each(|b| *b = !*b),
    /// };
    /// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let k = dev.kernel(NEGATE);
    /// assert_eq!(dev.kernel_name(&k), "negate");
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    pub fn kernel(&self, source: B::KernelSource) -> KernelHandle {
        let mut kernels = self.inner.kernel_registry();
        self.register(&mut kernels, source)
    }

    /// The handle of `builtin`, registered on first use: every later call returns the
    /// same handle, so a program need not keep them.
    ///
    /// ```
    /// # use capture_graphs::{Builtin, Device, DeviceConfig};
    /// # use capture_graphs::mock::MockBackend;
    /// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let add = dev.builtin(Builtin::AddScalar);
    /// assert_eq!(dev.builtin("add_scalar".parse()?), add);
    /// assert_eq!(dev.kernel_by_name("add_scalar"), Some(add));
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    pub fn builtin(&self, builtin: Builtin) -> KernelHandle
    where
        B: Builtins,
    {
        let mut kernels = self.inner.kernel_registry();
        if let Some((id, signature)) = kernels.builtin(builtin) {
            return self.handle(id, signature);
        }
        let handle = self.register(&mut kernels, B::builtin(builtin));
        kernels.set_builtin(builtin, handle.id);
        handle
    }

    /// The first kernel registered under `name` (the name its source gives it, as
    /// [`kernel_name`](Self::kernel_name) reports it), if any.
    pub fn kernel_by_name(&self, name: &str) -> Option<KernelHandle> {
        let (id, signature) = self.inner.kernel_registry().find(name)?;
        Some(self.handle(id, signature))
    }

    fn register(&self, kernels: &mut KernelRegistry<B>, source: B::KernelSource) -> KernelHandle {
        let name = B::kernel_name(&source);
        let (id, signature) = kernels.register(source, name.clone());
        self.inner.trace.kernel(id, name);
        self.handle(id, signature)
    }

    fn handle(&self, id: KernelId, signature: KernelSignature) -> KernelHandle {
        KernelHandle {
            id,
            device: self.inner.serial,
            signature,
        }
    }

    /// The name a registered kernel was given.
    pub fn kernel_name(&self, kernel: &KernelHandle) -> Cow<'static, str> {
        self.inner.trace.kernel_name(kernel.id)
    }

    /// Launches `kernel` over `args` with `info` words (empty for none) on `stream`:
    /// enqueued outside a window, recorded inside the caller's window.
    ///
    /// A launch whose input carries a failure is skipped and passes the failure on to its
    /// outputs. Buffers of other pooled streams are waited for first (rule 18).
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let (x, y) = (dev.alloc(s, 16)?, dev.alloc(s, 16)?);
    /// dev.write(s, &x, 0, [3.0f32; 4].map(f32::to_le_bytes).concat())?;
    /// let mul = dev.builtin(Builtin::MulScalar);
    /// let args = [Arg::read(&x), Arg::write(&y)];
    /// dev.launch(s, &mul, [1, 1, 1], &args, &Builtin::MulScalar.info(4, 2.0))?;
    /// assert_eq!(dev.read(s, &y)?, [6.0f32; 4].map(f32::to_le_bytes).concat());
    /// // One buffer short of the kernel's signature: refused before any backend sees it.
    /// assert!(dev.launch(s, &mul, [1, 1, 1], &args[..1], &Builtin::MulScalar.info(4, 2.0)).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// - [`ServerError::InvalidArgument`] for a kernel of another device, or a launch
    ///   that does not fit: more than [`MAX_LAUNCH_BUFFERS`](crate::MAX_LAUNCH_BUFFERS)
    ///   buffers, a buffer count or info-word count other than the kernel's signature
    ///   declares, an empty grid or one beyond the device's limits.
    /// - [`ServerError::InvalidBinding`] for a range outside its buffer, one starting at an
    ///   offset the device cannot bind, or one longer than the device binds.
    /// - [`ServerError::NeighbourRefused`] while another stream's window holds the
    ///   pooled stream.
    /// - [`ServerError::Unwritten`] when skipped because an input was claimed.
    /// - The driver's refusal to load or enqueue; inside a window every failure dooms it.
    pub fn launch(
        &self,
        stream: StreamId,
        kernel: &KernelHandle,
        dims: impl Into<Dims>,
        args: &[Arg],
        info: &[u64],
    ) -> Result<(), ServerError> {
        let dims = dims.into();
        let launched = self.launch_checked(stream, kernel, dims, args, info);
        self.inner.labels.named(launched)
    }

    /// Launches `kernel`, a kernel that takes no info words (the usual user kernel: its
    /// buffers and scalars are all it takes), over `args` on `stream`: as
    /// [`launch`](Self::launch) with no info words.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Device, DeviceConfig, KernelSignature, Param, StreamId};
    /// # use capture_graphs::mock::{MockBackend, MockKernel};
    /// const SCALE: MockKernel = MockKernel {
    ///     name: "scale",
    ///     signature: KernelSignature::of(&[Param::READ_WRITE, Param::scalar::<f32>()]),
    ///     f: |bufs, words| {
    ///         let a = f32::from_bits(words[0] as u32);
    ///         for c in bufs[0].chunks_exact_mut(4) {
    ///             let v = f32::from_le_bytes(c.try_into().unwrap()) * a;
    ///             c.copy_from_slice(&v.to_le_bytes());
    ///         }
    ///     },
    /// };
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let (k, y) = (dev.kernel(SCALE), dev.alloc(s, 16)?);
    /// dev.write_values(s, &y, 0, &[2.0f32; 4])?;
    /// dev.dispatch(s, &k, [1, 1, 1], &[Arg::read_write(&y), Arg::scalar(3.0f32)])?;
    /// assert_eq!(dev.read_values::<f32>(s, &y)?, [6.0; 4]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`launch`](Self::launch); a kernel that takes info words is refused
    /// ([`ServerError::InvalidArgument`] naming the count it takes).
    pub fn dispatch(
        &self,
        stream: StreamId,
        kernel: &KernelHandle,
        dims: impl Into<Dims>,
        args: &[Arg],
    ) -> Result<(), ServerError> {
        self.launch(stream, kernel, dims, args, &[])
    }

    fn launch_checked(
        &self,
        stream: StreamId,
        kernel: &KernelHandle,
        dims: Dims,
        args: &[Arg],
        info: &[u64],
    ) -> Result<(), ServerError> {
        ClosureScope::check(self.inner.serial, stream, "launch")?;
        if kernel.device != self.inner.serial {
            return Err(ServerError::invalid(
                "kernel",
                format!("kernel#{}", kernel.id.index()),
                "the kernel was registered with another device",
            ));
        }
        kernel.signature.check_launch(
            || self.kernel_name(kernel),
            &self.inner.limits,
            &dims,
            args.iter().map(Arg::shape),
            info.len(),
        )?;
        let job = Job::Kernel {
            id: kernel.id,
            dims,
            info,
        };
        self.enqueue(stream, job, args)
    }

    /// Runs the user's own `work` (a library call, commands of its own) on `stream` over
    /// the buffer ranges `args` declare, with their accesses: to the rules it is a
    /// launch. Its inputs are checked (a claimed one skips it, passing the failure on),
    /// its outputs claimed while it runs and settled after, other streams' uses ordered
    /// before it (rule 18), every buffer pinned by a graph that records it (rule 7: a
    /// library workspace declared as a read-write argument is the graph's for its life),
    /// and a failure inside a window dooms it. Warmup runs it; the window records it. The
    /// device keeps a clone of `work` (and what it references) until the device, or the
    /// graph that recorded it, is done with it.
    ///
    /// What `work` is depends on the backend: on CUDA a closure given the raw stream and
    /// each range's device address (a cuBLAS or NCCL call goes there), on Vulkan one
    /// given the command buffer being recorded and each range's buffer, offset and size,
    /// on the mock a host function over exactly the declared bytes, which runs when the
    /// queue reaches it (on every replay too). Where the library cannot check what the
    /// work touches, making it is `unsafe`, and its `# Safety` list says what the caller
    /// guarantees.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Device, DeviceConfig, StreamId};
    /// use capture_graphs::mock::{MockBackend, MockWork};
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let (x, y) = (dev.alloc(s, 16)?, dev.alloc(s, 16)?);
    /// dev.write_values(s, &x, 0, &[1u32, 2, 3, 4])?;
    /// // A "library call" of the caller's own: y = x reversed.
    /// let reverse = MockWork::new("reverse", |ranges| {
    ///     let (x, y) = ranges.split_at_mut(1);
    ///     y[0].copy_from_slice(&x[0]);
    ///     y[0].reverse();
    ///     Ok(())
    /// });
    /// let g = dev.capture(s, |d| d.foreign_work(s, &[Arg::read(&x), Arg::write(&y)], reverse.clone()))?;
    /// dev.write_values(s, &x, 0, &[5u32, 6, 7, 8])?;
    /// dev.replay(s, &g, 1)?;
    /// let mut out = [0u8; 16];
    /// dev.read_into(s, &y, 0, &mut out)?;
    /// assert_eq!(out[15], 5, "the replay ran the work again, over the new input");
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// - [`ServerError::InvalidArgument`] for a scalar argument (work takes buffers only)
    ///   or more buffers than a launch binds on this device.
    /// - As [`launch`](Self::launch) for ranges, neighbours, claimed inputs; the work's
    ///   own error, which inside a window dooms it.
    pub fn foreign_work(
        &self,
        stream: StreamId,
        args: &[Arg],
        work: B::Work,
    ) -> Result<(), ServerError> {
        let ran = self.foreign_work_checked(stream, args, &work);
        self.inner.labels.named(ran)
    }

    fn foreign_work_checked(
        &self,
        stream: StreamId,
        args: &[Arg],
        work: &B::Work,
    ) -> Result<(), ServerError> {
        ClosureScope::check(self.inner.serial, stream, "work")?;
        let name = B::work_name(work);
        if let Some(i) = args.iter().position(|a| a.buffer().is_none()) {
            return Err(ServerError::invalid(
                "argument",
                format!("a scalar for argument {i}"),
                format!("work {name} takes buffers only (its own values are its own)"),
            ));
        }
        if args.len() > self.inner.limits.max_buffers() {
            return Err(ServerError::invalid(
                "buffer count",
                args.len(),
                format!(
                    "work {name}: a launch binds at most {} buffers on this device",
                    self.inner.limits.max_buffers()
                ),
            ));
        }
        let id = self.inner.trace.work(name);
        self.enqueue(stream, Job::Work { id, work }, args)
    }

    /// Checks `args`' buffers and ranges, resolves the buffers of other pooled streams,
    /// and enqueues (or records) `job` on `stream`'s pooled stream.
    fn enqueue(&self, stream: StreamId, job: Job<'_, B>, args: &[Arg]) -> Result<(), ServerError> {
        for arg in args.iter().filter_map(Arg::as_buffer) {
            self.inner.check_buffer(&arg.buffer)?;
            let range = arg.buffer.range(arg.offset, arg.len)?;
            self.inner
                .limits
                .check_binding(arg.buffer.id(), range.start(), range.len())?;
        }
        let index = self.inner.pooled(stream);
        let all_here = args
            .iter()
            .filter_map(Arg::as_buffer)
            .all(|a| a.buffer.pooled == index);
        if all_here {
            let mut ps = self.inner.cells[index].lock();
            return self.inner.launch_on(&mut ps, stream, job, args, Ok(&[]));
        }
        let remote = self.inner.resolve_remote(index, args);
        let remote = remote.as_deref().map_err(Clone::clone);
        let mut ps = self.inner.cells[index].lock();
        self.inner.launch_on(&mut ps, stream, job, args, remote)
    }
}

/// What a launch slot runs: a registered kernel, or the user's own work.
pub(crate) enum Job<'a, B: Backend> {
    /// A kernel launch: the kernel, how it runs, its info words.
    Kernel {
        id: KernelId,
        dims: Dims,
        info: &'a [u64],
    },
    /// The user's own work, its name interned in the trace.
    Work { id: WorkId, work: &'a B::Work },
}

impl<B: Backend> Job<'_, B> {
    /// What the trace names it by.
    fn ran(&self) -> Ran {
        match self {
            Job::Kernel { id, .. } => Ran::Kernel(*id),
            Job::Work { id, .. } => Ran::Work(*id),
        }
    }
}

impl<B: Backend> Inner<B> {
    /// Resolves the buffers of other pooled streams on their own streams. Their order
    /// is kept by the launch's stream, on the device (rule 18).
    fn resolve_remote(
        &self,
        index: usize,
        args: &[Arg],
    ) -> Result<Vec<Remote<DeviceResource<B::Stream>>>, ServerError> {
        let mut remote = Vec::new();
        let mut others: Vec<usize> = args
            .iter()
            .filter_map(Arg::as_buffer)
            .map(|a| a.buffer.pooled)
            .filter(|&p| p != index)
            .collect();
        others.sort_unstable();
        others.dedup();
        for other in others {
            let wanted: Vec<(usize, ClaimKey)> = args
                .iter()
                .enumerate()
                .filter_map(|(i, a)| a.as_buffer().map(|a| (i, a)))
                .filter(|(_, a)| a.buffer.pooled == other)
                .map(|(i, a)| {
                    let range = a
                        .buffer
                        .range(a.offset, a.len)
                        .unwrap_or(ByteRange::from_bounds(0, 1));
                    (
                        i,
                        ClaimKey {
                            memory: a.buffer.id(),
                            range,
                        },
                    )
                })
                .collect();
            let resolved = self.cells[other].run(move |ps| {
                let mut out = Vec::with_capacity(wanted.len());
                for (arg, key) in wanted {
                    let location = ps.stream.device_memory().location(key.memory)?;
                    let resource = ps.stream.device_memory().resource(key)?;
                    out.push(Remote {
                        arg,
                        resource,
                        location,
                    });
                }
                Ok::<_, ServerError>(out)
            })?;
            remote.extend(resolved);
        }
        Ok(remote)
    }

    /// The loaded kernel, loading it first if it never was (rule 10: never inside a
    /// window).
    fn loaded_kernel(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        id: KernelId,
    ) -> Result<(Arc<B::Kernel>, Cow<'static, str>), ServerError> {
        let (source, name) = {
            let kernels = self.kernel_registry();
            let entry = kernels.get(id)?;
            if let Some(loaded) = &entry.loaded {
                return Ok((Arc::clone(loaded), entry.name.clone()));
            }
            (Arc::clone(&entry.source), entry.name.clone())
        };
        if ps.stream.capturing().is_recording() {
            let cause = ServerError::graph_state(
                "load",
                format!("kernel {name} was first loaded inside the window; launch it in warmup"),
            );
            return Err(self.doom(ps, stream, Cow::Owned(format!("load {name}")), cause));
        }
        // Rule 20: decided and done under the capture state, so no `begin` on another
        // thread can start recording between the check and the load.
        let loaded = self
            .captures
            .status()
            .with_recording(|recording| match recording {
                Some(recording) if B::load_breaks_capture() => {
                    let whose = match recording {
                        Recording::Here(owner) => format!("{owner} is recording"),
                        Recording::Elsewhere(owner) => format!(
                            "{owner} of another device on the same driver context is recording"
                        ),
                    };
                    let error = ServerError::graph_state(
                        "load",
                        format!("{whose}: loading kernel {name} would invalidate its capture"),
                    );
                    Err(error)
                }
                _ => B::load(&mut ps.stream, &source).map(Arc::new),
            });
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                if matches!(error, ServerError::GraphState { .. }) {
                    self.refused(stream, "load", &error);
                }
                return Err(error);
            }
        };
        let loaded = self.kernel_registry().set_loaded(id, loaded);
        self.trace.push(Event::Load { stream, kernel: id });
        Ok((loaded, name))
    }

    /// The info buffer holding `words`, from the cache or freshly written (rule 5's
    /// warm cache makes a window's launches hit).
    fn info_buffer(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        words: &[u64],
    ) -> Result<Option<DeviceResource<B::Stream>>, ServerError> {
        if words.is_empty() {
            return Ok(None);
        }
        self.forget_lost_uploads(ps);
        let hit = ps.stream.info_cache().get(words).map(|h| h.id());
        let recording = ps.stream.capturing().is_recording();
        let unwritten = ps.stream.info_cache().is_uploaded(words) == Some(false);
        let id = match hit {
            // Only a recorded upload wrote this entry (its window was aborted, or its
            // graph has not replayed yet), or its upload was lost to an asynchronous
            // error: upload the words now, or record an upload in this window unless its
            // own recording holds one already (rule 8's copy, kept for the graph's life).
            Some(id)
                if unwritten && (!recording || !ps.stream.info_cache().upload_recorded(words)) =>
            {
                let len = (words.len() * 8) as u64;
                let key = ClaimKey {
                    memory: id,
                    range: ByteRange::from_bounds(0, len),
                };
                let destination = ps.stream.device_memory().resource(key)?;
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                let staging = self.stage(ps, stream, &bytes, &destination)?;
                if recording {
                    ps.stream.info_cache().record_upload(words);
                } else {
                    ps.drops.push(staging);
                    ps.stream.info_cache().set_uploaded(words, true);
                }
                id
            }
            Some(id) => id,
            None => {
                let len = (words.len() * 8) as u64;
                // Outside any graph pool's memory: the cache's entries outlive its
                // members, and launches outside the pool read them (rule 23).
                let handle = self.reserve_placed(ps, stream, len, false)?;
                let key = ClaimKey {
                    memory: handle.id(),
                    range: ByteRange::from_bounds(0, len),
                };
                let destination = ps.stream.device_memory().resource(key)?;
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                let staging = self.stage(ps, stream, &bytes, &destination)?;
                if !ps.stream.capturing().is_recording() {
                    ps.drops.push(staging);
                }
                let id = handle.id();
                match ps.stream.info_cache().insert(words, handle)? {
                    Inserted::Cached { evicted } => {
                        if recording {
                            ps.stream.info_cache().record_upload(words);
                        }
                        for old in evicted {
                            ps.drops.push(old);
                        }
                    }
                    Inserted::Refused { value, .. } => {
                        // Not cached: the launch still needs it until the device is done.
                        ps.drops.push(value);
                    }
                }
                id
            }
        };
        let location = ps.stream.device_memory().bind(id)?;
        ps.stream.capturing().touch(stream, location);
        let size = (words.len() * 8) as u64;
        let resource = ps.stream.device_memory().resource(ClaimKey {
            memory: id,
            range: ByteRange::from_bounds(0, size),
        })?;
        Ok(Some(resource))
    }

    pub(crate) fn launch_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        job: Job<'_, B>,
        args: &[Arg],
        remote: Result<&[Remote<DeviceResource<B::Stream>>], ServerError>,
    ) -> Result<(), ServerError> {
        self.neighbour(ps, stream, "launch")?;
        let recording = ps.stream.capturing().is_recording();
        let ran = job.ran();
        let result = self.launch_inner(ps, stream, job, args, remote);
        match result {
            // Rule 11: whatever failed inside the window dooms it (a doomed window
            // keeps its first failure).
            // The launch's outputs are claimed too: the window's recording never names
            // a launch that failed.
            Err(error) if recording => {
                let outputs = std::mem::take(&mut ps.outputs);
                self.claim(&outputs, &error);
                ps.outputs = outputs;
                if matches!(error, ServerError::Doomed(_)) {
                    return Err(error);
                }
                let name = self.trace.ran_name(ran);
                Err(self.doom(ps, stream, name, error))
            }
            result => result,
        }
    }

    fn launch_inner(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        job: Job<'_, B>,
        args: &[Arg],
        remote: Result<&[Remote<DeviceResource<B::Stream>>], ServerError>,
    ) -> Result<(), ServerError> {
        let recording = ps.stream.capturing().is_recording();
        ps.bindings.clear();
        ps.inputs.clear();
        ps.outputs.clear();
        for arg in args.iter().filter_map(Arg::as_buffer) {
            let range = arg.buffer.range(arg.offset, arg.len)?;
            let binding = arg.buffer.binding(range, arg.access);
            if arg.access.reads() {
                ps.inputs.push(binding.claim_key());
            }
            if arg.access.writes() {
                ps.outputs.push(binding.claim_key());
            }
            ps.bindings.push(binding);
        }
        let (loaded, name) = match &job {
            Job::Kernel { id, .. } => match self.loaded_kernel(ps, stream, *id) {
                Ok((k, name)) => (Some(k), name),
                Err(error) => {
                    // Inside a window the caller claims them, once.
                    if !recording {
                        let outputs = std::mem::take(&mut ps.outputs);
                        self.claim(&outputs, &error);
                        ps.outputs = outputs;
                    }
                    return Err(error);
                }
            },
            Job::Work { id, .. } => (None, self.trace.work_name(*id)),
        };
        let what = match job {
            Job::Kernel { .. } => "launch",
            Job::Work { .. } => "work",
        };
        if recording {
            // Nothing runs inside the window: the ledger is left alone. The bytes of an
            // input the window did not write itself must be readable, or the window is
            // doomed; bytes it wrote first are rewritten by every replay before the read.
            for i in 0..ps.inputs.len() {
                let key = ps.inputs[i];
                ps.unwritten.clear();
                ps.stream
                    .capturing()
                    .unwritten_parts(key, &mut ps.unwritten);
                for j in 0..ps.unwritten.len() {
                    if let Err(mut error) = self.taint().check_read(ps.unwritten[j]) {
                        if let ServerError::Unwritten(u) = &mut error {
                            u.by = Some(format!("recorded {what} of {name} on {stream}").into());
                        }
                        return Err(self.doom(ps, stream, name, error));
                    }
                }
            }
        } else if let Err(error) = self.taint().propagate(
            name.clone(),
            stream,
            ps.inputs.iter().copied(),
            ps.outputs.iter().copied(),
        ) {
            // A claimed input: skip, pass the failure on (rule 14's eager twin).
            let mut error = error;
            if let ServerError::Unwritten(u) = &mut error {
                self.trace.push(Event::Skip {
                    stream,
                    op: name.clone(),
                    failure: u.failure,
                });
                u.by = Some(format!("{what} of {name} on {stream}").into());
            }
            return Err(error);
        }
        let remote = match remote {
            Ok(remote) => remote,
            Err(error) => return Err(self.fail_launch(ps, error)),
        };
        // Rule 18: after every other stream's use of these buffers, on the device.
        // Inside a window nothing runs: each replay is ordered instead.
        if !recording {
            let (inputs, outputs) = (
                std::mem::take(&mut ps.inputs),
                std::mem::take(&mut ps.outputs),
            );
            let ordered = self.order_device(ps, &inputs, &outputs);
            (ps.inputs, ps.outputs) = (inputs, outputs);
            if let Err(error) = ordered {
                return Err(self.fail_launch(ps, error));
            }
        }
        let info = match &job {
            Job::Kernel { info, .. } => match self.info_buffer(ps, stream, info) {
                Ok(info) => info,
                Err(error) => return Err(self.fail_launch(ps, error)),
            },
            Job::Work { .. } => None,
        };
        ps.params.clear();
        ps.buffers.clear();
        let mut b = 0;
        for (i, arg) in args.iter().enumerate() {
            let Some(buffer_arg) = arg.as_buffer() else {
                if let super::buffer::ArgKind::Scalar(v) = &arg.0 {
                    ps.params.push(LaunchParam::Scalar(*v));
                }
                continue;
            };
            let binding = &ps.bindings[b];
            b += 1;
            let (resource, location) = match remote.iter().find(|f| f.arg == i) {
                Some(f) => {
                    // Rule 7: the graph keeps another stream's buffer for its life.
                    ps.stream
                        .capturing()
                        .pin_foreign(buffer_arg.buffer.handle.binding());
                    (f.resource.clone(), f.location)
                }
                None => {
                    let memory = ps.stream.device_memory();
                    let location = match memory.bind(binding.memory()) {
                        Ok(l) => l,
                        Err(error) => return Err(self.fail_launch(ps, error)),
                    };
                    match memory.resource(binding.claim_key()) {
                        Ok(r) => (r, location),
                        Err(error) => return Err(self.fail_launch(ps, error)),
                    }
                }
            };
            ps.stream.capturing().touch(binding.stream(), location);
            let buffer = LaunchBuffer {
                resource,
                access: binding.access(),
            };
            match job {
                Job::Kernel { .. } => ps.params.push(LaunchParam::Buffer(buffer)),
                Job::Work { .. } => ps.buffers.push(buffer),
            }
        }
        let enqueue = |ps: &mut PooledStream<B>| match &job {
            Job::Kernel { dims, .. } => B::launch(
                &mut ps.stream,
                loaded.as_deref().expect("a kernel job has its kernel"),
                dims,
                &ps.params,
                info.as_ref(),
            ),
            Job::Work { work, .. } => B::run_work(&mut ps.stream, work, &ps.buffers),
        };
        let ran = job.ran();
        if recording {
            return match enqueue(ps) {
                Ok(()) => {
                    self.trace.launch(
                        stream,
                        ran,
                        ps.bindings.iter().map(|b| (b.claim_key(), b.access())),
                        true,
                    );
                    if let Job::Work { work, .. } = &job
                        && !B::EXECUTABLE_HOLDS_WORK
                    {
                        // What the work references stays with the graph (rule 7's twin
                        // for the user's objects), unless its executable holds it.
                        ps.stream.capturing().keep(Box::new((*work).clone()));
                    }
                    ps.stream.capturing().record(ps.bindings.drain(..));
                    Ok(())
                }
                Err(error) => Err(self.doom(ps, stream, name, error)),
            };
        }
        let scope = self
            .taint()
            .enter(name.clone(), ps.outputs.iter().copied())?;
        match enqueue(ps) {
            Ok(()) => {
                self.taint().settle(scope);
                self.trace.launch(
                    stream,
                    ran,
                    ps.bindings.iter().map(|b| (b.claim_key(), b.access())),
                    false,
                );
                let (inputs, outputs) = (
                    std::mem::take(&mut ps.inputs),
                    std::mem::take(&mut ps.outputs),
                );
                self.used(
                    ps,
                    &inputs,
                    &outputs,
                    args.iter()
                        .filter_map(Arg::as_buffer)
                        .map(|a| a.buffer.handle.binding()),
                );
                (ps.inputs, ps.outputs) = (inputs, outputs);
                if let Job::Work { work, .. } = &job {
                    // The device may still run it: what it references waits for a fence.
                    ps.drops.push(Pending::other((*work).clone(), 0));
                }
                self.maybe_flush(ps, stream);
                Ok(())
            }
            Err(error) => {
                self.fail_scope(scope, &ps.outputs, &error);
                Err(error)
            }
        }
    }

    /// A launch that failed before it was enqueued: its outputs are claimed with the
    /// error (inside a window, by `launch_on`, which dooms it).
    fn fail_launch(&self, ps: &mut PooledStream<B>, error: ServerError) -> ServerError {
        if !ps.stream.capturing().is_recording() {
            let outputs = std::mem::take(&mut ps.outputs);
            self.claim(&outputs, &error);
            ps.outputs = outputs;
        }
        error
    }
}
