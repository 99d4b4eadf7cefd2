//! `Device`: the generic runtime over a backend. Construction, and the eager calls
//! (alloc, write, read, sync, cleanup, reports); launches are in `launch.rs`, the
//! capture lifecycle in `lifecycle.rs`, the state they share in `inner.rs`.
//!
//! Every lock taken here follows the device's one lock order, written (and checked) in
//! `lock_order.rs` as `Level`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use super::branch_table::Branches;
use super::buffer::Buffer;
use super::cell::StreamCell;
use super::config::DeviceConfig;
use super::fault_counts::FaultCounts;
use super::graph_handle::GraphHandle;
use super::graph_registry::GraphRegistry;
use super::imports::Imports;
use super::inner::Inner;
use super::loop_data::BodyItem;
use super::order::Order;
use super::pending::{ReleasedGraphs, Suspects};
use super::pooled::PooledStream;
use super::registry::KernelRegistry;
use super::report::{DeviceReport, StreamReport};
use crate::capture::{CaptureStatus, DeviceCaptures, Recording};
use crate::driver::{Backend, DeviceExternal, DeviceStream};
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::label::{self, Labels};
use crate::memory::{Access, ClaimKey, CleanupReport, ManagedMemoryHandle, MemoryIds, PageUpdate};
use crate::op::Op;
use crate::range::ByteRange;
use crate::report::GraphLedger;
use crate::stream_state::StreamSetup;
use crate::subject::Subject;
use crate::taint::TaintLedger;
use crate::trace::{Event, Trace};

static DEVICES: AtomicU64 = AtomicU64::new(0);

/// A device over backend `B`: a pool of streams onto which logical streams fold, the
/// device-wide taint ledger, graph registry and trace.
///
/// `Send + Sync`: share it by reference (or in an `Arc`) across threads.
pub struct Device<B: Backend> {
    pub(crate) inner: Arc<Inner<B>>,
}

impl<B: Backend> Device<B> {
    /// A device over `backend` with `config`'s pooled streams.
    ///
    /// ```
    /// use capture_graphs::{Device, DeviceConfig};
    /// use capture_graphs::mock::MockBackend;
    ///
    /// // Two pooled streams; logical streams fold onto them (stream#2 shares #0's).
    /// let dev = Device::new(MockBackend::new(), DeviceConfig::new().streams(2)?)?;
    /// assert_eq!(dev.pooled_index(capture_graphs::StreamId::new(2)), 0);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The backend's refusal to create a stream.
    pub fn new(backend: B, config: DeviceConfig) -> Result<Self, ServerError> {
        let limits = backend.launch_limits();
        let captures =
            DeviceCaptures::in_domain(B::allocation_breaks_capture(), backend.capture_domain());
        let ids = MemoryIds::new();
        let backend = Arc::new(backend);
        let mut cells = Vec::with_capacity(config.streams);
        for index in 0..config.streams {
            let setup = StreamSetup::new(
                index,
                captures.clone(),
                ids.clone(),
                config.device_memory,
                config.host_memory,
                config.cache_policy,
            );
            let b = Arc::clone(&backend);
            let create = move || -> Result<PooledStream<B>, ServerError> {
                let mut stream = b.create_stream(&setup)?;
                if stream.capturing().index() != index {
                    return Err(ServerError::graph_state(
                        "create stream",
                        "the backend must create each stream's capture exactly once, in order",
                    ));
                }
                Ok(PooledStream::new(stream, index, config.drop_policy))
            };
            cells.push(if B::thread_affine() {
                StreamCell::spawn(index, create)?
            } else {
                StreamCell::direct(create()?)
            });
        }
        let signals = cells
            .iter()
            .map(|cell: &StreamCell<B>| cell.run(|ps| ps.stream.signal()))
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                signals,
                tracks: Order::new(config.streams),
                faults: FaultCounts::new(config.streams),
                backend,
                serial: DEVICES.fetch_add(1, Ordering::Relaxed),
                cells,
                captures,
                taint: Mutex::new(TaintLedger::new()),
                graphs: Mutex::new(GraphRegistry::default()),
                kernels: Mutex::new(KernelRegistry::new()),
                trace: Trace::new(config.trace),
                labels: Labels::default(),
                released: ReleasedGraphs::default(),
                branches: Branches::default(),
                imports: Mutex::new(Imports::default()),
                suspects: Suspects::default(),
                config,
                limits,
            }),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// The device's settings.
    pub fn config(&self) -> DeviceConfig {
        self.inner.config
    }

    /// The device's event log.
    pub fn trace(&self) -> &Trace {
        &self.inner.trace
    }

    /// Which pooled streams record right now.
    pub fn captures(&self) -> &CaptureStatus {
        self.inner.captures.status()
    }

    /// The pooled stream logical `stream` runs on.
    pub fn pooled_index(&self, stream: StreamId) -> usize {
        self.inner.pooled(stream)
    }

    /// Allocates `size` bytes of device memory owned by `stream`. The new buffer reads
    /// as never written until something writes it.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let s = StreamId::new(0);
    /// let x = dev.alloc(s, 1024)?;
    /// assert_eq!(x.size(), 1024);
    /// // Nothing wrote it yet: a read fails instead of returning stale bytes.
    /// assert!(dev.read(s, &x).unwrap_err().unwritten().is_some());
    /// // A zero size is refused, and the stream goes on.
    /// assert!(dev.alloc(s, 0).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// - [`ServerError::InvalidArgument`] for a size of zero or above the maximum.
    /// - [`ServerError::NeighbourRefused`] while another stream's window holds the
    ///   pooled stream.
    /// - [`ServerError::AllocInWindow`] when the pool would have to grow while a window
    ///   forbids it; inside the caller's own window this dooms the window (rule 6).
    /// - [`ServerError::OutOfMemory`] with every pool's and graph's figures.
    pub fn alloc(&self, stream: StreamId, size: u64) -> Result<Buffer, ServerError> {
        self.inner
            .on_stream(stream, |ps| self.inner.alloc_on(ps, stream, size))
    }

    /// Makes memory the caller already owns (weights, a KV cache its engine allocated) a
    /// [`Buffer`] of `stream`'s pooled stream, with no copy: the rules apply to it as to
    /// any buffer (its bytes start unwritten as far as the rules know, until written or
    /// a launch writes them; graphs that use it pin it; cross-stream order is kept), and
    /// the library never frees it. What `external` is depends on the backend (a device
    /// pointer and size on CUDA, a `VkBuffer` range on Vulkan, memory of the mock's own
    /// on the mock); making one is `unsafe` where the library cannot check it, and its
    /// `# Safety` list is the lifetime contract: the memory outlives every use (every
    /// graph that recorded it, every queued use; drop the graphs and sync first).
    ///
    /// A buffer imported as never written reads as unwritten until something writes it:
    /// [`assume_written`](Self::assume_written) says the caller's bytes are valid.
    ///
    /// # Errors
    ///
    /// The backend's refusal of `external` (named); [`ServerError::NeighbourRefused`]
    /// while another stream's window holds the pooled stream.
    pub fn import(
        &self,
        stream: StreamId,
        external: DeviceExternal<B::Stream>,
    ) -> Result<Buffer, ServerError> {
        let imported = self
            .inner
            .on_stream(stream, |ps| self.inner.import_on(ps, stream, external));
        self.inner.labels.named(imported)
    }

    /// Tells the rules that the caller's own bytes of `buffer` (memory it imported, that
    /// it filled itself) are valid: a read or a launch over them is no longer refused as
    /// never written. Settled as a host write is: after every other stream's use
    /// (rule 18).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), for a buffer of another device, a neighbour or a
    /// recording stream (inside the window the bytes would only be valid for the
    /// replays, which the rules cannot know).
    pub fn assume_written(&self, stream: StreamId, buffer: &Buffer) -> Result<(), ServerError> {
        let settled = self.assume_written_on(stream, buffer);
        self.inner.labels.named(settled)
    }

    fn assume_written_on(&self, stream: StreamId, buffer: &Buffer) -> Result<(), ServerError> {
        self.inner.closure_check(stream, "assume_written")?;
        self.inner.check_buffer(buffer)?;
        let range = buffer.range(0, None)?;
        if self.inner.pooled(stream) != buffer.pooled {
            self.inner.hand_over(stream, "assume_written", buffer)?;
        }
        let key = ClaimKey {
            memory: buffer.id(),
            range,
        };
        self.inner.order_host(buffer.pooled, stream, key)?;
        self.inner.cells[buffer.pooled].run(|ps| {
            self.inner.admit(ps, stream, "assume_written")?;
            if ps.stream.capturing().is_recording() {
                return Err(ServerError::graph_state_in(
                    "assume_written",
                    Some(Subject::Stream(stream)),
                    stream,
                    "is recording: the bytes would be valid only for replays",
                ));
            }
            self.inner.taint().host_write(key)
        })
    }

    /// Names `buffer` for people: errors, the trace and reports show `label` beside its
    /// id from now on (`buf#6 "kv_cache"`), until its memory is freed. Labelling again
    /// replaces the label; clones of the buffer share it.
    ///
    /// ```
    /// # use capture_graphs::{Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let logits = dev.alloc(s, 16)?;
    /// dev.label(&logits, "logits")?;
    /// let err = dev.read(s, &logits).unwrap_err(); // never written
    /// assert!(err.to_string().contains(r#"buf#0 "logits""#), "{err}");
    /// assert_eq!(dev.label_of(&logits).as_deref(), Some("logits"));
    /// // An empty label, or one with a quote or a control character, is refused.
    /// assert!(dev.label(&logits, "").is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for an empty label, one longer than
    /// [`MAX_LABEL_BYTES`](crate::MAX_LABEL_BYTES) or holding a control character or a
    /// `"`; [`ServerError::InvalidBinding`] for a buffer of another device.
    pub fn label(&self, buffer: &Buffer, label: &str) -> Result<(), ServerError> {
        self.inner.check_buffer(buffer)?;
        let label = label::checked(label)?;
        self.inner
            .labels
            .set_memory(buffer.id(), Arc::clone(&label));
        self.inner.trace.push(Event::LabelBuffer {
            memory: buffer.id(),
            label,
        });
        Ok(())
    }

    /// The label [`label`](Self::label) gave `buffer`, if any.
    pub fn label_of(&self, buffer: &Buffer) -> Option<Arc<str>> {
        self.inner.labels.memory(buffer.id())
    }

    /// Names `graph` for people: errors, the trace and its ledger (in
    /// [`memory_report`](Self::memory_report) and out-of-memory errors) show `label`
    /// beside its id from now on (`graph#2 "decode b=8"`), until it is dropped.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for a graph of another device; as
    /// [`label`](Self::label) for the label itself.
    pub fn label_graph(&self, graph: &GraphHandle, label: &str) -> Result<(), ServerError> {
        self.owned(graph)?;
        let graph = graph.id();
        let label = label::checked(label)?;
        {
            let mut registry = self.inner.registry();
            let ledger = registry
                .ledger_mut(graph)
                .ok_or_else(|| ServerError::UnknownGraph(graph))?;
            ledger.label = Some(Arc::clone(&label));
        }
        self.inner.labels.set_graph(graph, Arc::clone(&label));
        self.inner.trace.push(Event::LabelGraph { graph, label });
        Ok(())
    }

    /// Writes `bytes` into `buffer` at `offset`, staged through pinned host memory:
    /// anything that derefs to bytes (`&[u8]`, `Vec<u8>`, `[u8; N]`, `Bytes`), borrowed
    /// or owned. The bytes are copied into staging before the call returns, so the
    /// caller's buffer is free again at once. Outside a window the written bytes become
    /// readable; inside the caller's window the copy is recorded: the graph keeps the
    /// staged bytes and re-copies them on every replay.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 8)?;
    /// dev.write(s, &x, 0, [1u8; 8])?;
    /// let tail: &[u8] = &[2, 2, 2, 2];
    /// dev.write(s, &x, 4, tail)?; // part of it, in place, from a borrowed slice
    /// assert_eq!(dev.read(s, &x)?, [1, 1, 1, 1, 2, 2, 2, 2]);
    /// // Past the end: refused, naming the buffer; nothing was written.
    /// assert!(dev.write(s, &x, 6, [0u8; 4]).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidBinding`] for a range outside the buffer or a buffer of
    /// another device; [`ServerError::NeighbourRefused`]; the driver's refusal (the
    /// destination is then claimed with it).
    pub fn write(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        bytes: impl AsRef<[u8]>,
    ) -> Result<(), ServerError> {
        let written = self.write_bytes(stream, buffer, offset, bytes.as_ref());
        self.inner.labels.named(written)
    }

    fn write_bytes(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        self.inner.closure_check(stream, "write")?;
        self.inner.check_buffer(buffer)?;
        let range = buffer.range(offset, Some(bytes.len() as u64))?;
        let caller = self.inner.pooled(stream);
        if caller != buffer.pooled {
            self.inner.hand_over(stream, "write", buffer)?;
        }
        let mut ps = self.inner.cells[buffer.pooled].lock();
        self.inner.write_on(&mut ps, stream, buffer, range, bytes)
    }

    /// Writes a slice of plain-old-data values (`f32`, `u32`, `[f16; 2]`, your own
    /// `#[repr(C)]` [`Pod`] type) into `buffer` at byte `offset`, in the host's byte
    /// order, exactly as [`write`](Self::write) writes their bytes. No conversion and
    /// no allocation beyond the staging.
    ///
    /// ```
    /// # use capture_graphs::{Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 16)?;
    /// dev.write_values(s, &x, 0, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// dev.write_values(s, &x, 8, &[9.5f32])?; // the third value only
    /// assert_eq!(dev.read_values::<f32>(s, &x)?, [1.0, 2.0, 9.5, 4.0]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    pub fn write_values<T: Pod>(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        values: &[T],
    ) -> Result<(), ServerError> {
        self.write(
            stream,
            buffer,
            offset,
            bytemuck::cast_slice::<T, u8>(values),
        )
    }

    /// Reads all of `buffer` back to the host, after everything enqueued before it, into
    /// a new vector. [`read_into`](Self::read_into) fills a buffer of the caller's
    /// instead, and [`read_values`](Self::read_values) reads typed values.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let y = dev.alloc(s, 16)?;
    /// let fill = dev.builtin(Builtin::Fill);
    /// dev.launch(s, &fill, [1, 1, 1], &[Arg::write(&y)], &Builtin::Fill.info(4, 0.5))?;
    /// // The read waits for the launch.
    /// assert_eq!(dev.read(s, &y)?, [0.5f32; 4].map(f32::to_le_bytes).concat());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::Unwritten`] when any byte read carries a failure (or was never
    /// written); [`ServerError::GraphState`] when the stream records (the capture is
    /// not doomed by it); [`ServerError::NeighbourRefused`]; an asynchronous error the
    /// wait reported, which also taints what the stream wrote since its last good fence.
    pub fn read(&self, stream: StreamId, buffer: &Buffer) -> Result<Vec<u8>, ServerError> {
        self.read_range(stream, buffer, 0, buffer.size())
    }

    /// Reads `len` bytes of `buffer` at `offset` back to the host, into a new vector.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 8)?;
    /// dev.write(s, &x, 0, [1, 2, 3, 4, 5, 6, 7, 8])?;
    /// assert_eq!(dev.read_range(s, &x, 2, 3)?, [3, 4, 5]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), and [`ServerError::InvalidBinding`] for a range outside
    /// the buffer.
    pub fn read_range(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ServerError> {
        // The range is checked before anything the size of it is allocated.
        self.inner
            .labels
            .named(buffer.range(offset, Some(len)).map(drop))?;
        let mut out = vec![0; len as usize];
        self.read_into(stream, buffer, offset, &mut out)?;
        Ok(out)
    }

    /// Reads `out.len()` bytes of `buffer` at `offset` into `out`, after everything
    /// enqueued before it. Nothing is allocated: a decode loop reads its logits into the
    /// same host buffer every token. On an error `out` holds nothing to trust.
    ///
    /// ```
    /// # use capture_graphs::{Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 8)?;
    /// dev.write(s, &x, 0, [1, 2, 3, 4, 5, 6, 7, 8])?;
    /// let mut host = [0u8; 4];
    /// dev.read_into(s, &x, 4, &mut host)?;
    /// assert_eq!(host, [5, 6, 7, 8]);
    /// // A range past the end is refused, naming the buffer.
    /// assert!(dev.read_into(s, &x, 6, &mut host).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`read_range`](Self::read_range).
    pub fn read_into(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        let _span = tracing::debug_span!(
            target: "capture", "read", %stream, pooled = buffer.pooled, buffer = %buffer.id()
        )
        .entered();
        let read = self.read_bytes(stream, buffer, offset, out);
        self.inner.labels.named(read)
    }

    fn read_bytes(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        self.inner.check_buffer(buffer)?;
        let range = buffer.range(offset, Some(out.len() as u64))?;
        if self.inner.pooled(stream) != buffer.pooled {
            self.inner.hand_over(stream, "read", buffer)?;
        }
        // The host reads: it waits for the other streams that wrote the buffer first,
        // settling or tainting their work (rule 18).
        let key = ClaimKey {
            memory: buffer.id(),
            range,
        };
        self.inner.order_host(buffer.pooled, stream, key)?;
        self.inner.cells[buffer.pooled].run(|ps| self.inner.read_on(ps, stream, buffer, range, out))
    }

    /// Reads all of `buffer` as plain-old-data values of type `T`, in the host's byte
    /// order.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let y = dev.alloc(s, 16)?;
    /// let fill = dev.builtin(Builtin::Fill);
    /// dev.launch(s, &fill, [1, 1, 1], &[Arg::write(&y)], &Builtin::Fill.info(4, 0.5))?;
    /// assert_eq!(dev.read_values::<f32>(s, &y)?, [0.5; 4]);
    /// // A size that is not a whole number of values is refused.
    /// assert!(dev.read_values::<[f32; 3]>(s, &y).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), and [`ServerError::InvalidArgument`] when the buffer's
    /// size is not a multiple of `T`'s.
    pub fn read_values<T: Pod>(
        &self,
        stream: StreamId,
        buffer: &Buffer,
    ) -> Result<Vec<T>, ServerError> {
        let count = whole_values::<T>(buffer.size(), "read_values")?;
        let mut out = vec![T::zeroed(); count];
        self.read_values_into(stream, buffer, 0, &mut out)?;
        Ok(out)
    }

    /// Reads `out.len()` values of type `T` from `buffer` at byte `offset` into `out`,
    /// allocating nothing.
    ///
    /// ```
    /// # use capture_graphs::{Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 16)?;
    /// dev.write_values(s, &x, 0, &[1u32, 2, 3, 4])?;
    /// let mut last_two = [0u32; 2];
    /// dev.read_values_into(s, &x, 8, &mut last_two)?;
    /// assert_eq!(last_two, [3, 4]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`read_into`](Self::read_into).
    pub fn read_values_into<T: Pod>(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        offset: u64,
        out: &mut [T],
    ) -> Result<(), ServerError> {
        self.read_into(
            stream,
            buffer,
            offset,
            bytemuck::cast_slice_mut::<T, u8>(out),
        )
    }

    /// Waits for everything enqueued on `stream`'s pooled stream.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let y = dev.alloc(s, 16)?;
    /// let fill = dev.builtin(Builtin::Fill);
    /// dev.launch(s, &fill, [1, 1, 1], &[Arg::write(&y)], &Builtin::Fill.info(4, 1.0))?;
    /// dev.sync(s)?; // the launch has run; a failure it met would be reported here
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::GraphState`] when the stream records (not a failure of the
    /// capture); [`ServerError::NeighbourRefused`]; an asynchronous error the wait
    /// reported, which taints what the stream wrote since its last good fence.
    pub fn sync(&self, stream: StreamId) -> Result<(), ServerError> {
        let _span = tracing::debug_span!(
            target: "capture", "sync", %stream, pooled = self.inner.pooled(stream)
        )
        .entered();
        let synced = self
            .inner
            .on_stream(stream, |ps| self.inner.sync_on(ps, stream));
        self.inner.labels.named(synced)
    }

    /// Frees what the drop queues hold once the device is done with it, drops unpinned
    /// info-cache entries, and gives empty pages back to the storage.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 4096)?;
    /// drop(x);
    /// dev.sync(s)?;
    /// let released = dev.cleanup()?;
    /// assert_eq!(released.pages_released, 1);
    /// assert!(dev.memory_report().is_empty(), "everything was freed");
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::GraphState`] naming the stream while any window is active
    /// (prepared or recording), or while a window of another device on the same driver
    /// context records: no page is released or renumbered then, on any stream, and
    /// nothing is changed; `end` or `abort` the window first.
    pub fn cleanup(&self) -> Result<CleanupReport, ServerError> {
        self.inner.reap();
        let cleaned = self.cleanup_all();
        self.inner.labels.named(cleaned)
    }

    fn cleanup_all(&self) -> Result<CleanupReport, ServerError> {
        let status = self.captures();
        if let Some(recording) = status.recording().first() {
            return Err(ServerError::graph_state_in(
                "cleanup",
                None,
                *recording,
                "is recording: no page is released or renumbered",
            ));
        }
        // Decided for every stream before any is touched: a refusal changes nothing.
        // Another device of the driver context recording holds every page too (rule 25).
        let elsewhere = self.inner.captures.status().with_recording(|r| match r {
            Some(Recording::Elsewhere(owner)) => Some(owner),
            _ => None,
        });
        if let Some(owner) = elsewhere {
            return Err(ServerError::graph_state_in(
                "cleanup",
                None,
                owner,
                "on another device of the same driver context is recording: no page is \
                 released or renumbered until it closes",
            ));
        }
        if let Some(armed) = status.active().first() {
            return Err(ServerError::graph_state_in(
                "cleanup",
                None,
                *armed,
                "is prepared: no page is released or renumbered until it ends or is aborted",
            ));
        }
        // Every stream's deferred frees first: one stream's queued work may hold another
        // stream's memory (rule 19), so no page is looked at before all are drained.
        for index in 0..self.inner.cells.len() {
            self.inner.cells[index].run(|ps| self.inner.drain_for_cleanup(ps));
        }
        let mut total = CleanupReport::default();
        for index in 0..self.inner.cells.len() {
            let report = self.inner.cells[index].run(|ps| self.inner.cleanup_on(ps))?;
            total.pages_released += report.pages_released;
            total.bytes_released += report.bytes_released;
        }
        Ok(total)
    }

    /// Every pooled stream's memory, and what each live graph holds: pages (live driver
    /// allocations), bytes reserved and in use, slices, pending drops, and each graph's
    /// ledger.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let x = dev.alloc(s, 100)?;
    /// let report = dev.memory_report();
    /// assert_eq!(report.pages(), 1);
    /// assert_eq!(report.slices_in_use(), 1);
    /// assert_eq!(report.driver_allocations(), (1, 0));
    /// # drop(x);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    pub fn memory_report(&self) -> DeviceReport {
        self.inner.reap();
        let mut streams = Vec::with_capacity(self.inner.cells.len());
        for index in 0..self.inner.cells.len() {
            streams.push(self.inner.cells[index].run(|ps| StreamReport {
                index: ps.index,
                device: ps.stream.device_memory().report(),
                host: ps.stream.host_memory().report(),
                read_staging_bytes: ps.stream.read_staging_bytes(),
                pending_drops: ps.drops.len(),
            }));
        }
        let (graphs, graph_shared_bytes, pools) = self.inner.ledgers_and_pools();
        DeviceReport {
            streams,
            graphs,
            graph_shared_bytes,
            pools,
        }
    }

    /// The multiple of bytes a launch's buffer range must start at on this device
    /// ([`Arg::range`](crate::Arg::range)); a launch that breaks it is refused with the
    /// alignment in the error.
    pub fn binding_alignment(&self) -> u64 {
        self.inner.limits.binding_alignment()
    }

    /// The longest range one launch argument may bind on this device.
    pub fn max_binding_bytes(&self) -> u64 {
        self.inner.limits.max_binding_bytes()
    }

    /// Whether this device runs programmatic dependent launches
    /// ([`Dims::programmatic`](crate::Dims::programmatic)), and why not where it does not:
    /// CUDA on compute capability 9.0 or later does; Vulkan and the mock never.
    pub fn programmatic_launch(&self) -> crate::ProgrammaticLaunch {
        self.inner.limits.programmatic()
    }

    /// Whether this device's graphs change after their seal through their slots (rule
    /// 26: [`Arg::slot`](crate::Arg::slot), [`Dims::slot`](crate::Dims::slot)), and why
    /// not where they do not: where they cannot, a slot named inside a window is refused
    /// when recorded.
    pub fn graph_updates(&self) -> crate::GraphUpdates {
        self.inner.limits.graph_updates()
    }

    /// Whether this device replays graphs in a loop on the device (rule 30:
    /// [`replay_until`](Self::replay_until)), and what a loop body may not hold there:
    /// where it cannot, a stop flag named inside a window is refused when recorded.
    pub fn loops(&self) -> crate::DeviceLoops {
        self.inner.limits.loops()
    }

    /// What `graph` holds, with its device bytes split as the handles stand now: a
    /// buffer dropped since the seal counts as the graph's own. `None` for a graph of
    /// another device.
    pub fn graph(&self, graph: &GraphHandle) -> Option<GraphLedger> {
        self.owned(graph).ok()?;
        self.inner.registry().ledger(graph.id())
    }
}

impl<B: Backend> Inner<B> {
    pub(crate) fn alloc_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        size: u64,
    ) -> Result<Buffer, ServerError> {
        self.admit(ps, stream, "alloc")?;
        let handle = match self.reserve_device(ps, stream, size) {
            Ok(h) => h,
            Err(error) => {
                self.refused(stream, "alloc", &error);
                let own_window = ps.stream.capturing().is_recording();
                if own_window && matches!(error, ServerError::AllocInWindow { .. }) {
                    return Err(self.doom(ps, stream, Op::Call("alloc"), error));
                }
                return Err(error);
            }
        };
        self.new_buffer(ps, stream, handle)
    }

    fn import_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        external: DeviceExternal<B::Stream>,
    ) -> Result<Buffer, ServerError> {
        self.admit(ps, stream, "import")?;
        // Two imports of the same bytes would be two unrelated buffers to every rule:
        // the second is refused, naming the first, and the memory is not adopted.
        let place = ps.stream.device_memory().place(&external)?;
        let handle = {
            let mut imports = self.imports();
            if let Some(first) = imports.covering(&place) {
                return Err(ServerError::invalid_value_of(
                    "imported memory",
                    format!(
                        "bytes {}..{} of space {:#x}",
                        place.range.start(),
                        place.range.end(),
                        place.space
                    ),
                    Subject::buffer(first),
                    "this buffer, imported before and still live, covers some of them: \
                     use it (or a range of it, `Arg::range`), or drop it and clean up \
                     before importing the memory again",
                ));
            }
            let handle = ps.stream.device_memory().import(external)?;
            imports.add(place, handle.id());
            handle
        };
        self.new_buffer(ps, stream, handle)
    }

    /// The buffer over `handle`, just allocated or imported on `stream`: fresh in the
    /// taint ledger, traced, and owned by this device.
    fn new_buffer(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        handle: ManagedMemoryHandle,
    ) -> Result<Buffer, ServerError> {
        let size = handle.size();
        self.forget_freed(ps);
        self.taint().fresh(handle.id(), size)?;
        let pool = ps.stream.device_memory().location(handle.id())?.pool;
        self.trace.push(Event::Alloc {
            stream,
            memory: handle.id(),
            len: size,
            pool,
        });
        Ok(Buffer {
            handle,
            owner: stream,
            pooled: ps.index,
            device: self.serial,
        })
    }

    pub(crate) fn write_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        buffer: &Buffer,
        range: ByteRange,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        self.admit(ps, stream, "write")?;
        let key = ClaimKey {
            memory: buffer.id(),
            range,
        };
        let destination = ps.stream.device_memory().resource(key)?;
        let location = ps.stream.device_memory().bind(buffer.id())?;
        let recording = ps.stream.capturing().is_recording();
        // The copy runs after every other stream's use of the buffer (rule 18).
        let ordered = if recording {
            Ok(())
        } else {
            self.order_device(ps, &[], &[key])
        };
        let raced = if recording {
            // Rule 30: a copy the device cannot loop is refused in a window naming a
            // stop flag, changing nothing.
            self.loop_body(ps, stream, || Op::Call("write"), BodyItem::Copy)?;
            let uses = std::iter::once((key, Access::Write, None));
            self.check_race(ps, stream, Op::Call("write"), uses)
        } else {
            Ok(())
        };
        let staged = ordered
            .and(raced)
            .and_then(|()| self.stage(ps, stream, bytes, &destination));
        let staging = match staged {
            Ok(s) => s,
            Err(error) => {
                self.claim(&[key], &error);
                if recording {
                    return Err(self.doom(ps, stream, Op::Call("write"), error));
                }
                return Err(error);
            }
        };
        if recording {
            // Rule 8: the recorded copy re-reads its staging on every replay, so the
            // staged bytes stay with the graph (`stage` held the slice); the destination
            // joins the graph's written set and its claim is left alone until a replay
            // settles it.
            let capture = ps.stream.capturing();
            capture.touch(buffer.owner, location);
            capture.record_copy(std::iter::once(buffer.binding(range, Access::Write)));
            drop(staging);
            self.recorded_in_body(ps, || Op::Call("write"), BodyItem::Copy);
        } else {
            self.taint().host_write(key)?;
            self.used(ps, &[], &[key], [&buffer.handle]);
            // The staging slice is read by the enqueued copy: it is freed once the device
            // is done with it. The caller's bytes were copied into it already.
            ps.drops.push(staging);
        }
        self.trace.push(Event::Write {
            stream,
            key,
            recorded: recording,
        });
        self.maybe_flush(ps, stream);
        Ok(())
    }

    /// Refuses a host wait on a recording stream (rule 9): the owner gets a lifecycle
    /// error and its capture is not doomed; a neighbour is refused as one.
    fn refuse_host_wait(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: &'static str,
    ) -> Result<(), ServerError> {
        let recording = ps.stream.capturing().is_recording();
        match ps.stream.capturing().owner() {
            Some(owner) if owner == stream && recording => {
                let error = ServerError::graph_state_in(
                    op,
                    Some(Subject::Stream(stream)),
                    stream,
                    "is recording: a host wait would break the capture",
                );
                self.refused(stream, op, &error);
                Err(error)
            }
            // A branch records into its window: a host wait on it is one on the window
            // (rule 28).
            Some(owner) if recording && self.is_branch_of(ps, stream) => {
                let error = ServerError::graph_state_in(
                    op,
                    Some(Subject::Stream(stream)),
                    owner,
                    "records it as a branch: a host wait would break the capture",
                );
                self.refused(stream, op, &error);
                Err(error)
            }
            _ => self.admit(ps, stream, op).map(drop),
        }
    }

    fn read_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        buffer: &Buffer,
        range: ByteRange,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        self.refuse_host_wait(ps, stream, "read")?;
        let key = ClaimKey {
            memory: buffer.id(),
            range,
        };
        self.taint().check_read(key)?;
        let source = ps.stream.device_memory().resource(key)?;
        // Anything another stream wrote since the host-side wait is waited for on the
        // device, before the read's own wait for this stream.
        let read = self
            .order_device(ps, &[key], &[])
            .and_then(|()| B::read(&mut ps.stream, &source, out));
        if let Err(error) = read {
            self.fault(ps, stream, &error);
            return Err(error);
        }
        // The read waited for everything the stream enqueued and reported no
        // asynchronous error: the drop queue retires with no fence of its own.
        self.retire_waited(ps);
        self.order().all_good(ps.index);
        self.taint().check_read(key)?;
        self.trace.push(Event::Read { stream, key });
        Ok(())
    }

    fn sync_on(&self, ps: &mut PooledStream<B>, stream: StreamId) -> Result<(), ServerError> {
        self.refuse_host_wait(ps, stream, "sync")?;
        if let Err(error) = B::sync(&mut ps.stream) {
            self.fault(ps, stream, &error);
            return Err(error);
        }
        // The sync waited for everything and reported no asynchronous error: the drop
        // queue retires with no fence of its own.
        self.retire_waited(ps);
        self.order().all_good(ps.index);
        self.trace.push(Event::Sync { stream });
        Ok(())
    }

    /// Frees what `ps`'s drop queue holds and its unpinned info entries, once the device
    /// is done with them.
    fn drain_for_cleanup(&self, ps: &mut PooledStream<B>) {
        let stream = StreamId::new(ps.index as u64);
        // A failed fence keeps what it held (and claims what the stream wrote); the
        // cleanup goes on with the rest.
        let _ = self.drain(ps, stream);
        let unpinned = ps.stream.info_cache().clear_unpinned();
        if !unpinned.is_empty() {
            for handle in unpinned {
                ps.drops.push(handle);
            }
            let _ = self.drain(ps, stream);
        }
    }

    fn cleanup_on(&self, ps: &mut PooledStream<B>) -> Result<CleanupReport, ServerError> {
        let index = ps.index;
        let status = self.captures.status();
        let report = status.with_pages(index, |update: PageUpdate| {
            let device = ps.stream.device_memory().cleanup(update)?;
            let host = ps.stream.host_memory().cleanup(update)?;
            ps.stream.device_memory().renumber(update)?;
            ps.stream.host_memory().renumber(update)?;
            Ok::<_, ServerError>(CleanupReport {
                pages_released: device.pages_released + host.pages_released,
                bytes_released: device.bytes_released + host.bytes_released,
            })
        })?;
        self.forget_freed(ps);
        Ok(report)
    }
}

/// How many values of `T` make up `size` bytes, refused when `size` is not a whole
/// number of them.
fn whole_values<T>(size: u64, op: &'static str) -> Result<usize, ServerError> {
    let each = std::mem::size_of::<T>() as u64;
    if each == 0 || !size.is_multiple_of(each) {
        return Err(ServerError::invalid(
            op,
            format!("a buffer of {size} bytes"),
            format!(
                "not a whole number of {} ({each} bytes each)",
                std::any::type_name::<T>()
            ),
        ));
    }
    Ok((size / each) as usize)
}
