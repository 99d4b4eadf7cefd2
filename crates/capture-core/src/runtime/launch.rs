//! Kernel registration and the launch calls a user makes: the launch check against the
//! kernel's signature and the device's limits (rule 22's closure check first), then
//! `enqueue` onto the pooled stream, whose lock the launch path runs under
//! (`launch_path`: the shared resolution, then `launch_eager` or `launch_recorded`).

use std::borrow::Cow;

use super::buffer::Arg;
use super::device::Device;
use super::registry::KernelRegistry;
use crate::arg_value::ArgValue;
use crate::builtin::{Builtin, Builtins};
use crate::driver::Backend;
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::kernel::{Dims, KernelSignature};
use crate::subject::Subject;
use crate::trace::{KernelId, Ran, WorkId};

/// A kernel registered with a device. It is loaded on its first launch, which must come
/// before any capture window that uses it opens (warmup does that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelHandle {
    id: KernelId,
    device: u64,
    /// Copied from the registry, so the launch check takes no lock.
    signature: KernelSignature,
    /// Whether the signature alone fits the device's limits, asked once
    /// (`KernelSignature::fits`): its launches check only what they pass.
    fits: bool,
}

impl KernelHandle {
    /// The kernel's id in traces.
    pub fn id(&self) -> KernelId {
        self.id
    }

    /// What the kernel takes, as it was registered.
    pub fn signature(&self) -> KernelSignature {
        self.signature
    }
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
            fits: signature.fits(&self.inner.limits),
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
    ///   declares, an empty grid or one beyond the device's limits; a programmatic
    ///   launch ([`Dims::programmatic`]) of a kernel that does not declare its wait, or
    ///   on a device without them (`what: "programmatic launch"`, naming the kernel).
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
        self.inner.closure_check(stream, "launch")?;
        if kernel.device != self.inner.serial {
            return Err(ServerError::invalid_of(
                "kernel",
                Subject::Kernel {
                    kernel: kernel.id,
                    name: "".into(),
                },
                "the kernel was registered with another device",
            ));
        }
        kernel.signature.check_launch_on(
            || Subject::Kernel {
                kernel: kernel.id,
                name: self.kernel_name(kernel),
            },
            &self.inner.limits,
            &dims,
            args.iter().map(Arg::shape),
            info.len(),
            kernel.fits,
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
        self.inner.closure_check(stream, "work")?;
        let name = B::work_name(work);
        if let Some(i) = args.iter().position(|a| a.buffer().is_none()) {
            return Err(ServerError::invalid(
                "argument",
                ArgValue::argument(i, "a scalar"),
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

    /// Enqueues (or records) `job` over `args` on `stream`'s pooled stream, the buffers
    /// of other pooled streams resolved on their own streams first.
    fn enqueue(&self, stream: StreamId, job: Job<'_, B>, args: &[Arg]) -> Result<(), ServerError> {
        let index = self.inner.pooled(stream);
        let all_here = args
            .iter()
            .filter_map(Arg::as_buffer)
            .all(|a| a.buffer.pooled == index);
        if all_here {
            // The arguments are checked under the lock, once (`Inner::launch_on`).
            let mut ps = self.inner.cells[index].lock();
            return self.inner.launch_on(&mut ps, stream, job, args, Ok(&[]));
        }
        // Before another stream is asked for anything: each buffer is of this device,
        // its range inside it.
        for arg in args.iter().filter_map(Arg::as_buffer) {
            self.inner.check_buffer(&arg.buffer)?;
            let range = arg.buffer.range(arg.offset, arg.len)?;
            self.inner.limits.check_binding(
                arg.buffer.id(),
                range.start(),
                range.len(),
                arg.buffer.size(),
            )?;
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
    pub(crate) fn ran(&self) -> Ran {
        match self {
            Job::Kernel { id, .. } => Ran::Kernel(*id),
            Job::Work { id, .. } => Ran::Work(*id),
        }
    }

    /// Whether its grid is a slot, or bounded (a kernel's only).
    pub(crate) fn grid_slotted(&self) -> bool {
        matches!(self, Job::Kernel { dims, .. } if dims.grid_slot().is_some() || dims.is_bounded())
    }
}
