//! The kernel registry: every kernel registered with a device, and the loaded driver
//! kernel once its first launch loaded it (the declared signature travels in the
//! `KernelHandle`).

use std::borrow::Cow;
use std::sync::Arc;

use crate::builtin::Builtin;
use crate::driver::Backend;
use crate::error::ServerError;
use crate::kernel::KernelSignature;
use crate::subject::Subject;
use crate::trace::KernelId;

/// One registered kernel.
pub(crate) struct KernelEntry<B: Backend> {
    pub(crate) source: Arc<B::KernelSource>,
    pub(crate) name: Cow<'static, str>,
    pub(crate) signature: KernelSignature,
    pub(crate) loaded: Option<Arc<B::Kernel>>,
}

/// Every kernel a device knows, indexed by its [`KernelId`].
pub(crate) struct KernelRegistry<B: Backend> {
    entries: Vec<KernelEntry<B>>,
    /// The id each builtin was registered under by `Device::builtin`, in
    /// [`Builtin::ALL`] order.
    builtins: [Option<KernelId>; Builtin::ALL.len()],
}

impl<B: Backend> KernelRegistry<B> {
    pub(crate) fn new() -> Self {
        Self {
            entries: Vec::new(),
            builtins: [None; Builtin::ALL.len()],
        }
    }

    /// Registers `source` as the next kernel, not yet loaded; returns its id and
    /// signature. The id is the entry's index: the one counter of kernel ids, which
    /// nothing but a registration advances.
    pub(crate) fn register(
        &mut self,
        source: B::KernelSource,
        name: Cow<'static, str>,
    ) -> (KernelId, KernelSignature) {
        let signature = B::signature(&source);
        let id = KernelId(self.entries.len() as u32);
        self.entries.push(KernelEntry {
            source: Arc::new(source),
            name,
            signature,
            loaded: None,
        });
        (id, signature)
    }

    /// The first kernel registered under `name`, and its signature.
    pub(crate) fn find(&self, name: &str) -> Option<(KernelId, KernelSignature)> {
        self.entries
            .iter()
            .position(|e| e.name == name)
            .map(|i| (KernelId(i as u32), self.entries[i].signature))
    }

    /// The id `builtin` was registered under, if it was.
    pub(crate) fn builtin(&self, builtin: Builtin) -> Option<(KernelId, KernelSignature)> {
        self.builtins[builtin.index()].map(|id| (id, self.entries[id.index() as usize].signature))
    }

    /// Remembers that `builtin` is kernel `id`.
    pub(crate) fn set_builtin(&mut self, builtin: Builtin, id: KernelId) {
        self.builtins[builtin.index()] = Some(id);
    }

    /// The kernel `id` names.
    pub(crate) fn get(&self, id: KernelId) -> Result<&KernelEntry<B>, ServerError> {
        self.entries.get(id.index() as usize).ok_or_else(|| {
            ServerError::invalid_of(
                "kernel",
                Subject::Kernel {
                    kernel: id,
                    name: "".into(),
                },
                "not registered",
            )
        })
    }

    /// Keeps `loaded` as kernel `id`'s driver kernel, unless another thread loaded it
    /// first; returns the one kept.
    pub(crate) fn set_loaded(&mut self, id: KernelId, loaded: Arc<B::Kernel>) -> Arc<B::Kernel> {
        let entry = &mut self.entries[id.index() as usize];
        Arc::clone(entry.loaded.get_or_insert(loaded))
    }
}
