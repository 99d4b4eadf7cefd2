//! `ServerError`: every way a core operation or a backend call can fail, each naming the
//! value, stream or operation that was wrong.
//!
//! Errors are `Clone` because one failure is handed out many times: the taint ledger
//! stores the real error of a failed scope and returns it, as the cause, to every read
//! that later overlaps the bytes it left unwritten. Driver sources are therefore held in
//! an `Arc` rather than a `Box`.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

use crate::arg_value::ArgValue;
use crate::branch_refusal::{BranchRace, BranchRefused};
use crate::ids::{FailureId, GraphId, GraphPoolId, MemoryId, Named, StreamId};
use crate::memory::{PoolName, PoolUsage};
use crate::op::{Op, ReadBy};
use crate::range::{ByteRange, InvalidRange};
use crate::report::GraphLedger;
use crate::slot_table::SlotRefused;
use crate::stop_flag::LoopRefused;
use crate::subject::{Of, Subject};

/// A failure of a core operation or of a backend's driver call.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A lifecycle call out of order (begin without prepare, a second prepare, end with
    /// nothing open, a replay inside a window). Nothing was changed.
    #[error("{op}{}: {}", Of(subject), Why::of(subject, *window, reason))]
    GraphState {
        /// The refused call.
        op: &'static str,
        /// What it was refused for (the stream whose window it concerns, the graph),
        /// when the refusal names one.
        subject: Option<Box<Subject>>,
        /// The stream whose capture window stands in the way (the one recording, or
        /// prepared), when the refusal is because of one: rendered once, before the
        /// reason ("stream#0's window is recording: …").
        window: Option<StreamId>,
        /// Why it was refused (of `window`, when there is one).
        reason: Cow<'static, str>,
    },
    /// A reservation would have grown a pool while a capture window records: on a driver
    /// whose capture breaks on allocation that allocation would become part of (or
    /// invalidate) the recording.
    #[error(
        "allocation of {size} bytes in pool {pool} for {stream} refused: {recording} is recording a capture window ({ALLOC_ADVICE})"
    )]
    AllocInWindow {
        /// The bytes asked for.
        size: u64,
        /// The pool that would have grown.
        pool: PoolName,
        /// The stream that asked.
        stream: StreamId,
        /// The stream whose window is recording.
        recording: StreamId,
    },
    /// The driver's capture recorded memory allocation (or free) nodes: an allocation
    /// inside the window that only the driver saw, detected when instantiating. A graph
    /// holding one would replay once and then fail, so it is refused.
    #[error(
        "the capture recorded {count} memory allocation node(s): an allocation inside the window"
    )]
    AllocationNodes {
        /// How many allocation or free nodes the recorded graph holds.
        count: usize,
    },
    /// A read overlapped bytes that nothing successfully wrote.
    #[error("{0}")]
    Unwritten(Box<Unwritten>),
    /// Work issued on another stream while a capture closure of this device runs on the
    /// same thread: it would run eagerly in both phases and be left out of the graph, so
    /// it is refused (one stream per window). Nothing was done; the window goes on.
    #[error(
        "{op} on {other} refused: the capture closure of {window} is running on this thread, and work on another stream would run eagerly and be left out of the graph (one stream per window: issue it on {window}, or before or after the capture)"
    )]
    OtherStreamInCapture {
        /// The refused operation.
        op: &'static str,
        /// The stream whose capture closure runs.
        window: StreamId,
        /// The stream the work was issued on.
        other: StreamId,
    },
    /// A window was ended by a stream that did not open it: the window is closed with no
    /// graph, and the owner's later `end` gets this error too.
    #[error("capture window of {owner} abandoned: ended by {by}")]
    Abandoned {
        /// The stream that opened the window.
        owner: StreamId,
        /// The stream that ended it.
        by: StreamId,
    },
    /// A capture window was doomed (or invalidated) by a failure inside it: it seals no
    /// graph. The post-mortem names what did it.
    #[error("{0}")]
    Doomed(Box<PostMortem>),
    /// A stream sharing a pooled stream with an active capture window was refused.
    #[error(
        "{op} on {neighbour} refused: {owner} holds a capture window on the same pooled stream"
    )]
    NeighbourRefused {
        /// The refused operation.
        op: &'static str,
        /// The stream that was refused.
        neighbour: StreamId,
        /// The stream whose window is active.
        owner: StreamId,
    },
    /// No graph is registered under this id (never sealed, or already dropped).
    #[error("unknown graph {0}")]
    UnknownGraph(GraphId),
    /// No live allocation has this id (never handed out, or already freed).
    #[error("unknown memory {0}")]
    UnknownMemory(MemoryId),
    /// A pool could not grow: the storage refused or the configured limit was reached.
    #[error("{0}")]
    OutOfMemory(Box<OutOfMemory>),
    /// A binding that does not fit the allocation it names.
    #[error("invalid binding {buffer}: {reason}")]
    InvalidBinding {
        /// The buffer, or the bytes of it the binding names.
        buffer: Box<Subject>,
        /// What is wrong with it.
        reason: Cow<'static, str>,
    },
    /// A size, range, id or setting outside what the call accepts.
    #[error("invalid {what} {}: {reason}", Value { value, subject })]
    InvalidArgument {
        /// What kind of value was refused.
        what: &'static str,
        /// The buffer, graph, stream, kernel or pool refused (or whose value was), when
        /// the value is one or belongs to one.
        subject: Option<Box<Subject>>,
        /// The value ([`ArgValue::None`] when the subject is the value).
        value: ArgValue,
        /// Why it was refused.
        reason: Cow<'static, str>,
    },
    /// A driver call failed.
    #[error("driver call {op} failed")]
    Driver {
        /// The driver operation.
        op: &'static str,
        /// What the driver reported.
        #[source]
        source: Arc<dyn Error + Send + Sync>,
    },
    /// Bytes a graph pool's member allocated were overwritten by another member of the
    /// pool (rule 23): its members share the memory their windows allocate, so a read of
    /// such bytes, or a member's replay that needs them from its own earlier replay,
    /// fails naming who overwrote them. Found as the cause of an
    /// [`Unwritten`](Self::Unwritten) read or skipped replay.
    #[error("{}", Overwrite { pool: *.pool, graph: *.graph, replay: *.replay, stream: *.stream })]
    Overwritten {
        /// The graph pool whose members share the bytes.
        pool: GraphPoolId,
        /// The member that overwrote them; `None` while its capture was still open (its
        /// warmup wrote them, and it sealed no graph, or not yet).
        graph: Option<GraphId>,
        /// Which replay of that member (counted from 1 over the graph's life); `None`
        /// for its warmup, the capture closure's first run.
        replay: Option<u64>,
        /// The stream the overwriting work ran on.
        stream: StreamId,
    },
    /// Several failures at once, the first being the one that decided the outcome.
    #[error("{}", Several(.0))]
    Several(Vec<ServerError>),
    /// A graph slot's update, or a slot's use inside a window, refused (rule 26): which
    /// graph (or window's stream), which slot, and what differs from what was recorded.
    /// Nothing was changed.
    #[error("{0}")]
    SlotRefused(Box<SlotRefused>),
    /// A fork, a join, or a lifecycle call on a branch, refused (rule 28): which branch,
    /// forked from which stream, and why. Nothing was changed unless the reason says the
    /// window was doomed.
    #[error("{0}")]
    BranchRefused(Box<BranchRefused>),
    /// Two unjoined branches of one window use the same bytes, one of them writing
    /// (rule 29): both operations and the range. The second was not recorded; the window
    /// is doomed.
    #[error("{0}")]
    BranchRace(Box<BranchRace>),
    /// A window ended with a branch it forked still unjoined (rule 28): no graph; the
    /// window is doomed, naming the branch.
    #[error(
        "the window of {window} ended with its branch {branch} unjoined (join every branch before the window ends)"
    )]
    UnjoinedBranch {
        /// The window's origin.
        window: StreamId,
        /// The first branch still unjoined.
        branch: StreamId,
    },
    /// A stop flag, a loop body or a loop replay refused (rule 30): which window or
    /// graph, and what was wrong. Nothing was changed.
    #[error("{0}")]
    LoopRefused(Box<LoopRefused>),
}

/// What [`ServerError::AllocInWindow`] advises, wherever it is rendered.
pub(crate) const ALLOC_ADVICE: &str = "allocate in warmup, the capture closure's first run, \
     or before prepare: memory warmup used is kept for the window";

/// How [`ServerError::InvalidArgument`]'s value reads: the value, its subject, or the
/// value of its subject.
struct Value<'a> {
    value: &'a ArgValue,
    subject: &'a Option<Box<Subject>>,
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.value.is_none(), self.subject) {
            (true, Some(subject)) => write!(f, "{subject}"),
            (false, Some(subject)) => write!(f, "{} of {subject}", self.value),
            (_, None) => write!(f, "{}", self.value),
        }
    }
}

/// How [`ServerError::GraphState`]'s reason reads: of the window in the way, when
/// there is one, named once ("its window" when the subject is that window's stream).
pub(crate) struct Why<'a> {
    window: Option<StreamId>,
    own: bool,
    reason: &'a str,
}

impl<'a> Why<'a> {
    pub(crate) fn of(
        subject: &Option<Box<Subject>>,
        window: Option<StreamId>,
        reason: &'a str,
    ) -> Self {
        let stream = subject.as_deref().and_then(Subject::stream);
        Why {
            window,
            own: window.is_some() && stream == window,
            reason,
        }
    }
}

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.window {
            Some(_) if self.own => write!(f, "its window {}", self.reason),
            Some(window) => write!(f, "{window}'s window {}", self.reason),
            None => f.write_str(self.reason),
        }
    }
}

/// How [`ServerError::Overwritten`] reads.
struct Overwrite {
    pool: GraphPoolId,
    graph: Option<GraphId>,
    replay: Option<u64>,
    stream: StreamId,
}

impl fmt::Display for Overwrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.graph, self.replay) {
            (Some(graph), Some(n)) => write!(f, "replay {n} of {graph}")?,
            (Some(graph), None) => write!(f, "the warmup of {graph}")?,
            (None, _) => write!(f, "the warmup of a capture into {}", self.pool)?,
        }
        write!(
            f,
            " on {} overwrote these bytes: members of {} share the memory their windows \
             allocate (rule 23); write them again, or replay their own graph first",
            self.stream, self.pool
        )
    }
}

impl From<InvalidRange> for ServerError {
    fn from(e: InvalidRange) -> Self {
        match e {
            InvalidRange::Empty { offset } => Self::invalid(
                "byte range",
                format!("[{offset}..{offset})"),
                "a range names at least one byte",
            ),
            InvalidRange::Overflows { offset, len } => Self::invalid(
                "byte range",
                format!("offset {offset} len {len}"),
                "offset + len overflows",
            ),
        }
    }
}

impl ServerError {
    /// A refused lifecycle call.
    pub fn graph_state(op: &'static str, reason: impl Into<Cow<'static, str>>) -> Self {
        Self::GraphState {
            op,
            subject: None,
            window: None,
            reason: reason.into(),
        }
    }

    /// A refused lifecycle call, for `subject` (the stream whose window it concerns).
    pub fn graph_state_of(
        op: &'static str,
        subject: Subject,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::GraphState {
            op,
            subject: Some(Box::new(subject)),
            window: None,
            reason: reason.into(),
        }
    }

    /// A lifecycle call refused because of `window`'s capture window (recording, or
    /// prepared): `reason` says what of that window, and reads after it
    /// ("is recording: …"); `subject` is what the call was for, when it names one.
    ///
    /// ```
    /// use capture_graphs::{ServerError, StreamId};
    ///
    /// let s = StreamId::new(2);
    /// let err = ServerError::graph_state_in("cleanup", None, s, "is recording: no page is released");
    /// assert_eq!(err.window(), Some(s));
    /// assert_eq!(err.to_string(), "cleanup: stream#2's window is recording: no page is released");
    /// ```
    pub fn graph_state_in(
        op: &'static str,
        subject: Option<Subject>,
        window: StreamId,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::GraphState {
            op,
            subject: subject.map(Box::new),
            window: Some(window),
            reason: reason.into(),
        }
    }

    /// A refused argument: `what` kind of value, the value, and why.
    pub fn invalid(
        what: &'static str,
        value: impl Into<ArgValue>,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::InvalidArgument {
            what,
            subject: None,
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// A refused argument that is `subject` (a buffer, graph, stream, kernel or pool).
    pub fn invalid_of(
        what: &'static str,
        subject: Subject,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::InvalidArgument {
            what,
            subject: Some(Box::new(subject)),
            value: ArgValue::None,
            reason: reason.into(),
        }
    }

    /// A refused value of `subject`'s (a stream's replay, a buffer's range).
    pub fn invalid_value_of(
        what: &'static str,
        value: impl Into<ArgValue>,
        subject: Subject,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::InvalidArgument {
            what,
            subject: Some(Box::new(subject)),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// A binding of `buffer` (a buffer, or bytes of it) that does not fit.
    pub fn invalid_binding(buffer: Subject, reason: impl Into<Cow<'static, str>>) -> Self {
        Self::InvalidBinding {
            buffer: Box::new(buffer),
            reason: reason.into(),
        }
    }

    /// What the error names, when it names one thing as its subject: match on which
    /// buffer, graph, stream, kernel or pool was refused by its typed id, not its text.
    ///
    /// ```
    /// # use capture_graphs::{Device, DeviceConfig, ServerError, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let kv = dev.alloc(s, 64)?;
    /// dev.label(&kv, "kv cache")?;
    /// let err = dev.write(s, &kv, 60, vec![0u8; 8]).unwrap_err();
    /// let subject = err.subject().expect("the refusal names the buffer");
    /// assert_eq!(subject.memory(), Some(kv.id()));
    /// assert_eq!(subject.label(), Some("kv cache"));
    /// assert!(err.to_string().starts_with(r#"invalid binding buf#0 "kv cache"[60+8] (64 B)"#));
    /// # Ok::<(), ServerError>(())
    /// ```
    pub fn subject(&self) -> Option<&Subject> {
        match self {
            Self::GraphState { subject, .. } | Self::InvalidArgument { subject, .. } => {
                subject.as_deref()
            }
            Self::InvalidBinding { buffer, .. } => Some(buffer),
            Self::SlotRefused(refused) => Some(&refused.subject),
            Self::LoopRefused(refused) => Some(&refused.subject),
            _ => None,
        }
    }

    /// The stream whose capture window the error is about, when it names one besides its
    /// subject: the window in the way of a refused lifecycle call, the window a
    /// reservation or a neighbour was refused for, the window abandoned or left with a
    /// branch unjoined, the window whose closure runs on this thread.
    pub fn window(&self) -> Option<StreamId> {
        match self {
            Self::GraphState { window, .. } => *window,
            Self::AllocInWindow { recording, .. } => Some(*recording),
            Self::OtherStreamInCapture { window, .. } | Self::UnjoinedBranch { window, .. } => {
                Some(*window)
            }
            Self::NeighbourRefused { owner, .. } | Self::Abandoned { owner, .. } => Some(*owner),
            Self::Doomed(pm) => Some(pm.owner),
            _ => None,
        }
    }

    /// A failed driver call `op`, with what the driver said as its source.
    pub fn driver(op: &'static str, source: impl Error + Send + Sync + 'static) -> Self {
        Self::Driver {
            op,
            source: Arc::new(source),
        }
    }
}

impl From<BranchRefused> for ServerError {
    fn from(refused: BranchRefused) -> Self {
        ServerError::BranchRefused(Box::new(refused))
    }
}

impl From<BranchRace> for ServerError {
    fn from(race: BranchRace) -> Self {
        ServerError::BranchRace(Box::new(race))
    }
}

impl From<Box<SlotRefused>> for ServerError {
    fn from(refused: Box<SlotRefused>) -> Self {
        ServerError::SlotRefused(refused)
    }
}

impl From<LoopRefused> for ServerError {
    fn from(refused: LoopRefused) -> Self {
        ServerError::LoopRefused(Box::new(refused))
    }
}

impl From<SlotRefused> for ServerError {
    fn from(refused: SlotRefused) -> Self {
        ServerError::SlotRefused(Box::new(refused))
    }
}

impl ServerError {
    /// The error to match on, one step away however it was wrapped: a post-mortem's
    /// cause (a doomed window's failure), or the deciding (first) failure of
    /// [`Several`](Self::Several), followed down to a variant that wraps no other.
    ///
    /// ```
    /// use capture_graphs::{Op, ServerError, StreamId};
    ///
    /// let cause = ServerError::invalid("grid", "[0, 1, 1]", "empty");
    /// let doomed =
    ///     ServerError::doomed(StreamId::new(0), Op::Call("end"), StreamId::new(0), 3, cause);
    /// assert!(matches!(doomed.root_cause(), ServerError::InvalidArgument { what: "grid", .. }));
    /// ```
    pub fn root_cause(&self) -> &ServerError {
        let mut error = self;
        loop {
            error = match error {
                Self::Doomed(pm) => &pm.cause,
                Self::Several(all) if !all.is_empty() => &all[0],
                _ => return error,
            };
        }
    }

    /// The post-mortem of a doomed window, when this is one.
    pub fn post_mortem(&self) -> Option<&PostMortem> {
        match self {
            Self::Doomed(pm) => Some(pm),
            _ => None,
        }
    }

    /// The refused read, when this error (or its [root cause](Self::root_cause)) is one:
    /// which bytes, which failure, and the launches skipped because of it.
    pub fn unwritten(&self) -> Option<&Unwritten> {
        match self.root_cause() {
            Self::Unwritten(u) => Some(u),
            _ => None,
        }
    }

    /// Every failure this error carries, outermost first: itself, then a post-mortem's
    /// cause and each failure of [`Several`](Self::Several), depth first.
    pub fn failures(&self) -> Vec<&ServerError> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            out.push(e);
            match e {
                Self::Doomed(pm) => stack.push(&pm.cause),
                Self::Several(all) => stack.extend(all.iter().rev()),
                _ => {}
            }
        }
        out
    }
}

/// Renders an error followed by each of its sources, `: `-separated: how a failure
/// nested in another (a claim's cause, a post-mortem's) is shown in full.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

struct Several<'a>(&'a [ServerError]);

impl fmt::Display for Several<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; then ")?;
            }
            write!(f, "{}", Chain(e))?;
        }
        Ok(())
    }
}

/// A backend cannot be used here: no driver library, no device, or a device without
/// what the backend needs. Every backend returns this from its constructor instead of
/// panicking.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{backend} unavailable: {why}")]
pub struct Unavailable {
    backend: &'static str,
    why: String,
}

impl Unavailable {
    /// `backend` (its name, as `Vulkan` or `CUDA`) cannot be used, because `why`.
    pub fn new(backend: &'static str, why: impl Into<String>) -> Self {
        Self {
            backend,
            why: why.into(),
        }
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// Why it cannot be used.
    pub fn why(&self) -> &str {
        &self.why
    }
}

impl From<Unavailable> for ServerError {
    fn from(u: Unavailable) -> Self {
        ServerError::driver("open backend", u)
    }
}

/// Why bytes are claimed in the taint ledger.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum FailureCause {
    /// A fresh allocation: nothing has written these bytes yet.
    NeverWritten,
    /// The work that claimed these bytes never finished: it panicked, or its outcome
    /// was never reported.
    Unfinished {
        /// The operation whose scope claimed the bytes.
        op: Op,
    },
    /// The work that should have written these bytes failed with this error.
    Failed(ServerError),
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverWritten => f.write_str("never written"),
            Self::Unfinished { op } => write!(f, "{op} never finished"),
            Self::Failed(e) => write!(f, "{}", Chain(e)),
        }
    }
}

/// A launch skipped because one of its inputs was claimed; it passed the claim's failure
/// on to its own outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The skipped operation: a kernel's launch, the program's work, a graph's replay.
    pub op: Op,
    /// The stream it was issued on.
    pub stream: StreamId,
    /// The claimed input that made it skip.
    pub input: MemoryId,
    /// The input's label, when the user gave it one ([`Device::label`](crate::Device::label)).
    pub input_label: Option<Arc<str>>,
    /// The bytes of that input that were claimed.
    pub range: ByteRange,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} skipped (input {}{})",
            self.op,
            self.stream,
            Named(self.input, self.input_label.as_deref()),
            self.range
        )
    }
}

/// A read refused because it overlapped claimed bytes.
#[derive(Debug, Clone)]
pub struct Unwritten {
    /// The allocation read.
    pub memory: MemoryId,
    /// Its label, when the user gave it one ([`Device::label`](crate::Device::label)).
    pub label: Option<Arc<str>>,
    /// The bytes the read asked for.
    pub read: ByteRange,
    /// The claimed bytes the read overlapped (the first such claim).
    pub claimed: ByteRange,
    /// The failure the claim carries.
    pub failure: FailureId,
    /// What that failure is.
    pub cause: FailureCause,
    /// The launches skipped because of that failure, oldest first.
    pub chain: Vec<Skipped>,
    /// What read the bytes when it was not a host read: the launch, work or replay that
    /// was skipped or refused (`launch of add_one on stream#0`), so the message names it.
    pub by: Option<ReadBy>,
}

impl fmt::Display for Unwritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let memory = Named(self.memory, self.label.as_deref());
        match &self.by {
            Some(by) => write!(
                f,
                "{by} skipped: its input {memory}{} overlaps {}, which carries {}: {}",
                self.read, self.claimed, self.failure, self.cause
            )?,
            None => write!(
                f,
                "read of {memory}{} refused: {} carries {}: {}",
                self.read, self.claimed, self.failure, self.cause
            )?,
        }
        for s in &self.chain {
            write!(f, "; then {s}")?;
        }
        Ok(())
    }
}

/// What doomed a capture window: which call, on which stream, after how many recorded
/// launches, and why.
#[derive(Debug, Clone)]
pub struct PostMortem {
    /// The stream that opened the window.
    pub owner: StreamId,
    /// The operation that failed or was refused inside the window.
    pub op: Op,
    /// The logical stream that issued it.
    pub stream: StreamId,
    /// Launches recorded before it.
    pub launches: u64,
    /// The failure itself.
    pub cause: ServerError,
}

impl fmt::Display for PostMortem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capture window of {} doomed by {} on {} after {} recorded launches: {}",
            self.owner,
            self.op,
            self.stream,
            self.launches,
            Chain(&self.cause)
        )
    }
}

impl ServerError {
    /// The post-mortem of a window `owner` opened, doomed by `op` on `stream` after
    /// `launches` recorded launches, because of `cause`.
    pub fn doomed(
        owner: StreamId,
        op: Op,
        stream: StreamId,
        launches: u64,
        cause: ServerError,
    ) -> Self {
        Self::Doomed(Box::new(PostMortem {
            owner,
            op,
            stream,
            launches,
            cause,
        }))
    }
}

/// A pool that could not grow, with the figures of every pool and graph at that moment.
#[derive(Debug, Clone)]
pub struct OutOfMemory {
    /// The bytes asked for.
    pub requested: u64,
    /// The pool that could not grow.
    pub pool: PoolName,
    /// Why: the storage's refusal, or the configured limit.
    pub reason: Cow<'static, str>,
    /// Reserved and in-use bytes per pool.
    pub pools: Vec<PoolUsage>,
    /// What each live graph holds (filled in by the runtime, empty below it).
    pub graphs: Vec<GraphLedger>,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory: {} bytes in pool {}: {}",
            self.requested, self.pool, self.reason
        )?;
        for p in &self.pools {
            write!(f, "; {p}")?;
        }
        for g in &self.graphs {
            write!(f, "; {g}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_names_each_failure_in_order() {
        let e = ServerError::Several(vec![
            ServerError::Abandoned {
                owner: StreamId::new(0),
                by: StreamId::new(1),
            },
            ServerError::graph_state("end", "doomed"),
        ]);
        assert_eq!(
            e.to_string(),
            "capture window of stream#0 abandoned: ended by stream#1; then end: doomed"
        );
    }

    #[test]
    fn the_root_cause_is_one_step_away_however_deep_it_is_wrapped() {
        let cause = ServerError::UnknownGraph(GraphId::new(7));
        let wrapped = ServerError::doomed(
            StreamId::new(0),
            Op::Call("end"),
            StreamId::new(1),
            2,
            ServerError::Several(vec![cause, ServerError::graph_state("end", "then")]),
        );
        assert!(matches!(wrapped.root_cause(), ServerError::UnknownGraph(g) if g.index() == 7));
        assert_eq!(wrapped.post_mortem().map(|pm| pm.launches), Some(2));
        let kinds: Vec<String> = wrapped.failures().iter().map(|e| e.to_string()).collect();
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        assert_eq!(kinds[2], "unknown graph graph#7");
        assert_eq!(kinds[3], "end: then");
        // Something that wraps nothing is its own root cause.
        let flat = ServerError::UnknownMemory(MemoryId::new(3));
        assert!(std::ptr::eq(flat.root_cause(), &flat));
        assert!(flat.unwritten().is_none());
    }

    #[test]
    fn driver_errors_chain_their_source() {
        let e = ServerError::driver("cuGraphLaunch", std::io::Error::other("boom"));
        assert_eq!(e.to_string(), "driver call cuGraphLaunch failed");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("boom"));
    }
}
