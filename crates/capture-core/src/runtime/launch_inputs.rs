//! What a launch reads besides its arguments: its kernel, loaded on first use (never
//! inside a window, rule 10; never while a capture a load would break records, rule 20),
//! and its info words, through the stream's metadata cache (rule 5's warm cache makes a
//! window's launches hit; rule 8 keeps a recorded upload's copy for the graph's life).

use std::borrow::Cow;
use std::sync::Arc;

use super::inner::Inner;
use super::launch::Job;
use super::pooled::PooledStream;
use crate::capture::Recording;
use crate::driver::{Backend, DeviceResource, DeviceStream};
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::info_cache::Inserted;
use crate::memory::ClaimKey;
use crate::op::Op;
use crate::range::ByteRange;
use crate::subject::Subject;
use crate::trace::{Event, KernelId};

/// What a job runs, and the operation its errors and the ledger name.
pub(super) type JobCode<K> = (Option<Arc<K>>, Op);

impl<B: Backend> Inner<B> {
    /// The code `job` runs, loaded for a kernel (rules 10 and 20), with its name; work
    /// is its own code and has only its name.
    pub(super) fn job_code(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        job: &Job<'_, B>,
    ) -> Result<JobCode<B::Kernel>, ServerError> {
        match job {
            Job::Kernel { id, .. } => {
                let (kernel, name) = self.loaded_kernel(ps, stream, *id)?;
                Ok((Some(kernel), Op::Launch { kernel: *id, name }))
            }
            Job::Work { id, .. } => Ok((
                None,
                Op::Work {
                    work: *id,
                    name: self.trace.work_name(*id),
                },
            )),
        }
    }

    /// The loaded kernel, loading it first if it never was (rule 10: never inside a
    /// window).
    pub(super) fn loaded_kernel(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        id: KernelId,
    ) -> Result<(Arc<B::Kernel>, Cow<'static, str>), ServerError> {
        // A kernel stays loaded once it is: the stream's last one needs no registry.
        if let Some((last, loaded, name)) = &ps.last_kernel
            && *last == id
        {
            return Ok((Arc::clone(loaded), name.clone()));
        }
        let (source, name) = {
            let kernels = self.kernel_registry();
            let entry = kernels.get(id)?;
            if let Some(loaded) = &entry.loaded {
                let found = (Arc::clone(loaded), entry.name.clone());
                ps.last_kernel = Some((id, Arc::clone(&found.0), found.1.clone()));
                return Ok(found);
            }
            (Arc::clone(&entry.source), entry.name.clone())
        };
        if ps.stream.capturing().is_recording() {
            let cause = ServerError::graph_state_of(
                "load",
                Subject::Kernel {
                    kernel: id,
                    name: name.clone(),
                },
                "first loaded inside the window; launch it in warmup",
            );
            return Err(self.doom(ps, stream, Op::Load { kernel: id, name }, cause));
        }
        // Rule 20: decided and done under the capture state, so no `begin` on another
        // thread can start recording between the check and the load.
        let loaded = self
            .captures
            .status()
            .with_recording(|recording| match recording {
                Some(recording) if B::load_breaks_capture() => {
                    let (owner, whose) = match recording {
                        Recording::Here(owner) => (owner, "is recording"),
                        Recording::Elsewhere(owner) => (
                            owner,
                            "on another device of the same driver context is recording",
                        ),
                    };
                    let error = ServerError::graph_state_in(
                        "load",
                        Some(Subject::Kernel {
                            kernel: id,
                            name: name.clone(),
                        }),
                        owner,
                        format!("{whose}: loading it would invalidate its capture"),
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
    pub(super) fn info_buffer(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        words: &[u64],
    ) -> Result<Option<DeviceResource<B::Stream>>, ServerError> {
        if words.is_empty() {
            return Ok(None);
        }
        self.forget_lost_uploads(ps);
        let recording = ps.stream.capturing().is_recording();
        // One lookup: the entry, whether an upload wrote it, whether this window's
        // recording holds one.
        let hit = ps
            .stream
            .info_cache()
            .lookup(words)
            .map(|h| (h.value.id(), h.uploaded, h.recorded));
        let id = match hit {
            // Only a recorded upload wrote this entry (its window was aborted, or its
            // graph has not replayed yet), or its upload was lost to an asynchronous
            // error: upload the words now, or record an upload in this window unless its
            // own recording holds one already (rule 8's copy, kept for the graph's life).
            Some((id, false, recorded)) if !recording || !recorded => {
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
            Some((id, ..)) => id,
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
        let size = (words.len() * 8) as u64;
        let (location, resource) = ps.stream.device_memory().bind_resource(ClaimKey {
            memory: id,
            range: ByteRange::from_bounds(0, size),
        })?;
        ps.stream.capturing().touch(stream, location);
        Ok(Some(resource))
    }
}
