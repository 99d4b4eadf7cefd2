//! The launch model, and what a launch must fit, checked by the core before any backend
//! sees it: the kernel's [`KernelSignature`] (an ordered list of [`Param`]s, declared
//! when it is registered), the launch's [`Dims`] (grid, block, dynamic shared memory,
//! whether it may overlap its predecessor), and the device's [`LaunchLimits`] (declared
//! by the backend once).
//!
//! A programmatic dependent launch ([`Dims::programmatic`], CUDA's
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`) lets the device start a
//! kernel while the kernel before it on the stream finishes; the kernel itself waits for
//! its predecessor's results (`cudaGridDependencySynchronize`, PTX `griddepcontrol.wait`)
//! before it reads them. The core allows it only where both sides say so: the kernel's
//! signature declares the wait ([`KernelSignature::with_grid_dependency_wait`]; a kernel
//! that reads its inputs without waiting would read bytes its predecessor has not
//! written yet), and the device runs such launches ([`ProgrammaticLaunch`] in its
//! limits: CUDA on compute capability 9.0 or later; never Vulkan or the mock). Anything
//! else is refused before the backend sees it, as every other launch check is.

use crate::arg_value::ArgValue;
use crate::error::ServerError;
use crate::ids::{KernelId, MemoryId};
use crate::memory::{Access, SLICE_ALIGNMENT};
use crate::scalar_type::{ScalarParam, ScalarType, type_name};
use crate::slot_table::SlotName;
use crate::stop_flag::DeviceLoops;
use crate::subject::Subject;

/// How many workgroups (blocks) a launch runs, per dimension.
pub type Grid = [u32; 3];

/// The most buffers one launch binds on any device (a device may bind fewer:
/// [`LaunchLimits::max_buffers`]).
pub const MAX_LAUNCH_BUFFERS: usize = 32;

/// The most parameters a kernel takes (buffers and scalars together).
pub const MAX_KERNEL_PARAMS: usize = 64;

/// The largest scalar passed by value, in bytes (a plain struct of 2, 4 and 8-byte
/// fields).
pub const MAX_SCALAR_BYTES: usize = 64;

/// One parameter of a kernel, in the order the kernel takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// A buffer (or a range of one) the kernel reads, writes or both. A launch's
    /// [`Arg`](crate::Arg) must say the same access: an access the kernel does not make
    /// is refused, in either direction, since taint and cross-stream order follow the
    /// `Arg`.
    Buffer(Access),
    /// A buffer whose access the kernel does not declare: each launch's `Arg` says it
    /// (the form [`KernelSignature::new`] makes).
    AnyBuffer,
    /// A value passed by value, of `bytes` bytes: 1, 2, 4 or 8, or an array or plain
    /// struct of such fields (a multiple of 4, at most [`MAX_SCALAR_BYTES`]; a larger
    /// type's size is kept as `u16::MAX`, which every launch check refuses). `element` is
    /// the type of its fields where they share one ([`Param::scalar`] of a number or an
    /// array of numbers): a backend that reflects its kernels (Vulkan) refuses a kernel
    /// whose parameter is of another type. `None` (a struct, [`Param::scalar_struct`])
    /// checks the size alone.
    Scalar {
        /// Its size in bytes.
        bytes: u16,
        /// The type of every field, where they share one.
        element: Option<ScalarType>,
    },
}

/// A size in bytes as the launch model keeps it: past `u16::MAX`, `u16::MAX` (larger
/// than any scalar a launch passes, so refused), never cut to its low bits.
const fn saturate_u16(size: usize) -> u16 {
    if size > u16::MAX as usize {
        u16::MAX
    } else {
        size as u16
    }
}

impl Param {
    /// A buffer the kernel reads.
    pub const READ: Param = Param::Buffer(Access::Read);
    /// A buffer the kernel writes.
    pub const WRITE: Param = Param::Buffer(Access::Write);
    /// A buffer the kernel reads and writes in place.
    pub const READ_WRITE: Param = Param::Buffer(Access::ReadWrite);

    /// A scalar of type `T`, passed by value (`Param::scalar::<u32>()`,
    /// `Param::scalar::<[f32; 2]>()`): its size, and its fields' type.
    pub const fn scalar<T: ScalarParam>() -> Param {
        Param::Scalar {
            bytes: saturate_u16(std::mem::size_of::<T>()),
            element: Some(T::ELEMENT),
        }
    }

    /// A plain `#[repr(C)]` struct `T` passed by value, whose fields are of several types:
    /// its size is checked, its fields' types by no backend.
    pub const fn scalar_struct<T>() -> Param {
        Param::Scalar {
            bytes: saturate_u16(std::mem::size_of::<T>()),
            element: None,
        }
    }

    /// The size of a scalar parameter, `None` for a buffer.
    pub const fn scalar_bytes(self) -> Option<u16> {
        match self {
            Param::Scalar { bytes, .. } => Some(bytes),
            _ => None,
        }
    }

    /// What fills the unused tail of a signature's parameter array.
    const UNUSED: Param = Param::Scalar {
        bytes: 0,
        element: None,
    };

    /// Whether this is a buffer parameter.
    pub const fn is_buffer(self) -> bool {
        matches!(self, Param::Buffer(_) | Param::AnyBuffer)
    }

    /// Where a scalar of `size` bytes starts after `offset` bytes of scalars: at its
    /// alignment, which is its size for 2, 4 and 8 bytes, 8 for a struct whose size is a
    /// multiple of 8, else 4. The layout the backends pass scalars in (Vulkan's push
    /// constants, the mock's words), the same as a `#[repr(C)]` struct of them.
    pub const fn scalar_offset(offset: u32, size: u16) -> u32 {
        let align = match size {
            1 | 2 | 4 => size as u32,
            s if s % 8 == 0 => 8,
            _ => 4,
        };
        offset.div_ceil(align) * align
    }
}

/// What a kernel takes: its parameters in order (buffers with their access, and scalars
/// passed by value), how many 64-bit info words (handed to it in a buffer the core keeps
/// and caches, the form the builtins use), where the kernel fixes it, its block
/// (workgroup) shape, and whether it waits for its grid dependency first (so it may be
/// a programmatic dependent launch). A kernel declares it when it is registered; every
/// launch of it must fit.
///
/// ```
/// use capture_graphs::{KernelSignature, Param};
///
/// // y = a * x + b over n elements: x read, y written, n and (a, b) by value.
/// const AXPB: KernelSignature = KernelSignature::of(&[
///     Param::READ,
///     Param::WRITE,
///     Param::scalar::<u32>(),
///     Param::scalar::<[f32; 2]>(),
/// ]);
/// assert_eq!((AXPB.buffers(), AXPB.scalars()), (2, 2));
/// // n at 0; (a, b) at 8: an 8-byte value aligns to 8, as CUDA's float2 and a
/// // Vulkan vec2 do.
/// assert_eq!(AXPB.scalar_bytes(), 16);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelSignature {
    params: [Param; MAX_KERNEL_PARAMS],
    len: u8,
    info_words: u32,
    block: Option<[u32; 3]>,
    waits_for_grid: bool,
}

/// An info-word count as a signature keeps it: past `u32::MAX` words (32 GiB), `u32::MAX`.
const fn saturate_u32(words: usize) -> u32 {
    if words > u32::MAX as usize {
        u32::MAX
    } else {
        words as u32
    }
}

impl KernelSignature {
    /// A kernel over `buffers` buffers whose access it does not declare (each launch's
    /// `Arg` says it) and `info_words` info words (0 for none: the kernel then gets no
    /// info buffer). The form the library's first kernels took; on CUDA such a kernel
    /// takes each buffer as a pointer and a length, then the info words' pointer.
    pub const fn new(buffers: usize, info_words: usize) -> Self {
        let mut params = [Param::AnyBuffer; MAX_KERNEL_PARAMS];
        let mut i = buffers;
        while i < MAX_KERNEL_PARAMS {
            params[i] = Param::UNUSED;
            i += 1;
        }
        Self {
            params,
            len: if buffers > MAX_KERNEL_PARAMS {
                u8::MAX
            } else {
                buffers as u8
            },
            info_words: saturate_u32(info_words),
            block: None,
            waits_for_grid: false,
        }
    }

    /// A kernel taking `params`, in order (more than [`MAX_KERNEL_PARAMS`] makes a
    /// signature every launch is refused with).
    pub const fn of(params: &[Param]) -> Self {
        let mut all = [Param::UNUSED; MAX_KERNEL_PARAMS];
        let mut i = 0;
        while i < params.len() && i < MAX_KERNEL_PARAMS {
            all[i] = params[i];
            i += 1;
        }
        Self {
            params: all,
            len: if params.len() > MAX_KERNEL_PARAMS {
                u8::MAX
            } else {
                params.len() as u8
            },
            info_words: 0,
            block: None,
            waits_for_grid: false,
        }
    }

    /// The same kernel, also taking `words` info words.
    pub const fn with_info(mut self, words: usize) -> Self {
        self.info_words = saturate_u32(words);
        self
    }

    /// The same kernel, whose block (workgroup) shape is fixed at `block` (a Vulkan
    /// shader's `local_size`): a launch that gives another is refused.
    pub const fn with_block(mut self, block: [u32; 3]) -> Self {
        self.block = Some(block);
        self
    }

    /// The same kernel, declaring that it waits for its grid dependency before it reads
    /// or writes any memory: on CUDA it calls `cudaGridDependencySynchronize()` (PTX
    /// `griddepcontrol.wait`) first, so its predecessor on the stream has finished and
    /// its writes are visible before this kernel touches a byte. Only such a
    /// kernel may be launched with [`Dims::programmatic`]; the declaration changes
    /// nothing for a launch that does not ask for it (the wait returns at once when the
    /// launch has no programmatic dependency).
    pub const fn with_grid_dependency_wait(mut self) -> Self {
        self.waits_for_grid = true;
        self
    }

    /// Whether the kernel declares that it waits for its grid dependency
    /// ([`with_grid_dependency_wait`](Self::with_grid_dependency_wait)).
    pub const fn waits_for_grid_dependency(&self) -> bool {
        self.waits_for_grid
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Param] {
        &self.params[..usize::from(self.len).min(MAX_KERNEL_PARAMS)]
    }

    /// How many buffers the kernel binds.
    pub fn buffers(&self) -> usize {
        self.params().iter().filter(|p| p.is_buffer()).count()
    }

    /// How many scalars it takes by value.
    pub fn scalars(&self) -> usize {
        self.params().len() - self.buffers()
    }

    /// The bytes of its scalars laid out in order ([`Param::scalar_offset`]), padded to
    /// 4 bytes.
    pub fn scalar_bytes(&self) -> u32 {
        let mut end = 0;
        for p in self.params() {
            if let Some(size) = p.scalar_bytes() {
                end = Param::scalar_offset(end, size) + u32::from(size);
            }
        }
        end.div_ceil(4) * 4
    }

    /// Whether every buffer's access is left to the launch (made by [`new`](Self::new)).
    pub fn undeclared(&self) -> bool {
        self.params().iter().all(|p| matches!(p, Param::AnyBuffer))
    }

    /// How many info words the kernel reads.
    pub const fn info_words(&self) -> usize {
        self.info_words as usize
    }

    /// Whether the kernel gets an info buffer.
    pub const fn has_info(&self) -> bool {
        self.info_words > 0
    }

    /// The block shape the kernel fixes, if it does.
    pub const fn block(&self) -> Option<[u32; 3]> {
        self.block
    }

    /// Checks a launch of `args` (each a buffer with its access, or a scalar of its
    /// size), `info_words` info words and `dims` against this signature and `limits`;
    /// `name` names the kernel, asked only for an error.
    #[cfg(test)]
    pub(crate) fn check_launch(
        &self,
        kernel: impl Fn() -> Subject,
        limits: &LaunchLimits,
        dims: &Dims,
        args: impl ExactSizeIterator<Item = ArgShape>,
        info_words: usize,
    ) -> Result<(), ServerError> {
        self.check_launch_on(kernel, limits, dims, args, info_words, false)
    }

    /// Whether the signature alone fits `limits`: its parameter count, its scalars'
    /// sizes, its buffer count and its parameter bytes. A handle keeps the answer for
    /// its device, and its launches skip those checks ([`check_launch_on`]).
    ///
    /// [`check_launch_on`]: Self::check_launch_on
    pub(crate) fn fits(&self, limits: &LaunchLimits) -> bool {
        let shapes = self.params().iter().map(|p| match *p {
            Param::Scalar { bytes, element } => ArgShape::Scalar(usize::from(bytes), element),
            Param::Buffer(access) => ArgShape::Buffer(access),
            Param::AnyBuffer => ArgShape::Buffer(Access::ReadWrite),
        });
        let no_subject = || Subject::Kernel {
            kernel: KernelId(u32::MAX),
            name: "".into(),
        };
        self.check_launch_on(
            no_subject,
            limits,
            &Dims::grid([1, 1, 1]),
            shapes,
            self.info_words(),
            false,
        )
        .is_ok()
    }

    /// [`check_launch`](Self::check_launch), the signature's own checks left out when it
    /// `fits` the device (as [`fits`](Self::fits) said for these `limits`): the order
    /// in which the rest refuses is the same either way.
    pub(crate) fn check_launch_on(
        &self,
        kernel: impl Fn() -> Subject,
        limits: &LaunchLimits,
        dims: &Dims,
        args: impl ExactSizeIterator<Item = ArgShape>,
        info_words: usize,
        fits: bool,
    ) -> Result<(), ServerError> {
        if !fits && usize::from(self.len) > MAX_KERNEL_PARAMS {
            return Err(ServerError::invalid_of(
                "kernel signature",
                kernel(),
                format!("a kernel takes at most {MAX_KERNEL_PARAMS} parameters"),
            ));
        }
        let params = self.params();
        if args.len() != params.len() {
            return Err(ServerError::invalid_value_of(
                "argument count",
                args.len(),
                kernel(),
                format!(
                    "it takes {} parameters ({} buffers, {} scalars)",
                    params.len(),
                    self.buffers(),
                    self.scalars()
                ),
            ));
        }
        for (i, (arg, param)) in args.zip(params).enumerate() {
            match (arg, *param) {
                (ArgShape::Buffer(_), Param::AnyBuffer) => {}
                (ArgShape::Buffer(given), Param::Buffer(declared)) if given == declared => {}
                (ArgShape::Buffer(given), Param::Buffer(declared)) => {
                    return Err(ServerError::invalid_value_of(
                        "argument access",
                        ArgValue::argument(i, format!("{given:?}")),
                        kernel(),
                        format!(
                            "it declares {declared:?} there: an argument's access must be the \
                             kernel's, or taint and cross-stream order would follow the wrong one"
                        ),
                    ));
                }
                (
                    ArgShape::Scalar(given, element),
                    Param::Scalar {
                        bytes: declared,
                        element: declared_element,
                    },
                ) if given == usize::from(declared) => {
                    // A typed parameter takes a value of its own type, never bytes of
                    // the right size meaning something else (an f32 read as a u32
                    // index); a struct parameter takes any value of its size.
                    if let Some(want) = declared_element
                        && element != Some(want)
                    {
                        return Err(ServerError::invalid_value_of(
                            "scalar type",
                            ArgValue::argument(i, type_name(given, element)),
                            kernel(),
                            format!(
                                "it takes {} there: pass a value of that type",
                                type_name(given, Some(want))
                            ),
                        ));
                    }
                }
                (
                    ArgShape::Scalar(given, _),
                    Param::Scalar {
                        bytes: declared, ..
                    },
                ) => {
                    return Err(ServerError::invalid_value_of(
                        "scalar size",
                        ArgValue::argument(i, ArgValue::Bytes(given as u64)),
                        kernel(),
                        format!("it takes a {declared}-byte scalar there"),
                    ));
                }
                (
                    ArgShape::Buffer(_),
                    Param::Scalar {
                        bytes: declared, ..
                    },
                ) => {
                    return Err(ServerError::invalid_value_of(
                        "argument",
                        ArgValue::argument(i, "a buffer"),
                        kernel(),
                        format!("it takes a {declared}-byte scalar there"),
                    ));
                }
                (ArgShape::Scalar(given, _), _) => {
                    return Err(ServerError::invalid_value_of(
                        "argument",
                        ArgValue::argument(i, format!("a {given}-byte scalar")),
                        kernel(),
                        "it takes a buffer there",
                    ));
                }
            }
        }
        for p in params.iter().filter(|_| !fits) {
            if let Some(size) = p.scalar_bytes()
                && (size == 0
                    || usize::from(size) > MAX_SCALAR_BYTES
                    || !(matches!(size, 1 | 2) || size % 4 == 0))
            {
                return Err(ServerError::invalid_value_of(
                    "scalar size",
                    ArgValue::Bytes(u64::from(size)),
                    kernel(),
                    format!(
                        "a scalar is 1, 2 or a multiple of 4 bytes, at most {MAX_SCALAR_BYTES}"
                    ),
                ));
            }
        }
        if info_words != self.info_words() {
            return Err(ServerError::invalid_value_of(
                "info words",
                info_words,
                kernel(),
                format!("it takes {} info words", self.info_words()),
            ));
        }
        if fits {
            return self.check_dims(&kernel, limits, dims);
        }
        let buffers = self.buffers();
        if buffers > limits.max_buffers {
            return Err(ServerError::invalid_value_of(
                "buffer count",
                buffers,
                kernel(),
                format!(
                    "a launch binds at most {} buffers on this device",
                    limits.max_buffers
                ),
            ));
        }
        let pointers = buffers + usize::from(self.has_info());
        let param_bytes =
            u64::from(self.scalar_bytes()) + pointers as u64 * u64::from(limits.pointer_bytes);
        if param_bytes > u64::from(limits.max_param_bytes) {
            return Err(ServerError::invalid_value_of(
                "parameter bytes",
                param_bytes,
                kernel(),
                format!(
                    "this device passes at most {} bytes of parameters to a kernel{}",
                    limits.max_param_bytes,
                    if limits.pointer_bytes > 0 {
                        format!(" ({} per buffer)", limits.pointer_bytes)
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        self.check_dims(&kernel, limits, dims)
    }

    /// The grid and block of a launch against this signature and `limits`, and its
    /// programmatic setting.
    fn check_dims(
        &self,
        kernel: &impl Fn() -> Subject,
        limits: &LaunchLimits,
        dims: &Dims,
    ) -> Result<(), ServerError> {
        dims.check(kernel, self.block, limits)?;
        if dims.programmatic {
            if !self.waits_for_grid {
                return Err(ServerError::invalid_of(
                    "programmatic launch",
                    kernel(),
                    "the kernel does not declare that it waits for its grid dependency \
                     (KernelSignature::with_grid_dependency_wait): started while its \
                     predecessor finishes, it would read bytes not yet written",
                ));
            }
            if let ProgrammaticLaunch::Unsupported(why) = limits.programmatic {
                return Err(ServerError::invalid_of(
                    "programmatic launch",
                    kernel(),
                    why,
                ));
            }
        }
        Ok(())
    }
}

/// A scalar argument's bytes, held inline (a launch allocates nothing for it), with the
/// type of its fields where they share one (a number, or an array of numbers): a
/// launch and a slot update are checked against the type the kernel declares, not the
/// size alone.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScalarValue {
    len: u32,
    element: Option<ScalarType>,
    bytes: [u8; MAX_SCALAR_BYTES],
}

impl ScalarValue {
    /// `bytes` as a scalar whose fields are all `element` (`None`: a plain struct of
    /// several types); more than [`MAX_SCALAR_BYTES`] keeps only the length, and the
    /// launch check refuses it.
    pub(crate) fn of(bytes: &[u8], element: Option<ScalarType>) -> Self {
        let mut inline = [0; MAX_SCALAR_BYTES];
        if bytes.len() <= MAX_SCALAR_BYTES {
            inline[..bytes.len()].copy_from_slice(bytes);
        }
        Self {
            len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
            element,
            bytes: inline,
        }
    }

    /// The type of its fields, where they share one; `None` for a struct
    /// ([`Arg::scalar_struct`](crate::Arg::scalar_struct)).
    pub fn element(&self) -> Option<ScalarType> {
        self.element
    }

    /// The value's size in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it has no bytes (never, for a scalar the check let through).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value's bytes, in the host's byte order.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len().min(MAX_SCALAR_BYTES)]
    }
}

impl std::fmt::Debug for ScalarValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.element {
            Some(t) => write!(f, "Scalar({t}: {:02x?})", self.bytes()),
            None => write!(f, "Scalar({:02x?})", self.bytes()),
        }
    }
}

/// What one launch argument is, as the launch check sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgShape {
    /// A buffer with the access the argument gives.
    Buffer(Access),
    /// A scalar of this many bytes, and its fields' type where they share one.
    Scalar(usize, Option<ScalarType>),
}

/// How a launch runs: its grid (workgroups, CUDA's blocks), its block (workgroup) shape
/// where the launch gives one, its dynamic shared-memory bytes, and whether it may start
/// while the launch before it finishes ([`programmatic`](Self::programmatic)). A
/// `[u32; 3]` is a grid alone: the kernel's own block (the shader's on Vulkan, the kernel
/// source's on CUDA), no dynamic shared memory, in stream order.
///
/// ```
/// use capture_graphs::Dims;
///
/// let dims = Dims::grid([8, 1, 1]).block([256, 1, 1]).shared_bytes(1024);
/// assert_eq!(dims.block_shape(), Some([256, 1, 1]));
/// assert_eq!(Dims::from([4, 1, 1]).block_shape(), None);
/// assert!(!dims.is_programmatic() && dims.programmatic(true).is_programmatic());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dims {
    grid: Grid,
    block: Option<[u32; 3]>,
    shared: u32,
    programmatic: bool,
    /// The largest grid a slot update may set ([`up_to`](Self::up_to)).
    bound: Option<Grid>,
    /// The grid's slot, inside a window ([`slot`](Self::slot)).
    slot: Option<SlotName>,
}

impl Dims {
    /// `grid` workgroups, the kernel's own block, no dynamic shared memory.
    pub const fn grid(grid: Grid) -> Self {
        Self {
            grid,
            block: None,
            shared: 0,
            programmatic: false,
            bound: None,
            slot: None,
        }
    }

    /// A grid of `max` workgroups that a slot update may shrink, never grow: the
    /// same as `Dims::grid(max).up_to(max)`. Name the slot with [`slot`](Self::slot).
    pub const fn grid_up_to(max: Grid) -> Self {
        Self::grid(max).up_to(max)
    }

    /// The same launch with its grid bounded by `max`: a slot update
    /// ([`GraphHandle::set_grid`](crate::GraphHandle::set_grid)) may set any grid up to
    /// `max` in every dimension, and the kernel reads its real extent from a scalar or a
    /// buffer. The launch's grid must be within `max`. A grid slot without a bound is
    /// bounded by its recorded grid.
    pub const fn up_to(mut self, max: Grid) -> Self {
        self.bound = Some(max);
        self
    }

    /// The same launch with its grid a slot called `name`: inside a capture window, the
    /// sealed graph's grid for this launch changes only through
    /// [`GraphHandle::set_grid`](crate::GraphHandle::set_grid) under that name, within
    /// the bound ([`up_to`](Self::up_to), or the recorded grid). Outside a window the
    /// name does nothing. Several launches may share one grid slot: an update sets all.
    pub fn slot(mut self, name: &str) -> Self {
        self.slot = Some(SlotName::new(name));
        self
    }

    /// Whether the launch bounds its grid ([`up_to`](Self::up_to)).
    pub const fn is_bounded(&self) -> bool {
        self.bound.is_some()
    }

    /// The grid's slot, when it has one.
    pub const fn grid_slot(&self) -> Option<SlotName> {
        self.slot
    }

    /// The largest grid a slot update may set: the bound, or the grid itself.
    pub fn grid_bound(&self) -> Grid {
        self.bound.unwrap_or(self.grid)
    }

    /// The same launch over `grid`, its bound and slot kept (an update's).
    pub(crate) const fn with_grid(mut self, grid: Grid) -> Self {
        self.grid = grid;
        self
    }

    /// The same launch with blocks of `block` threads.
    pub const fn block(mut self, block: [u32; 3]) -> Self {
        self.block = Some(block);
        self
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn shared_bytes(mut self, bytes: u32) -> Self {
        self.shared = bytes;
        self
    }

    /// The same launch, allowed (`true`) to start while the kernel before it on the
    /// stream finishes: a programmatic dependent launch (CUDA's
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`; recorded in a capture, a
    /// programmatic edge of the graph). What is left of a replayed graph's cost is on
    /// the device, each kernel's launch waiting for its predecessor's end; this overlaps
    /// the two.
    ///
    /// The kernel must declare that it waits for its predecessor's results first
    /// ([`KernelSignature::with_grid_dependency_wait`]), and the device must run such
    /// launches ([`ProgrammaticLaunch`]: CUDA on compute capability 9.0 or later). Vulkan
    /// and the mock have none: there such a launch is refused, not run in order, so code
    /// that counts on the overlap learns it is not there. A refused launch changes
    /// nothing (no claim, no recording, the window not doomed).
    pub const fn programmatic(mut self, on: bool) -> Self {
        self.programmatic = on;
        self
    }

    /// Whether the launch may overlap its predecessor ([`programmatic`](Self::programmatic)).
    pub const fn is_programmatic(&self) -> bool {
        self.programmatic
    }

    /// The grid.
    pub const fn grid_shape(&self) -> Grid {
        self.grid
    }

    /// The block shape, where the launch gives one.
    pub const fn block_shape(&self) -> Option<[u32; 3]> {
        self.block
    }

    /// The dynamic shared-memory bytes per block.
    pub const fn shared(&self) -> u32 {
        self.shared
    }

    fn check(
        &self,
        kernel: impl Fn() -> Subject,
        fixed: Option<[u32; 3]>,
        limits: &LaunchLimits,
    ) -> Result<(), ServerError> {
        let grid = self.grid;
        if let Some(bound) = self.bound {
            if bound.contains(&0) || bound.iter().zip(limits.max_grid).any(|(&g, max)| g > max) {
                return Err(ServerError::invalid(
                    "grid bound",
                    bound,
                    format!(
                        "a bound runs 1 to {:?} workgroups per dimension on this device",
                        limits.max_grid
                    ),
                ));
            }
            if grid.iter().zip(bound).any(|(&g, b)| g > b) {
                return Err(ServerError::invalid(
                    "grid",
                    grid,
                    format!("the launch bounds its grid by {bound:?}"),
                ));
            }
        }
        if grid.contains(&0) {
            return Err(ServerError::invalid(
                "grid",
                grid,
                "every dimension runs at least one workgroup",
            ));
        }
        if grid.iter().zip(limits.max_grid).any(|(&g, max)| g > max) {
            return Err(ServerError::invalid(
                "grid",
                grid,
                format!(
                    "this device runs at most {:?} workgroups per dimension",
                    limits.max_grid
                ),
            ));
        }
        if let Some(block) = self.block {
            if let Some(fixed) = fixed
                && fixed != block
            {
                return Err(ServerError::invalid_value_of(
                    "block",
                    block,
                    kernel(),
                    format!("it runs blocks of {fixed:?} (its own)"),
                ));
            }
            let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
            if block.contains(&0)
                || block.iter().zip(limits.max_block).any(|(&b, max)| b > max)
                || threads > u64::from(limits.max_threads)
            {
                return Err(ServerError::invalid(
                    "block",
                    block,
                    format!(
                        "this device runs blocks of 1 to {:?} threads per dimension, at most {} \
                         in all",
                        limits.max_block, limits.max_threads
                    ),
                ));
            }
        }
        if self.shared > limits.max_shared_bytes {
            return Err(ServerError::invalid(
                "shared memory",
                ArgValue::Bytes(u64::from(self.shared)),
                if limits.max_shared_bytes == 0 {
                    "this device gives a launch no dynamic shared memory (a kernel declares its \
                     own)"
                        .to_string()
                } else {
                    format!(
                        "this device gives a block at most {} bytes of dynamic shared memory",
                        limits.max_shared_bytes
                    )
                },
            ));
        }
        Ok(())
    }
}

impl From<Grid> for Dims {
    fn from(grid: Grid) -> Self {
        Dims::grid(grid)
    }
}

/// What a device can bind and run, declared by the backend once per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    binding_alignment: u64,
    max_binding_bytes: u64,
    max_grid: Grid,
    max_block: [u32; 3],
    max_threads: u32,
    max_shared_bytes: u32,
    max_param_bytes: u32,
    pointer_bytes: u32,
    max_buffers: usize,
    programmatic: ProgrammaticLaunch,
    graph_updates: GraphUpdates,
    loops: DeviceLoops,
}

/// Whether a device's graphs change after their seal through their slots (rules 26 and
/// 27: [`Arg::slot`](crate::Arg::slot), [`Dims::slot`]). Declared by the backend in its
/// [`LaunchLimits`]; where they cannot, a launch naming a slot inside a window is
/// refused with [`ServerError::SlotRefused`], so no graph promises what it cannot keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphUpdates {
    /// The backend updates a sealed graph's recorded launches, each update seen only by
    /// replays enqueued after it.
    Supported,
    /// It does not, for the reason given.
    Unsupported(&'static str),
}

/// Whether a device runs programmatic dependent launches ([`Dims::programmatic`]): a
/// kernel started while its predecessor on the stream finishes, waiting for its results
/// itself. Declared by the backend in its [`LaunchLimits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgrammaticLaunch {
    /// The device runs them (CUDA on compute capability 9.0 or later).
    Supported,
    /// It does not, for the reason given (what a refused launch's error says: the
    /// backend and why).
    Unsupported(&'static str),
}

impl LaunchLimits {
    /// A device that binds ranges starting at multiples of `binding_alignment` bytes
    /// and at most `max_binding_bytes` long, and runs at most `max_grid` workgroups per
    /// dimension; blocks of at most 1,024 threads ([1024, 1024, 64]), 48 KiB of dynamic
    /// shared memory, 4,096 bytes of parameters with 8 per buffer, and
    /// [`MAX_LAUNCH_BUFFERS`] buffers, and no programmatic dependent launch, until the
    /// `with_*` calls say otherwise.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for an alignment that is not a power of two
    /// dividing [`SLICE_ALIGNMENT`] (every slice must start bindable), a zero maximum
    /// range, or a zero grid dimension.
    pub fn new(
        binding_alignment: u64,
        max_binding_bytes: u64,
        max_grid: Grid,
    ) -> Result<Self, ServerError> {
        if !binding_alignment.is_power_of_two()
            || !SLICE_ALIGNMENT.is_multiple_of(binding_alignment)
        {
            return Err(ServerError::invalid(
                "binding alignment",
                binding_alignment,
                format!("it must be a power of two dividing the slice alignment {SLICE_ALIGNMENT}"),
            ));
        }
        if max_binding_bytes == 0 {
            return Err(ServerError::invalid(
                "binding range",
                0u64,
                "a device binds at least one byte",
            ));
        }
        if max_grid.contains(&0) {
            return Err(ServerError::invalid(
                "grid limit",
                max_grid,
                "a device runs at least one workgroup per dimension",
            ));
        }
        Ok(Self {
            binding_alignment,
            max_binding_bytes,
            max_grid,
            max_block: [1024, 1024, 64],
            max_threads: 1024,
            max_shared_bytes: 48 << 10,
            max_param_bytes: 4096,
            pointer_bytes: 8,
            max_buffers: MAX_LAUNCH_BUFFERS,
            programmatic: ProgrammaticLaunch::Unsupported(
                "this device runs no programmatic dependent launch",
            ),
            graph_updates: GraphUpdates::Unsupported(
                "this device's graphs do not change after their seal",
            ),
            loops: DeviceLoops::Unsupported("this device runs no loop replay"),
        })
    }

    /// The same limits with blocks of at most `max_block` threads per dimension and
    /// `max_threads` in all.
    pub fn with_block(mut self, max_block: [u32; 3], max_threads: u32) -> Self {
        self.max_block = max_block;
        self.max_threads = max_threads;
        self
    }

    /// The same limits with at most `bytes` of dynamic shared memory per block (0: the
    /// device gives a launch none).
    pub fn with_shared(mut self, bytes: u32) -> Self {
        self.max_shared_bytes = bytes;
        self
    }

    /// The same limits with at most `max_bytes` of parameters per launch, each buffer
    /// (and the info words' buffer) taking `pointer_bytes` of them (8 on CUDA, whose
    /// buffers are pointers in the parameter space; 0 on Vulkan, whose parameter bytes
    /// are its push constants), and at most `max_buffers` buffers (capped at
    /// [`MAX_LAUNCH_BUFFERS`]).
    pub fn with_params(mut self, max_bytes: u32, pointer_bytes: u32, max_buffers: usize) -> Self {
        self.max_param_bytes = max_bytes;
        self.pointer_bytes = pointer_bytes;
        self.max_buffers = max_buffers.min(MAX_LAUNCH_BUFFERS);
        self
    }

    /// The same limits, with the device running programmatic dependent launches or not
    /// (and why not).
    pub fn with_programmatic(mut self, programmatic: ProgrammaticLaunch) -> Self {
        self.programmatic = programmatic;
        self
    }

    /// Whether the device runs programmatic dependent launches.
    pub fn programmatic(&self) -> ProgrammaticLaunch {
        self.programmatic
    }

    /// The same limits, with the device's graphs changing through their slots or not.
    pub fn with_graph_updates(mut self, updates: GraphUpdates) -> Self {
        self.graph_updates = updates;
        self
    }

    /// Whether the device's graphs change through their slots.
    pub fn graph_updates(&self) -> GraphUpdates {
        self.graph_updates
    }

    /// The same limits, with the device replaying graphs in a loop on the device or not
    /// (rule 30), and what a loop body may not hold.
    pub fn with_loops(mut self, loops: DeviceLoops) -> Self {
        self.loops = loops;
        self
    }

    /// Whether the device runs loop replays, and what a loop body may not hold.
    pub fn loops(&self) -> DeviceLoops {
        self.loops
    }

    /// The multiple of bytes a bound range starts at.
    pub fn binding_alignment(&self) -> u64 {
        self.binding_alignment
    }

    /// The longest range one binding may cover.
    pub fn max_binding_bytes(&self) -> u64 {
        self.max_binding_bytes
    }

    /// The most workgroups per dimension.
    pub fn max_grid(&self) -> Grid {
        self.max_grid
    }

    /// The most threads per block dimension, and in all.
    pub fn max_block(&self) -> ([u32; 3], u32) {
        (self.max_block, self.max_threads)
    }

    /// The most dynamic shared memory per block.
    pub fn max_shared_bytes(&self) -> u32 {
        self.max_shared_bytes
    }

    /// The most parameter bytes per launch, and what a buffer takes of them.
    pub fn max_param_bytes(&self) -> (u32, u32) {
        (self.max_param_bytes, self.pointer_bytes)
    }

    /// The most buffers per launch.
    pub fn max_buffers(&self) -> usize {
        self.max_buffers
    }

    /// Checks one bound range (`offset` and `len` within buffer `binding`).
    #[inline]
    pub(crate) fn check_binding(
        &self,
        memory: MemoryId,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Result<(), ServerError> {
        let buffer = || Subject::bytes(memory, offset, len, size);
        if !offset.is_multiple_of(self.binding_alignment) {
            return Err(ServerError::InvalidBinding {
                buffer: Box::new(buffer()),
                reason: format!(
                    "offset {offset}: this device binds ranges at multiples of {} bytes",
                    self.binding_alignment
                )
                .into(),
            });
        }
        if len > self.max_binding_bytes {
            return Err(ServerError::InvalidBinding {
                buffer: Box::new(buffer()),
                reason: format!(
                    "{len} bytes: this device binds at most {} bytes per buffer",
                    self.max_binding_bytes
                )
                .into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel the tests' launches name.
    fn k() -> Subject {
        Subject::Kernel {
            kernel: crate::trace::KernelId(3),
            name: "k".into(),
        }
    }

    fn limits() -> LaunchLimits {
        LaunchLimits::new(16, 1 << 20, [100, 10, 10]).unwrap()
    }

    fn bufs(n: usize, access: Access) -> impl ExactSizeIterator<Item = ArgShape> {
        std::iter::repeat_n(ArgShape::Buffer(access), n)
    }

    #[test]
    fn a_launch_must_fit_its_signature() {
        let sig = KernelSignature::new(2, 2);
        let l = limits();
        let grid = Dims::grid([1, 1, 1]);
        sig.check_launch(k, &l, &grid, bufs(2, Access::Read), 2)
            .unwrap();
        let arity = sig
            .check_launch(k, &l, &grid, bufs(1, Access::Read), 2)
            .unwrap_err();
        assert!(
            arity
                .to_string()
                .contains("of kernel k (kernel#3): it takes 2 parameters"),
            "{arity}"
        );
        let info = sig
            .check_launch(k, &l, &grid, bufs(2, Access::Read), 0)
            .unwrap_err();
        assert!(info.to_string().contains("takes 2 info words"), "{info}");
        let empty = sig
            .check_launch(k, &l, &Dims::grid([1, 0, 1]), bufs(2, Access::Read), 2)
            .unwrap_err();
        assert!(empty.to_string().contains("[1, 0, 1]"), "{empty}");
        let big = sig
            .check_launch(k, &l, &Dims::grid([101, 1, 1]), bufs(2, Access::Read), 2)
            .unwrap_err();
        assert!(big.to_string().contains("at most [100, 10, 10]"), "{big}");
    }

    #[test]
    fn an_argument_must_be_what_its_parameter_declares() {
        const SIG: KernelSignature =
            KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]);
        let l = limits();
        let grid = Dims::grid([1, 1, 1]);
        let check = |args: [ArgShape; 3]| SIG.check_launch(k, &l, &grid, args.into_iter(), 0);
        let ok = [
            ArgShape::Buffer(Access::Read),
            ArgShape::Buffer(Access::Write),
            ArgShape::Scalar(4, Some(ScalarType::U32)),
        ];
        check(ok).unwrap();
        // Writing through a read parameter, in either direction of a mismatch.
        for access in [Access::Write, Access::ReadWrite] {
            let mut args = ok;
            args[0] = ArgShape::Buffer(access);
            let e = check(args).unwrap_err();
            assert!(e.to_string().contains("declares Read"), "{e}");
        }
        let mut args = ok;
        args[1] = ArgShape::Buffer(Access::Read);
        assert!(
            check(args)
                .unwrap_err()
                .to_string()
                .contains("declares Write")
        );
        // A scalar of the wrong size, a buffer where a scalar goes, and the reverse.
        let mut args = ok;
        args[2] = ArgShape::Scalar(8, Some(ScalarType::U64));
        let e = check(args).unwrap_err();
        assert!(e.to_string().contains("takes a 4-byte scalar"), "{e}");
        // The right size of another type, or a struct, where a u32 goes.
        for given in [Some(ScalarType::F32), Some(ScalarType::I32), None] {
            let mut args = ok;
            args[2] = ArgShape::Scalar(4, given);
            let e = check(args).unwrap_err();
            assert!(
                matches!(
                    e,
                    ServerError::InvalidArgument {
                        what: "scalar type",
                        ..
                    }
                ) && e.to_string().contains("it takes u32 there"),
                "{e}"
            );
        }
        let mut args = ok;
        args[2] = ArgShape::Buffer(Access::Read);
        assert!(
            check(args)
                .unwrap_err()
                .to_string()
                .contains("4-byte scalar")
        );
        let mut args = ok;
        args[0] = ArgShape::Scalar(4, Some(ScalarType::U32));
        assert!(
            check(args)
                .unwrap_err()
                .to_string()
                .contains("takes a buffer")
        );
    }

    #[test]
    fn block_shared_memory_and_parameter_bytes_must_fit_the_device() {
        let sig = KernelSignature::of(&[Param::READ_WRITE, Param::scalar::<[u64; 8]>()]);
        let l = limits()
            .with_block([256, 4, 1], 256)
            .with_shared(1024)
            .with_params(64, 8, 4);
        let args = || {
            [
                ArgShape::Buffer(Access::ReadWrite),
                ArgShape::Scalar(64, Some(ScalarType::U64)),
            ]
            .into_iter()
        };
        let check = |dims: Dims| sig.check_launch(k, &l, &dims, args(), 0);
        // 8 bytes for the buffer and 64 of scalar: past the device's 64.
        let e = check(Dims::grid([1, 1, 1])).unwrap_err();
        assert!(
            e.to_string().contains("at most 64 bytes of parameters"),
            "{e}"
        );
        let l = l.with_params(128, 8, 4);
        let check = |dims: Dims| sig.check_launch(k, &l, &dims, args(), 0);
        check(Dims::grid([1, 1, 1]).block([256, 1, 1]).shared_bytes(1024)).unwrap();
        for (dims, needle) in [
            (Dims::grid([1, 1, 1]).block([257, 1, 1]), "[257, 1, 1]"),
            (
                Dims::grid([1, 1, 1]).block([128, 4, 1]),
                "at most 256 in all",
            ),
            (Dims::grid([1, 1, 1]).block([0, 1, 1]), "[0, 1, 1]"),
            (
                Dims::grid([1, 1, 1]).shared_bytes(1025),
                "at most 1024 bytes",
            ),
        ] {
            let e = check(dims).unwrap_err();
            assert!(e.to_string().contains(needle), "{needle}: {e}");
        }
        // A kernel that fixes its block refuses another.
        let fixed = sig.with_block([64, 1, 1]);
        let e = fixed
            .check_launch(k, &l, &Dims::grid([1, 1, 1]).block([32, 1, 1]), args(), 0)
            .unwrap_err();
        assert!(e.to_string().contains("runs blocks of [64, 1, 1]"), "{e}");
        // Too many buffers for the device.
        let many = KernelSignature::new(5, 0);
        let e = many
            .check_launch(k, &l, &Dims::grid([1, 1, 1]), bufs(5, Access::Read), 0)
            .unwrap_err();
        assert!(e.to_string().contains("at most 4 buffers"), "{e}");
    }

    #[test]
    fn a_programmatic_launch_needs_a_kernel_that_waits_and_a_device_that_overlaps() {
        let sig = KernelSignature::new(1, 0);
        let waits = sig.with_grid_dependency_wait();
        let l = limits();
        let overlapping = l.with_programmatic(ProgrammaticLaunch::Supported);
        let dims = Dims::grid([1, 1, 1]).programmatic(true);
        let check = |sig: KernelSignature, l: &LaunchLimits, dims: &Dims| {
            sig.check_launch(k, l, dims, bufs(1, Access::Read), 0)
        };
        check(waits, &overlapping, &dims).unwrap();
        // In stream order, any kernel on any device.
        check(sig, &l, &Dims::grid([1, 1, 1])).unwrap();
        // A kernel that does not wait is refused first, on any device.
        for l in [&l, &overlapping] {
            let e = check(sig, l, &dims).unwrap_err();
            assert!(
                matches!(
                    e,
                    ServerError::InvalidArgument {
                        what: "programmatic launch",
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(
                e.to_string()
                    .contains("kernel k (kernel#3): the kernel does not declare that it waits"),
                "{e}"
            );
        }
        // A device without it refuses a kernel that waits, saying why.
        let e = check(waits, &l, &dims).unwrap_err();
        assert!(
            e.to_string()
                .contains("kernel k (kernel#3): this device runs no programmatic dependent launch"),
            "{e}"
        );
        let vulkan = l.with_programmatic(ProgrammaticLaunch::Unsupported("Vulkan has none"));
        let e = check(waits, &vulkan, &dims).unwrap_err();
        assert!(
            e.to_string()
                .contains("kernel k (kernel#3): Vulkan has none"),
            "{e}"
        );
        assert_eq!(e.subject(), Some(&k()), "the kernel is a field");
    }

    #[test]
    fn scalars_lay_out_as_a_repr_c_struct() {
        assert_eq!(Param::scalar_offset(0, 4), 0);
        assert_eq!(Param::scalar_offset(4, 8), 8);
        assert_eq!(Param::scalar_offset(2, 4), 4);
        assert_eq!(Param::scalar_offset(5, 2), 6);
        assert_eq!(Param::scalar_offset(4, 12), 4);
        assert_eq!(Param::scalar_offset(4, 16), 8);
        #[repr(C)]
        struct S(u32, u64, u16, [f32; 3]);
        let sig = KernelSignature::of(&[
            Param::scalar::<u32>(),
            Param::scalar::<u64>(),
            Param::scalar::<u16>(),
            Param::scalar::<[f32; 3]>(),
        ]);
        assert_eq!(sig.scalar_bytes() as usize, std::mem::size_of::<S>());
    }

    #[test]
    fn a_binding_must_start_aligned_and_fit_the_device() {
        let l = limits();
        let m = MemoryId::new(0);
        l.check_binding(m, 32, 64, 1 << 21).unwrap();
        let e = l.check_binding(m, 4, 64, 1 << 21).unwrap_err();
        assert!(
            matches!(&e, ServerError::InvalidBinding { buffer, .. } if buffer.memory() == Some(m)),
            "{e:?}"
        );
        assert!(e.to_string().contains("offset 4"), "{e}");
        let e = l.check_binding(m, 0, (1 << 20) + 1, 1 << 21).unwrap_err();
        assert!(e.to_string().contains("at most 1048576 bytes"), "{e}");
    }

    #[test]
    fn limits_refuse_an_alignment_slices_cannot_meet() {
        assert!(LaunchLimits::new(512, 1, [1, 1, 1]).is_err());
        assert!(LaunchLimits::new(24, 1, [1, 1, 1]).is_err());
        assert!(LaunchLimits::new(256, 0, [1, 1, 1]).is_err());
        assert!(LaunchLimits::new(256, 1, [0, 1, 1]).is_err());
    }
}
