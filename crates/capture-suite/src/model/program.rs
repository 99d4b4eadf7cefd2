//! What a model-based test runs: a [`Program`] of [`Op`]s over a few logical streams,
//! and the proptest strategies that generate them.
//!
//! Buffers and graphs are named by their position in the program's own lists (the Nth
//! `Alloc`, the Nth `End` or `Capture`), and an op naming one that does not exist (never
//! allocated, failed, dropped) does nothing, so a program stays meaningful while proptest
//! shrinks it by removing ops.

use std::fmt;

use capture_core::Builtin;
use capture_mock::FaultOp;
use proptest::prelude::*;
use proptest::sample::select;

/// The most ops a generated program holds.
pub const MAX_OPS: usize = 64;

/// The most elements a generated buffer holds.
pub const MAX_ELEMENTS: u32 = 24;

/// How many buffer and graph names ops draw from (names past the program's own lists
/// are no-ops).
const NAMES: u8 = 8;

/// A buffer or graph name meaning "the latest one": what a motif uses for the buffer it
/// just allocated or the graph it just captured.
pub const LATEST: u8 = u8::MAX;

/// A buffer name meaning "the one before the latest".
pub const PREVIOUS: u8 = u8::MAX - 1;

/// A random program for one device (and, through [`Op::SecondDevice`] and
/// [`Op::OnSecond`], a second device built on the same backend value).
#[derive(Clone, Debug)]
pub struct Program {
    /// Pooled streams of the device (1 to 4).
    pub pooled: usize,
    /// Logical streams the ops use (2 to 6); stream `n` runs on pooled stream
    /// `n % pooled`.
    pub streams: u8,
    /// What to do, in order.
    pub ops: Vec<Op>,
}

/// One step of a [`Program`]. Streams are taken modulo [`Program::streams`].
#[derive(Clone, Debug)]
pub enum Op {
    /// Allocate `bytes` bytes on `stream` (the next buffer name).
    Alloc {
        /// The owning stream.
        stream: u8,
        /// The size (a multiple of 4 mostly, odd sizes sometimes).
        bytes: u32,
    },
    /// Import `bytes` bytes of memory the caller owns (the next buffer name) on
    /// `stream`: filled by the caller with `values` (cycled), and declared written with
    /// `Device::assume_written`, or left unwritten when `None`. Nothing on a backend
    /// that cannot make such memory.
    Import {
        /// The owning stream.
        stream: u8,
        /// The size, a multiple of 4.
        bytes: u32,
        /// What the caller fills it with, as `f32`s.
        values: Option<Vec<i8>>,
    },
    /// Drop the user's handle of buffer `buf`.
    Drop {
        /// The buffer.
        buf: u8,
    },
    /// Write `values` (as `f32`) into `buf` at element `offset` (clipped to fit).
    Write {
        /// The stream that writes.
        stream: u8,
        /// The buffer.
        buf: u8,
        /// Where, in elements (taken modulo the buffer's length).
        offset: u8,
        /// Small integers, written as little-endian `f32`s.
        values: Vec<i8>,
    },
    /// Read `buf` back (all of it, or `len` elements at `offset`).
    Read {
        /// The stream that reads.
        stream: u8,
        /// The buffer.
        buf: u8,
        /// `(offset, len)` in elements, clipped to fit; `None` for the whole buffer.
        range: Option<(u8, u8)>,
    },
    /// Launch a builtin.
    Launch {
        /// The stream that launches.
        stream: u8,
        /// What.
        launch: LaunchSpec,
    },
    /// Wait for everything enqueued on `stream`.
    Sync {
        /// The stream.
        stream: u8,
    },
    /// `Device::cleanup`.
    Cleanup,
    /// `Device::prepare`.
    Prepare {
        /// The stream.
        stream: u8,
    },
    /// `Device::begin`.
    Begin {
        /// The stream.
        stream: u8,
    },
    /// `Device::end` (the next graph name), by the window's owner or any other stream.
    End {
        /// The stream.
        stream: u8,
    },
    /// `Device::abort`.
    Abort {
        /// The stream.
        stream: u8,
    },
    /// `Device::capture` with a closure running `body` (called twice: warmup, record);
    /// the next graph name.
    Capture {
        /// The stream.
        stream: u8,
        /// What the closure does, on `stream`.
        body: Vec<BodyOp>,
        /// Whether the closure stops at the first error and returns it (`?`), or runs
        /// every op and returns `Ok` whatever failed.
        stop: bool,
        /// `Device::capture_in` graph pool `n` of the device (made at its first use)
        /// rather than `Device::capture` (rule 23).
        pool: Option<u8>,
    },
    /// Replay graph `graph` `times` times on `stream`.
    Replay {
        /// The stream (the graph's own, mostly).
        stream: u8,
        /// The graph.
        graph: u8,
        /// 1 to 3.
        times: u8,
    },
    /// A loop replay of graph `graph` on `stream`, up to `max` times (rule 30): refused
    /// for a graph whose capture named no stop flag; else the model runs the graph
    /// iteration by iteration and stops after the one that left the flag non-zero,
    /// then reads the iteration counter on `reader` (another stream, mostly: its read
    /// must wait for the whole loop).
    ReplayUntil {
        /// The stream (the graph's own, mostly).
        stream: u8,
        /// The graph.
        graph: u8,
        /// 0 to 8 (0 is refused).
        max: u8,
        /// The stream that reads the counter after it.
        reader: u8,
    },
    /// Releases a graph: `Device::drop_graph`, or (`handle`) dropping its handle.
    DropGraph {
        /// The graph.
        graph: u8,
        /// Whether the handle is dropped rather than passed to `drop_graph`.
        handle: bool,
    },
    /// Replays a graph of the first device on the second (rule 24: refused, naming the
    /// graph, and nothing runs); nothing when there is no second device.
    ReplayElsewhere {
        /// The first device's graph.
        graph: u8,
    },
    /// Fail the `nth` next call of driver operation `op`.
    Fault {
        /// The operation.
        op: FaultOp,
        /// 1 to 4.
        nth: u8,
    },
    /// Registers a kernel afresh (`Device::kernel` of the builtin's source, or of the
    /// user kernel's): later launches of it use the new handle. Kernel ids come from the
    /// registry's own counter, so a registration after any foreign work still runs its
    /// own code.
    Register {
        /// The builtin (when `user` is `None`).
        builtin: Builtin,
        /// The user kernel instead.
        user: Option<UserKernel>,
    },
    /// Imports the caller's memory behind import `buf` once more (a second adoption of
    /// the same memory), drops that handle at once, and cleans up when `cleanup`: the
    /// caller's memory must never be freed, and the first import reads on.
    ImportAgain {
        /// The first import's buffer name.
        buf: u8,
        /// Whether `cleanup()` runs after the drop.
        cleanup: bool,
    },
    /// Imports `bytes` of memory of another backend value: refused, naming it, with the
    /// stream usable (where the backend can make such memory). The other value makes
    /// `skip` pieces of memory first, so the memory's own number there is `skip`, which
    /// may be the number of memory the device's backend value has (a backend that told
    /// them apart by number alone would take one for the other).
    ImportElsewhere {
        /// The stream.
        stream: u8,
        /// The size, a multiple of 4.
        bytes: u32,
        /// How many pieces of memory the other value makes first.
        skip: u8,
    },
    /// A launch of a kernel that takes one scalar of [`SCALAR_SIZES`]`[declared]` bytes
    /// and [`INFO_COUNTS`]`[info]` info words, given a scalar of `SCALAR_SIZES[given]`
    /// bytes and `INFO_COUNTS[info_given]` words: accepted exactly when the sizes are
    /// valid and agree, else refused with `InvalidArgument`, changing nothing (sizes past
    /// 16 bits included). Skipped while a window is open on the stream's pooled stream.
    Sized {
        /// The stream.
        stream: u8,
        /// The declared scalar size's index.
        declared: u8,
        /// The given scalar size's index.
        given: u8,
        /// The declared info count's index.
        info: u8,
        /// The given info count's index.
        info_given: u8,
    },
    /// Updates slot `slot` (its index among the graph's, modulo their count; a name the
    /// graph lacks when it has none) of graph `graph` (rule 26).
    Update {
        /// The graph.
        graph: u8,
        /// The slot's index.
        slot: u8,
        /// What the update sets.
        change: UpdateSpec,
    },
    /// `Device::fork(parent, branch)` outside any capture closure (inside a window the
    /// user opened by hand, or none): the next branch token (rule 28).
    Fork {
        /// The parent.
        parent: u8,
        /// The stream forked.
        branch: u8,
    },
    /// `Device::join` of branch token `token` (counted as buffer names are, from the
    /// first or back from the latest), forked here or in a closure: a token of a window
    /// or phase gone is refused as stale.
    Join {
        /// The token.
        token: u8,
    },
    /// A kernel's fault met only through another stream's device-side wait (rule 15):
    /// three buffers (`b` on `waiting`, written and settled; `x` on `faulting`; `y` on
    /// `waiting`), a faulting kernel on `faulting` writing `b`, a host write of `x` on
    /// `faulting`, a launch on `waiting` reading `x` (so it waits for `faulting` on the
    /// device) and writing `y`, and a sync of `waiting`, which meets the fault. Then `b`,
    /// read on `waiting` (which already waited for the faulting stream), must fail: the
    /// failing stream's writes are claimed, never read as good. Nothing where the
    /// backend has no faulting kernel, or a fault is armed, pending or a window open.
    FaultMetByWait {
        /// The stream whose kernel faults.
        faulting: u8,
        /// The stream whose wait meets the fault.
        waiting: u8,
    },
    /// Builds a second device on the same backend value (one driver context, one
    /// capture domain) when there is none, with as many pooled streams as the first;
    /// drops it when there is one, whatever it or the first device is doing.
    SecondDevice,
    /// Runs an op on the second device, against its own model (nothing when there is no
    /// second device). Its windows and the first device's share the capture domain.
    OnSecond(Box<Op>),
}

/// What a capture closure does, on the capturing stream.
#[derive(Clone, Debug)]
pub enum BodyOp {
    /// Allocate `bytes` bytes inside the closure (the next buffer name, in each of its
    /// two calls): warmup's is dropped when that call ends, as a local is; the recorded
    /// one too, unless `keep` (the user keeps it), else it is the graph's alone.
    Alloc {
        /// The size.
        bytes: u32,
        /// Whether the user keeps the recorded call's buffer.
        keep: bool,
    },
    /// State the graph carries: allocated and written with `values` (cycled) in the
    /// warmup call, the same buffer named again in the recorded call (the next buffer
    /// name in each), and held by the graph alone once the capture returns.
    State {
        /// The size, a multiple of 4.
        bytes: u32,
        /// Its first values, as `f32`s.
        values: Vec<i8>,
    },
    /// A launch.
    Launch(LaunchSpec),
    /// A host write, as [`Op::Write`].
    Write {
        /// The buffer.
        buf: u8,
        /// Where, in elements.
        offset: u8,
        /// The values.
        values: Vec<i8>,
    },
    /// `Device::fork` of `stream` off the stream the closure's ops run on now (the
    /// capturing stream, or a branch it switched to): the next branch token (rule 28).
    Fork {
        /// The stream forked.
        stream: u8,
    },
    /// From here the closure's ops run on the stream of branch token `to` (counted
    /// back from the latest token; past the tokens, the capturing stream itself).
    Switch {
        /// The token.
        to: u8,
    },
    /// `Device::join` of branch token `token` (counted back from the latest): the ops
    /// then run on its parent, if they ran on it.
    Join {
        /// The token.
        token: u8,
    },
    /// A capture of another stream (or the same one) nested in this closure, its
    /// closure filling a buffer: refused (rule 22, or the lifecycle for the same stream),
    /// so nothing of it runs and no graph comes back; the outer capture goes on.
    Nested {
        /// The nested capture's stream.
        stream: u8,
    },
}

/// The scalar sizes [`Op::Sized`] declares and gives: valid ones, at the 64-byte limit,
/// just past it, and past 16 bits.
pub const SCALAR_SIZES: [u32; 12] = [1, 2, 3, 4, 8, 60, 64, 65, 68, 65535, 65536, 65540];

/// The info-word counts [`Op::Sized`] declares and gives, at and past 16 bits.
pub const INFO_COUNTS: [u32; 6] = [0, 1, 2, 65535, 65536, 65537];

/// A user kernel the model knows, which a backend may provide (the mock does; see
/// `model::mock_kernels`). Each takes two buffers, an input `x` (read) and an output
/// `y` (write); then two info words (the element count and 0), or for
/// [`Affine`](Self::Affine) three scalars by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserKernel {
    /// Copies the first half of its elements from `x` to `y` and leaves the second half
    /// of `y` untouched: a kernel that writes only part of what it declares.
    Partial,
    /// Panics when it runs: the device work faults, reported at a later wait.
    Panics,
    /// Shortens a buffer it was given: breaks the contract, and faults like a panic.
    Resizes,
    /// `y[i] = a * x[i] + b` for `i < n`, its parameters scalars passed by value: `a` an
    /// `f32` (the spec's scalar), `b` an `i16` (`1 - scalar`), `n` a `u32` (the element
    /// count); no info words.
    Affine,
    /// `flag = 1` (a `u32`) when `x[0] >= t`, with `t` the spec's scalar as an `f32` (its
    /// second info word), the flag left as it was otherwise: the stop flag of a loop
    /// replay (rule 30), set on the end token only. Its ranges are one element
    /// each (its output the whole buffer with `collide`: a flag of another size, which
    /// a window refuses); recorded as a kernel, its output is named the window's stop
    /// flag.
    StopAt,
}

impl UserKernel {
    /// Every user kernel.
    pub const ALL: [UserKernel; 5] = [
        UserKernel::Partial,
        UserKernel::Panics,
        UserKernel::Resizes,
        UserKernel::Affine,
        UserKernel::StopAt,
    ];

    /// Whether its work faults when it runs.
    pub const fn faults(self) -> bool {
        matches!(self, UserKernel::Panics | UserKernel::Resizes)
    }
}

/// How a [`LaunchSpec`] reaches the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `Device::launch` of the kernel.
    Kernel,
    /// `Device::foreign_work` over the same buffers and accesses, the backend's own work
    /// computing what the kernel would (on the mock, a `MockWork` running the kernel's
    /// function on the declared ranges).
    Work,
    /// `Device::launch` with a scalar the signature does not take: of the wrong size
    /// (`Affine`'s `b` passed as an `i32`), or one argument too many (the others). The
    /// launch check must refuse it, changing nothing.
    WrongScalar,
    /// `Device::launch` of an `Affine` kernel with `a` given as the `u32` of its bits: a
    /// scalar of the right size and the wrong type (issue 45), which the launch check
    /// must refuse (`InvalidArgument`, "scalar type"), changing nothing. A builtin's
    /// launch (no scalars) in this form gives one argument too many, refused as well.
    WrongType,
    /// `Device::launch` of a user kernel whose two buffers are the same bytes, both
    /// written (issue 45): refused (`InvalidArgument`, "aliased arguments"), changing
    /// nothing, since the device writes them in no order. On a builtin, its input given
    /// as its output: in place, one read-write access, run as any launch.
    Aliased,
    /// `Device::launch` as a programmatic dependent launch (`Dims::programmatic`): where
    /// the device runs them and the kernel declares its grid-dependency wait (the CUDA
    /// builtins on compute capability 9.0 and later), exactly a [`Form::Kernel`] launch
    /// (the device may overlap, never reorder, what the kernel reads); anywhere else (the
    /// mock, Vulkan, a kernel that does not wait) refused by the launch check, changing
    /// nothing.
    Programmatic,
}

/// A launch: the kernel (a builtin, or a [`UserKernel`]), its buffers (in the kernel's
/// argument order) and its scalar. The element count is derived from the ranges so a
/// builtin writes every byte of its output range.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The builtin (ignored when `user` names a user kernel).
    pub builtin: Builtin,
    /// A user kernel instead of the builtin.
    pub user: Option<UserKernel>,
    /// One argument for `fill`, two (x, y) for the others.
    pub args: Vec<ArgSpec>,
    /// The scalar `a` (for `row_bias`, the column count is `1 + |scalar| % 4`).
    pub scalar: i8,
    /// How it reaches the device.
    pub form: Form,
    /// For a user kernel whose second info word it ignores: that word is chosen so the
    /// launch's info words share one hash under the runtime's unkeyed id hasher with
    /// every other such launch's (the cache must keep them apart, and hash them keyed).
    pub collide: bool,
    /// As a kernel inside a window, slot `n`'s launch (rule 26): its first buffer is
    /// the slot `b{n}`, its grid the slot `g{n}` (bounded by [`GRID_MAX`]), and an
    /// `Affine` launch's scalar `a` the slot `a{n}`. One slot has one value in a window:
    /// a second launch giving it another is refused, recording nothing.
    pub slot: Option<u8>,
}

/// The bound of a slotted launch's grid ([`LaunchSpec::slot`]).
pub const GRID_MAX: [u32; 3] = [4, 1, 1];

/// What an [`Op::Update`] asks of a graph's slot.
#[derive(Clone, Debug)]
pub enum UpdateSpec {
    /// `GraphHandle::set` of an `f32` (or, `wrong_size`, an `i16`; `wrong_type`, the
    /// `u32` of its bits: both refused).
    Scalar {
        /// The new value.
        value: i8,
        /// Whether it is of another size than the slot's.
        wrong_size: bool,
        /// Whether it is of the slot's size and another type.
        wrong_type: bool,
    },
    /// `GraphHandle::rebind_to` buffer `buf` (its range, as an [`ArgSpec`] gives one),
    /// with the slot's access: refused when the length differs.
    Rebind {
        /// The buffer and range.
        arg: ArgSpec,
    },
    /// `GraphHandle::set_grid` to `[x, 1, 1]`: refused past [`GRID_MAX`].
    Grid {
        /// The grid's x.
        x: u8,
    },
}

/// One launch argument: a buffer, and optionally a range of it.
#[derive(Clone, Debug)]
pub struct ArgSpec {
    /// The buffer.
    pub buf: u8,
    /// `(offset in blocks of 4 elements, len in elements)`, clipped to fit; `None`: the
    /// whole buffer.
    pub range: Option<(u8, u8)>,
}

fn stream() -> impl Strategy<Value = u8> {
    0u8..6
}

fn name() -> impl Strategy<Value = u8> {
    0u8..NAMES
}

fn values() -> impl Strategy<Value = Vec<i8>> {
    prop::collection::vec(-8i8..=8, 1..=8)
}

fn alloc_bytes() -> impl Strategy<Value = u32> {
    prop_oneof![
        5 => (1u32..=MAX_ELEMENTS).prop_map(|e| e * 4),
        1 => 1u32..=(MAX_ELEMENTS * 4 + 1),
    ]
}

fn arg() -> impl Strategy<Value = ArgSpec> {
    (
        name(),
        prop_oneof![
            1 => Just(None),
            2 => (0u8..6, 1u8..=MAX_ELEMENTS as u8).prop_map(Some),
        ],
    )
        .prop_map(|(buf, range)| ArgSpec { buf, range })
}

/// A launch's slot number, now and then (rule 26; only a kernel inside a window names
/// one, elsewhere it does nothing).
fn slot() -> impl Strategy<Value = Option<u8>> {
    prop::option::weighted(0.3, 0u8..3)
}

/// What an update asks: valid and refused ones of every kind.
fn update_spec() -> impl Strategy<Value = UpdateSpec> {
    prop_oneof![
        2 => (-4i8..=4, prop::bool::weighted(0.2), prop::bool::weighted(0.2))
            .prop_map(|(value, wrong_size, wrong_type)| UpdateSpec::Scalar {
                value,
                wrong_size,
                wrong_type: wrong_type && !wrong_size,
            }),
        3 => arg().prop_map(|arg| UpdateSpec::Rebind { arg }),
        1 => (1u8..=6).prop_map(|x| UpdateSpec::Grid { x }),
    ]
}

fn update() -> impl Strategy<Value = Op> {
    (0u8..4, 0u8..4, update_spec()).prop_map(|(graph, slot, change)| Op::Update {
        graph,
        slot,
        change,
    })
}

/// A graph with slots, then updates of them between and around replays and reads: an
/// Affine step over its input slot and scalar slot, a builtin over the same input slot
/// (one slot, one value), and its output read back.
fn updated_graph() -> impl Strategy<Value = Vec<Op>> {
    let after = prop_oneof![
        4 => update().prop_map(|op| match op {
            Op::Update { slot, change, .. } => Op::Update { graph: LATEST, slot, change },
            other => other,
        }),
        3 => (1u8..=2).prop_map(|times| Op::Replay { stream: 0, graph: LATEST, times }),
        2 => (0u8..6).prop_map(|b| Op::Read { stream: 0, buf: LATEST - b, range: None }),
        1 => (0u8..6, values())
            .prop_map(|(b, values)| Op::Write { stream: 0, buf: LATEST - b, offset: 0, values }),
        1 => (0u8..6).prop_map(|b| Op::Drop { buf: LATEST - b }),
        1 => (stream(), alloc_bytes()).prop_map(|(stream, bytes)| Op::Alloc { stream, bytes }),
    ];
    (
        1u32..=8,
        -3i8..=3,
        any::<bool>(),
        prop::collection::vec(after, 2..=10),
    )
        .prop_map(|(elements, scalar, second, after)| {
            let bytes = elements * 4;
            let arg = |buf| ArgSpec { buf, range: None };
            let mut ops = vec![
                Op::Alloc { stream: 0, bytes },
                Op::Write {
                    stream: 0,
                    buf: LATEST,
                    offset: 0,
                    values: vec![1; elements as usize],
                },
                Op::Alloc { stream: 0, bytes },
                Op::Alloc { stream: 0, bytes },
            ];
            let mut body = vec![BodyOp::Launch(LaunchSpec {
                builtin: Builtin::Copy,
                user: Some(UserKernel::Affine),
                args: vec![arg(LATEST - 2), arg(LATEST - 1)],
                scalar,
                form: Form::Kernel,
                collide: false,
                slot: Some(0),
            })];
            if second {
                body.push(BodyOp::Launch(LaunchSpec {
                    builtin: Builtin::AddScalar,
                    user: None,
                    args: vec![arg(LATEST - 2), arg(LATEST)],
                    scalar,
                    form: Form::Kernel,
                    collide: false,
                    slot: Some(0),
                }));
            }
            ops.push(Op::Capture {
                stream: 0,
                body,
                stop: false,
                pool: None,
            });
            // A buffer to rebind to, as long as the input, written.
            ops.push(Op::Alloc { stream: 0, bytes });
            ops.push(Op::Write {
                stream: 0,
                buf: LATEST,
                offset: 0,
                values: vec![2; elements as usize],
            });
            ops.extend(after);
            ops
        })
}

/// A kernel launch, mostly, or the same computation as foreign work.
fn good_form() -> impl Strategy<Value = Form> {
    prop_oneof![3 => Just(Form::Kernel), 1 => Just(Form::Work)]
}

/// A launch of any builtin over any buffers, as a kernel or as foreign work.
pub fn launch_spec() -> impl Strategy<Value = LaunchSpec> {
    (
        select(Builtin::ALL.to_vec()),
        arg(),
        arg(),
        -3i8..=3,
        good_form(),
        slot(),
    )
        .prop_map(|(builtin, x, y, scalar, form, slot)| {
            let args = match builtin {
                Builtin::Fill => vec![y],
                _ => vec![x, y],
            };
            LaunchSpec {
                builtin,
                user: None,
                args,
                scalar,
                form,
                collide: false,
                slot,
            }
        })
}

/// A launch of a builtin, mostly, or of a [`UserKernel`] (which writes only part of its
/// output, faults, or takes scalars), as a kernel or as foreign work; now and then one
/// with a scalar the kernel does not take, or a builtin's as a programmatic dependent
/// launch.
pub fn any_launch() -> impl Strategy<Value = LaunchSpec> {
    let user = (
        select(UserKernel::ALL.to_vec()),
        arg(),
        arg(),
        -3i8..=3,
        good_form(),
        prop::bool::weighted(0.3),
        slot(),
    )
        .prop_map(|(user, x, y, scalar, form, collide, slot)| LaunchSpec {
            builtin: Builtin::Copy,
            user: Some(user),
            args: vec![x, y],
            scalar,
            form,
            // A StopAt's `collide` names its whole output the flag, of any length.
            collide: collide && user != UserKernel::Affine,
            slot,
        });
    prop_oneof![
        12 => launch_spec(),
        1 => launch_spec().prop_map(|mut spec| {
            spec.form = Form::Programmatic;
            spec
        }),
        4 => user,
        1 => (launch_spec(), any::<bool>()).prop_map(|(mut spec, affine)| {
            if affine {
                spec.user = Some(UserKernel::Affine);
                if spec.args.len() == 1 {
                    spec.args.insert(0, spec.args[0].clone());
                }
            }
            spec.form = Form::WrongScalar;
            spec
        }),
        1 => launch_spec().prop_map(|mut spec| {
            spec.user = Some(UserKernel::Affine);
            if spec.args.len() == 1 {
                spec.args.insert(0, spec.args[0].clone());
            }
            spec.form = Form::WrongType;
            spec
        }),
        // One buffer passed twice: a user kernel's two outputs (refused), or a builtin
        // in place (its input its output).
        1 => (launch_spec(), select(vec![None, Some(UserKernel::Partial)])).prop_map(|(mut spec, user)| {
            if spec.args.len() == 2 {
                spec.args[0] = spec.args[1].clone();
            }
            spec.user = user;
            spec.form = Form::Aliased;
            spec
        }),
    ]
}

fn body_op() -> impl Strategy<Value = BodyOp> {
    prop_oneof![
        1 => (alloc_bytes(), any::<bool>()).prop_map(|(bytes, keep)| BodyOp::Alloc { bytes, keep }),
        8 => any_launch().prop_map(BodyOp::Launch),
        1 => (name(), 0u8..MAX_ELEMENTS as u8, values())
            .prop_map(|(buf, offset, values)| BodyOp::Write { buf, offset, values }),
        1 => stream().prop_map(|stream| BodyOp::Nested { stream }),
        1 => stream().prop_map(|stream| BodyOp::Fork { stream }),
        1 => (0u8..3).prop_map(|to| BodyOp::Switch { to }),
        1 => (0u8..3).prop_map(|token| BodyOp::Join { token: back(token) }),
    ]
}

fn fault() -> impl Strategy<Value = Op> {
    (select(FaultOp::ALL.to_vec()), 1u8..=4).prop_map(|(op, nth)| Op::Fault { op, nth })
}

/// Any single op.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (stream(), alloc_bytes()).prop_map(|(stream, bytes)| Op::Alloc { stream, bytes }),
        2 => (stream(), 1u32..=MAX_ELEMENTS, prop::option::weighted(0.8, values()))
            .prop_map(|(stream, elements, values)| Op::Import { stream, bytes: elements * 4, values }),
        3 => name().prop_map(|buf| Op::Drop { buf }),
        5 => (stream(), name(), 0u8..MAX_ELEMENTS as u8, values())
            .prop_map(|(stream, buf, offset, values)| Op::Write { stream, buf, offset, values }),
        5 => (
            stream(),
            name(),
            prop_oneof![
                1 => Just(None),
                1 => (0u8..MAX_ELEMENTS as u8, 1u8..=MAX_ELEMENTS as u8).prop_map(Some),
            ],
        )
            .prop_map(|(stream, buf, range)| Op::Read { stream, buf, range }),
        8 => (stream(), any_launch()).prop_map(|(stream, launch)| Op::Launch { stream, launch }),
        2 => stream().prop_map(|stream| Op::Sync { stream }),
        1 => Just(Op::Cleanup),
        2 => stream().prop_map(|stream| Op::Prepare { stream }),
        2 => stream().prop_map(|stream| Op::Begin { stream }),
        2 => stream().prop_map(|stream| Op::End { stream }),
        1 => stream().prop_map(|stream| Op::Abort { stream }),
        3 => (
            stream(),
            prop::collection::vec(body_op(), 1..=4),
            any::<bool>(),
            prop::option::weighted(0.3, 0u8..2),
        )
            .prop_map(|(stream, body, stop, pool)| Op::Capture { stream, body, stop, pool }),
        4 => (stream(), 0u8..4, 1u8..=3)
            .prop_map(|(stream, graph, times)| Op::Replay { stream, graph, times }),
        2 => (stream(), 0u8..4, 0u8..=8, stream())
            .prop_map(|(stream, graph, max, reader)| Op::ReplayUntil { stream, graph, max, reader }),
        1 => (0u8..4, any::<bool>()).prop_map(|(graph, handle)| Op::DropGraph { graph, handle }),
        1 => (0u8..4).prop_map(|graph| Op::ReplayElsewhere { graph }),
        2 => fault(),
        1 => (select(Builtin::ALL.to_vec()), prop::option::weighted(0.4, select(UserKernel::ALL.to_vec())))
            .prop_map(|(builtin, user)| Op::Register { builtin, user }),
        1 => (name(), any::<bool>()).prop_map(|(buf, cleanup)| Op::ImportAgain { buf, cleanup }),
        1 => (stream(), 1u32..=MAX_ELEMENTS, 0u8..24)
            .prop_map(|(stream, elements, skip)| Op::ImportElsewhere { stream, bytes: elements * 4, skip }),
        1 => sized(),
        3 => update(),
        1 => (stream(), stream()).prop_map(|(parent, branch)| Op::Fork { parent, branch }),
        1 => (0u8..3).prop_map(|token| Op::Join { token: back(token) }),
        1 => (stream(), stream()).prop_map(|(faulting, waiting)| Op::FaultMetByWait { faulting, waiting }),
    ]
}

/// A launch whose scalar and info sizes are drawn from [`SCALAR_SIZES`] and
/// [`INFO_COUNTS`]: the given ones mostly the declared ones, so valid launches at every
/// limit run as well as refused ones.
fn sized() -> impl Strategy<Value = Op> {
    let scalar = 0u8..SCALAR_SIZES.len() as u8;
    let info = 0u8..INFO_COUNTS.len() as u8;
    (
        stream(),
        scalar.clone(),
        prop::option::weighted(0.3, scalar),
        info.clone(),
        prop::option::weighted(0.3, info),
    )
        .prop_map(|(stream, declared, given, info, info_given)| Op::Sized {
            stream,
            declared,
            given: given.unwrap_or(declared),
            info,
            info_given: info_given.unwrap_or(info),
        })
}

/// The caller's memory imported, imported again and that second import dropped and
/// cleaned up, then the first read and dropped and cleaned up too: the caller's memory
/// must hold its bytes at the end (each import is an adoption of its own, released
/// without a free). Then memory of another backend value, numbered there as memory of
/// the device's own may be: refused.
fn imported_twice() -> impl Strategy<Value = Vec<Op>> {
    (
        stream(),
        1u32..=MAX_ELEMENTS,
        values(),
        any::<bool>(),
        0u8..24,
    )
        .prop_map(|(stream, elements, values, cleanup, skip)| {
            let bytes = elements * 4;
            vec![
                Op::Import {
                    stream,
                    bytes,
                    values: Some(values),
                },
                Op::ImportAgain {
                    buf: LATEST,
                    cleanup,
                },
                Op::Read {
                    stream,
                    buf: LATEST,
                    range: None,
                },
                Op::ImportElsewhere {
                    stream,
                    bytes,
                    skip,
                },
                Op::Drop { buf: LATEST },
                Op::Sync { stream },
                Op::Cleanup,
            ]
        })
}

/// Launches whose kernels declare scalars and info counts at and past 16 bits (65,535
/// and more), given what they declare or a neighbour of it: a size cut to its low bits
/// would accept one it must refuse.
fn sizes_past_sixteen_bits() -> impl Strategy<Value = Vec<Op>> {
    let at = |of: &[u32], v: u32| of.iter().position(|&x| x == v).expect("listed") as u8;
    // (declared, given): what it declares, or the value its low 16 bits make.
    let scalars = [
        (65540, 65540),
        (65540, 4),
        (65536, 4),
        (65535, 65535),
        (64, 64),
        (68, 68),
    ]
    .map(|(d, g)| (at(&SCALAR_SIZES, d), at(&SCALAR_SIZES, g)));
    let infos = [
        (65536, 65536),
        (65536, 0),
        (65537, 1),
        (65537, 65537),
        (65535, 65535),
        (2, 2),
    ]
    .map(|(d, g)| (at(&INFO_COUNTS, d), at(&INFO_COUNTS, g)));
    prop::collection::vec(
        (stream(), select(scalars.to_vec()), select(infos.to_vec())).prop_map(
            |(stream, (declared, given), (info, info_given))| Op::Sized {
                stream,
                declared,
                given,
                info,
                info_given,
            },
        ),
        2..=4,
    )
}

/// Foreign work of a name new to the device, then kernels registered and builtins first
/// used after it, each launched and read: a kernel's id must not follow the trace's
/// names (they drift apart by one per new work name).
fn kernels_after_work() -> impl Strategy<Value = Vec<Op>> {
    (
        stream(),
        launch_spec(),
        launch_spec(),
        select(UserKernel::ALL.to_vec()),
        select(Builtin::ALL.to_vec()),
    )
        .prop_map(|(stream, mut work, mut kernel, user, builtin)| {
            work.form = Form::Work;
            kernel.form = Form::Kernel;
            let output = kernel.args.last().map(|a| a.buf);
            let mut ops = vec![
                Op::Launch {
                    stream,
                    launch: work,
                },
                Op::Register {
                    builtin,
                    user: Some(user),
                },
                Op::Launch {
                    stream,
                    launch: kernel,
                },
            ];
            if let Some(buf) = output {
                ops.push(Op::Read {
                    stream,
                    buf,
                    range: None,
                });
            }
            ops
        })
}

/// An op on the second device: any op of one device, its buffer and graph names folded
/// onto the few a second device holds (the first three), so most of them do something.
fn second_op() -> impl Strategy<Value = Op> {
    op().prop_map(|op| few_names(op, 3))
}

/// `op` with every buffer and graph name folded below `n` ([`LATEST`] kept).
fn few_names(op: Op, n: u8) -> Op {
    let fold = |name: u8| {
        if name == LATEST || name == PREVIOUS {
            name
        } else {
            name % n
        }
    };
    let launch = |mut l: LaunchSpec| {
        for a in &mut l.args {
            a.buf = fold(a.buf);
        }
        l
    };
    match op {
        Op::Drop { buf } => Op::Drop { buf: fold(buf) },
        Op::Write {
            stream,
            buf,
            offset,
            values,
        } => Op::Write {
            stream,
            buf: fold(buf),
            offset,
            values,
        },
        Op::Read { stream, buf, range } => Op::Read {
            stream,
            buf: fold(buf),
            range,
        },
        Op::Launch { stream, launch: l } => Op::Launch {
            stream,
            launch: launch(l),
        },
        Op::Capture {
            stream,
            body,
            stop,
            pool,
        } => Op::Capture {
            stream,
            stop,
            pool,
            body: body
                .into_iter()
                .map(|b| match b {
                    BodyOp::Launch(l) => BodyOp::Launch(launch(l)),
                    BodyOp::Write {
                        buf,
                        offset,
                        values,
                    } => BodyOp::Write {
                        buf: fold(buf),
                        offset,
                        values,
                    },
                    other @ (BodyOp::Alloc { .. }
                    | BodyOp::State { .. }
                    | BodyOp::Nested { .. }
                    | BodyOp::Fork { .. }
                    | BodyOp::Switch { .. }
                    | BodyOp::Join { .. }) => other,
                })
                .collect(),
        },
        Op::Replay {
            stream,
            graph,
            times,
        } => Op::Replay {
            stream,
            graph: fold(graph),
            times,
        },
        Op::DropGraph { graph, handle } => Op::DropGraph {
            graph: fold(graph),
            handle,
        },
        Op::ReplayElsewhere { graph } => Op::ReplayElsewhere { graph: fold(graph) },
        Op::ImportAgain { buf, cleanup } => Op::ImportAgain {
            buf: fold(buf),
            cleanup,
        },
        other => other,
    }
}

/// Work queued over a buffer, the buffer dropped under it, an allocation that may reuse
/// its memory, and a read of the work's output: the sequence rule 19 is about, which
/// single random ops rarely line up.
fn use_then_drop() -> impl Strategy<Value = Vec<Op>> {
    (stream(), launch_spec(), alloc_bytes()).prop_map(|(stream, launch, bytes)| {
        let input = launch.args.first().map(|a| a.buf);
        let output = launch.args.last().map(|a| a.buf);
        let mut ops = vec![Op::Launch { stream, launch }];
        if let Some(buf) = input {
            ops.push(Op::Drop { buf });
        }
        ops.push(Op::Alloc { stream, bytes });
        if let Some(buf) = output {
            ops.push(Op::Read {
                stream,
                buf,
                range: None,
            });
        }
        ops
    })
}

/// A window on stream 0 given a buffer of stream 1 (pooled apart when there are two
/// pooled streams), which the user drops inside the window; a buffer allocated on stream 1
/// and written before the window closes; then a replay, and reads. The graph must keep the dropped buffer
/// (rule 7): the new buffer keeps what was written, and the replay still runs.
fn foreign_dropped_in_window() -> impl Strategy<Value = Vec<Op>> {
    (
        select(vec![Builtin::Fill, Builtin::AddScalar, Builtin::Copy]),
        any::<bool>(),
        1u32..=MAX_ELEMENTS,
        values(),
    )
        .prop_map(|(builtin, input, elements, values)| {
            let latest = ArgSpec {
                buf: LATEST,
                range: None,
            };
            let own = ArgSpec {
                buf: 0,
                range: None,
            };
            let args = match (builtin, input) {
                (Builtin::Fill, _) => vec![latest],
                (_, true) => vec![latest, own],
                (_, false) => vec![own, latest],
            };
            let launch = LaunchSpec {
                builtin,
                user: None,
                args,
                scalar: 2,
                form: Form::Kernel,
                collide: false,
                slot: None,
            };
            let bytes = elements * 4;
            vec![
                Op::Alloc { stream: 1, bytes },
                Op::Write {
                    stream: 1,
                    buf: LATEST,
                    offset: 0,
                    values: values.clone(),
                },
                // Settled, so nothing but the user's handle and the window keeps it.
                Op::Sync { stream: 1 },
                Op::Prepare { stream: 0 },
                Op::Launch {
                    stream: 0,
                    launch: launch.clone(),
                },
                Op::Begin { stream: 0 },
                Op::Launch { stream: 0, launch },
                Op::Drop { buf: LATEST },
                // Allocated while the window is still open, so the dropped buffer's
                // memory is taken back before the seal could look for it.
                Op::Alloc { stream: 1, bytes },
                Op::Write {
                    stream: 1,
                    buf: LATEST,
                    offset: 0,
                    values,
                },
                Op::End { stream: 0 },
                Op::Replay {
                    stream: 0,
                    graph: LATEST,
                    times: 1,
                },
                Op::Read {
                    stream: 1,
                    buf: LATEST,
                    range: None,
                },
                Op::Read {
                    stream: 0,
                    buf: 0,
                    range: None,
                },
            ]
        })
}

/// An input of the window's own stream (memory the caller owns, imported and declared
/// written, or an allocation written; prepared first or not, so it comes from either
/// pool) read by a launch (or foreign work) recorded in a window; the user drops it
/// inside the window and allocates a new buffer of its size, written; then replays, and
/// reads. The graph keeps the input (rule 7): the new buffer is other memory, each
/// replay reads the input's bytes, and an import is intact at the end (the library
/// never frees it).
fn input_dropped_in_window() -> impl Strategy<Value = Vec<Op>> {
    (
        stream(),
        select(vec![Builtin::AddScalar, Builtin::Copy, Builtin::MulScalar]),
        good_form(),
        1u32..=MAX_ELEMENTS,
        values(),
        values(),
        0u8..3,
    )
        .prop_map(|(stream, builtin, form, elements, first, second, input)| {
            let bytes = elements * 4;
            let launch = LaunchSpec {
                builtin,
                user: None,
                args: vec![
                    ArgSpec {
                        buf: LATEST,
                        range: None,
                    },
                    ArgSpec {
                        buf: 0,
                        range: None,
                    },
                ],
                scalar: 2,
                form,
                collide: false,
                slot: None,
            };
            let written = |first| Op::Write {
                stream,
                buf: LATEST,
                offset: 0,
                values: first,
            };
            let mut ops = match input {
                0 => vec![Op::Import {
                    stream,
                    bytes,
                    values: Some(first),
                }],
                // From the dynamic pool.
                1 => vec![
                    Op::Alloc { stream, bytes },
                    written(first),
                    Op::Prepare { stream },
                ],
                // From the persistent pool: allocated while prepared.
                _ => vec![
                    Op::Prepare { stream },
                    Op::Alloc { stream, bytes },
                    written(first),
                ],
            };
            if input == 0 {
                ops.push(Op::Prepare { stream });
            }
            let mut recorded = launch.clone();
            recorded.args[0].buf = PREVIOUS;
            ops.extend([
                Op::Launch { stream, launch },
                // Warmup allocates what the recording will.
                Op::Alloc { stream, bytes },
                Op::Drop { buf: LATEST },
                Op::Begin { stream },
                Op::Launch {
                    stream,
                    launch: recorded,
                },
                Op::Drop { buf: PREVIOUS },
                Op::Alloc { stream, bytes },
                Op::Write {
                    stream,
                    buf: LATEST,
                    offset: 0,
                    values: second,
                },
                Op::End { stream },
                Op::Replay {
                    stream,
                    graph: LATEST,
                    times: 2,
                },
                Op::Read {
                    stream,
                    buf: 0,
                    range: None,
                },
                Op::Read {
                    stream,
                    buf: LATEST,
                    range: None,
                },
            ]);
            ops
        })
}

/// A launch recorded in a window that is then aborted, and the same launch (the same
/// info words) recorded in a later window with no warmup launch of it: the second
/// window meets the info entry the aborted one cached, whose upload never ran (issue 23,
/// item 3). The kernel is loaded first by a launch with other words. Then a replay, and
/// a read of what it wrote.
fn info_reused_after_abort() -> impl Strategy<Value = Vec<Op>> {
    (stream(), launch_spec(), -3i8..=3).prop_map(|(stream, launch, other)| {
        let output = launch.args.last().map(|a| a.buf);
        let mut first = launch.clone();
        first.scalar = if other == launch.scalar {
            other.wrapping_add(4)
        } else {
            other
        };
        let mut ops = vec![
            Op::Launch {
                stream,
                launch: first,
            },
            Op::Sync { stream },
            Op::Prepare { stream },
            Op::Begin { stream },
            Op::Launch {
                stream,
                launch: launch.clone(),
            },
            Op::Abort { stream },
            Op::Prepare { stream },
            Op::Begin { stream },
            Op::Launch { stream, launch },
            Op::End { stream },
            Op::Replay {
                stream,
                graph: LATEST,
                times: 1,
            },
        ];
        if let Some(buf) = output {
            ops.push(Op::Read {
                stream,
                buf,
                range: None,
            });
        }
        ops
    })
}

/// A kernel's fault on one stream, reported by syncs of every stream; then a fresh write
/// on that stream read by a launch on another, and the launch's output read: the old
/// fault, reported already, must not fail the new wait (issue 23, item 2; the mock once
/// failed every later wait on the stream).
fn fault_reported_then_waited() -> impl Strategy<Value = Vec<Op>> {
    (
        stream(),
        stream(),
        select(vec![UserKernel::Panics, UserKernel::Resizes]),
        values(),
    )
        .prop_map(|(a, b, user, values)| {
            let whole = |buf| ArgSpec { buf, range: None };
            let mut ops = vec![Op::Launch {
                stream: a,
                launch: LaunchSpec {
                    builtin: Builtin::Copy,
                    user: Some(user),
                    args: vec![whole(0), whole(1)],
                    scalar: 0,
                    form: Form::Kernel,
                    collide: false,
                    slot: None,
                },
            }];
            ops.extend((0..6).map(|stream| Op::Sync { stream }));
            ops.extend([
                Op::Write {
                    stream: a,
                    buf: 0,
                    offset: 0,
                    values,
                },
                Op::Launch {
                    stream: b,
                    launch: LaunchSpec {
                        builtin: Builtin::Copy,
                        user: None,
                        args: vec![whole(0), whole(2)],
                        scalar: 0,
                        form: Form::Kernel,
                        collide: false,
                        slot: None,
                    },
                },
                Op::Read {
                    stream: b,
                    buf: 2,
                    range: None,
                },
            ]);
            ops
        })
}

/// A producer's launch on one stream and a consumer's on another that reads its output,
/// with the consumer's device-side wait for the producer refused (an injected
/// `WaitFor` fault): the refused launch must not run unordered; a retry waits and reads
/// what the producer wrote.
fn refused_device_wait() -> impl Strategy<Value = Vec<Op>> {
    (stream(), stream(), values(), 1u8..=2).prop_map(|(a, b, values, nth)| {
        let whole = |buf| ArgSpec { buf, range: None };
        let copy = |x, y| LaunchSpec {
            builtin: Builtin::Copy,
            user: None,
            args: vec![whole(x), whole(y)],
            scalar: 0,
            form: Form::Kernel,
            collide: false,
            slot: None,
        };
        vec![
            Op::Write {
                stream: a,
                buf: 0,
                offset: 0,
                values,
            },
            Op::Launch {
                stream: a,
                launch: copy(0, 1),
            },
            Op::Fault {
                op: FaultOp::WaitFor,
                nth,
            },
            Op::Launch {
                stream: b,
                launch: copy(1, 2),
            },
            Op::Launch {
                stream: b,
                launch: copy(1, 2),
            },
            Op::Read {
                stream: b,
                buf: 2,
                range: None,
            },
        ]
    })
}

/// `cleanup()` while a window is prepared, while it records, and after it ends: refused
/// while one is active, changing nothing (issue 23, item 4), then a replay and reads.
fn cleanup_around_a_window() -> impl Strategy<Value = Vec<Op>> {
    (stream(), launch_spec()).prop_map(|(stream, launch)| {
        let output = launch.args.last().map(|a| a.buf);
        let mut ops = vec![
            Op::Prepare { stream },
            Op::Launch {
                stream,
                launch: launch.clone(),
            },
            Op::Cleanup,
            Op::Begin { stream },
            Op::Launch { stream, launch },
            Op::Cleanup,
            Op::End { stream },
            Op::Cleanup,
            Op::Replay {
                stream,
                graph: LATEST,
                times: 1,
            },
        ];
        if let Some(buf) = output {
            ops.push(Op::Read {
                stream,
                buf,
                range: None,
            });
        }
        ops
    })
}

/// A second device on the same backend value, working (and capturing) while the first
/// records, then dropped in the middle of the first device's window (rule 25: its pages
/// wait for the window to close); the first device's graph then replays and is read.
fn second_device_dropped_in_a_window() -> impl Strategy<Value = Vec<Op>> {
    (
        stream(),
        launch_spec(),
        prop::collection::vec(second_op(), 1..=6),
        1u32..=MAX_ELEMENTS,
        values(),
    )
        .prop_map(|(stream, launch, second, elements, values)| {
            let output = launch.args.last().map(|a| a.buf);
            let mut ops = vec![Op::SecondDevice];
            for on in [stream, stream + 1] {
                ops.push(Op::OnSecond(Box::new(Op::Alloc {
                    stream: on,
                    bytes: elements * 4,
                })));
                ops.push(Op::OnSecond(Box::new(Op::Write {
                    stream: on,
                    buf: LATEST,
                    offset: 0,
                    values: values.clone(),
                })));
            }
            ops.extend([
                Op::Prepare { stream },
                Op::Launch {
                    stream,
                    launch: launch.clone(),
                },
                Op::Begin { stream },
            ]);
            ops.extend(second.into_iter().map(|op| Op::OnSecond(Box::new(op))));
            ops.push(Op::Launch { stream, launch });
            ops.push(Op::SecondDevice);
            ops.push(Op::End { stream });
            ops.push(Op::Replay {
                stream,
                graph: LATEST,
                times: 1,
            });
            if let Some(buf) = output {
                ops.push(Op::Read {
                    stream,
                    buf,
                    range: None,
                });
            }
            ops
        })
}

/// A prologue that gives a program data to work on: a buffer allocated on a random
/// stream and written whole (values wrap to fit).
fn written_buffer() -> impl Strategy<Value = [Op; 2]> {
    (
        stream(),
        1u32..=MAX_ELEMENTS,
        prop::collection::vec(-8i8..=8, MAX_ELEMENTS as usize),
    )
        .prop_map(|(stream, elements, values)| {
            [
                Op::Alloc {
                    stream,
                    bytes: elements * 4,
                },
                Op::Write {
                    stream,
                    buf: 0,
                    offset: 0,
                    values: values[..elements as usize].to_vec(),
                },
            ]
        })
}

/// The buffer, or graph, named `back` places before the latest (0: the latest).
const fn back(back: u8) -> u8 {
    LATEST - back
}

/// A step forked over branches (rules 28 and 29): a capture whose closure forks one to
/// three other streams (off the capturing stream or off a branch), launches on each and
/// on the capturing stream over the same few buffers (so some launches race, most do
/// not), and joins the branches in any order (or leaves one unjoined), some writes among
/// them; then replays and reads of those buffers, a fork and join by hand, and work on
/// the branches' streams and their neighbours after the window.
fn forked_step() -> impl Strategy<Value = Vec<Op>> {
    let arg = |buf: u8| ArgSpec { buf, range: None };
    let launch = (
        select(vec![
            Builtin::AddScalar,
            Builtin::Copy,
            Builtin::MulScalar,
            Builtin::Fill,
        ]),
        0u8..6,
        0u8..6,
        -4i8..4,
    )
        .prop_map(move |(builtin, x, y, scalar)| {
            let args = if builtin == Builtin::Fill {
                vec![arg(back(y))]
            } else {
                vec![arg(back(x)), arg(back(y))]
            };
            BodyOp::Launch(LaunchSpec {
                builtin,
                user: None,
                args,
                scalar,
                form: Form::Kernel,
                collide: false,
                slot: None,
            })
        });
    let body = prop_oneof![
        6 => launch,
        3 => stream().prop_map(|stream| BodyOp::Fork { stream }),
        3 => (0u8..3).prop_map(|to| BodyOp::Switch { to }),
        3 => (0u8..3).prop_map(|token| BodyOp::Join { token: back(token) }),
        1 => (0u8..6, values()).prop_map(|(b, values)| BodyOp::Write { buf: back(b), offset: 0, values }),
    ];
    let after = prop_oneof![
        3 => (1u8..=2).prop_map(|times| Op::Replay { stream: 0, graph: LATEST, times }),
        3 => (0u8..6).prop_map(|b| Op::Read { stream: 0, buf: back(b), range: None }),
        2 => (stream(), 0u8..6).prop_map(|(stream, b)| Op::Read { stream, buf: back(b), range: None }),
        2 => (stream(), any_launch()).prop_map(|(stream, launch)| Op::Launch { stream, launch }),
        1 => (stream(), stream()).prop_map(|(parent, branch)| Op::Fork { parent, branch }),
        1 => (0u8..3).prop_map(|token| Op::Join { token: back(token) }),
    ];
    (
        stream(),
        prop::collection::vec((1u32..=MAX_ELEMENTS, values()), 3..=5),
        prop::collection::vec(body, 3..=10),
        any::<bool>(),
        prop::collection::vec(after, 2..=8),
    )
        .prop_map(|(stream, buffers, mut body, join_all, after)| {
            let mut ops = Vec::new();
            for (elements, values) in buffers {
                ops.push(Op::Alloc {
                    stream,
                    bytes: elements * 4,
                });
                ops.push(Op::Write {
                    stream,
                    buf: LATEST,
                    offset: 0,
                    values,
                });
            }
            if join_all {
                // Most steps join what they forked, in the order the branches end.
                body.extend((0..3).map(|_| BodyOp::Join { token: LATEST }));
            }
            ops.push(Op::Capture {
                stream,
                body,
                stop: false,
                pool: None,
            });
            ops.extend(after);
            ops
        })
}

/// A forked step whose launches name buffer slots (a whole buffer, or half of one) on
/// both lanes, then rebinds of those slots onto the other lane's buffers and halves
/// (rule 27: rule 29 on the sealed graph) and onto its own, between replays and reads.
/// The capturing stream forks the next stream (another pooled stream when there are
/// two), the branch works over buffers 0 and 1 and the origin over 2 and 3 (so the
/// recording seldom races), both join, and the origin reads a branch's output; the
/// buffers share one size, so most rebinds fit their slot and many land on bytes the
/// other lane uses: its outputs, its inputs, a sub-range of them.
fn forked_rebinds() -> impl Strategy<Value = Vec<Op>> {
    let arg = |buf: u8, half: Option<u8>| ArgSpec {
        buf: back(buf),
        range: half.map(|h| (h, 4)),
    };
    // A launch over two of the four buffers (`base`, `base + 1`), its first buffer a
    // slot now and then.
    let launch = move |base: u8| {
        let arg = arg;
        (
            select(vec![
                Builtin::AddScalar,
                Builtin::Copy,
                Builtin::Fill,
                Builtin::Axpy,
            ]),
            any::<bool>(),
            prop::option::of(0u8..2),
            -4i8..4,
            prop::option::weighted(0.7, 0u8..2),
        )
            .prop_map(move |(builtin, flip, half, scalar, slot)| {
                let (x, y) = if flip {
                    (base + 1, base)
                } else {
                    (base, base + 1)
                };
                let args = if builtin == Builtin::Fill {
                    vec![arg(3 - y, half)]
                } else {
                    vec![arg(3 - x, half), arg(3 - y, half)]
                };
                BodyOp::Launch(LaunchSpec {
                    builtin,
                    user: None,
                    args,
                    scalar,
                    form: Form::Kernel,
                    collide: false,
                    slot: slot.map(|n| n + 2 * (base / 2)),
                })
            })
    };
    // Each slotted launch names its buffer slot, then its grid slot: even indices are
    // buffer slots.
    let rebind =
        (0u8..4, 0u8..4, prop::option::of(0u8..2)).prop_map(move |(slot, b, half)| Op::Update {
            graph: LATEST,
            slot: 2 * slot,
            change: UpdateSpec::Rebind { arg: arg(b, half) },
        });
    let after = prop_oneof![
        6 => rebind,
        2 => (1u8..=2).prop_map(|times| Op::Replay { stream: 0, graph: LATEST, times }),
        2 => (0u8..4).prop_map(|b| Op::Read { stream: 0, buf: back(b), range: None }),
    ];
    (
        stream(),
        select(vec![8u32, 12]),
        prop::collection::vec(values(), 4),
        prop::collection::vec(launch(0), 1..=2),
        prop::collection::vec(launch(2), 1..=2),
        prop::collection::vec(after, 4..=14),
    )
        .prop_map(move |(stream, elements, values, branch, origin, after)| {
            let mut ops = Vec::new();
            for values in values {
                ops.push(Op::Alloc {
                    stream,
                    bytes: elements * 4,
                });
                ops.push(Op::Write {
                    stream,
                    buf: LATEST,
                    offset: 0,
                    values,
                });
            }
            // Buffers are named back from the latest: 3 is the first, 0 the last.
            let mut body = vec![
                BodyOp::Fork { stream: stream + 1 },
                BodyOp::Switch { to: 0 },
            ];
            body.extend(branch);
            // Past the tokens: the capturing stream itself.
            body.push(BodyOp::Switch { to: 31 });
            body.extend(origin);
            body.push(BodyOp::Join { token: LATEST });
            body.push(BodyOp::Launch(LaunchSpec {
                builtin: Builtin::AddScalar,
                user: None,
                args: vec![arg(2, None), arg(0, None)],
                scalar: 1,
                form: Form::Kernel,
                collide: false,
                slot: None,
            }));
            ops.push(Op::Capture {
                stream,
                body,
                stop: false,
                pool: None,
            });
            ops.extend(after.into_iter().map(|op| match op {
                Op::Replay { graph, times, .. } => Op::Replay {
                    stream,
                    graph,
                    times,
                },
                Op::Read { buf, range, .. } => Op::Read { stream, buf, range },
                other => other,
            }));
            ops
        })
}

/// A decode loop (rule 30): `ones` (all 1.0), `x` (its first element `start`) and a
/// 4-byte `flag` on one stream; a step that counts (`x += ones`, its first buffer a
/// slot now and then), sets the flag once `x[0] >= t`, and now and then faults; then
/// loop replays (flags set at the first iteration, later, or never within `max`), reads
/// of `x`, the flag and the counter on any stream (racing the loop), plain replays,
/// writes that start `x` again, slot updates between loops, drops and syncs.
fn stop_loop() -> impl Strategy<Value = Vec<Op>> {
    let after = prop_oneof![
        6 => (0u8..=8, stream()).prop_map(|(max, reader)| Op::ReplayUntil { stream: 0, graph: LATEST, max, reader }),
        3 => (stream(), 0u8..3).prop_map(|(stream, b)| Op::Read { stream, buf: LATEST - b, range: None }),
        1 => (1u8..=2).prop_map(|times| Op::Replay { stream: 0, graph: LATEST, times }),
        2 => (-6i8..=4).prop_map(|v| Op::Write { stream: 0, buf: LATEST - 1, offset: 0, values: vec![v] }),
        2 => update().prop_map(|op| match op {
            Op::Update { slot, change, .. } => Op::Update { graph: LATEST, slot, change },
            other => other,
        }),
        1 => stream().prop_map(|stream| Op::Sync { stream }),
        1 => (0u8..3).prop_map(|b| Op::Drop { buf: LATEST - b }),
        1 => any::<bool>().prop_map(|handle| Op::DropGraph { graph: LATEST, handle }),
        1 => fault(),
        1 => (stream(), stream()).prop_map(|(faulting, waiting)| Op::FaultMetByWait { faulting, waiting }),
        // x written by a kernel that faults: a later loop reads it first (rule 14).
        1 => Just(Op::Launch {
            stream: 0,
            launch: LaunchSpec {
                builtin: Builtin::Copy,
                user: Some(UserKernel::Panics),
                args: vec![ArgSpec { buf: LATEST - 2, range: None }, ArgSpec { buf: LATEST - 1, range: None }],
                scalar: 0,
                form: Form::Kernel,
                collide: false,
                slot: None,
            },
        }),
    ];
    (
        stream(),
        0u8..2,
        any::<bool>(),
        1u32..=4,
        -4i8..=4,
        -2i8..=8,
        prop::option::weighted(0.3, Just(0u8)),
        prop::bool::weighted(0.15),
        (0u8..6, any::<bool>()),
        prop::collection::vec(after, 3..=12),
    )
        .prop_map(
            |(stream, x_on, settle, elements, start, t, slot, faults, (extra, stop), after)| {
                let bytes = elements * 4;
                // x is the capturing stream's, or the next stream's (another pooled stream
                // when there are two): its reads there must wait for the loop (rule 18).
                let arg = |buf| ArgSpec { buf, range: None };
                let mut ops = vec![
                    Op::Alloc { stream, bytes },
                    Op::Write {
                        stream,
                        buf: LATEST,
                        offset: 0,
                        values: vec![1; elements as usize],
                    },
                    Op::Alloc {
                        stream: stream + x_on,
                        bytes,
                    },
                    Op::Write {
                        stream: stream + x_on,
                        buf: LATEST,
                        offset: 0,
                        values: vec![start],
                    },
                    Op::Alloc { stream, bytes: 4 },
                ];
                let launch = |builtin, user, args, scalar, slot| {
                    BodyOp::Launch(LaunchSpec {
                        builtin,
                        user,
                        args,
                        scalar,
                        form: Form::Kernel,
                        collide: false,
                        slot,
                    })
                };
                // Inside the closure: LATEST is the flag, LATEST - 1 is x, LATEST - 2 ones.
                let mut body = vec![
                    launch(
                        Builtin::Axpy,
                        None,
                        vec![arg(LATEST - 2), arg(LATEST - 1)],
                        1,
                        slot,
                    ),
                    launch(
                        Builtin::Copy,
                        Some(UserKernel::StopAt),
                        vec![arg(LATEST - 1), arg(LATEST)],
                        t,
                        None,
                    ),
                ];
                if faults {
                    body.push(launch(
                        Builtin::Copy,
                        Some(UserKernel::Panics),
                        vec![arg(LATEST - 2), arg(LATEST - 1)],
                        0,
                        None,
                    ));
                }
                // Now and then a copy or the user's own work in the step, before or
                // after the flag: where the device cannot loop them, one of the two is
                // refused when recorded (rule 30), and the closure stops there or goes on.
                let write = BodyOp::Write {
                    buf: LATEST - 1,
                    offset: 0,
                    values: vec![start],
                };
                let work = BodyOp::Launch(LaunchSpec {
                    builtin: Builtin::AddScalar,
                    user: None,
                    args: vec![arg(LATEST - 2), arg(LATEST - 2)],
                    scalar: 0,
                    form: Form::Work,
                    collide: false,
                    slot: None,
                });
                match extra {
                    0 => body.insert(0, write),
                    1 => body.push(write),
                    2 => body.insert(0, work),
                    3 => body.push(work),
                    _ => {}
                }
                ops.push(Op::Capture {
                    stream,
                    body,
                    stop: stop || extra > 3,
                    pool: None,
                });
                if settle {
                    // Warmup's uses settled: only the loop's own stamp orders what follows.
                    ops.push(Op::Sync { stream });
                    ops.push(Op::Sync { stream: stream + 1 });
                }
                ops.extend(
                    after
                        .into_iter()
                        .flat_map(|op| match op {
                            // The fault reported before what follows: a loop then meets x claimed.
                            Op::Launch { launch, .. } => {
                                vec![Op::Launch { stream, launch }, Op::Sync { stream }]
                            }
                            op => vec![op],
                        })
                        .map(|op| match op {
                            Op::ReplayUntil {
                                graph, max, reader, ..
                            } => Op::ReplayUntil {
                                stream,
                                graph,
                                max,
                                reader,
                            },
                            Op::Replay { graph, times, .. } => Op::Replay {
                                stream,
                                graph,
                                times,
                            },
                            Op::Write {
                                buf,
                                offset,
                                values,
                                ..
                            } => Op::Write {
                                stream,
                                buf,
                                offset,
                                values,
                            },
                            other => other,
                        }),
                );
                ops
            },
        )
}

/// A batch-size ladder in one graph pool (rule 23): two to four members captured on one
/// stream, each allocating an intermediate inside its closure (kept by the user, or the
/// graph's alone) between two launches, or carrying state of its own from one replay to
/// the next (`y += a * x` into a buffer allocated in warmup), in sizes up and down, some
/// replayed as soon as captured; then
/// replays of every member up the ladder and back down, each followed by reads of every
/// member's intermediate and output, then random replays, reads, writes, drops and
/// cleanups.
fn pool_ladder() -> impl Strategy<Value = Vec<Op>> {
    let member = (
        1u32..=MAX_ELEMENTS,
        any::<bool>(),
        0u8..3,
        select(vec![Builtin::AddScalar, Builtin::Copy, Builtin::MulScalar]),
        values(),
        any::<bool>(),
    );
    let after = prop_oneof![
        4 => (0u8..4, 1u8..=2).prop_map(|(g, times)| Op::Replay { stream: 0, graph: back(g), times }),
        3 => (0u8..6).prop_map(|b| Op::Read { stream: 0, buf: back(b), range: None }),
        1 => (0u8..4, any::<bool>()).prop_map(|(g, handle)| Op::DropGraph { graph: back(g), handle }),
        1 => Just(Op::Cleanup),
        1 => (0u8..6, values()).prop_map(|(b, values)| Op::Write { stream: 0, buf: back(b), offset: 0, values }),
    ];
    (
        stream(),
        0u8..2,
        prop::collection::vec(member, 2..=4),
        prop::collection::vec(after, 2..=10),
    )
        .prop_map(|(stream, pool, members, after)| {
            let arg = |buf| ArgSpec { buf, range: None };
            let launch = |builtin, x, y| {
                BodyOp::Launch(LaunchSpec {
                    builtin,
                    user: None,
                    args: vec![arg(x), arg(y)],
                    scalar: 2,
                    form: Form::Kernel,
                    collide: false,
                    slot: None,
                })
            };
            let mut ops = Vec::new();
            let n = members.len() as u8;
            for (elements, keep, shape, builtin, first, now) in members {
                let bytes = elements * 4;
                // Its input and output: buffers of the user's, written whole.
                ops.push(Op::Alloc { stream, bytes });
                ops.push(Op::Write {
                    stream,
                    buf: LATEST,
                    offset: 0,
                    values: first
                        .iter()
                        .copied()
                        .cycle()
                        .take(elements as usize)
                        .collect(),
                });
                ops.push(Op::Alloc { stream, bytes });
                // Inside the closure: LATEST is what it allocated, back(1) the output,
                // back(2) the input.
                let body = match shape {
                    0 | 1 => vec![
                        BodyOp::Alloc { bytes, keep },
                        launch(builtin, back(2), LATEST),
                        launch(builtin, LATEST, back(1)),
                    ],
                    _ => vec![
                        BodyOp::State {
                            bytes,
                            values: first.clone(),
                        },
                        launch(Builtin::Axpy, back(2), LATEST),
                        launch(Builtin::Copy, LATEST, back(1)),
                    ],
                };
                ops.push(Op::Capture {
                    stream,
                    body,
                    stop: true,
                    pool: Some(pool),
                });
                if ops.len() > 5 {
                    // The member before: what it kept, and its output.
                    ops.push(Op::Read {
                        stream,
                        buf: back(3),
                        range: None,
                    });
                    ops.push(Op::Read {
                        stream,
                        buf: back(4),
                        range: None,
                    });
                }
                if now {
                    // Replayed at once: what it keeps holds values before the next
                    // member's capture places its own allocations.
                    ops.push(Op::Replay {
                        stream,
                        graph: LATEST,
                        times: 1,
                    });
                }
            }
            let reads = |ops: &mut Vec<Op>| {
                for b in 0..2 * n {
                    // Member i's intermediate is 3 (n - 1 - i) names back, its output
                    // the one before.
                    ops.push(Op::Read {
                        stream,
                        buf: back(3 * (b / 2) + b % 2),
                        range: None,
                    });
                }
            };
            for g in (0..n).rev() {
                ops.push(Op::Replay {
                    stream,
                    graph: back(g),
                    times: 1,
                });
            }
            reads(&mut ops);
            for g in 0..n {
                ops.push(Op::Replay {
                    stream,
                    graph: back(g),
                    times: 1,
                });
            }
            reads(&mut ops);
            ops.extend(after.into_iter().map(|op| match op {
                Op::Replay { graph, times, .. } => Op::Replay {
                    stream,
                    graph,
                    times,
                },
                Op::Read { buf, range, .. } => Op::Read { stream, buf, range },
                Op::Write {
                    buf,
                    offset,
                    values,
                    ..
                } => Op::Write {
                    stream,
                    buf,
                    offset,
                    values,
                },
                other => other,
            }));
            ops
        })
}

/// A program of up to [`MAX_OPS`] ops over 2 to 6 logical streams on 1 to 4 pooled
/// streams: a prologue of up to 4 buffers allocated and written whole, then random ops
/// and motifs, some on a second device of the same backend value.
pub fn program() -> impl Strategy<Value = Program> {
    (
        1usize..=4,
        2u8..=6,
        prop::collection::vec(written_buffer(), 0..=4),
        prop::collection::vec(
            prop_oneof![
                28 => op().prop_map(|op| vec![op]),
                2 => use_then_drop(),
                2 => foreign_dropped_in_window(),
                2 => input_dropped_in_window(),
                3 => pool_ladder(),
                3 => updated_graph(),
                4 => forked_step(),
                5 => forked_rebinds(),
                4 => stop_loop(),
                1 => info_reused_after_abort(),
                1 => cleanup_around_a_window(),
                1 => fault_reported_then_waited(),
                1 => refused_device_wait(),
                2 => kernels_after_work(),
                1 => imported_twice(),
                1 => sizes_past_sixteen_bits(),
                1 => second_device_dropped_in_a_window(),
                1 => Just(vec![Op::SecondDevice]),
                3 => second_op().prop_map(|op| vec![Op::OnSecond(Box::new(op))]),
            ],
            1..=MAX_OPS - 14,
        ),
        any::<bool>(),
    )
        .prop_map(|(pooled, streams, prologue, rest, settle)| {
            let mut ops = Vec::with_capacity(prologue.len() * 2 + rest.len());
            for (name, [alloc, write]) in prologue.into_iter().enumerate() {
                ops.push(alloc);
                ops.push(match write {
                    Op::Write {
                        stream,
                        offset,
                        values,
                        ..
                    } => Op::Write {
                        stream,
                        buf: name as u8,
                        offset,
                        values,
                    },
                    other => other,
                });
            }
            // Half the programs settle the prologue's writes first, so work queued later
            // over those buffers (and a drop under it) meets memory that already holds
            // its data: a free under queued work then shows as poisoned bytes (rule 19).
            if settle {
                ops.extend((0..6).map(|stream| Op::Sync { stream }));
            }
            ops.extend(rest.into_iter().flatten().take(MAX_OPS - 14));
            Program {
                pooled,
                streams,
                ops,
            }
        })
}

impl fmt::Display for Program {
    /// One op a line, numbered as violations name them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} pooled stream(s), {} logical streams:",
            self.pooled, self.streams
        )?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  {i:>2}: {op:?}")?;
        }
        Ok(())
    }
}
