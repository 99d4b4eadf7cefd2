//! `Buffer` (an allocation as a user holds it) and `Arg` (one argument of a launch: a
//! range of a buffer with its access, or a scalar by value).

use std::fmt;

use bytemuck::Pod;

use crate::error::ServerError;
use crate::ids::{MemoryId, StreamId};
use crate::kernel::{ArgShape, ScalarValue};
use crate::memory::{Access, BufferBinding, ManagedMemoryHandle};
use crate::range::ByteRange;
use crate::scalar_type::ScalarParam;
use crate::slot_table::SlotName;
use crate::subject::Subject;

/// A device allocation. Cloning adds an owner of the same memory, not a copy: every
/// clone sees what any launch or write does to it, and the memory is freed when the last
/// clone (and every graph that pins it) is gone.
///
/// [`can_mut`](Self::can_mut) tells whether this handle is the only owner. The device
/// does not enforce it: a launch may update a shared buffer in place (`Arg::read_write`)
/// and every clone sees the update. It is for the caller's own decision, as a tensor
/// library makes it (update in place when no one else holds the buffer, else write a
/// fresh one).
///
/// ```
/// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
/// # use capture_graphs::mock::MockBackend;
/// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
/// # let s = StreamId::new(0);
/// let x = dev.alloc(s, 16)?;
/// assert!(x.can_mut());
/// let shared = x.clone();
/// assert!(!x.can_mut() && !shared.can_mut());
/// // Not enforced: an in-place update of a shared buffer runs, and both handles see it.
/// dev.write_values(s, &x, 0, &[1.0f32; 4])?;
/// let add = dev.builtin(Builtin::AddScalar);
/// dev.launch(s, &add, [1, 1, 1], &[Arg::read(&x), Arg::write(&shared)], &Builtin::AddScalar.info(4, 1.0))?;
/// assert_eq!(dev.read_values::<f32>(s, &x)?, [2.0; 4]);
/// drop(shared);
/// assert!(x.can_mut());
/// # Ok::<(), capture_graphs::ServerError>(())
/// ```
#[derive(Clone)]
pub struct Buffer {
    pub(crate) handle: ManagedMemoryHandle,
    pub(crate) owner: StreamId,
    pub(crate) pooled: usize,
    pub(crate) device: u64,
}

impl Buffer {
    /// The allocation's logical id.
    pub fn id(&self) -> MemoryId {
        self.handle.id()
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.handle.size()
    }

    /// The logical stream that allocated it.
    pub fn owner(&self) -> StreamId {
        self.owner
    }

    /// Whether this handle is the only owner of the memory (no clone of it lives), so
    /// an update in place is seen by no one else. Graphs that pin the buffer do not
    /// count. Advisory: the device does not refuse an in-place launch on a shared buffer.
    pub fn can_mut(&self) -> bool {
        self.handle.can_mut()
    }

    /// The whole buffer, for the ledgers.
    pub(crate) fn binding(&self, range: ByteRange, access: Access) -> BufferBinding {
        let whole = BufferBinding::whole(&self.handle.binding(), self.owner, access);
        if range == whole.range() {
            whole
        } else {
            BufferBinding::new(
                &self.handle.binding(),
                self.owner,
                range.start(),
                range.len(),
                access,
            )
            .unwrap_or(whole)
        }
    }

    /// `len` bytes at `offset`, checked against the buffer's size.
    #[inline]
    pub(crate) fn range(&self, offset: u64, len: Option<u64>) -> Result<ByteRange, ServerError> {
        let len = len.unwrap_or_else(|| self.size().saturating_sub(offset));
        let bad = |reason: &'static str| ServerError::InvalidBinding {
            buffer: Box::new(Subject::bytes(self.id(), offset, len, self.size())),
            reason: reason.into(),
        };
        let range =
            ByteRange::new(offset, len).map_err(|_| bad("the range is empty or overflows"))?;
        if range.end() > self.size() {
            return Err(bad("the range runs past the end of the buffer"));
        }
        Ok(range)
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({}, {} B, {})",
            self.id(),
            self.size(),
            self.owner
        )
    }
}

/// One argument of a launch, in the kernel's parameter order: a buffer (or a range of
/// it) with what the launch does to it, or a scalar passed by value.
///
/// ```
/// # use capture_graphs::{Arg, Device, DeviceConfig, StreamId};
/// # use capture_graphs::mock::MockBackend;
/// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
/// # let s = StreamId::new(0);
/// let x = dev.alloc(s, 64)?;
/// let args = [
///     Arg::read(&x).range(0, 32), // the first 32 bytes, read
///     Arg::scalar(8u32),          // n, by value
///     Arg::scalar([0.5f32, 1.0]), // a plain struct of two floats
/// ];
/// assert_eq!(args[1].scalar_bytes(), Some(&8u32.to_ne_bytes()[..]));
/// assert!(args[2].buffer().is_none());
/// # Ok::<(), capture_graphs::ServerError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Arg(
    pub(crate) ArgKind,
    pub(crate) Option<SlotName>,
    /// Whether it is the window's stop flag (rule 30).
    pub(crate) bool,
);

#[derive(Clone, Debug)]
pub(crate) enum ArgKind {
    Buffer(BufferArg),
    Scalar(ScalarValue),
}

/// A buffer argument: the buffer, the range given, and the access.
#[derive(Clone, Debug)]
pub(crate) struct BufferArg {
    pub(crate) buffer: Buffer,
    pub(crate) offset: u64,
    pub(crate) len: Option<u64>,
    pub(crate) access: Access,
}

impl Arg {
    /// The launch reads `buffer`.
    pub fn read(buffer: &Buffer) -> Self {
        Self::new(buffer, Access::Read)
    }

    /// The launch writes `buffer`.
    pub fn write(buffer: &Buffer) -> Self {
        Self::new(buffer, Access::Write)
    }

    /// The launch reads and writes `buffer` in place.
    pub fn read_write(buffer: &Buffer) -> Self {
        Self::new(buffer, Access::ReadWrite)
    }

    /// `buffer` with `access`.
    pub fn new(buffer: &Buffer, access: Access) -> Self {
        Self(
            ArgKind::Buffer(BufferArg {
                buffer: buffer.clone(),
                offset: 0,
                len: None,
                access,
            }),
            None,
            false,
        )
    }

    /// `value` passed by value: a number (`u32`, `f32`, `i64`, ...) or an array of
    /// numbers of one type (`[f32; 4]`), up to
    /// [`MAX_SCALAR_BYTES`](crate::MAX_SCALAR_BYTES). Its type is checked against the
    /// one the kernel declares ([`Param::scalar`](crate::Param::scalar)): an `f32` where
    /// a `u32` goes is refused, though both are 4 bytes. Fixed at capture, unless the
    /// argument is a [`slot`](Self::slot). A larger value is refused when the launch is
    /// issued.
    pub fn scalar<T: Pod + ScalarParam>(value: T) -> Self {
        Self(
            ArgKind::Scalar(ScalarValue::of(
                bytemuck::bytes_of(&value),
                Some(T::ELEMENT),
            )),
            None,
            false,
        )
    }

    /// `value`, a plain `#[repr(C)]` struct whose fields are of several types, passed
    /// by value: only its size is checked, and only a parameter declared as a struct
    /// ([`Param::scalar_struct`](crate::Param::scalar_struct)) takes it.
    pub fn scalar_struct<T: Pod>(value: T) -> Self {
        Self(
            ArgKind::Scalar(ScalarValue::of(bytemuck::bytes_of(&value), None)),
            None,
            false,
        )
    }

    /// The same argument, a slot called `name` of the graph a window seals (rule 26):
    /// the graph's value for it changes only through [`GraphHandle::set`] (a scalar) or
    /// [`GraphHandle::rebind`] (a buffer) under that name, checked against what was
    /// recorded. Several launches of one window may use one slot, with one value (the
    /// same scalar, or the same buffer range): an update changes them all. Outside a
    /// window the name does nothing; on the user's own work
    /// ([`Device::foreign_work`](crate::Device::foreign_work)) it is refused.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Device, DeviceConfig, SlotName, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let kv = dev.alloc(s, 64)?;
    /// let pos = Arg::scalar(7u32).slot("pos");
    /// assert_eq!(pos.slot_name(), Some(SlotName::new("pos")));
    /// let _kv = Arg::read(&kv).slot("kv");
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// [`GraphHandle::set`]: crate::GraphHandle::set
    /// [`GraphHandle::rebind`]: crate::GraphHandle::rebind
    pub fn slot(mut self, name: &str) -> Self {
        self.1 = Some(SlotName::new(name));
        self
    }

    /// The argument's slot, when it is one.
    pub fn slot_name(&self) -> Option<SlotName> {
        self.1
    }

    /// The same argument, a `u32` the launch writes, as the stop flag of the graph the
    /// window seals (rule 30): [`Device::replay_until`](crate::Device::replay_until)
    /// replays the graph up to `max` times on the device and stops after the iteration
    /// in which the flag was set (non-zero). The flag is zeroed when each loop replay
    /// starts; the step's kernel sets it (on the end token, at the context's end). One
    /// buffer argument written by the launch, of exactly one `u32`
    /// ([`range`](Self::range) it to 4 bytes), not a slot; one flag per window (other
    /// launches may write the same bytes). Outside a window it does nothing.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let done = dev.alloc(s, 4)?;
    /// let flag = Arg::write(&done).stop_flag();
    /// assert!(flag.is_stop_flag());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    pub fn stop_flag(mut self) -> Self {
        self.2 = true;
        self
    }

    /// Whether the argument is a stop flag.
    pub fn is_stop_flag(&self) -> bool {
        self.2
    }

    /// Only `len` bytes at `offset` of a buffer argument (nothing for a scalar), checked
    /// when the launch is issued.
    ///
    /// `offset` must be a multiple of the device's binding alignment
    /// ([`Device::binding_alignment`](crate::Device::binding_alignment): a Vulkan
    /// device's `minStorageBufferOffsetAlignment`, often 16 to 256 bytes; 16 on CUDA and
    /// the mock), and `len` at most what one binding covers. A launch with a range that
    /// breaks either is refused with [`ServerError::InvalidBinding`](crate::ServerError)
    /// naming the alignment or the limit, before any backend sees it. Every buffer
    /// starts aligned ([`SLICE_ALIGNMENT`](crate::SLICE_ALIGNMENT) is a multiple of
    /// every device's alignment), so a whole buffer always binds.
    pub fn range(mut self, offset: u64, len: u64) -> Self {
        if let ArgKind::Buffer(b) = &mut self.0 {
            b.offset = offset;
            b.len = Some(len);
        }
        self
    }

    /// The buffer, for a buffer argument.
    pub fn buffer(&self) -> Option<&Buffer> {
        match &self.0 {
            ArgKind::Buffer(b) => Some(&b.buffer),
            ArgKind::Scalar(_) => None,
        }
    }

    /// What the launch does to the buffer, for a buffer argument.
    pub fn access(&self) -> Option<Access> {
        match &self.0 {
            ArgKind::Buffer(b) => Some(b.access),
            ArgKind::Scalar(_) => None,
        }
    }

    /// The value's bytes, for a scalar argument.
    pub fn scalar_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            ArgKind::Buffer(_) => None,
            ArgKind::Scalar(v) => Some(v.bytes()),
        }
    }

    pub(crate) fn shape(&self) -> ArgShape {
        match &self.0 {
            ArgKind::Buffer(b) => ArgShape::Buffer(b.access),
            ArgKind::Scalar(v) => ArgShape::Scalar(v.len(), v.element()),
        }
    }

    pub(crate) fn as_buffer(&self) -> Option<&BufferArg> {
        match &self.0 {
            ArgKind::Buffer(b) => Some(b),
            ArgKind::Scalar(_) => None,
        }
    }
}
