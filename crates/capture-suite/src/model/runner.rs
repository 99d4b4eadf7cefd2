//! The runner: drives a [`Device`] through a program's ops, one at a time, keeping the
//! reference model beside it, and checks after every op what the rules promise.
//!
//! The model follows the device where the rules leave the outcome open (an injected
//! fault fired, a call was refused with a typed error) and predicts it where they do
//! not. Every public call runs under `catch_unwind`: a panic is a violation.

mod branching;
mod token;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use capture_core::{
    Access, Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceLoops, Dims, GraphHandle,
    GraphPool, GraphUpdates, KernelHandle, MemoryId, Op as Ran, ProgrammaticLaunch, ServerError,
    SlotMismatch, StreamId,
};
use capture_mock::{FaultOp, FaultPlan, Faulty};

use super::kernels::{
    ElsewhereFn, ExternalFn, ImportFn, Imported, SizedFn, UserFn, WorkFn, WorkOf, colliding_word,
    scalar_of,
};
use super::program::{
    ArgSpec, BodyOp, Form, GRID_MAX, INFO_COUNTS, LATEST, LaunchSpec, Op, SCALAR_SIZES, UpdateSpec,
    UserKernel,
};
use super::reference::{
    Byte, Model, ModelGraph, Rec, ResolvedLaunch, SlotKind, SlotUse, SlotVal, Window, add_slots,
    slot_conflicts,
};
use super::span::Span;

/// A broken promise: which op of the program, and what the device did that the rules
/// do not allow.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The op's position in the program (the program's length for the final checks).
    pub step: usize,
    /// The op, rendered.
    pub op: String,
    /// What went wrong.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} ({}): {}", self.step, self.op, self.what)
    }
}

impl std::error::Error for Violation {}

/// How a call failed, as far as the model is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `ServerError::Unwritten`: skipped, or a read of claimed bytes.
    Unwritten,
    /// Refused before anything ran (neighbour, bad argument or binding, unknown graph):
    /// nothing changed.
    Refused,
    /// Refused on the way (a lifecycle refusal, an allocation refused while a window
    /// records, out of memory): the op's outputs may have been claimed.
    LateRefused,
    /// An injected fault in the op's own driver call (enqueue, load, allocation, copy,
    /// replay, begin, instantiate).
    OwnFault,
    /// An injected fault in a wait (a fence wait, an asynchronous error, a submit).
    WaitFault,
    /// A window closed without a graph (abandoned, several failures).
    Closed,
    /// Anything else: never allowed.
    Unexpected,
}

/// Faults in a wait: a fence wait refused, an asynchronous error reported, a submit
/// refused, or a device-side wait for another stream refused (the core then treats what
/// the stream wrote since its last good fence as rule 15 says).
const WAIT_FAULTS: [FaultOp; 4] = [
    FaultOp::FenceWait,
    FaultOp::AsyncAtFence,
    FaultOp::Submit,
    FaultOp::WaitFor,
];

/// The driver operation the mock names when a kernel's work faulted (a user kernel that
/// panicked or resized a buffer), reported at a later wait.
const KERNEL_FAULT: &str = "kernel";

/// The driver operation the mock names when the user's own work failed on the device,
/// reported as a kernel's fault is.
const WORK_FAULT: &str = "work";

/// Whether a driver error names a fault of device work (a kernel's or the user's own).
fn device_fault(op: &str) -> bool {
    op == KERNEL_FAULT || op == WORK_FAULT
}

/// Sorts an error into a [`Kind`], and whether it says the window was doomed. `fired`
/// are the faults injected during the call; a driver error that none of them explains
/// is unexpected, unless it is a kernel's fault and one may be unreported (`kernel`).
fn classify(
    error: &ServerError,
    fired: &[FaultOp],
    kernel: bool,
    surfaced: &mut Vec<FaultOp>,
) -> (Kind, bool) {
    match error {
        ServerError::Unwritten(_) => (Kind::Unwritten, false),
        ServerError::NeighbourRefused { .. }
        | ServerError::InvalidArgument { .. }
        | ServerError::InvalidBinding { .. }
        | ServerError::SlotRefused(_)
        | ServerError::LoopRefused(_)
        | ServerError::BranchRefused(_)
        | ServerError::UnknownGraph(_) => (Kind::Refused, false),
        ServerError::GraphState { .. }
        | ServerError::AllocInWindow { .. }
        | ServerError::BranchRace(_)
        | ServerError::UnjoinedBranch { .. }
        | ServerError::OutOfMemory(_) => (Kind::LateRefused, false),
        ServerError::Driver { op, .. } => match fired.iter().find(|f| f.name() == *op) {
            Some(f) => {
                surfaced.push(*f);
                if WAIT_FAULTS.contains(f) {
                    (Kind::WaitFault, false)
                } else {
                    (Kind::OwnFault, false)
                }
            }
            None if kernel && device_fault(op) => (Kind::WaitFault, false),
            None => (Kind::Unexpected, false),
        },
        ServerError::Doomed(pm) => (classify(&pm.cause, fired, kernel, surfaced).0, true),
        ServerError::Abandoned { .. } => (Kind::Closed, false),
        ServerError::Several(all) => {
            for e in all {
                classify(e, fired, kernel, surfaced);
            }
            (Kind::Closed, false)
        }
        _ => (Kind::Unexpected, false),
    }
}

/// The index `name` stands for among `len` names: itself, or counted back from the
/// latest (`LATEST` the latest, `LATEST - k` the one `k` before it).
fn relative(name: u8, len: usize) -> Option<usize> {
    if name >= LATEST - 31 {
        len.checked_sub(1 + usize::from(LATEST - name))
    } else {
        Some(usize::from(name))
    }
}

fn armed(plan: &FaultPlan) -> Vec<FaultOp> {
    FaultOp::ALL
        .into_iter()
        .filter(|op| plan.is_armed(*op))
        .collect()
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_string()
    }
}

/// Runs `f` under `catch_unwind`, and says which armed faults fired meanwhile.
fn guarded<T>(plan: &FaultPlan, f: impl FnOnce() -> T) -> (Result<T, String>, Vec<FaultOp>) {
    let before = armed(plan);
    let result = catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_text(&*p));
    let after = armed(plan);
    let fired = before
        .into_iter()
        .filter(|op| !after.contains(op))
        .collect();
    (result, fired)
}

fn f32_bytes(values: &[i8]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| f32::from(*v).to_le_bytes())
        .collect()
}

/// `len` bytes at `offset` of a buffer of `size` bytes: the offset wraps, the length is
/// clipped (at least one byte).
fn clip(size: usize, offset: usize, len: usize) -> (usize, usize) {
    let offset = if offset < size { offset } else { offset % size };
    (offset, len.min(size - offset).max(1))
}

fn render(bytes: &[Byte]) -> String {
    let shown: Vec<String> = bytes
        .iter()
        .take(16)
        .map(|b| match b {
            Byte::Val(v) => format!("{v:02x}"),
            Byte::Either(v) => format!("{v:02x}?"),
            Byte::Unwritten => "--".to_string(),
            Byte::Any => "**".to_string(),
        })
        .collect();
    shown.join(" ")
}

/// A launch ready to issue: the device's arguments (buffers, then scalars) and info
/// words, the words a mock kernel would see (for the same computation as foreign work),
/// and the model's view.
struct Issued {
    args: Vec<Arg>,
    info: Vec<u64>,
    words: Vec<u64>,
    model: ResolvedLaunch,
    /// The slots it names inside a window (rule 26), and its grid's.
    slots: Vec<SlotUse>,
    grid_slot: Option<String>,
}

/// The state of one run: the device, its plan and kernels, the model, and the handles
/// behind the program's names.
pub(crate) struct Run<B: Builtins> {
    pub(crate) dev: Arc<Device<Faulty<B>>>,
    plan: Arc<FaultPlan>,
    /// Each builtin's handle, in [`Builtin::ALL`]'s order: `Device::builtin` at its first
    /// launch, or a later registration's ([`Op::Register`]).
    kernels: Vec<Option<KernelHandle>>,
    /// The user kernels the backend provides, in [`UserKernel::ALL`]'s order, registered
    /// at their first launch.
    user: Vec<Option<KernelHandle>>,
    /// The user kernels' sources.
    user_source: Option<UserFn<B>>,
    /// The handle `Device::builtin` gave at each builtin's first use.
    first_builtin: Vec<Option<KernelHandle>>,
    /// The `Sized` kernels registered so far, by declared scalar and info sizes.
    sized: HashMap<(u8, u8), KernelHandle>,
    /// Their sources, where the backend has them.
    sized_source: Option<SizedFn<B>>,
    /// Another device on the same driver context has a window recording: its capture
    /// domain may refuse a first kernel load or a page release here (rule 20).
    pub(crate) elsewhere: bool,
    /// Per pooled stream: work that faults (a user kernel's) may be unreported on it, so
    /// what any stream writes may yet be claimed (rule 15, taken wide).
    faulty: Vec<bool>,
    streams: u8,
    pooled: usize,
    /// One thread of a threaded run: every op runs on this logical stream, and other
    /// threads' windows (unknown here) may refuse anything.
    fixed: Option<u8>,
    pub(crate) model: Model,
    /// Program buffer names → model buffers.
    slots: Vec<Option<usize>>,
    /// Model buffers → the user's handle, while held.
    handles: Vec<Option<Buffer>>,
    /// Model buffers shared read-only between threads.
    shared: Vec<bool>,
    graphs: Vec<Option<(GraphHandle, ModelGraph)>>,
    step: usize,
    op_text: String,
    fired: Vec<FaultOp>,
    surfaced: Vec<FaultOp>,
    pub(crate) violation: Option<Violation>,
    /// The backend's own work for a launch's computation, where it has a form of it.
    work: Option<WorkFn<B>>,
    /// Memory of the caller's own, where the backend can make it.
    import: Option<ImportFn<B>>,
    /// Memory of another backend value, where the backend can make it.
    elsewhere_memory: Option<ElsewhereFn<B>>,
    /// The device's graph pools, made at their first use, and the pooled stream each
    /// one's members live on (rule 23).
    pools: Vec<(Option<GraphPool>, Option<usize>)>,
    /// The model buffers allocated while a capture into a graph pool was armed: in that
    /// pool's memory, whose members take each other's graph-only bytes.
    arena: HashMap<usize, u8>,
    /// While a capture closure runs: its pool, if any, with the buffers it allocated or
    /// used; whether this is the recorded call; the names its allocations took, and the
    /// state buffers of its warmup call.
    closure: Option<Closure>,
    /// What `Device::import` took for each import that succeeded, by model buffer, to
    /// import the same memory again.
    externals: HashMap<usize, ExternalFn<B>>,
    /// The device's id of each import that succeeded, by model buffer: what a second
    /// import of its memory is refused naming.
    import_ids: HashMap<usize, MemoryId>,
    /// Each import that succeeded: its model buffer and the caller's memory. Declared
    /// last, so it outlives the device and every graph (its `# Safety` contract).
    imports: Vec<(usize, Box<dyn Imported>)>,
    /// The branch tokens the program forked, by name (rule 28).
    tokens: Vec<Option<token::Token>>,
}

/// What the model knows of a capture closure while it runs.
#[derive(Default)]
struct Closure {
    pool: Option<u8>,
    own: BTreeSet<usize>,
    record: bool,
    /// The first name of this call's.
    base: usize,
    /// Names its `Alloc`s took in this call, with `keep`.
    allocs: Vec<(usize, bool)>,
    /// Its `State` buffers, in order (from the warmup call).
    states: Vec<Option<usize>>,
    /// How many `State`s this call named.
    named: usize,
    /// The branch its ops run on now (`Switch`), if not the capturing stream.
    on: Option<u8>,
}

impl<B: Builtins> Run<B> {
    pub(crate) fn new(
        dev: Arc<Device<Faulty<B>>>,
        kernels: Vec<KernelHandle>,
        streams: u8,
        pooled: usize,
        fixed: Option<u8>,
    ) -> Self {
        Self {
            plan: Arc::clone(dev.backend().plan()),
            dev,
            kernels: if kernels.len() == Builtin::ALL.len() {
                kernels.into_iter().map(Some).collect()
            } else {
                vec![None; Builtin::ALL.len()]
            },
            user: vec![None; UserKernel::ALL.len()],
            user_source: None,
            first_builtin: vec![None; Builtin::ALL.len()],
            sized: HashMap::new(),
            sized_source: None,
            elsewhere: false,
            faulty: vec![false; pooled],
            streams,
            pooled,
            fixed,
            model: Model::new(pooled),
            slots: Vec::new(),
            handles: Vec::new(),
            shared: Vec::new(),
            graphs: Vec::new(),
            step: 0,
            op_text: String::new(),
            fired: Vec::new(),
            surfaced: Vec::new(),
            violation: None,
            work: None,
            import: None,
            elsewhere_memory: None,
            pools: vec![(None, None), (None, None)],
            arena: HashMap::new(),
            closure: None,
            externals: HashMap::new(),
            import_ids: HashMap::new(),
            imports: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// Gives the run the backend's own work and imported memory (`None`: work and
    /// import ops do nothing).
    pub(crate) fn foreign(
        &mut self,
        work: Option<WorkFn<B>>,
        import: Option<ImportFn<B>>,
        elsewhere: Option<ElsewhereFn<B>>,
    ) {
        self.work = work;
        self.import = import;
        self.elsewhere_memory = elsewhere;
    }

    /// Gives the run the user kernels the backend provides (`source` gives `None` for
    /// one it has not), each registered at its first launch; launches of the others do
    /// nothing.
    pub(crate) fn user_kernels(&mut self, source: UserFn<B>, sized: Option<SizedFn<B>>) {
        self.user_source = Some(source);
        self.sized_source = sized;
    }

    /// The handle of user kernel `user`, registered now if it never was; `None` when
    /// the backend has no such kernel.
    fn user_kernel(&mut self, user: UserKernel) -> Option<KernelHandle> {
        let at = UserKernel::ALL.iter().position(|k| *k == user)?;
        if self.user[at].is_none() {
            let source = self.user_source.as_ref()?(user)?;
            self.user[at] = Some(self.dev.kernel(source));
        }
        self.user[at]
    }

    /// The handle a launch of `builtin` uses: `Device::builtin`'s (asked every time,
    /// and always the handle it gave first), or a later registration's. `None` when the
    /// call panicked (a violation).
    fn builtin_kernel(&mut self, builtin: Builtin) -> Option<KernelHandle> {
        let at = Builtin::ALL
            .iter()
            .position(|b| *b == builtin)
            .expect("a builtin");
        let dev = Arc::clone(&self.dev);
        let (got, _) = self.guarded(|| dev.builtin(builtin))?;
        match self.first_builtin[at] {
            Some(first) if first != got => {
                self.fail(format!(
                    "Device::builtin({}) gave another handle than at its first use",
                    builtin.name()
                ));
            }
            Some(_) => {}
            None => self.first_builtin[at] = Some(got),
        }
        Some(*self.kernels[at].get_or_insert(got))
    }

    /// Registers `builtin` (or `user`) afresh: later launches use the new handle, which
    /// must run the same code.
    fn register(&mut self, builtin: Builtin, user: Option<UserKernel>) {
        let dev = Arc::clone(&self.dev);
        match user {
            Some(user) => {
                let Some(at) = UserKernel::ALL.iter().position(|k| *k == user) else {
                    return;
                };
                let Some(source) = self.user_source.as_ref().and_then(|f| f(user)) else {
                    return;
                };
                if let Some((k, _)) = self.guarded(|| dev.kernel(source)) {
                    self.user[at] = Some(k);
                }
            }
            None => {
                let at = Builtin::ALL
                    .iter()
                    .position(|b| *b == builtin)
                    .expect("a builtin");
                if let Some((k, _)) = self.guarded(|| dev.kernel(B::builtin(builtin))) {
                    if dev.kernel_name(&k) != builtin.name() {
                        self.fail(format!(
                            "a kernel registered as {} is named {}",
                            builtin.name(),
                            dev.kernel_name(&k)
                        ));
                    }
                    self.kernels[at] = Some(k);
                }
            }
        }
    }

    /// Drops `other` (another device's run: its device, buffers and graphs, whatever it
    /// was doing) under `catch_unwind`: a panic is a violation, named as `step`.
    pub(crate) fn guarded_drop(&mut self, step: usize, other: Run<B>) {
        self.step = step;
        self.op_text = "SecondDevice (dropped)".to_string();
        let (result, _) = guarded(&self.plan, move || drop(other));
        if let Err(panic) = result {
            self.fail(format!("dropping the second device panicked: {panic}"));
        }
    }

    /// Whether the model has a window recording on this device.
    pub(crate) fn records(&self) -> bool {
        self.model.windows.iter().flatten().any(|w| w.recording)
    }

    /// A launch or replay whose work faults was enqueued: the fault is reported at some
    /// later wait, on this stream or on one that waits for it, and claims what each wrote
    /// since its last good fence (rule 15).
    fn kernel_fault(&mut self) {
        self.faulty.fill(true);
        self.model.widen_since();
    }

    /// Adds a buffer the caller allocated and wrote (`bytes`, settled), under the next
    /// buffer name; `shared` ones are never written by this run.
    pub(crate) fn adopt(&mut self, buffer: Buffer, bytes: &[u8], shared: bool) {
        let pooled = self.dev.pooled_index(buffer.owner());
        let idx = self.model.alloc(bytes.len(), pooled);
        self.model.set(
            Span {
                buf: idx,
                start: 0,
                end: bytes.len(),
            },
            bytes,
        );
        self.handles.push(Some(buffer));
        self.shared.push(shared);
        self.slots.push(Some(idx));
    }

    fn fail(&mut self, what: impl Into<String>) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                step: self.step,
                op: self.op_text.clone(),
                what: what.into(),
            });
        }
    }

    fn stream(&self, s: u8) -> u8 {
        self.fixed.unwrap_or(s % self.streams)
    }

    /// The pooled stream `s`'s work goes to: its own, or the window's it is a branch
    /// of (rule 28).
    fn pooled_of(&self, s: u8) -> usize {
        self.route_of(s).unwrap_or(s as usize % self.pooled)
    }

    /// Whether a window may be open anywhere (on this device, or recording on another of
    /// the same driver context): then a typed refusal is no surprise.
    fn any_window(&self) -> bool {
        self.fixed.is_some() || self.elsewhere || self.model.windows.iter().any(Option::is_some)
    }

    /// The window `s` records on its own pooled stream, if it does.
    fn recording_by(&self, pooled: usize, s: u8) -> bool {
        matches!(&self.model.windows[pooled], Some(w) if w.recording && w.owner == s)
            || (self.branch_open(pooled, s)
                && self.model.windows[pooled]
                    .as_ref()
                    .is_some_and(|w| w.recording))
    }

    /// The owner of an active window on `pooled` other than `s` (a neighbour refusal).
    fn neighbour_of(&self, pooled: usize, s: u8) -> Option<u8> {
        match &self.model.windows[pooled] {
            Some(w) if w.owner != s && !self.branch_open(pooled, s) => Some(w.owner),
            Some(_) => None,
            // A neighbour of a branch: its pooled stream is lent to a window.
            None => self.lent_to(pooled),
        }
    }

    fn classify(&mut self, error: &ServerError, fired: &[FaultOp]) -> (Kind, bool) {
        let kernel = self.faulty.iter().any(|f| *f);
        classify(error, fired, kernel, &mut self.surfaced)
    }

    fn guarded<T>(&mut self, f: impl FnOnce() -> T) -> Option<(T, Vec<FaultOp>)> {
        let (result, fired) = guarded(&self.plan, f);
        self.note_fired(&fired);
        match result {
            Ok(value) => Some((value, fired)),
            Err(panic) => {
                self.fail(format!("a public call panicked: {panic}"));
                None
            }
        }
    }

    /// Faults that fired during a call. A wait fault claims what any stream wrote since
    /// its last good fence at once, before the call's own checks: a read's final drain,
    /// say, claims the very bytes it read (rule 15), so its `Unwritten` is right.
    fn note_fired(&mut self, fired: &[FaultOp]) {
        for f in fired {
            if !self.fired.contains(f) {
                self.fired.push(*f);
            }
        }
        if fired.iter().any(|f| WAIT_FAULTS.contains(f)) {
            self.model.widen_since();
        }
    }

    /// A sync of pooled stream `p` failed at its wait, which waits for `p` alone: when
    /// with a kernel's fault, `p` reported it, and it claimed what `p` wrote since its
    /// last good fence (the model widened it already).
    fn reported(&mut self, error: &ServerError, p: usize) {
        if let ServerError::Driver { op, .. } = error.root_cause()
            && device_fault(op)
        {
            self.faulty[p] = false;
        }
    }

    /// The pooled stream `op` enqueues device work on (which may wait for other
    /// streams), if it does.
    fn enqueues_on(&self, op: &Op) -> Option<usize> {
        match op {
            Op::Launch { stream, .. }
            | Op::Begin { stream }
            | Op::Capture { stream, .. }
            | Op::Replay { stream, .. }
            | Op::ReplayUntil { stream, .. } => Some(self.pooled_of(self.stream(*stream))),
            Op::Write { buf, .. } => self.live(*buf).map(|idx| self.model.bufs[idx].pooled),
            _ => None,
        }
    }

    fn live(&self, name: u8) -> Option<usize> {
        let at = relative(name, self.slots.len())?;
        let idx = (*self.slots.get(at)?)?;
        self.handles[idx].as_ref()?;
        Some(idx)
    }

    fn handle(&self, idx: usize) -> Buffer {
        self.handles[idx].clone().expect("checked live")
    }

    fn window_mut(&mut self, pooled: usize) -> Option<&mut Window> {
        self.model.windows[pooled].as_mut()
    }

    /// Runs one op of the program and checks what the rules promise after it.
    pub(crate) fn op(&mut self, step: usize, op: &Op) {
        self.step = step;
        self.op_text = format!("{op:?}");
        self.fired.clear();
        self.surfaced.clear();
        // Work enqueued on a pooled stream may wait (on the device) for another stream
        // whose fault is unreported: the fault then reaches it too.
        let enqueues = self.enqueues_on(op);
        let imported =
            enqueues.is_some_and(|p| self.faulty.iter().enumerate().any(|(q, f)| *f && q != p));
        match op {
            Op::Alloc { stream, bytes } => self.alloc(*stream, *bytes),
            Op::Import {
                stream,
                bytes,
                values,
            } => self.import(*stream, *bytes, values.as_deref()),
            Op::Drop { buf } => self.drop_buffer(*buf),
            Op::Write {
                stream,
                buf,
                offset,
                values,
            } => {
                let _ = self.write(self.stream(*stream), *buf, *offset, values);
            }
            Op::Read { stream, buf, range } => self.read(*stream, *buf, *range),
            Op::Launch { stream, launch } => {
                let _ = self.launch(self.stream(*stream), launch);
            }
            Op::Sync { stream } => self.sync(*stream),
            Op::Cleanup => self.cleanup(),
            Op::Prepare { stream } => self.prepare(*stream),
            Op::Begin { stream } => self.begin(*stream),
            Op::End { stream } => self.end(*stream),
            Op::Abort { stream } => self.abort(*stream),
            Op::Capture {
                stream,
                body,
                stop,
                pool,
            } => self.capture(*stream, body, *stop, *pool),
            Op::Replay {
                stream,
                graph,
                times,
            } => self.replay(*stream, *graph, u32::from(*times).clamp(1, 3)),
            Op::ReplayUntil {
                stream,
                graph,
                max,
                reader,
            } => self.replay_until(*stream, *graph, u32::from(*max), *reader),
            Op::DropGraph { graph, handle } => self.drop_graph(*graph, *handle),
            // Handled by `check_with`, which holds both devices.
            Op::ReplayElsewhere { .. } => {}
            Op::Fault { op, nth } => {
                if self.fixed.is_none() {
                    self.plan
                        .fail(*op, u32::from(*nth).max(1))
                        .expect("a valid fault position");
                }
            }
            // The second device is the caller's (`check_with`): a run of one device
            // ignores them.
            Op::SecondDevice | Op::OnSecond(_) => {}
            Op::Register { builtin, user } => self.register(*builtin, *user),
            Op::ImportAgain { buf, cleanup } => self.import_again(*buf, *cleanup),
            Op::ImportElsewhere {
                stream,
                bytes,
                skip,
            } => self.import_elsewhere(*stream, *bytes, *skip),
            Op::Sized {
                stream,
                declared,
                given,
                info,
                info_given,
            } => self.sized(*stream, [*declared, *given], [*info, *info_given]),
            Op::Update {
                graph,
                slot,
                change,
            } => self.update(*graph, *slot, change),
            Op::Fork { parent, branch } => self.fork(*parent, *branch),
            Op::FaultMetByWait { faulting, waiting } => {
                self.fault_met_by_wait(*faulting, *waiting);
            }
            Op::Join { token } => self.join(*token, None),
        }
        if let (true, Some(p)) = (imported, enqueues) {
            self.faulty[p] = true;
        }
        self.after_op();
    }

    /// What holds after every op: a fault's wide effect, and no stream left recording
    /// that the model says is not.
    fn after_op(&mut self) {
        let widen = self.fired.iter().any(|f| {
            WAIT_FAULTS.contains(f) || (*f != FaultOp::Upload && !self.surfaced.contains(f))
        });
        if widen || self.faulty.iter().any(|f| *f) {
            // Rule 15, taken wide: any pooled stream's writes since its last good fence
            // may be claimed by an asynchronous error, wherever it was reported (an
            // injected one, or a kernel's fault not yet reported).
            self.model.widen_since();
        }
        if self.fired.iter().any(|f| *f != FaultOp::Upload) {
            for w in self.model.windows.iter_mut().flatten() {
                w.may_doom = true;
            }
        }
        let dev = Arc::clone(&self.dev);
        let Some((recording, _)) = self.guarded(|| dev.captures().recording()) else {
            return;
        };
        let recording: Vec<u64> = recording.iter().map(|s| s.index()).collect();
        match self.fixed {
            None => {
                let expected: Vec<u64> = self
                    .model
                    .windows
                    .iter()
                    .flatten()
                    .filter(|w| w.recording)
                    .map(|w| u64::from(w.owner))
                    .collect();
                if recording != expected {
                    self.fail(format!(
                        "streams recording: {recording:?}; the model expects {expected:?}"
                    ));
                }
            }
            Some(own) => {
                let p = self.pooled_of(own);
                let expected = self.recording_by(p, own);
                if recording.contains(&u64::from(own)) != expected {
                    self.fail(format!(
                        "stream#{own} recording: {}; the model expects {expected}",
                        !expected
                    ));
                }
            }
        }
    }

    fn alloc(&mut self, stream: u8, bytes: u32) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        let size = u64::from(bytes.max(1));
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.alloc(StreamId::new(s.into()), size))
        else {
            self.slots.push(None);
            return;
        };
        match result {
            Ok(buffer) => {
                if buffer.size() != size {
                    self.fail(format!("alloc of {size} B gave {} B", buffer.size()));
                }
                let idx = self.model.alloc(size as usize, p);
                self.handles.push(Some(buffer));
                self.shared.push(false);
                self.slots.push(Some(idx));
            }
            Err(e) => {
                self.slots.push(None);
                let (kind, _) = self.classify(&e, &fired);
                let own = self.recording_by(p, s);
                match kind {
                    Kind::Refused | Kind::LateRefused => {
                        if !self.any_window() {
                            self.fail(format!("alloc refused with no window open: {}", Chain(&e)));
                        }
                        if own {
                            let doom = matches!(e, ServerError::AllocInWindow { .. });
                            if let Some(w) = self.window_mut(p) {
                                // Rule 6: an allocation refused inside the window dooms it.
                                w.must_doom |= doom;
                                w.may_doom = true;
                            }
                        }
                    }
                    Kind::OwnFault | Kind::WaitFault => {
                        if let Some(w) = self.window_mut(p) {
                            w.may_doom = true;
                        }
                    }
                    _ => self.fail(format!("alloc failed: {}", Chain(&e))),
                }
            }
        }
    }

    /// Memory of the caller's own: made by the backend, filled by the caller, imported,
    /// and (with `values`) declared written.
    fn import(&mut self, stream: u8, bytes: u32, values: Option<&[i8]>) {
        let Some(make) = self.import.clone() else {
            self.slots.push(None);
            return;
        };
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        let size = bytes.max(4) as usize;
        let (again, memory) = make(self.dev.backend().inner(), size as u64);
        let external = again();
        let content: Option<Vec<u8>> = values.map(|v| {
            let mut b: Vec<u8> = f32_bytes(v).into_iter().cycle().take(size).collect();
            b.truncate(size);
            b
        });
        if let Some(c) = &content {
            memory.write(0, c);
        }
        let must_refuse = self.neighbour_of(p, s).is_some();
        let dev = Arc::clone(&self.dev);
        let stream_id = StreamId::new(s.into());
        let Some((result, fired)) = self.guarded(|| dev.import(stream_id, external)) else {
            self.slots.push(None);
            return;
        };
        let buffer = match result {
            Ok(buffer) => buffer,
            Err(e) => {
                self.slots.push(None);
                let (kind, _) = self.classify(&e, &fired);
                match kind {
                    Kind::Refused if must_refuse || self.any_window() => {}
                    Kind::OwnFault | Kind::WaitFault => {}
                    _ => self.fail(format!("import failed: {}", Chain(&e))),
                }
                return;
            }
        };
        if must_refuse {
            self.fail("import accepted from a neighbour of an active window");
        }
        if buffer.size() != size as u64 {
            self.fail(format!("import of {size} B gave {} B", buffer.size()));
        }
        let idx = self.model.alloc(size, p);
        self.handles.push(Some(buffer.clone()));
        self.shared.push(false);
        self.slots.push(Some(idx));
        self.imports.push((idx, memory));
        self.externals.insert(idx, again);
        self.import_ids.insert(idx, buffer.id());
        let Some(content) = content else { return };
        let recording = self.recording_by(p, s);
        let Some((result, fired)) = self.guarded(|| dev.assume_written(stream_id, &buffer)) else {
            return;
        };
        match result {
            Ok(()) => {
                if recording {
                    self.fail("assume_written accepted while its stream records");
                }
                self.model.set(
                    Span {
                        buf: idx,
                        start: 0,
                        end: size,
                    },
                    &content,
                );
            }
            Err(e) => {
                let (kind, _) = self.classify(&e, &fired);
                match kind {
                    Kind::Refused | Kind::LateRefused if recording || self.any_window() => {}
                    Kind::OwnFault | Kind::WaitFault => {}
                    _ => self.fail(format!("assume_written failed: {}", Chain(&e))),
                }
            }
        }
    }

    /// Every import holds, in the caller's own memory, the bytes the model knows for
    /// certain: the library never freed, reused or poisoned memory it does not own.
    pub(crate) fn check_imports(&mut self) {
        let mut wrong = None;
        for (idx, memory) in &self.imports {
            let held = memory.read();
            for (at, (byte, value)) in self.model.bufs[*idx].bytes.iter().zip(&held).enumerate() {
                if let Byte::Val(v) = byte
                    && v != value
                {
                    wrong = Some(format!(
                        "imported buffer {idx}'s memory holds {value:#04x} at byte {at}; the \
                         model has {v:#04x} (model: {})",
                        render(&self.model.bufs[*idx].bytes)
                    ));
                    break;
                }
            }
        }
        if let Some(what) = wrong {
            self.fail(what);
        }
    }

    /// Imports the memory behind import `name` again (and cleans up): while the first
    /// import's handle lives, refused with `InvalidArgument` naming it (issue 45: two
    /// imports of one memory would be two unrelated buffers to every rule) and nothing
    /// changes; once its handle is gone the memory may still be held (a graph's pin, a
    /// pool not yet reclaimed), so a refusal naming it or a fresh adoption both hold,
    /// whose release must not free the caller's memory (checked at the end, and by the
    /// first import's reads).
    fn import_again(&mut self, name: u8, cleanup: bool) {
        let Some(at) = relative(name, self.slots.len()) else {
            return;
        };
        let Some(idx) = self.slots.get(at).copied().flatten() else {
            return;
        };
        let Some(again) = self.externals.get(&idx).cloned() else {
            return;
        };
        let Some(&first) = self.import_ids.get(&idx) else {
            return;
        };
        let first_live = self.handles[idx].is_some();
        let p = self.model.bufs[idx].pooled;
        // Any stream of the first import's pooled stream, or of the next one.
        let Some(s) = (0..self.streams).find(|&s| self.pooled_of(s) == p) else {
            return;
        };
        let s = self.stream(s + u8::from(cleanup));
        let must_refuse = self.neighbour_of(self.pooled_of(s), s).is_some();
        let dev = Arc::clone(&self.dev);
        let stream = StreamId::new(s.into());
        let Some((result, fired)) = self.guarded(|| dev.import(stream, again())) else {
            return;
        };
        match result {
            Ok(buffer) => {
                if must_refuse {
                    self.fail("import accepted from a neighbour of an active window");
                }
                if first_live {
                    self.fail(format!(
                        "a second import of the memory {first} imports was accepted while {first} lives"
                    ));
                }
                let size = self.model.bufs[idx].size as u64;
                if buffer.size() != size {
                    self.fail(format!("import again of {size} B gave {} B", buffer.size()));
                }
                let _ = self.guarded(move || drop(buffer));
            }
            Err(e) => {
                let (kind, _) = self.classify(&e, &fired);
                let names_first = matches!(
                    e,
                    ServerError::InvalidArgument {
                        what: "imported memory",
                        ..
                    }
                ) && e.subject().and_then(|s| s.memory()) == Some(first);
                match kind {
                    Kind::Refused if must_refuse || self.any_window() => {}
                    Kind::Refused if names_first => {}
                    Kind::OwnFault | Kind::WaitFault => {}
                    _ if first_live => self.fail(format!(
                        "a second live import was not refused naming {first}: {}",
                        Chain(&e)
                    )),
                    _ => self.fail(format!("import of imported memory failed: {}", Chain(&e))),
                }
            }
        }
        if cleanup {
            self.cleanup();
        }
    }

    /// Imports memory of another backend value: refused with `InvalidArgument` naming
    /// the memory, whatever else holds, and nothing changes.
    fn import_elsewhere(&mut self, stream: u8, bytes: u32, skip: u8) {
        let Some(make) = self.elsewhere_memory.clone() else {
            return;
        };
        let s = self.stream(stream);
        let (external, memory) = make(u64::from(bytes.max(4)), skip);
        let dev = Arc::clone(&self.dev);
        let stream_id = StreamId::new(s.into());
        let Some((result, fired)) = self.guarded(|| dev.import(stream_id, external())) else {
            return;
        };
        match result {
            Ok(buffer) => {
                self.fail("memory of another backend value was imported");
                let _ = self.guarded(move || drop(buffer));
            }
            Err(ServerError::InvalidArgument {
                what: "imported memory",
                ..
            }) => {}
            Err(e) => {
                let (kind, _) = self.classify(&e, &fired);
                if !matches!(kind, Kind::Refused | Kind::OwnFault | Kind::WaitFault) {
                    self.fail(format!(
                        "memory of another backend value failed otherwise than refused: {}",
                        Chain(&e)
                    ));
                }
            }
        }
        drop(memory);
    }

    /// A launch of a kernel taking one scalar and some info words, at and past every
    /// size limit: accepted exactly when its sizes are valid and agree with the
    /// signature; a refusal is `InvalidArgument` and changes nothing.
    fn sized(&mut self, stream: u8, scalar: [u8; 2], info: [u8; 2]) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        // A window's info buffers come from its pools; launches there are the other
        // ops' business.
        if self.any_window() || self.neighbour_of(p, s).is_some() || self.records() {
            return;
        }
        let at = |i: u8, of: &[u32]| of[usize::from(i) % of.len()];
        let [declared, given] = scalar.map(|i| at(i, &SCALAR_SIZES));
        let [words, words_given] = info.map(|i| at(i, &INFO_COUNTS));
        let key = (
            scalar[0] % SCALAR_SIZES.len() as u8,
            info[0] % INFO_COUNTS.len() as u8,
        );
        let kernel = match self.sized.get(&key) {
            Some(k) => *k,
            None => {
                let Some(source) = self.sized_source.as_ref().and_then(|f| f(declared, words))
                else {
                    return;
                };
                let dev = Arc::clone(&self.dev);
                let Some((k, _)) = self.guarded(|| dev.kernel(source)) else {
                    return;
                };
                self.sized.insert(key, k);
                k
            }
        };
        let valid = declared > 0
            && declared as usize <= capture_core::MAX_SCALAR_BYTES
            && (matches!(declared, 1 | 2) || declared % 4 == 0);
        let accept = valid && given == declared && words == words_given;
        let arg = scalar_of(given);
        let words: Vec<u64> = vec![0; words_given as usize];
        let dev = Arc::clone(&self.dev);
        let id = StreamId::new(s.into());
        let Some((result, fired)) =
            self.guarded(|| dev.launch(id, &kernel, [1, 1, 1], &[arg], &words))
        else {
            return;
        };
        match (result, accept) {
            (Ok(()), true) => {}
            (Ok(()), false) => self.fail(format!(
                "a launch of a {given}-byte scalar and {words_given} info words was accepted by \
                 a kernel declaring {declared} bytes and {} words",
                at(info[0], &INFO_COUNTS)
            )),
            (Err(ServerError::InvalidArgument { .. }), false) => {}
            (Err(e), _) => {
                let (kind, _) = self.classify(&e, &fired);
                if !matches!(kind, Kind::OwnFault | Kind::WaitFault) {
                    self.fail(format!(
                        "a launch of a {given}-byte scalar and {words_given} info words (the \
                         kernel declares {declared} and {}) failed: {}",
                        at(info[0], &INFO_COUNTS),
                        Chain(&e)
                    ));
                }
            }
        }
    }

    fn drop_buffer(&mut self, name: u8) {
        let Some(idx) = self.live(name) else { return };
        if self.shared[idx] {
            return;
        }
        let handle = self.handles[idx].take();
        let _ = self.guarded(move || drop(handle));
    }

    /// A host write; returns the device's answer (a capture closure stops at an error).
    fn write(&mut self, s: u8, name: u8, offset: u8, values: &[i8]) -> Result<(), ServerError> {
        let Some(idx) = self.live(name) else {
            return Ok(());
        };
        if self.shared[idx] {
            return Ok(());
        }
        let size = self.model.bufs[idx].size;
        let (off, len) = clip(size, offset as usize * 4, values.len() * 4);
        let mut bytes = f32_bytes(values);
        bytes.truncate(len);
        let span = Span {
            buf: idx,
            start: off,
            end: off + len,
        };
        let p_b = self.model.bufs[idx].pooled;
        let p_s = self.pooled_of(s);
        let recorded = self.recording_by(p_b, s);
        // Rule 13 (a neighbour of an active window), and a write from inside a window to
        // another pooled stream's buffer, which cannot be recorded.
        let must_refuse =
            self.neighbour_of(p_b, s).is_some() || (p_s != p_b && self.recording_by(p_s, s));
        let handle = self.handle(idx);
        let data = bytes.clone();
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) =
            self.guarded(|| dev.write(StreamId::new(s.into()), &handle, off as u64, data))
        else {
            return Ok(());
        };
        // Rule 30: a copy the device cannot loop, in a window naming a stop flag, is
        // refused before anything else is checked, changing nothing.
        let cannot_loop = recorded && !must_refuse && self.cannot_loop(false);
        let body_refused = cannot_loop
            && self.model.windows[p_b]
                .as_ref()
                .is_some_and(|w| w.flag.is_some());
        match (&result, body_refused) {
            (Err(ServerError::LoopRefused(r)), true)
                if matches!(r.mismatch, capture_core::LoopMismatch::Body { .. }) =>
            {
                return result;
            }
            (_, true) => {
                self.fail(format!(
                    "a copy in a window naming a stop flag, on a device that cannot loop it, \
                     was not refused: {result:?}"
                ));
                return result;
            }
            (Err(ServerError::LoopRefused(r)), false) => {
                self.fail(format!("a write was refused as a loop's: {r}"));
                return result;
            }
            _ => {}
        }
        if recorded && !must_refuse {
            self.check_race(p_b, s, &[(span, true)], &result);
        }
        match &result {
            Ok(()) => {
                if must_refuse {
                    self.fail("write accepted from a neighbour of an active window");
                }
                if recorded {
                    if let Some(w) = self.window_mut(p_b) {
                        w.blocker |= cannot_loop;
                        w.recs.push(Rec::Write { dst: span, bytes });
                        w.forks.recorded(s, vec![(span, true)]);
                    }
                } else {
                    self.model.set(span, &bytes);
                    self.model.since[p_b].push(span);
                }
            }
            Err(e) => {
                let (kind, doomed) = self.classify(e, &fired);
                match kind {
                    Kind::Refused => {
                        if !must_refuse && !self.any_window() {
                            self.fail(format!("write refused with no window open: {}", Chain(e)));
                        }
                    }
                    Kind::LateRefused => {
                        if !must_refuse && !self.any_window() {
                            self.fail(format!("write refused with no window open: {}", Chain(e)));
                        }
                        self.model.widen(span);
                    }
                    // The write's own copy or staging failed: its destination is claimed.
                    Kind::OwnFault => self.model.unwrite(span),
                    // A wait before the write failed: the write may not have happened,
                    // and whether its destination is claimed the rules leave open.
                    Kind::WaitFault => self.model.widen(span),
                    _ => self.fail(format!("write failed: {}", Chain(e))),
                }
                if recorded
                    && kind != Kind::Refused
                    && let Some(w) = self.window_mut(p_b)
                {
                    // Rule 11: a failed write inside the window dooms it.
                    w.must_doom |= doomed || kind == Kind::OwnFault;
                    w.may_doom = true;
                }
            }
        }
        result
    }

    fn read(&mut self, stream: u8, name: u8, range: Option<(u8, u8)>) {
        let s = self.stream(stream);
        let Some(idx) = self.live(name) else { return };
        let size = self.model.bufs[idx].size;
        let (off, len) = match range {
            None => (0, size),
            Some((o, l)) => clip(size, o as usize * 4, l as usize * 4),
        };
        self.read_at(s, idx, off, len);
    }

    /// Reads `len` bytes at `off` of model buffer `idx` on stream `s`, and checks them
    /// against the model.
    fn read_at(&mut self, s: u8, idx: usize, off: usize, len: usize) {
        let span = Span {
            buf: idx,
            start: off,
            end: off + len,
        };
        let p_b = self.model.bufs[idx].pooled;
        let p_s = self.pooled_of(s);
        // Rule 9: a host read of a recording stream is refused; rule 13: so is a
        // neighbour's.
        let must_refuse = self.recording_by(p_b, s)
            || (p_s != p_b && self.recording_by(p_s, s))
            || self.neighbour_of(p_b, s).is_some();
        let handle = self.handle(idx);
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self
            .guarded(|| dev.read_range(StreamId::new(s.into()), &handle, off as u64, len as u64))
        else {
            return;
        };
        let expected = self.model.bytes(span).to_vec();
        match result {
            Ok(got) => {
                if must_refuse {
                    self.fail("read accepted from a recording stream or a neighbour of a window");
                }
                if got.len() != len {
                    self.fail(format!("read of {len} B returned {} B", got.len()));
                    return;
                }
                for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                    let ok = match e {
                        Byte::Val(v) | Byte::Either(v) => g == v,
                        Byte::Any => true,
                        Byte::Unwritten => false,
                    };
                    if !ok {
                        let what = match e {
                            Byte::Unwritten => "bytes nothing wrote",
                            _ => "wrong bytes",
                        };
                        self.fail(format!(
                            "read returned {what} at byte {}: got [{}], the model has [{}]",
                            off + i,
                            got[i..]
                                .iter()
                                .take(16)
                                .map(|b| format!("{b:02x}"))
                                .collect::<Vec<_>>()
                                .join(" "),
                            render(&expected[i..]),
                        ));
                        return;
                    }
                }
                self.model.settle(span);
                self.model.since[p_b].clear();
                // Everything enqueued on the buffer's stream ran and its faults were
                // reported: none is left to claim what it writes from now on.
                self.faulty[p_b] = false;
            }
            Err(e) => {
                let (kind, _) = self.classify(&e, &fired);
                match kind {
                    Kind::Unwritten => {
                        if expected.iter().all(|b| matches!(b, Byte::Val(_))) {
                            self.fail(format!(
                                "read refused as unwritten, but the model has every byte written: {}",
                                Chain(&e)
                            ));
                        }
                    }
                    Kind::Refused | Kind::LateRefused => {
                        if !must_refuse && !self.any_window() {
                            self.fail(format!("read refused with no window open: {}", Chain(&e)));
                        }
                    }
                    // Reported by the read's own stream, or by another stream it waited
                    // for first (rule 18): which, the error does not say. It claims
                    // what was written since the last good fence (rule 15), which a
                    // later read in the same op (a loop's counter) then meets: taken
                    // wide at once, as after every op.
                    Kind::WaitFault => self.model.widen_since(),
                    _ => self.fail(format!("read failed: {}", Chain(&e))),
                }
            }
        }
    }

    /// Resolves a launch spec against the live buffers; `None` makes it a no-op.
    fn resolve(&self, spec: &LaunchSpec) -> Option<Issued> {
        struct A {
            idx: usize,
            off: usize,
            len: usize,
        }
        let mut resolved: Vec<A> = Vec::with_capacity(spec.args.len());
        for ArgSpec { buf, range } in &spec.args {
            let idx = self.live(*buf)?;
            let elems = self.model.bufs[idx].size / 4;
            if elems == 0 {
                return None;
            }
            let (off, len) = match range {
                None => (0, elems),
                Some((block, len)) => {
                    // Launch ranges start at multiples of 16 bytes (the mock's, and
                    // CUDA's, binding alignment).
                    let off = *block as usize * 4;
                    let off = if off < elems { off } else { 0 };
                    (off, (*len as usize).clamp(1, elems - off))
                }
            };
            resolved.push(A { idx, off, len });
        }
        let accesses: Vec<Access> = match (spec.user, spec.builtin) {
            // Both buffers written: the same bytes (`Form::Aliased`), to be refused.
            (Some(UserKernel::Partial), _) if spec.form == Form::Aliased => {
                vec![Access::Write, Access::Write]
            }
            (Some(_), _) => vec![Access::Read, Access::Write],
            (None, Builtin::Fill) => vec![Access::Write],
            (None, Builtin::Axpy) => vec![Access::Read, Access::ReadWrite],
            (None, _) => vec![Access::Read, Access::Write],
        };
        if resolved.len() != accesses.len() {
            return None;
        }
        match spec.form {
            Form::Work => {
                self.work.as_ref()?;
            }
            Form::Kernel
            | Form::WrongScalar
            | Form::WrongType
            | Form::Aliased
            | Form::Programmatic => {
                if let Some(user) = spec.user {
                    self.user_source.as_ref()?(user)?;
                }
            }
        }
        // The element count covers the output range exactly, so the kernel writes every
        // byte the launch declares it writes (a builtin does; a user kernel may not).
        let a = f32::from(spec.scalar);
        // Scalars by value, and the model's view of them (as info words).
        let mut scalars: Vec<Arg> = Vec::new();
        let info = match spec.builtin {
            _ if spec.user == Some(UserKernel::Affine) => {
                let n = resolved[0].len.min(resolved[1].len);
                resolved[1].len = n;
                let b = 1 - i16::from(spec.scalar);
                if spec.form == Form::WrongType {
                    scalars.push(Arg::scalar(a.to_bits()));
                } else {
                    scalars.push(Arg::scalar(a));
                }
                if spec.form == Form::WrongScalar {
                    scalars.push(Arg::scalar(i32::from(b)));
                } else {
                    scalars.push(Arg::scalar(b));
                }
                scalars.push(Arg::scalar(n as u32));
                [u64::from(a.to_bits()), u64::from(f32::from(b).to_bits())]
            }
            _ if spec.user == Some(UserKernel::StopAt) => {
                // One element each: x[0] in, the flag word out (rule 30); with
                // `collide`, the whole output: a flag of another size than a u32's.
                resolved[0].len = 1;
                if !spec.collide {
                    resolved[1].len = 1;
                }
                [1, u64::from(a.to_bits())]
            }
            _ if spec.user.is_some() => {
                let n = resolved[0].len.min(resolved[1].len);
                resolved[1].len = n;
                [
                    n as u64,
                    if spec.collide {
                        colliding_word(n as u64)
                    } else {
                        0
                    },
                ]
            }
            Builtin::Fill => spec.builtin.info(resolved[0].len as u64, a),
            Builtin::RowBias => {
                let m = resolved[0].len.min(resolved[1].len);
                let cols = (1 + spec.scalar.unsigned_abs() as usize % 4).min(m);
                let rows = m / cols;
                resolved[1].len = rows * cols;
                spec.builtin.info(rows as u64, cols as f32)
            }
            _ => {
                let n = resolved[0].len.min(resolved[1].len);
                resolved[1].len = n;
                spec.builtin.info(n as u64, a)
            }
        };
        if matches!(spec.form, Form::WrongScalar | Form::WrongType) && scalars.is_empty() {
            // One argument the signature does not have.
            scalars.push(Arg::scalar(1u32));
        }
        // What the kernel's function sees: its info words, then each scalar as a word.
        let (info_words, words) = if spec.user == Some(UserKernel::Affine) {
            let n = resolved[1].len as u64;
            let b = 1 - i16::from(spec.scalar);
            (
                Vec::new(),
                vec![u64::from(a.to_bits()), u64::from(b as u16), n],
            )
        } else {
            (info.to_vec(), info.to_vec())
        };
        let mut args = Vec::with_capacity(resolved.len());
        let mut model_args = Vec::with_capacity(resolved.len());
        for (r, access) in resolved.iter().zip(&accesses) {
            if access.writes() && self.shared[r.idx] {
                return None;
            }
            let size = self.model.bufs[r.idx].size;
            let handle = self.handles[r.idx].as_ref()?;
            let whole = r.off == 0 && r.len * 4 == size;
            let arg = Arg::new(handle, *access);
            args.push(if whole {
                arg
            } else {
                arg.range(r.off as u64 * 4, r.len as u64 * 4)
            });
            model_args.push((
                Span {
                    buf: r.idx,
                    start: r.off * 4,
                    end: (r.off + r.len) * 4,
                },
                *access,
            ));
        }
        if Model::races(&model_args) {
            return None;
        }
        let mut slots = Vec::new();
        let mut grid_slot = None;
        if let (Some(n), Form::Kernel) = (spec.slot, spec.form) {
            // Rule 26: its first buffer, its grid and an Affine launch's `a` are slots; a
            // StopAt's buffer slot is its flag (refused inside a window: a flag is fixed
            // at capture, rule 30).
            let b = usize::from(spec.user == Some(UserKernel::StopAt));
            let name = format!("b{n}");
            args[b] = args[b].clone().slot(&name);
            slots.push(SlotUse {
                name,
                kind: SlotKind::Buffer {
                    len: model_args[b].0.end - model_args[b].0.start,
                    access: model_args[b].1,
                },
                value: SlotVal::Buffer(model_args[b].0),
                arg: Some(b),
            });
            if spec.user == Some(UserKernel::Affine) {
                let name = format!("a{n}");
                scalars[0] = scalars[0].clone().slot(&name);
                slots.push(SlotUse {
                    name,
                    kind: SlotKind::Scalar,
                    value: SlotVal::Scalar(a.to_bits()),
                    arg: None,
                });
            }
            let name = format!("g{n}");
            slots.push(SlotUse {
                name: name.clone(),
                kind: SlotKind::Grid,
                value: SlotVal::Grid([1, 1, 1]),
                arg: None,
            });
            grid_slot = Some(name);
        }
        if spec.form != Form::Work {
            // Work takes buffers only: its scalars ride in its own words.
            args.extend(scalars);
        }
        Some(Issued {
            args,
            info: info_words,
            words,
            slots,
            grid_slot,
            model: ResolvedLaunch {
                builtin: spec.builtin,
                user: spec.user,
                args: model_args,
                info,
            },
        })
    }

    /// A launch; returns the device's answer (a capture closure stops at an error).
    fn launch(&mut self, s: u8, spec: &LaunchSpec) -> Result<(), ServerError> {
        let Some(mut issued) = self.resolve(spec) else {
            return Ok(());
        };
        let p = self.pooled_of(s);
        let recorded = self.recording_by(p, s);
        let must_refuse = self.neighbour_of(p, s).is_some();
        // Rule 30: a `StopAt` kernel recorded names its output the window's stop flag.
        // As the user's own work, it names its flag too: refused in every mode.
        let stop_at = spec.user == Some(UserKernel::StopAt);
        let flag = (stop_at
            && ((recorded && spec.form == Form::Kernel) || spec.form == Form::Work))
            .then(|| issued.model.args[1].0);
        let flag_slotted = stop_at && spec.form == Form::Kernel && !issued.slots.is_empty();
        if flag.is_some() {
            issued.args[1] = issued.args[1].clone().stop_flag();
        }
        let inputs: Vec<Span> = issued.model.inputs().collect();
        let outputs: Vec<Span> = issued.model.outputs().collect();
        let dev = Arc::clone(&self.dev);
        let stream = StreamId::new(s.into());
        let mut overlaps = false;
        // The kernel launched (none for the user's work): a skip must name it.
        let mut launched = None;
        let called = match spec.form {
            Form::Work => {
                let make = self.work.clone().expect("resolve checked the work");
                let Some(work) = make(&WorkOf {
                    builtin: spec.builtin,
                    user: spec.user,
                    words: issued.words.clone(),
                }) else {
                    return Ok(());
                };
                self.guarded(|| dev.foreign_work(stream, &issued.args, work))
            }
            Form::Kernel
            | Form::WrongScalar
            | Form::WrongType
            | Form::Aliased
            | Form::Programmatic => {
                let kernel = match spec.user {
                    Some(user) => self
                        .user_kernel(user)
                        .expect("resolve checked the user kernel"),
                    None => match self.builtin_kernel(spec.builtin) {
                        Some(k) => k,
                        None => return Ok(()),
                    },
                };
                launched = Some(kernel.id());
                let programmatic = spec.form == Form::Programmatic;
                // What the rules say of a programmatic launch: the device runs them and
                // the kernel waits (then it is a launch like any), or it is refused.
                overlaps = programmatic
                    && dev.programmatic_launch() == ProgrammaticLaunch::Supported
                    && kernel.signature().waits_for_grid_dependency();
                let mut dims = Dims::grid([1, 1, 1]).programmatic(programmatic);
                if let Some(name) = &issued.grid_slot {
                    dims = dims.up_to(GRID_MAX).slot(name);
                }
                self.guarded(|| dev.launch(stream, &kernel, dims, &issued.args, &issued.info))
            }
        };
        let Some((result, fired)) = called else {
            return Ok(());
        };
        let two_writes = spec.form == Form::Aliased && spec.user.is_some();
        let refused_check = match spec.form {
            Form::WrongScalar => Some("a launch with a scalar its kernel does not take"),
            Form::WrongType => Some("a launch with a scalar of the right size and another type"),
            Form::Aliased if two_writes => Some("a launch writing the same bytes twice"),
            Form::Programmatic if !overlaps => {
                Some("a programmatic launch the device or the kernel cannot run")
            }
            _ => None,
        };
        if let Some(what) = refused_check {
            // The launch check refuses it before anything runs: nothing changes.
            match &result {
                Ok(()) => self.fail(format!("{what} was accepted")),
                Err(ServerError::InvalidArgument { what: refused, .. })
                    if match spec.form {
                        Form::Programmatic => *refused == "programmatic launch",
                        Form::WrongType => {
                            *refused == "scalar type" || spec.user != Some(UserKernel::Affine)
                        }
                        Form::Aliased => *refused == "aliased arguments",
                        _ => true,
                    } => {}
                Err(e) => {
                    let (kind, _) = self.classify(e, &fired);
                    if kind != Kind::Refused || !(must_refuse || self.any_window()) {
                        self.fail(format!(
                            "{what} failed otherwise than refused: {}",
                            Chain(e)
                        ));
                    }
                }
            }
            return result;
        }
        if recorded && !issued.slots.is_empty() && !must_refuse {
            // Refused where the device's graphs cannot change, or where a slot would
            // get a second value.
            let conflict = dev.graph_updates() != GraphUpdates::Supported
                || self.model.windows[p]
                    .as_ref()
                    .is_some_and(|w| slot_conflicts(&w.slots, &issued.slots));
            match (&result, conflict) {
                (Err(ServerError::SlotRefused(_)), true) => return result,
                (Err(ServerError::SlotRefused(r)), false) => {
                    self.fail(format!("a recorded launch's slots were refused: {r}"));
                    return result;
                }
                (Ok(()), true) => {
                    self.fail("a recorded launch giving a slot another value was accepted");
                    return result;
                }
                _ => {}
            }
        }
        if let Some(f) = flag.filter(|_| !must_refuse) {
            // A device without loops refuses the flag; one flag per window (another
            // range is refused); a window that recorded what the device cannot loop
            // refuses it: each changing nothing (rule 30).
            use capture_core::LoopMismatch as M;
            let w = self.model.windows[p].as_ref();
            let expected = if spec.form == Form::Work {
                Some("Work")
            } else if flag_slotted {
                Some("Slotted")
            } else if f.end - f.start != 4 {
                Some("Size")
            } else if matches!(dev.loops(), DeviceLoops::Unsupported(_)) {
                Some("Unsupported")
            } else if w.and_then(|w| w.flag).is_some_and(|first| first != f) {
                Some("Second")
            } else if w.is_some_and(|w| w.blocker) {
                Some("Body")
            } else {
                None
            };
            match (&result, expected) {
                (Err(ServerError::LoopRefused(r)), Some(want))
                    if matches!(
                        (&r.mismatch, want),
                        (M::Work, "Work")
                            | (M::Slotted, "Slotted")
                            | (M::Size { .. }, "Size")
                            | (M::Unsupported(_), "Unsupported")
                            | (M::Second { .. }, "Second")
                            | (M::Body { .. }, "Body")
                    ) =>
                {
                    return result;
                }
                (Err(ServerError::LoopRefused(r)), _) => {
                    self.fail(format!(
                        "a recorded stop flag was refused ({expected:?} expected): {r}"
                    ));
                    return result;
                }
                (Ok(()), Some(want)) => {
                    self.fail(format!(
                        "a stop flag the rules refuse ({want}) was accepted"
                    ));
                    return result;
                }
                _ => {}
            }
        }
        // Rule 30: work the device cannot loop, recorded in a window naming a stop flag,
        // is refused before anything else is checked, changing nothing.
        let cannot_loop =
            recorded && !must_refuse && spec.form == Form::Work && self.cannot_loop(true);
        if cannot_loop
            && self.model.windows[p]
                .as_ref()
                .is_some_and(|w| w.flag.is_some())
        {
            if !matches!(&result, Err(ServerError::LoopRefused(r)) if matches!(r.mismatch, capture_core::LoopMismatch::Body { .. }))
            {
                self.fail(format!(
                    "work in a window naming a stop flag, on a device that cannot loop it, \
                     was not refused: {result:?}"
                ));
            }
            return result;
        }
        let error = result.as_ref().err().map(|e| (self.classify(e, &fired), e));
        if recorded {
            let uses: Vec<(Span, bool)> = inputs
                .iter()
                .map(|&i| (i, false))
                .chain(outputs.iter().map(|&o| (o, true)))
                .collect();
            self.check_race(p, s, &uses, &result);
            match error {
                None => {
                    let written = self.model.windows[p]
                        .as_ref()
                        .map(Window::written)
                        .unwrap_or_default();
                    let state = self.model.inputs(&inputs, &written);
                    if state.unwritten {
                        // Rules 11 and 14: an input the window did not write itself must
                        // be readable, or the recorded launch dooms the window.
                        self.fail(
                            "recorded launch accepted though an input byte the window did not write is unwritten",
                        );
                    }
                    if let Some(w) = self.window_mut(p) {
                        if let Some(f) = flag {
                            w.flag.get_or_insert(f);
                        }
                        w.blocker |= cannot_loop;
                        add_slots(&mut w.slots, w.recs.len(), issued.slots);
                        w.recs.push(Rec::Launch(issued.model));
                        w.forks.recorded(s, uses);
                    }
                }
                Some(((Kind::Refused, _), _)) => {}
                Some(((kind, _), e)) => {
                    if matches!(kind, Kind::Closed | Kind::Unexpected) {
                        self.fail(format!("recorded launch failed: {}", Chain(e)));
                    }
                    for span in &outputs {
                        self.model.widen(*span);
                    }
                    if let Some(w) = self.window_mut(p) {
                        // Rule 11: any failed launch inside the window dooms it.
                        w.must_doom = true;
                        w.may_doom = true;
                    }
                }
            }
            return result;
        }
        let state = self.model.inputs(&inputs, &[]);
        match error {
            None => {
                if must_refuse {
                    self.fail("launch accepted from a neighbour of an active window");
                }
                if state.unwritten {
                    self.fail("launch ran though an input byte is unwritten (it must be skipped)");
                    return result;
                }
                self.model.since[p].extend(outputs);
                if self.model.run_launch(&issued.model) {
                    self.kernel_fault();
                }
            }
            Some(((kind, _), e)) => {
                let e = e.clone();
                match kind {
                    Kind::Unwritten => {
                        if state.all_val {
                            self.fail(format!(
                                "launch skipped as unwritten, but the model has every input written: {}",
                                Chain(&e)
                            ));
                        }
                        // The refusal names the skipped launch by its kernel (or as work)
                        // and its stream, as fields.
                        let named = e.unwritten().and_then(|u| u.by.as_ref()).is_some_and(|by| {
                            by.stream == stream
                                && !by.recorded
                                && match (&by.op, launched) {
                                    (Ran::Launch { kernel, .. }, Some(k)) => *kernel == k,
                                    (Ran::Work { .. }, None) => true,
                                    _ => false,
                                }
                        });
                        if !named {
                            self.fail(format!(
                                "a skipped launch's refusal does not name it: {e:?}"
                            ));
                        }
                        for span in &outputs {
                            self.model.unwrite(*span);
                        }
                    }
                    Kind::Refused | Kind::LateRefused => {
                        if !must_refuse && !self.any_window() {
                            self.fail(format!("launch refused with no window open: {}", Chain(&e)));
                        }
                        if kind == Kind::LateRefused {
                            for span in &outputs {
                                self.model.widen(*span);
                            }
                        }
                    }
                    Kind::OwnFault => {
                        for span in &outputs {
                            self.model.unwrite(*span);
                        }
                    }
                    Kind::WaitFault => {
                        for span in &outputs {
                            self.model.widen(*span);
                        }
                    }
                    _ => self.fail(format!("launch failed: {}", Chain(&e))),
                }
            }
        }
        result
    }

    /// [`Op::FaultMetByWait`]: the fault reaches the core only through the waiting
    /// stream's wait, and what the faulting stream wrote must read as failed after it.
    fn fault_met_by_wait(&mut self, faulting: u8, waiting: u8) {
        let clean = self
            .user_source
            .as_ref()
            .is_some_and(|f| f(UserKernel::Panics).is_some())
            && armed(&self.plan).is_empty()
            && !self.faulty.iter().any(|f| *f)
            && self.fired.is_empty()
            && self.model.windows.iter().all(Option::is_none)
            && self.fixed.is_none();
        if !clean {
            return;
        }
        let (sa, sb) = (self.stream(faulting), self.stream(waiting));
        let whole = |buf| ArgSpec { buf, range: None };
        // Each step as an op of its own, with what holds after every op.
        self.alloc(sb, 16);
        self.after_op();
        if self.write(sb, LATEST, 0, &[1, 2, 3, 4]).is_err() {
            return;
        }
        self.after_op();
        self.sync(sb);
        self.alloc(sa, 16);
        self.after_op();
        self.alloc(sb, 16);
        self.after_op();
        let (Some(b), Some(x), Some(_)) = (
            self.live(LATEST - 2),
            self.live(LATEST - 1),
            self.live(LATEST),
        ) else {
            return;
        };
        let faults = LaunchSpec {
            builtin: Builtin::Copy,
            user: Some(UserKernel::Panics),
            args: vec![whole(LATEST - 2), whole(LATEST - 2)],
            scalar: 0,
            form: Form::Kernel,
            collide: false,
            slot: None,
        };
        if self.launch(sa, &faults).is_err() {
            return;
        }
        self.after_op();
        if self.write(sa, LATEST - 1, 0, &[5, 6, 7, 8]).is_err() {
            return;
        }
        self.after_op();
        let reads = LaunchSpec {
            builtin: Builtin::Copy,
            user: None,
            args: vec![whole(LATEST - 1), whole(LATEST)],
            scalar: 0,
            form: Form::Kernel,
            collide: false,
            slot: None,
        };
        let _ = self.launch(sb, &reads);
        self.after_op();
        self.sync(sb);
        self.after_op();
        let _ = x;
        let dev = Arc::clone(&self.dev);
        let handle = self.handle(b);
        let stream = StreamId::new(sb.into());
        let Some((result, fired)) = self.guarded(|| dev.read(stream, &handle)) else {
            return;
        };
        match result {
            Ok(bytes) => self.fail(format!(
                "bytes a faulted kernel wrote read as good once the fault was met through \
                 stream#{sb}'s wait: {bytes:?}"
            )),
            Err(e) => {
                let (kind, _) = self.classify(&e, &fired);
                if !matches!(kind, Kind::Unwritten | Kind::WaitFault) {
                    self.fail(format!(
                        "the read after a fault failed otherwise: {}",
                        Chain(&e)
                    ));
                }
            }
        }
    }

    fn sync(&mut self, stream: u8) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        let must_refuse = self.recording_by(p, s) || self.neighbour_of(p, s).is_some();
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.sync(StreamId::new(s.into()))) else {
            return;
        };
        match result {
            Ok(()) => {
                if must_refuse {
                    self.fail("sync accepted on a recording stream or a neighbour of a window");
                }
                self.model.since[p].clear();
                self.faulty[p] = false;
            }
            Err(e) => match self.classify(&e, &fired).0 {
                Kind::Refused | Kind::LateRefused => {
                    if !must_refuse && !self.any_window() {
                        self.fail(format!("sync refused with no window open: {}", Chain(&e)));
                    }
                }
                Kind::WaitFault => self.reported(&e, p),
                _ => self.fail(format!("sync failed: {}", Chain(&e))),
            },
        }
    }

    fn cleanup(&mut self) {
        let recording = self.model.windows.iter().flatten().any(|w| w.recording);
        let dev = Arc::clone(&self.dev);
        // What a refusal must leave as it was (issue 23, item 4): every pool's pages and
        // bytes, on every pooled stream.
        let before = self.fixed.is_none().then(|| dev.memory_report());
        let Some((result, fired)) = self.guarded(|| dev.cleanup()) else {
            return;
        };
        if let (Some(before), Err(ServerError::GraphState { .. })) = (&before, &result) {
            let after = dev.memory_report();
            if &after != before {
                self.fail(format!(
                    "a refused cleanup changed the memory:\nbefore:\n{before:#}after:\n{after:#}"
                ));
            }
        }
        match result {
            Ok(_) => {
                if recording && self.fixed.is_none() {
                    self.fail("cleanup accepted while a stream records");
                }
                let active = self.model.windows.iter().any(Option::is_some);
                if active && self.fixed.is_none() {
                    self.fail("cleanup accepted while a window is prepared (rule 17: it must change nothing)");
                }
            }
            Err(e) => {
                let kind = self.classify(&e, &fired).0;
                // Refused while any window is active: pages are held from prepare (the
                // pools are armed) to the window's close, and a refusal changes nothing.
                let active = self.model.windows.iter().any(Option::is_some);
                let fine = match kind {
                    Kind::LateRefused => active || self.fixed.is_some() || self.elsewhere,
                    Kind::WaitFault => true,
                    _ => false,
                };
                if !fine {
                    self.fail(format!("cleanup failed: {}", Chain(&e)));
                }
            }
        }
    }

    fn prepare(&mut self, stream: u8) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        let open = self.model.windows[p].is_some() || self.lent_to(p).is_some();
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.prepare(StreamId::new(s.into()))) else {
            return;
        };
        match result {
            Ok(()) => {
                if open {
                    self.fail("prepare accepted with a window already open on the pooled stream");
                }
                self.model.windows[p] = Some(Window::prepared(s));
                self.model.abandoned[p] = None;
            }
            Err(e) => {
                let kind = self.classify(&e, &fired).0;
                if !open || !matches!(kind, Kind::Refused | Kind::LateRefused) {
                    self.fail(format!(
                        "prepare refused with no window open on the pooled stream: {}",
                        Chain(&e)
                    ));
                }
                // The refusal names the window in the way by its stream's id.
                let owner = self.model.windows[p].as_ref().map(|w| w.owner);
                let typed = matches!(
                    e,
                    ServerError::GraphState { .. } | ServerError::NeighbourRefused { .. }
                );
                if let Some(owner) = owner.filter(|_| typed)
                    && e.window() != Some(StreamId::new(owner.into()))
                {
                    self.fail(format!(
                        "prepare refused for stream#{owner}'s window without naming it: {}",
                        Chain(&e)
                    ));
                }
            }
        }
    }

    fn begin(&mut self, stream: u8) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        let prepared = matches!(&self.model.windows[p], Some(w) if w.owner == s && !w.recording);
        let unjoined = self.model.windows[p]
            .as_ref()
            .and_then(|w| w.forks.unjoined())
            .filter(|_| prepared);
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.begin(StreamId::new(s.into()))) else {
            return;
        };
        match result {
            Ok(()) => {
                if !prepared {
                    self.fail("begin accepted without a prepared window of this stream");
                }
                if let Some(b) = unjoined {
                    self.fail(format!("begin accepted though stream#{b} is unjoined"));
                }
                if let Some(w) = self.window_mut(p) {
                    w.recording = true;
                    w.forks.next_phase();
                }
            }
            Err(e) => {
                let kind = self.classify(&e, &fired).0;
                if let Some(b) = unjoined {
                    // Rule 28: refused naming the branch; the prepared window is gone.
                    let named = matches!(&e, ServerError::UnjoinedBranch { branch, .. } if u64::from(b) == branch.index());
                    if !named && !matches!(kind, Kind::OwnFault | Kind::WaitFault) {
                        self.fail(format!(
                            "begin with stream#{b} unjoined failed: {}",
                            Chain(&e)
                        ));
                    }
                    self.model.windows[p] = None;
                } else if prepared {
                    if matches!(kind, Kind::OwnFault | Kind::WaitFault) {
                        // Rule 17: a driver refusal at begin unwinds to no capture, so
                        // prepare → begin can be retried.
                        self.model.windows[p] = None;
                    } else {
                        self.fail(format!("begin refused on a prepared window: {}", Chain(&e)));
                    }
                } else if !matches!(kind, Kind::Refused | Kind::LateRefused | Kind::WaitFault) {
                    // Out of order, begin is refused and changes nothing (rule 1). That
                    // it waits for the other streams before it finds out, and reports a
                    // fault injected in that wait, the rules leave open (the wait's
                    // claims are rule 15's, applied above).
                    self.fail(format!("begin out of order failed: {}", Chain(&e)));
                }
            }
        }
    }

    /// The window on `p` closed without a graph: what it would have written is claimed.
    fn close_failed(&mut self, p: usize) {
        if let Some(w) = self.model.windows[p].take() {
            for span in w.written() {
                self.model.unwrite(span);
            }
        }
    }

    fn end(&mut self, stream: u8) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        if let Some(w) = self.window_mut(p)
            && w.recording
            && w.owner == s
            && w.forks.unjoined().is_some()
        {
            // Rule 28: ended with a branch unjoined, the window is doomed.
            w.must_doom = true;
            w.may_doom = true;
        }
        let window = self.model.windows[p].clone();
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.end(StreamId::new(s.into()))) else {
            self.graphs.push(None);
            return;
        };
        let mut graph = None;
        match (&window, result) {
            (Some(w), result) if w.owner != s && w.forks.is_branch(s) => {
                // A branch's end is refused: the window is its origin's.
                match result {
                    Ok(id) => self.fail(format!("a branch's end sealed {id}")),
                    Err(e) => {
                        if self.classify(&e, &fired).0 != Kind::Refused {
                            self.fail(format!("a branch's end failed: {}", Chain(&e)));
                        }
                    }
                }
            }
            (Some(w), Ok(id)) if w.recording && w.owner == s => {
                if w.must_doom {
                    self.fail(format!(
                        "end sealed {id} though an op inside the window failed (rule 11)"
                    ));
                }
                graph = Some((
                    id,
                    ModelGraph {
                        owner: s,
                        pooled: p,
                        recs: w.recs.clone(),
                        pool: None,
                        slots: w.slots.clone(),
                        order: w.forks.clone(),
                        flag: w.flag,
                        counter: None,
                    },
                ));
                self.model.windows[p] = None;
            }
            (_, Ok(id)) => {
                self.fail(format!(
                    "end sealed {id} with no window of this stream recording"
                ));
                self.model.windows[p] = None;
            }
            (Some(w), Err(e)) if w.recording && w.owner == s => {
                let kind = self.classify(&e, &fired).0;
                if !w.may_doom && fired.is_empty() {
                    self.fail(format!(
                        "end of a window nothing doomed failed: {} ({kind:?})",
                        Chain(&e)
                    ));
                }
                self.close_failed(p);
            }
            (Some(w), Err(e)) => {
                let owner = w.owner;
                let kind = self.classify(&e, &fired).0;
                if owner != s && !matches!(kind, Kind::Closed) {
                    self.fail(format!(
                        "a foreign end did not abandon the window: {}",
                        Chain(&e)
                    ));
                }
                // From prepare the window is disarmed; a foreign end abandons it (rule 12).
                self.close_failed(p);
                if owner != s {
                    self.model.abandoned[p] = Some(owner);
                }
            }
            (None, Err(e)) => {
                let kind = self.classify(&e, &fired).0;
                if self.model.abandoned[p] == Some(s) {
                    self.model.abandoned[p] = None;
                    if kind != Kind::Closed {
                        self.fail(format!(
                            "the owner's end after a foreign end did not say abandoned: {}",
                            Chain(&e)
                        ));
                    }
                } else if !matches!(kind, Kind::LateRefused | Kind::Refused) {
                    self.fail(format!("end with nothing open failed: {}", Chain(&e)));
                }
            }
        }
        self.graphs.push(graph);
    }

    fn abort(&mut self, stream: u8) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        // A neighbour of the window, or a branch of it (its lifecycle is the origin's).
        let neighbour = matches!(&self.model.windows[p], Some(w) if w.owner != s);
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.abort(StreamId::new(s.into()))) else {
            return;
        };
        match result {
            Ok(()) => {
                if neighbour {
                    self.fail("abort accepted from a neighbour of the window");
                } else {
                    // Rule 2: from capture the written ranges are claimed; from prepare
                    // the window is disarmed; otherwise nothing happens.
                    self.close_failed(p);
                }
            }
            Err(e) => {
                let kind = self.classify(&e, &fired).0;
                if !neighbour || kind != Kind::Refused {
                    self.fail(format!("abort failed: {}", Chain(&e)));
                }
            }
        }
    }

    fn body_op(&mut self, s: u8, op: &BodyOp) -> Result<(), ServerError> {
        let names = |op: &BodyOp| -> Vec<u8> {
            match op {
                BodyOp::Launch(spec) => spec.args.iter().map(|a| a.buf).collect(),
                BodyOp::Write { buf, .. } => vec![*buf],
                BodyOp::Alloc { .. }
                | BodyOp::State { .. }
                | BodyOp::Nested { .. }
                | BodyOp::Fork { .. }
                | BodyOp::Switch { .. }
                | BodyOp::Join { .. } => Vec::new(),
            }
        };
        let used: Vec<usize> = names(op).into_iter().filter_map(|n| self.live(n)).collect();
        if let Some(c) = &mut self.closure {
            c.own.extend(used);
        }
        // The capturing stream, or the branch the closure switched to (rule 28).
        let (origin, s) = (s, self.on_stream(s));
        match op {
            BodyOp::Nested { stream } => {
                self.nested(origin, *stream);
                Ok(())
            }
            BodyOp::Fork { stream } => {
                self.fork(s, *stream);
                Ok(())
            }
            BodyOp::Switch { to } => {
                self.switch(origin, *to);
                Ok(())
            }
            BodyOp::Join { token } => {
                self.join(*token, Some(origin));
                Ok(())
            }
            BodyOp::Launch(spec) => self.launch(s, spec),
            BodyOp::Write {
                buf,
                offset,
                values,
            } => self.write(s, *buf, *offset, values),
            BodyOp::Alloc { bytes, keep } => {
                self.placing();
                self.alloc(s, *bytes);
                self.allocated(*keep);
                Ok(())
            }
            BodyOp::State { bytes, values } => {
                let record = self.closure.as_ref().is_some_and(|c| c.record);
                if record {
                    // The same buffer as warmup's, named again.
                    let c = self.closure.as_mut().expect("in a closure");
                    let idx = c.states.get(c.named).copied().flatten();
                    c.named += 1;
                    self.slots.push(idx);
                    return Ok(());
                }
                self.placing();
                self.alloc(s, bytes.div_ceil(4).max(1) * 4);
                let idx = self.live(LATEST);
                if let Some(c) = &mut self.closure {
                    c.states.push(idx);
                    c.named += 1;
                    c.own.extend(idx);
                }
                if let Some(idx) = idx {
                    if let Some(c) = &self.closure
                        && let Some(pool) = c.pool
                    {
                        self.arena.insert(idx, pool);
                    }
                    let elements = self.model.bufs[idx].size / 4;
                    let all: Vec<i8> = values.iter().copied().cycle().take(elements).collect();
                    return self.write(s, LATEST, 0, &all);
                }
                Ok(())
            }
        }
    }

    /// A capture of `nested` (another stream, or the same) inside the closure of `s`'s
    /// capture, its closure filling a buffer allocated inside it: refused (rule 22 names
    /// both streams; the same stream is already prepared or recording), so nothing of it
    /// runs and no graph comes back. The caller's closure goes on.
    fn nested(&mut self, s: u8, nested: u8) {
        let n = self.stream(nested);
        let dev = Arc::clone(&self.dev);
        let (outer, inner) = (StreamId::new(s.into()), StreamId::new(n.into()));
        let Some(fill) = self.builtin_kernel(Builtin::Fill) else {
            return;
        };
        let ran = std::sync::atomic::AtomicBool::new(false);
        let Some((result, _)) = self.guarded(|| {
            dev.capture(inner, |d| {
                ran.store(true, std::sync::atomic::Ordering::Relaxed);
                let y = d.alloc(inner, 16)?;
                d.launch(
                    inner,
                    &fill,
                    [1, 1, 1],
                    &[Arg::write(&y)],
                    &Builtin::Fill.info(4, 1.0),
                )
            })
        }) else {
            return;
        };
        match result {
            Ok(graph) => {
                self.fail(format!(
                    "a capture of {inner} nested in {outer}'s capture closure was accepted"
                ));
                let _ = self.guarded(move || drop(graph));
            }
            Err(ServerError::OtherStreamInCapture { window, other, .. }) => {
                if (window, other) != (outer, inner) {
                    self.fail(format!(
                        "a nested capture refused naming {window} and {other}, not {outer} and {inner}"
                    ));
                }
            }
            Err(ServerError::BranchRefused(r))
                if r.branch == inner && self.route_of(n) == Some(self.pooled_of(s)) =>
            {
                // A branch of the window: its lifecycle is the origin's (rule 28).
            }
            Err(e) if n == s => {
                // The same stream: already prepared or recording (rule 1).
                if !matches!(e, ServerError::GraphState { .. } | ServerError::NeighbourRefused { .. }) {
                    self.fail(format!("a nested capture of the same stream failed: {}", Chain(&e)));
                }
            }
            Err(e) => self.fail(format!(
                "a capture of {inner} nested in {outer}'s closure failed otherwise than refused: {}",
                Chain(&e)
            )),
        }
        if ran.load(std::sync::atomic::Ordering::Relaxed) {
            self.fail(format!(
                "the closure of a capture of {inner} nested in {outer}'s ran"
            ));
        }
    }

    /// A capture into a graph pool places an allocation: it may take the bytes of any
    /// buffer of the pool that only graphs hold and this capture did not place or use
    /// (rule 23), so a replay that needs them may now be refused.
    fn placing(&mut self) {
        let Some(Closure {
            pool: Some(pool),
            own,
            ..
        }) = &self.closure
        else {
            return;
        };
        let (pool, own) = (*pool, own.clone());
        self.widen_pool(pool, |run, idx| {
            !own.contains(&idx) && run.handles[idx].is_none()
        });
    }

    /// Widens every buffer of graph pool `pool` that `taken` says another member may
    /// have overwritten: its bytes hold their value, or a read of them is refused.
    fn widen_pool(&mut self, pool: u8, taken: impl Fn(&Self, usize) -> bool) {
        let taken: Vec<usize> = self
            .arena
            .iter()
            .filter(|&(&idx, &p)| p == pool && taken(self, idx))
            .map(|(idx, _)| *idx)
            .collect();
        for idx in taken {
            let end = self.model.bufs[idx].size;
            self.model.widen(Span {
                buf: idx,
                start: 0,
                end,
            });
        }
    }

    /// The closure's allocation just took the latest name: the capture's own, in its
    /// pool's memory when it has one.
    fn allocated(&mut self, keep: bool) {
        let name = self.slots.len() - 1;
        let idx = self.live(LATEST);
        let Some(c) = &mut self.closure else { return };
        c.allocs.push((name, keep));
        if let Some(idx) = idx {
            c.own.insert(idx);
            if let Some(pool) = c.pool {
                self.arena.insert(idx, pool);
            }
        }
    }

    /// A call of the capture closure ends: warmup's allocations are dropped and its
    /// names given back (the recorded call names the same things again); the recorded
    /// call's, unless kept.
    fn closure_call_ends(&mut self) {
        let Some(c) = &mut self.closure else { return };
        let record = c.record;
        let base = c.base;
        let allocs = std::mem::take(&mut c.allocs);
        for (name, keep) in allocs {
            if record && keep {
                continue;
            }
            if let Some(Some(idx)) = self.slots.get(name).copied()
                && let Some(handle) = self.handles[idx].take()
            {
                let _ = self.guarded(move || drop(handle));
            }
        }
        if !record {
            self.slots.truncate(base);
        }
    }

    /// The graph pool `n`, made at its first use; and whether a capture on pooled
    /// stream `p` is refused because its members live on another.
    fn pool(&mut self, n: u8, p: usize) -> Option<(GraphPool, bool)> {
        let dev = Arc::clone(&self.dev);
        let (pool, _) = &mut self.pools[usize::from(n)];
        if pool.is_none() {
            let made = dev.graph_pool(&format!("pool {n}"));
            match made {
                Ok(made) => *pool = Some(made),
                Err(e) => {
                    let what = format!("graph_pool refused: {}", Chain(&e));
                    self.fail(what);
                    return None;
                }
            }
        }
        let pool = self.pools[usize::from(n)].0.clone()?;
        let pooled = &mut self.pools[usize::from(n)].1;
        let refused = pooled.is_some_and(|at| at != p);
        pooled.get_or_insert(p);
        Some((pool, refused))
    }

    fn capture(&mut self, stream: u8, body: &[BodyOp], stop: bool, pool: Option<u8>) {
        let s = self.stream(stream);
        let p = self.pooled_of(s);
        let open = self.model.windows[p].is_some() || self.lent_to(p).is_some();
        let mut unjoined_warmup = None;
        let in_pool = match pool {
            Some(n) => match self.pool(n, p) {
                Some(found) => Some(found),
                None => return,
            },
            None => None,
        };
        let refused_pool = in_pool.as_ref().is_some_and(|(_, refused)| *refused);
        let dev = Arc::clone(&self.dev);
        let plan = Arc::clone(&self.plan);
        let mut calls = 0u32;
        let mut body_error: Option<ServerError> = None;
        self.closure = None;
        let (result, fired) = guarded(&plan, || {
            let record = |d: &capture_core::Capturing<'_, Faulty<B>>| {
                let _ = d;
                calls += 1;
                match calls {
                    1 => {
                        self.model.windows[p] = Some(Window::prepared(s));
                        self.model.abandoned[p] = None;
                        self.closure = Some(Closure {
                            pool,
                            base: self.slots.len(),
                            ..Closure::default()
                        });
                    }
                    _ => {
                        if let Some(w) = self.window_mut(p) {
                            // Rule 28: `begin` opened the window, so warmup joined
                            // every branch it forked; the recording forks its own.
                            unjoined_warmup = w.forks.unjoined();
                            w.recording = true;
                            w.forks.next_phase();
                        }
                        if let Some(b) = unjoined_warmup {
                            self.fail(format!(
                                "begin opened a window whose warmup left stream#{b} unjoined"
                            ));
                        }
                        let base = self.slots.len();
                        if let Some(c) = &mut self.closure {
                            c.record = true;
                            c.base = base;
                            c.named = 0;
                            c.on = None;
                        }
                    }
                }
                for op in body {
                    if let Err(e) = self.body_op(s, op)
                        && stop
                    {
                        body_error = Some(e.clone());
                        self.closure_call_ends();
                        return Err(e);
                    }
                    if self.violation.is_some() {
                        let e = ServerError::graph_state("model", "a violation was found");
                        body_error = Some(e.clone());
                        self.closure_call_ends();
                        return Err(e);
                    }
                }
                if calls > 1
                    && let Some(w) = self.window_mut(p)
                    && w.forks.unjoined().is_some()
                {
                    // Rule 28: the window ends with a branch unjoined, so it is doomed.
                    w.must_doom = true;
                    w.may_doom = true;
                }
                self.closure_call_ends();
                Ok(())
            };
            match &in_pool {
                Some((pool, _)) => dev.capture_in(StreamId::new(s.into()), pool, record),
                None => dev.capture(StreamId::new(s.into()), record),
            }
        });
        // The state buffers are the graph's alone from here.
        let closure = self.closure.take().unwrap_or_default();
        for idx in closure.states.iter().flatten() {
            if let Some(handle) = self.handles[*idx].take() {
                let _ = self.guarded(move || drop(handle));
            }
        }
        let member = pool.map(|n| (n, closure.own));
        if refused_pool {
            match &result {
                Ok(Err(ServerError::InvalidArgument {
                    what: "graph pool", ..
                })) if calls == 0 => {}
                other => self.fail(format!(
                    "a capture into a pool whose members live on another pooled stream was not refused: {other:?}"
                )),
            }
            self.graphs.push(None);
            return;
        }
        self.note_fired(&fired);
        let result = match result {
            Ok(r) => r,
            Err(panic) => {
                self.fail(format!("a public call panicked: {panic}"));
                self.graphs.push(None);
                return;
            }
        };
        if self.violation.is_some() {
            self.graphs.push(None);
            return;
        }
        let mut graph = None;
        match (calls, result) {
            (0, Ok(id)) => self.fail(format!("capture sealed {id} without calling the closure")),
            (0, Err(e)) => {
                let kind = self.classify(&e, &fired).0;
                if !open || !matches!(kind, Kind::Refused | Kind::LateRefused) {
                    self.fail(format!(
                        "capture's prepare refused with no window open on the pooled stream: {}",
                        Chain(&e)
                    ));
                }
            }
            (1, Ok(id)) => {
                self.fail(format!(
                    "capture sealed {id} after calling the closure once"
                ));
                self.model.windows[p] = None;
            }
            (1, Err(e)) => {
                let unjoined = self.model.windows[p]
                    .as_ref()
                    .and_then(|w| w.forks.unjoined());
                if let Some(b) = unjoined {
                    // Rule 28: warmup left a branch unjoined, so `begin` refuses.
                    let named = matches!(e.root_cause(), ServerError::UnjoinedBranch { branch, .. } if u64::from(b) == branch.index());
                    let kind = self.classify(&e, &fired).0;
                    let fault = matches!(kind, Kind::OwnFault | Kind::WaitFault);
                    if !named && body_error.is_none() && !fault {
                        self.fail(format!(
                            "warmup left stream#{b} unjoined, begin did not say so: {}",
                            Chain(&e)
                        ));
                    }
                } else if body_error.is_none() {
                    let kind = self.classify(&e, &fired).0;
                    if !matches!(kind, Kind::OwnFault | Kind::WaitFault) {
                        self.fail(format!("capture's begin refused: {}", Chain(&e)));
                    }
                }
                // The closure's error (or begin's): aborted from prepare.
                self.model.windows[p] = None;
            }
            (2, Ok(id)) => {
                if body_error.is_some() {
                    self.fail(format!("capture sealed {id} though the closure failed"));
                }
                match self.model.windows[p].take() {
                    Some(w) => {
                        if w.must_doom {
                            self.fail(format!(
                                "capture sealed {id} though an op inside the window failed (rule 11)"
                            ));
                        }
                        graph = Some((
                            id,
                            ModelGraph {
                                owner: s,
                                pooled: p,
                                recs: w.recs,
                                pool: member,
                                slots: w.slots,
                                order: w.forks,
                                flag: w.flag,
                                counter: None,
                            },
                        ));
                    }
                    None => self.fail(format!("capture sealed {id} with no window in the model")),
                }
            }
            (2, Err(e)) => {
                if body_error.is_none() {
                    let may_doom = self.model.windows[p].as_ref().is_some_and(|w| w.may_doom);
                    if !may_doom && fired.is_empty() {
                        let kind = self.classify(&e, &fired).0;
                        self.fail(format!(
                            "capture of a window nothing doomed failed: {} ({kind:?})",
                            Chain(&e)
                        ));
                    }
                }
                // Aborted from capture, or ended without a graph: the written ranges are
                // claimed.
                self.close_failed(p);
            }
            (n, _) => self.fail(format!("capture called its closure {n} times")),
        }
        self.graphs.push(graph);
    }

    fn replay(&mut self, stream: u8, name: u8, times: u32) {
        let s = self.stream(stream);
        let Some(at) = relative(name, self.graphs.len()) else {
            return;
        };
        let Some(Some((handle, graph))) = self.graphs.get_mut(at).map(Option::take) else {
            return;
        };
        let id = handle.id();
        self.replay_handle(s, &handle, &graph, times);
        self.graphs[at] = Some((handle, graph));
        let _ = id;
    }

    fn replay_handle(&mut self, s: u8, handle: &GraphHandle, graph: &ModelGraph, times: u32) {
        let id = handle.id();
        let p = graph.pooled;
        // A graph replays only on its own stream; never inside a window (rule 16) or
        // from a neighbour of one (rule 13).
        let must_refuse =
            graph.owner != s || self.model.windows[p].is_some() || self.lent_to(p).is_some();
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) =
            self.guarded(|| dev.replay(StreamId::new(s.into()), handle, times))
        else {
            return;
        };
        let state = self.model.replay_inputs(&graph.recs);
        let written = graph.written();
        match result {
            Ok(()) => {
                if must_refuse {
                    self.fail(format!(
                        "replay of {id} accepted on another stream or inside a window"
                    ));
                }
                if state.unwritten {
                    self.fail(format!(
                        "replay of {id} ran though an input byte is unwritten (rule 14)"
                    ));
                    return;
                }
                self.model.since[p].extend(written);
                self.replayed_over(graph);
                if self.model.run_recs(&graph.recs, times) {
                    self.kernel_fault();
                }
            }
            Err(e) => {
                let kind = self.classify(&e, &fired).0;
                match kind {
                    Kind::Unwritten => {
                        if must_refuse {
                            self.fail(format!(
                                "replay of {id} on another stream or inside a window ran its input check"
                            ));
                        }
                        if state.all_val {
                            self.fail(format!(
                                "replay of {id} skipped as unwritten, but the model has every input written: {}",
                                Chain(&e)
                            ));
                        }
                        let named = e.unwritten().and_then(|u| u.by.as_ref()).is_some_and(|by| {
                            by.op.graph() == Some(id) && by.stream.index() == u64::from(s)
                        });
                        if !named {
                            self.fail(format!(
                                "a skipped replay of {id}'s refusal does not name it: {e:?}"
                            ));
                        }
                        for span in written {
                            self.model.unwrite(span);
                        }
                    }
                    Kind::Refused | Kind::LateRefused => {
                        if !must_refuse && !self.any_window() {
                            self.fail(format!("replay of {id} refused: {}", Chain(&e)));
                        }
                    }
                    // Rule 14: a replay that fails to enqueue claims what the graph writes.
                    Kind::OwnFault => {
                        for span in written {
                            self.model.unwrite(span);
                        }
                    }
                    Kind::WaitFault => {
                        self.replayed_over(graph);
                        for span in written {
                            self.model.widen(span);
                        }
                    }
                    _ => self.fail(format!("replay of {id} failed: {}", Chain(&e))),
                }
            }
        }
    }

    /// Whether the device cannot put a copy (`work` false) or the user's own work in a
    /// loop body (rule 30).
    fn cannot_loop(&self, work: bool) -> bool {
        match self.dev.loops() {
            DeviceLoops::Supported { copies, work: w } => {
                if work {
                    w.is_some()
                } else {
                    copies.is_some()
                }
            }
            DeviceLoops::Unsupported(_) => false,
        }
    }

    /// A loop replay of graph `name` (rule 30), up to `max` times; then its counter read
    /// on `reader`.
    fn replay_until(&mut self, stream: u8, name: u8, max: u32, reader: u8) {
        let s = self.stream(stream);
        let Some(at) = relative(name, self.graphs.len()) else {
            return;
        };
        let Some(Some((handle, mut graph))) = self.graphs.get_mut(at).map(Option::take) else {
            return;
        };
        let enqueued = self.loop_handle(s, &handle, &mut graph, max);
        let first = graph.written().first().copied();
        let counter = graph.counter;
        self.graphs[at] = Some((handle, graph));
        // Read on any stream, before anything else waits for it, what the loop wrote
        // first (on its own buffer's pooled stream, perhaps another) and the counter:
        // each waits for the whole loop (rule 30). A loop skipped or refused leaves the
        // counter claimed, or as the last loop left it.
        let reader = self.stream(reader);
        if enqueued.is_some()
            && let Some(span) = first.filter(|span| self.handles[span.buf].is_some())
        {
            self.read_at(reader, span.buf, span.start, span.end - span.start);
        }
        if let Some(c) = counter.filter(|&c| self.handles[c].is_some()) {
            self.read_at(reader, c, 0, 4);
        }
    }

    /// Runs the loop replay and predicts it: the model's graph iteration by iteration,
    /// the flag and counter zeroed first, the counter set after each, stopping after
    /// the iteration that left the flag non-zero (or at a fault, or where the model does
    /// not know the flag: then what the graph writes is unknown). Returns the counter's
    /// model buffer when the loop was enqueued.
    fn loop_handle(
        &mut self,
        s: u8,
        handle: &GraphHandle,
        graph: &mut ModelGraph,
        max: u32,
    ) -> Option<usize> {
        let id = handle.id();
        let p = graph.pooled;
        let must_refuse =
            graph.owner != s || self.model.windows[p].is_some() || self.lent_to(p).is_some();
        let refused = max == 0 || must_refuse || graph.flag.is_none();
        let dev = Arc::clone(&self.dev);
        let (result, fired) =
            self.guarded(|| dev.replay_until(StreamId::new(s.into()), handle, max))?;
        let state = self.model.replay_inputs(&graph.recs);
        let mut written = graph.written();
        match result {
            Ok(counter) => {
                if refused {
                    self.fail(format!(
                        "loop of {id} (max {max}) accepted on another stream, inside a window, \
                         without a stop flag or of no iterations"
                    ));
                    return None;
                }
                if state.unwritten {
                    self.fail(format!(
                        "loop of {id} ran though an input byte is unwritten (rule 14)"
                    ));
                    return None;
                }
                let c = match graph.counter {
                    Some(c) => {
                        let same = self.handles[c]
                            .as_ref()
                            .is_none_or(|h| h.id() == counter.id());
                        if !same {
                            self.fail(format!("loop of {id} gave another counter than before"));
                        }
                        self.handles[c] = Some(counter);
                        c
                    }
                    None => {
                        // Read by the op itself after every loop, under no buffer name
                        // of the program's (a motif's names stay what it meant).
                        let c = self.model.alloc(4, p);
                        self.handles.push(Some(counter));
                        self.shared.push(false);
                        graph.counter = Some(c);
                        c
                    }
                };
                let counted = Span {
                    buf: c,
                    start: 0,
                    end: 4,
                };
                written.push(counted);
                let flag = graph.flag.expect("checked above");
                self.model.since[p].extend(written.iter().copied());
                self.replayed_over(graph);
                self.model.set(flag, &[0; 4]);
                self.model.set(counted, &[0; 4]);
                for i in 1..=max {
                    let faulted = self.model.run_recs(&graph.recs, 1);
                    self.model.set(counted, &i.to_le_bytes());
                    if faulted {
                        // The fault ends the loop; rule 15 claims what it wrote.
                        self.kernel_fault();
                        break;
                    }
                    let word: Option<Vec<u8>> =
                        self.model.bytes(flag).iter().map(|b| b.value()).collect();
                    match word {
                        Some(w) if w == [0; 4] => {}
                        Some(_) => break,
                        None => {
                            // The model cannot tell whether the loop went on.
                            for span in &written {
                                self.model.forget(*span);
                            }
                            break;
                        }
                    }
                }
                Some(c)
            }
            Err(e) => {
                let kind = self.classify(&e, &fired).0;
                let counted = graph.counter.map(|c| Span {
                    buf: c,
                    start: 0,
                    end: 4,
                });
                written.extend(counted);
                match (&e, kind) {
                    (ServerError::LoopRefused(r), _) => {
                        let expected = match r.mismatch {
                            capture_core::LoopMismatch::Max { .. } => max == 0,
                            capture_core::LoopMismatch::NoFlag => graph.flag.is_none(),
                            capture_core::LoopMismatch::Unsupported(_) => {
                                matches!(self.dev.loops(), DeviceLoops::Unsupported(_))
                            }
                            _ => false,
                        };
                        if !expected {
                            self.fail(format!("loop of {id} (max {max}) refused: {r}"));
                        }
                    }
                    (_, Kind::Unwritten) => {
                        if refused {
                            self.fail(format!(
                                "loop of {id} refused otherwise ran its input check: {}",
                                Chain(&e)
                            ));
                        }
                        if state.all_val {
                            self.fail(format!(
                                "loop of {id} skipped as unwritten, but the model has every input written: {}",
                                Chain(&e)
                            ));
                        }
                        let named = e.unwritten().and_then(|u| u.by.as_ref()).is_some_and(|by| {
                            by.op.graph() == Some(id) && by.stream.index() == u64::from(s)
                        });
                        if !named {
                            self.fail(format!(
                                "a skipped loop of {id}'s refusal does not name it: {e:?}"
                            ));
                        }
                        for span in written {
                            self.model.unwrite(span);
                        }
                    }
                    (_, Kind::Refused | Kind::LateRefused) => {
                        if max == 0 || (!must_refuse && !self.any_window()) {
                            self.fail(format!("loop of {id} refused: {}", Chain(&e)));
                        }
                    }
                    // The loop's enqueue failed: what the graph writes is claimed. An
                    // allocation of its counter that failed changed nothing.
                    (_, Kind::OwnFault) => {
                        if fired.contains(&FaultOp::Replay) {
                            for span in written {
                                self.model.unwrite(span);
                            }
                        }
                    }
                    (_, Kind::WaitFault) => {
                        self.replayed_over(graph);
                        for span in written {
                            self.model.widen(span);
                        }
                    }
                    _ => self.fail(format!("loop of {id} failed: {}", Chain(&e))),
                }
                None
            }
        }
    }

    /// Updates a slot of graph `name` (rule 26): checked against what was recorded, all
    /// or nothing, and the model's graph follows a valid one (rule 27 for a rebind: the
    /// graph reads and writes the new buffer from here on).
    fn update(&mut self, name: u8, slot: u8, change: &UpdateSpec) {
        let Some(at) = relative(name, self.graphs.len()) else {
            return;
        };
        let Some(Some((handle, mut graph))) = self.graphs.get_mut(at).map(Option::take) else {
            return;
        };
        self.update_graph(&handle, &mut graph, slot, change);
        self.graphs[at] = Some((handle, graph));
    }

    fn update_graph(
        &mut self,
        handle: &GraphHandle,
        graph: &mut ModelGraph,
        slot: u8,
        change: &UpdateSpec,
    ) {
        let id = handle.id();
        // The graph lists the slots its capture named, in order.
        if let Some((listed, _)) = self.guarded(|| handle.slots()) {
            match listed {
                Ok(listed) => {
                    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
                    let model: Vec<&str> = graph.slots.iter().map(|s| s.name.as_str()).collect();
                    if names != model {
                        self.fail(format!("{id} lists slots {names:?}, the model {model:?}"));
                        return;
                    }
                }
                Err(e) => {
                    self.fail(format!("{id}'s slots could not be listed: {}", Chain(&e)));
                    return;
                }
            }
        }
        if graph.slots.is_empty() {
            let Some((result, _)) = self.guarded(|| handle.set("none", 1.0f32)) else {
                return;
            };
            match result {
                Err(ServerError::SlotRefused(r)) if matches!(&r.mismatch, SlotMismatch::Unknown { slots } if slots.is_empty()) =>
                    {}
                other => self.fail(format!("an update of {id}, which has no slots: {other:?}")),
            }
            return;
        }
        let i = usize::from(slot) % graph.slots.len();
        let ms = graph.slots[i].clone();
        // What the call is, whether the rules accept it, and the value it sets.
        let (result, fired, valid, value) = match (change, ms.kind) {
            (
                UpdateSpec::Scalar {
                    value,
                    wrong_size,
                    wrong_type,
                },
                kind,
            ) => {
                let v = f32::from(*value);
                let called = if *wrong_size {
                    self.guarded(|| handle.set(&ms.name, i16::from(*value)))
                } else if *wrong_type {
                    // The slot's size, another type: its bits would be read as an f32.
                    self.guarded(|| handle.set(&ms.name, v.to_bits()))
                } else {
                    self.guarded(|| handle.set(&ms.name, v))
                };
                let Some((result, fired)) = called else {
                    return;
                };
                if kind == SlotKind::Scalar && *wrong_type {
                    match &result {
                        Err(ServerError::SlotRefused(r))
                            if matches!(r.mismatch, SlotMismatch::ScalarType { .. }) => {}
                        other => self.fail(format!(
                            "{id}: a u32 set on the f32 slot {} was not refused for its type: {other:?}",
                            ms.name
                        )),
                    }
                    return;
                }
                let valid = kind == SlotKind::Scalar && !*wrong_size && !*wrong_type;
                (result, fired, valid, SlotVal::Scalar(v.to_bits()))
            }
            (UpdateSpec::Grid { x }, kind) => {
                let grid = [u32::from(*x), 1, 1];
                let Some((result, fired)) = self.guarded(|| handle.set_grid(&ms.name, grid)) else {
                    return;
                };
                let valid = kind == SlotKind::Grid && grid[0] <= GRID_MAX[0];
                (result, fired, valid, SlotVal::Grid(grid))
            }
            (UpdateSpec::Rebind { arg }, kind) => {
                let Some((idx, off, len)) = self.resolve_arg(arg) else {
                    return;
                };
                let span = Span {
                    buf: idx,
                    start: off * 4,
                    end: (off + len) * 4,
                };
                let access = match kind {
                    SlotKind::Buffer { access, .. } => access,
                    _ => Access::Read,
                };
                // What the model does not follow: a rebind of a pool member or into a
                // pool's memory (rule 23's own sets), into memory read-only to this run,
                // or one racing another argument of a launch using the slot.
                let pooled =
                    graph.pool.is_some()
                        || self.graphs.iter().flatten().any(|(_, g)| {
                            g.pool.as_ref().is_some_and(|(_, own)| own.contains(&idx))
                        });
                let races = ms
                    .uses
                    .iter()
                    .any(|&(rec, arg)| match (&graph.recs[rec], arg) {
                        (Rec::Launch(l), Some(a)) => {
                            let mut args = l.args.clone();
                            args[a].0 = span;
                            Model::races(&args)
                        }
                        _ => false,
                    });
                if pooled || races || (self.shared[idx] && access.writes()) {
                    return;
                }
                let buffer = self.handle(idx);
                let whole = off == 0 && len * 4 == self.model.bufs[idx].size;
                let given = if whole {
                    Arg::new(&buffer, access)
                } else {
                    Arg::new(&buffer, access).range(off as u64 * 4, len as u64 * 4)
                };
                let Some((result, fired)) = self.guarded(|| handle.rebind_to(&ms.name, &given))
                else {
                    return;
                };
                let fits = matches!(kind, SlotKind::Buffer { len: l, .. } if l == len * 4);
                // Rule 27: rule 29 holds on the sealed graph, so a rebind that would make
                // two ops of unordered lanes use common bytes, one writing, is refused.
                let races = fits && graph.rebind_races(i, span);
                if races {
                    match &result {
                        Err(ServerError::SlotRefused(r))
                            if matches!(r.mismatch, SlotMismatch::BranchRace(_)) => {}
                        other => self.fail(format!(
                            "{id}: a rebind of {} making two unjoined branches race was not refused \
                             as a race: {other:?}",
                            ms.name
                        )),
                    }
                    return;
                }
                (result, fired, fits, SlotVal::Buffer(span))
            }
        };
        match result {
            Ok(()) => {
                if !valid {
                    self.fail(format!(
                        "{id}: an update the rules refuse was accepted: {change:?}"
                    ));
                    return;
                }
                let slot = &mut graph.slots[i];
                slot.value = value;
                for &(rec, arg) in &slot.uses {
                    let Rec::Launch(l) = &mut graph.recs[rec] else {
                        continue;
                    };
                    match (value, arg) {
                        // Affine's `a` rides in the model's first info word.
                        (SlotVal::Scalar(bits), _) => l.info[0] = u64::from(bits),
                        (SlotVal::Buffer(span), Some(a)) => l.args[a].0 = span,
                        // The mock does not model grids.
                        _ => {}
                    }
                }
            }
            Err(ServerError::SlotRefused(r)) => {
                if valid {
                    self.fail(format!("{id}: a valid update was refused: {r}"));
                }
            }
            Err(e) => {
                let (kind, _) = self.classify(&e, &fired);
                if kind != Kind::OwnFault {
                    self.fail(format!("{id}: an update failed: {}", Chain(&e)));
                }
            }
        }
    }

    /// The buffer, offset and length (in elements) an argument names, as a launch
    /// resolves it; `None` for a buffer without a handle or with no elements.
    fn resolve_arg(&self, arg: &ArgSpec) -> Option<(usize, usize, usize)> {
        let idx = self.live(arg.buf)?;
        let elems = self.model.bufs[idx].size / 4;
        if elems == 0 {
            return None;
        }
        let (off, len) = match arg.range {
            None => (0, elems),
            Some((block, len)) => {
                let off = block as usize * 4;
                let off = if off < elems { off } else { 0 };
                (off, (len as usize).clamp(1, elems - off))
            }
        };
        Some((idx, off, len))
    }

    /// A member of a graph pool replayed: it may have written over any buffer of the
    /// pool its capture did not allocate or use (rule 23).
    fn replayed_over(&mut self, graph: &ModelGraph) {
        let Some((pool, own)) = &graph.pool else {
            return;
        };
        self.widen_pool(*pool, |_, idx| !own.contains(&idx));
    }

    /// Releases graph `name`: through `drop_graph`, or by dropping its handle (rule 24:
    /// the same release, behind its last replay's fence, never blocking).
    fn drop_graph(&mut self, name: u8, by_handle: bool) {
        let Some(slot) = relative(name, self.graphs.len()).and_then(|at| self.graphs.get_mut(at))
        else {
            return;
        };
        let Some((handle, _)) = slot.take() else {
            return;
        };
        let id = handle.id();
        if by_handle {
            // A panic in the release is a violation (`guarded` records it).
            let _ = self.guarded(move || drop(handle));
            return;
        }
        let dev = Arc::clone(&self.dev);
        let Some((result, _)) = self.guarded(|| dev.drop_graph(handle)) else {
            return;
        };
        if let Err(e) = result {
            self.fail(format!("drop of {id} failed: {}", Chain(&e)));
        }
    }

    /// Replays graph `name` of this device on `other` (rule 24): refused with
    /// `InvalidArgument` naming the graph before anything runs; the graph stays this
    /// device's.
    pub(crate) fn replay_elsewhere(&mut self, name: u8, other: &Device<Faulty<B>>) {
        let Some(Some((handle, graph))) = relative(name, self.graphs.len())
            .and_then(|at| self.graphs.get_mut(at))
            .map(Option::take)
        else {
            return;
        };
        let id = handle.id();
        let s = StreamId::new(graph.owner.into());
        let Some((result, _)) = self.guarded(|| other.replay(s, &handle, 1)) else {
            return;
        };
        match result {
            Err(ServerError::InvalidArgument { what: "graph", .. }) => {}
            Ok(()) => self.fail(format!("{id} of another device replayed (rule 24)")),
            Err(e) => self.fail(format!(
                "{id} of another device refused otherwise than as another device's graph: {}",
                Chain(&e)
            )),
        }
        self.graphs[name as usize] = Some((handle, graph));
    }

    /// Disarms every fault still armed (re-arming it at a call that never comes).
    pub(crate) fn disarm(&self) {
        for op in FaultOp::ALL {
            if self.plan.is_armed(op) {
                self.plan
                    .fail(op, u32::MAX)
                    .expect("a valid fault position");
            }
        }
    }

    /// Closes every window the model has open, with `abort` from its owner.
    pub(crate) fn close_windows(&mut self) {
        for p in 0..self.pooled {
            if let Some(owner) = self.model.windows[p].as_ref().map(|w| w.owner) {
                self.abort(owner);
            }
        }
    }

    /// Rule 17 and the issue's "after a failure, a fresh capture on that stream works":
    /// a capture of one fill launch on `s` seals, replays and reads back.
    pub(crate) fn fresh_capture(&mut self, s: u8) {
        let Some(fill) = self.builtin_kernel(Builtin::Fill) else {
            return;
        };
        let stream = StreamId::new(s.into());
        let dev = Arc::clone(&self.dev);
        let Some((result, _)) = self.guarded(|| -> Result<(), ServerError> {
            let b = dev.alloc(stream, 16)?;
            let g = dev.capture(stream, |d| {
                d.launch(
                    stream,
                    &fill,
                    [1, 1, 1],
                    &[Arg::write(&b)],
                    &Builtin::Fill.info(4, 3.0),
                )
            })?;
            dev.replay(stream, &g, 1)?;
            let got = dev.read(stream, &b)?;
            let want: Vec<u8> = [3.0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
            if got != want {
                return Err(ServerError::graph_state("model", "wrong bytes"));
            }
            dev.drop_graph(g)
        }) else {
            return;
        };
        if let Err(e) = result {
            self.fail(format!(
                "a fresh capture on stream#{s} failed: {}",
                Chain(&e)
            ));
        }
    }

    /// The memory report's graph ledgers add up: each graph's marginal bytes are at most
    /// what it holds for graphs alone (graph only and info), and the bytes held only for
    /// graphs (shared once, plus every marginal) at most their sum over graphs, which
    /// counts a shared allocation once per graph.
    fn check_ledgers(&mut self) {
        let dev = Arc::clone(&self.dev);
        let Some((report, _)) = self.guarded(|| dev.memory_report()) else {
            return;
        };
        let mut for_graphs = 0;
        for g in &report.graphs {
            let own = g.graph_only_bytes + g.info_bytes;
            for_graphs += own;
            if g.marginal_bytes > own {
                self.fail(format!(
                    "{}: marginal {} B above its {own} B held for graphs alone",
                    g.graph, g.marginal_bytes
                ));
            }
        }
        let mut in_pools = 0;
        for p in &report.pools {
            in_pools += p.held_bytes;
            if p.shared_bytes > p.held_bytes {
                self.fail(format!(
                    "{}: {} B shared by its members, above the {} B it holds for them",
                    p.pool, p.shared_bytes, p.held_bytes
                ));
            }
        }
        if in_pools > report.graph_held_bytes() {
            self.fail(format!(
                "graph pools hold {in_pools} B for graphs, above the {} B graphs hold in all",
                report.graph_held_bytes()
            ));
        }
        if report.graph_held_bytes() > for_graphs {
            self.fail(format!(
                "graphs hold {} B only for graphs, above the {for_graphs} B their ledgers sum to",
                report.graph_held_bytes()
            ));
        }
    }

    /// Drops every graph and buffer this run holds.
    pub(crate) fn drop_all(&mut self) {
        for slot in 0..self.graphs.len() {
            self.drop_graph(slot as u8, slot % 2 == 1);
        }
        let handles: Vec<Buffer> = self.handles.iter_mut().filter_map(Option::take).collect();
        let _ = self.guarded(move || drop(handles));
    }

    /// The program is done: windows closed, no stream recording, a fresh capture works on
    /// every stream, and after dropping everything, syncing and cleaning up, no pool has
    /// a byte in use and no graph lives.
    pub(crate) fn finish(&mut self, step: usize) {
        self.step = step;
        self.op_text = "final checks".to_string();
        self.fired.clear();
        self.surfaced.clear();
        self.disarm();
        self.close_windows();
        self.after_op();
        if self.violation.is_some() {
            return;
        }
        // A kernel's fault may still be unreported: a wait of every pooled stream
        // reports it first (a capture would meet it at `begin`, and refuse to open).
        for p in 0..self.pooled {
            self.sync(p as u8);
        }
        if self.violation.is_some() {
            return;
        }
        for s in 0..self.streams {
            self.fresh_capture(s);
        }
        self.check_ledgers();
        self.drop_all();
        for p in 0..self.pooled {
            let dev = Arc::clone(&self.dev);
            let Some((result, _)) = self.guarded(|| dev.sync(StreamId::new(p as u64))) else {
                return;
            };
            if let Err(e) = result {
                self.fail(format!("sync of pooled stream {p} failed: {}", Chain(&e)));
            }
        }
        let dev = Arc::clone(&self.dev);
        let Some((result, _)) = self.guarded(|| dev.cleanup()) else {
            return;
        };
        if let Err(e) = result {
            self.fail(format!("cleanup failed: {}", Chain(&e)));
        }
        self.check_empty();
        self.check_imports();
    }

    /// Every pool reports nothing in use and no graph is live.
    pub(crate) fn check_empty(&mut self) {
        let dev = Arc::clone(&self.dev);
        let Some((report, _)) = self.guarded(|| dev.memory_report()) else {
            return;
        };
        for stream in &report.streams {
            for pool in stream.device.pools.iter().chain(&stream.host.pools) {
                if pool.in_use != 0 || pool.slices_in_use != 0 {
                    self.fail(format!(
                        "after dropping everything, pooled stream {}: {pool}",
                        stream.index
                    ));
                }
            }
        }
        if !report.graphs.is_empty() {
            self.fail(format!(
                "after dropping every graph, {} still live",
                report.graphs.len()
            ));
        }
    }
}
