//! Owning handles and non-owning bindings to one allocation.
//!
//! Two counters decide two different questions:
//! - *May this buffer be updated in place?* Only when one handle is held outside the
//!   memory manager ([`ManagedMemoryHandle::can_mut`]). Handles are ownership.
//! - *May this slice go back to its pool?* Only when no handle and no binding is held.
//!   Bindings keep a slice allocated without counting as an owner, which is how a
//!   capture's priming and a graph's pins hold memory without turning every in-place
//!   kernel of warmup into an out-of-place one (the bug burn #5772 reported).
//!
//! A binding can still ask whether any owner remains
//! ([`ManagedMemoryBinding::user_held`]): it reaches its handle through a weak
//! reference, which neither keeps the handle alive nor counts as an owner.

use std::fmt;
use std::sync::{Arc, Weak};

use crate::ids::MemoryId;

/// The shared part of one allocation: its id and usable size, and the way back to its
/// handle. Held by bindings.
#[derive(Debug)]
pub(crate) struct BindingInner {
    pub(crate) id: MemoryId,
    pub(crate) size: u64,
    /// The allocation's handle, not kept alive by this reference.
    handle: Weak<HandleInner>,
}

/// The ownership token of one allocation. Holds a binding, so any handle also keeps the
/// slice allocated.
#[derive(Debug)]
pub(crate) struct HandleInner {
    pub(crate) binding: Arc<BindingInner>,
}

/// An owning handle to one allocation of a [`MemoryManagement`](super::MemoryManagement).
///
/// Cloning a handle adds an owner; [`can_mut`](Self::can_mut) is true only while a single
/// handle exists outside the manager.
#[derive(Clone)]
pub struct ManagedMemoryHandle(pub(crate) Arc<HandleInner>);

impl ManagedMemoryHandle {
    pub(crate) fn fresh(id: MemoryId, size: u64) -> Self {
        Self(Arc::new_cyclic(|handle| HandleInner {
            binding: Arc::new(BindingInner {
                id,
                size,
                handle: handle.clone(),
            }),
        }))
    }

    /// The allocation's logical id.
    pub fn id(&self) -> MemoryId {
        self.0.binding.id
    }

    /// The usable size in bytes (the size asked for, not the padded slice).
    pub fn size(&self) -> u64 {
        self.0.binding.size
    }

    /// A non-owning binding to the same allocation.
    pub fn binding(&self) -> ManagedMemoryBinding {
        ManagedMemoryBinding(Arc::clone(&self.0.binding))
    }

    /// Whether this is the only owner outside the memory manager, so a kernel may update
    /// the buffer in place. Bindings (a capture's priming, a graph's pins) do not count.
    pub fn can_mut(&self) -> bool {
        // One count is the manager's own, one is this handle.
        Arc::strong_count(&self.0) <= 2
    }
}

impl fmt::Debug for ManagedMemoryHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ManagedMemoryHandle({}, {} B)", self.id(), self.size())
    }
}

/// A non-owning reference that keeps one allocation's slice out of its pool without
/// counting towards exclusive ownership.
#[derive(Clone)]
pub struct ManagedMemoryBinding(pub(crate) Arc<BindingInner>);

impl ManagedMemoryBinding {
    /// The allocation's logical id.
    pub fn id(&self) -> MemoryId {
        self.0.id
    }

    /// The usable size in bytes.
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Whether an owning handle is still held outside the memory manager (by whoever the
    /// manager handed it to: a user's buffer, or another owner such as an info cache),
    /// as [`ManagedMemoryHandle::can_mut`] counts them. False once only the manager's own
    /// handle is left, and for a slice nobody ever owned (a graph's placeholder): then
    /// the bindings alone keep the slice allocated.
    pub fn user_held(&self) -> bool {
        // One count is the manager's own while the slice is handed out.
        self.0.handle.strong_count() >= 2
    }

    pub(crate) fn downgrade(&self) -> Weak<BindingInner> {
        Arc::downgrade(&self.0)
    }
}

impl fmt::Debug for ManagedMemoryBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ManagedMemoryBinding({}, {} B)", self.id(), self.size())
    }
}
