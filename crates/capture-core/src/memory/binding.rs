//! `BufferBinding`: the byte range of one allocation a launch was given, the stream that
//! owns it, and what the launch does to it.

use std::fmt;
use std::sync::Weak;

use super::access::Access;
use super::handle::{BindingInner, ManagedMemoryBinding};
use crate::error::ServerError;
use crate::ids::{MemoryId, StreamId};
use crate::range::ByteRange;
use crate::subject::Subject;

/// The identity of a claim in the taint ledger: one exact byte range of one allocation.
///
/// Two tensors carved from one batched allocation share a [`MemoryId`] but are two
/// claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimKey {
    /// The allocation.
    pub memory: MemoryId,
    /// The bytes of it.
    pub range: ByteRange,
}

impl fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.memory, self.range)
    }
}

/// A byte range of one allocation given to a launch, the stream that owns the
/// allocation, and the launch's access.
///
/// It does not keep the allocation alive: [`is_live`](Self::is_live) tells whether the
/// memory is still allocated, which is how a closing capture leaves out memory already
/// gone.
#[derive(Clone)]
pub struct BufferBinding {
    key: ClaimKey,
    stream: StreamId,
    access: Access,
    live: Weak<BindingInner>,
}

impl BufferBinding {
    /// `len` bytes at `offset` of the allocation `binding` names, owned by `stream`.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidBinding`] naming the binding when the range is empty,
    /// overflows, or runs past the allocation's size.
    pub fn new(
        binding: &ManagedMemoryBinding,
        stream: StreamId,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Self, ServerError> {
        let name = || Subject::bytes(binding.id(), offset, len, binding.size());
        let range = ByteRange::new(offset, len).map_err(|_| ServerError::InvalidBinding {
            buffer: Box::new(name()),
            reason: "the range is empty or overflows".into(),
        })?;
        if range.end() > binding.size() {
            return Err(ServerError::InvalidBinding {
                buffer: Box::new(name()),
                reason: "the range runs past the end of the allocation".into(),
            });
        }
        Ok(Self {
            key: ClaimKey {
                memory: binding.id(),
                range,
            },
            stream,
            access,
            live: binding.downgrade(),
        })
    }

    /// The whole allocation `binding` names.
    pub fn whole(binding: &ManagedMemoryBinding, stream: StreamId, access: Access) -> Self {
        Self {
            key: ClaimKey {
                memory: binding.id(),
                range: ByteRange::from_bounds(0, binding.size()),
            },
            stream,
            access,
            live: binding.downgrade(),
        }
    }

    /// The allocation.
    pub fn memory(&self) -> MemoryId {
        self.key.memory
    }

    /// The bytes of it.
    pub fn range(&self) -> ByteRange {
        self.key.range
    }

    /// The stream that owns the allocation.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// What the launch does to the range.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The same range with another access.
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// The exact range this binding claims in the taint ledger.
    pub fn claim_key(&self) -> ClaimKey {
        self.key
    }

    /// Whether the allocation is still held by anyone (a handle, a binding, or a pool
    /// that has not yet taken the slice back).
    pub fn is_live(&self) -> bool {
        self.live.strong_count() > 0
    }

    /// A binding that keeps the allocation out of its pool, while it is live.
    pub fn upgrade(&self) -> Option<ManagedMemoryBinding> {
        self.live.upgrade().map(ManagedMemoryBinding)
    }
}

impl fmt::Debug for BufferBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl fmt::Display for BufferBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} on {}", self.key, self.access, self.stream)
    }
}
