//! The reference model: plain Rust, per byte of every buffer ever allocated, what a read
//! may return; per pooled stream, the capture window the user opened and what it
//! recorded; per graph, the recorded ops a replay applies in order.
//!
//! A byte is [`Byte::Val`] (a read returns exactly it), [`Byte::Unwritten`] (never
//! written, or its writer definitely failed: a read must fail with
//! `ServerError::Unwritten`), [`Byte::Either`] (an injected fault may or may not have
//! claimed it: a read returns exactly it or fails with `Unwritten`, nothing else), or
//! [`Byte::Any`] (a kernel declared it written but did not write it: the rules promise
//! nothing of its value).

use capture_core::{Access, Builtin};
use std::collections::BTreeSet;

use super::forks::Forks;
use super::program::UserKernel;
use super::span::Span;

/// What a read of one byte may return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Byte {
    /// Exactly this value.
    Val(u8),
    /// A refusal with `ServerError::Unwritten`, and nothing else.
    Unwritten,
    /// This value, or a refusal with `ServerError::Unwritten`.
    Either(u8),
    /// Any value, or a refusal with `ServerError::Unwritten`: a kernel declared the byte
    /// written and did not write it (the declaration is the user's; the device keeps
    /// whatever the memory held), or it was computed from such a byte.
    Any,
}

impl Byte {
    pub(crate) fn value(self) -> Option<u8> {
        match self {
            Byte::Val(v) | Byte::Either(v) => Some(v),
            Byte::Unwritten | Byte::Any => None,
        }
    }

    fn widened(self) -> Byte {
        match self {
            Byte::Val(v) => Byte::Either(v),
            other => other,
        }
    }

    /// What a byte holds once a kernel that declared it written left it alone: its
    /// value when the model knows it for certain, else nothing known.
    fn untouched(self) -> Byte {
        match self {
            Byte::Val(v) => Byte::Val(v),
            _ => Byte::Any,
        }
    }

    /// What a byte holds once a launch that declared it written faulted before writing
    /// it: the launch's claim is settled at enqueue and the fault claims it again when it
    /// is reported, so a read fails; until then a later launch may read the memory, which
    /// still holds the old value.
    fn faulted(self) -> Byte {
        match self {
            Byte::Val(v) | Byte::Either(v) => Byte::Either(v),
            Byte::Unwritten | Byte::Any => Byte::Any,
        }
    }
}

/// One buffer: its bytes' states, kept after the user drops the handle (a graph may
/// still read or write it).
#[derive(Clone, Debug)]
pub(crate) struct ModelBuffer {
    pub(crate) size: usize,
    pub(crate) pooled: usize,
    pub(crate) bytes: Vec<Byte>,
}

/// A launch with its buffers resolved to spans.
#[derive(Clone, Debug)]
pub(crate) struct ResolvedLaunch {
    pub(crate) builtin: Builtin,
    /// A user kernel instead of the builtin.
    pub(crate) user: Option<UserKernel>,
    pub(crate) args: Vec<(Span, Access)>,
    pub(crate) info: [u64; 2],
}

impl ResolvedLaunch {
    pub(crate) fn inputs(&self) -> impl Iterator<Item = Span> + '_ {
        self.args.iter().filter(|(_, a)| a.reads()).map(|(s, _)| *s)
    }

    pub(crate) fn outputs(&self) -> impl Iterator<Item = Span> + '_ {
        self.args
            .iter()
            .filter(|(_, a)| a.writes())
            .map(|(s, _)| *s)
    }
}

/// An op a window recorded, which a replay applies.
#[derive(Clone, Debug)]
pub(crate) enum Rec {
    Launch(ResolvedLaunch),
    Write { dst: Span, bytes: Vec<u8> },
}

impl Rec {
    fn inputs(&self) -> Vec<Span> {
        match self {
            Rec::Launch(l) => l.inputs().collect(),
            Rec::Write { .. } => Vec::new(),
        }
    }

    fn outputs(&self) -> Vec<Span> {
        match self {
            Rec::Launch(l) => l.outputs().collect(),
            Rec::Write { dst, .. } => vec![*dst],
        }
    }
}

/// What a graph slot is, in the model (rule 26).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotKind {
    /// An `f32` scalar.
    Scalar,
    /// A buffer range of `len` bytes, with the access its launches merge to.
    Buffer { len: usize, access: Access },
    /// A grid bounded by `GRID_MAX`.
    Grid,
}

/// A slot's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotVal {
    Scalar(u32),
    Buffer(Span),
    Grid([u32; 3]),
}

/// One slot a window recorded or a graph has: its name, kind and value, and its uses
/// (the recorded op's index, and for a buffer the argument's).
#[derive(Clone, Debug)]
pub(crate) struct ModelSlot {
    pub(crate) name: String,
    pub(crate) kind: SlotKind,
    pub(crate) value: SlotVal,
    pub(crate) uses: Vec<(usize, Option<usize>)>,
}

/// A slot one launch names: as [`ModelSlot`], with the argument it is.
#[derive(Clone, Debug)]
pub(crate) struct SlotUse {
    pub(crate) name: String,
    pub(crate) kind: SlotKind,
    pub(crate) value: SlotVal,
    pub(crate) arg: Option<usize>,
}

/// Whether `using` conflicts with the slots recorded so far: another kind, another
/// length, or another value under one name (a slot has one value in a window).
pub(crate) fn slot_conflicts(slots: &[ModelSlot], using: &[SlotUse]) -> bool {
    using.iter().any(|u| {
        slots.iter().any(|s| {
            s.name == u.name
                && (s.value != u.value
                    || match (s.kind, u.kind) {
                        (SlotKind::Buffer { len: a, .. }, SlotKind::Buffer { len: b, .. }) => {
                            a != b
                        }
                        (a, b) => std::mem::discriminant(&a) != std::mem::discriminant(&b),
                    })
        })
    })
}

/// Records `using` for recorded op `rec` (checked with [`slot_conflicts`] first).
pub(crate) fn add_slots(slots: &mut Vec<ModelSlot>, rec: usize, using: Vec<SlotUse>) {
    for u in using {
        match slots.iter_mut().find(|s| s.name == u.name) {
            Some(s) => {
                if let (SlotKind::Buffer { access, .. }, SlotKind::Buffer { access: more, .. }) =
                    (&mut s.kind, u.kind)
                {
                    *access = access.merge(more);
                }
                s.uses.push((rec, u.arg));
            }
            None => slots.push(ModelSlot {
                name: u.name,
                kind: u.kind,
                value: u.value,
                uses: vec![(rec, u.arg)],
            }),
        }
    }
}

/// The window a logical stream opened on a pooled stream.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    pub(crate) owner: u8,
    pub(crate) recording: bool,
    pub(crate) recs: Vec<Rec>,
    /// An op of the owner failed inside the window in a way the rules say dooms it.
    pub(crate) must_doom: bool,
    /// Something happened that may doom it (an injected fault, a refusal the rules
    /// leave open).
    pub(crate) may_doom: bool,
    /// The slots its recorded launches named (rule 26).
    pub(crate) slots: Vec<ModelSlot>,
    /// Its branches (rules 28 and 29).
    pub(crate) forks: Forks,
    /// The stop flag its recorded launches named (rule 30).
    pub(crate) flag: Option<Span>,
    /// Whether it recorded a copy or work the device cannot put in a loop body: a
    /// stop flag named later is refused (rule 30).
    pub(crate) blocker: bool,
}

impl Window {
    pub(crate) fn prepared(owner: u8) -> Self {
        Self {
            owner,
            recording: false,
            recs: Vec::new(),
            must_doom: false,
            may_doom: false,
            slots: Vec::new(),
            forks: Forks::new(owner),
            flag: None,
            blocker: false,
        }
    }

    pub(crate) fn written(&self) -> Vec<Span> {
        self.recs.iter().flat_map(Rec::outputs).collect()
    }
}

/// A sealed graph: where it replays and what.
#[derive(Clone, Debug)]
pub(crate) struct ModelGraph {
    pub(crate) owner: u8,
    pub(crate) pooled: usize,
    pub(crate) recs: Vec<Rec>,
    /// The graph pool it was captured into, and the buffers its capture allocated or
    /// used (rule 23: its replays take the pool's other buffers' bytes, never these).
    pub(crate) pool: Option<(u8, BTreeSet<usize>)>,
    /// Its slots, with their values now (rule 26).
    pub(crate) slots: Vec<ModelSlot>,
    /// The order its window's lanes put its recorded ops in (rules 28 and 29).
    pub(crate) order: Forks,
    /// Its stop flag, when its capture named one (rule 30).
    pub(crate) flag: Option<Span>,
    /// The model's buffer for its iteration counter, once a loop replay made it.
    pub(crate) counter: Option<usize>,
}

impl ModelGraph {
    pub(crate) fn written(&self) -> Vec<Span> {
        self.recs.iter().flat_map(Rec::outputs).collect()
    }

    /// Whether rebinding slot `slot` to `to` would make two recorded ops the lanes do
    /// not order use common bytes, one of them writing (rule 29 on the sealed graph).
    pub(crate) fn rebind_races(&self, slot: usize, to: Span) -> bool {
        let mut recs = self.recs.clone();
        let mut moved = Vec::new();
        for &(rec, arg) in &self.slots[slot].uses {
            if let (Rec::Launch(l), Some(a)) = (&mut recs[rec], arg) {
                l.args[a].0 = to;
                moved.push(rec);
            }
        }
        let uses = |r: &Rec| -> Vec<(Span, bool)> {
            match r {
                Rec::Launch(l) => l.args.iter().map(|(s, a)| (*s, a.writes())).collect(),
                Rec::Write { dst, .. } => vec![(*dst, true)],
            }
        };
        moved.iter().any(|&a| {
            (0..recs.len()).any(|b| {
                b != a
                    && !self.order.ordered(a, b)
                    && uses(&recs[a]).iter().any(|(x, xw)| {
                        uses(&recs[b])
                            .iter()
                            .any(|(y, yw)| (*xw || *yw) && x.overlaps(y))
                    })
            })
        })
    }
}

/// What the inputs of a launch or replay hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InputState {
    /// Some input byte is certainly unwritten.
    pub(crate) unwritten: bool,
    /// Every input byte is certainly written.
    pub(crate) all_val: bool,
}

/// The whole device as the rules say a user sees it.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) bufs: Vec<ModelBuffer>,
    pub(crate) windows: Vec<Option<Window>>,
    /// Per pooled stream: the owner of a window another stream abandoned, whose `end`
    /// hears of it.
    pub(crate) abandoned: Vec<Option<u8>>,
    /// Per pooled stream: what it wrote since its last good read or sync (rule 15's
    /// "since its last good fence", taken wide).
    pub(crate) since: Vec<Vec<Span>>,
}

impl Model {
    pub(crate) fn new(pooled: usize) -> Self {
        Self {
            bufs: Vec::new(),
            windows: vec![None; pooled],
            abandoned: vec![None; pooled],
            since: vec![Vec::new(); pooled],
        }
    }

    /// A fresh allocation: every byte unwritten.
    pub(crate) fn alloc(&mut self, size: usize, pooled: usize) -> usize {
        self.bufs.push(ModelBuffer {
            size,
            pooled,
            bytes: vec![Byte::Unwritten; size],
        });
        self.bufs.len() - 1
    }

    pub(crate) fn bytes(&self, span: Span) -> &[Byte] {
        &self.bufs[span.buf].bytes[span.start..span.end]
    }

    pub(crate) fn set(&mut self, span: Span, values: &[u8]) {
        let bytes = &mut self.bufs[span.buf].bytes[span.start..span.end];
        for (b, v) in bytes.iter_mut().zip(values) {
            *b = Byte::Val(*v);
        }
    }

    /// Nothing known of `span` any more: a loop the model cannot follow wrote it.
    pub(crate) fn forget(&mut self, span: Span) {
        self.bufs[span.buf].bytes[span.start..span.end].fill(Byte::Any);
    }

    pub(crate) fn unwrite(&mut self, span: Span) {
        self.bufs[span.buf].bytes[span.start..span.end].fill(Byte::Unwritten);
    }

    pub(crate) fn widen(&mut self, span: Span) {
        for b in &mut self.bufs[span.buf].bytes[span.start..span.end] {
            *b = b.widened();
        }
    }

    /// A read that returned `Ok` settles what it read: those bytes were not claimed, and
    /// only a later fault (which widens again) can claim them.
    pub(crate) fn settle(&mut self, span: Span) {
        for b in &mut self.bufs[span.buf].bytes[span.start..span.end] {
            if let Byte::Either(v) = *b {
                *b = Byte::Val(v);
            }
        }
    }

    /// Every byte any pooled stream wrote since its last good fence may now be claimed.
    pub(crate) fn widen_since(&mut self) {
        let spans: Vec<Span> = self.since.iter().flatten().copied().collect();
        for span in spans {
            self.widen(span);
        }
    }

    /// What `spans` hold, leaving out bytes `skip` covers.
    pub(crate) fn inputs(&self, spans: &[Span], skip: &[Span]) -> InputState {
        let mut state = InputState {
            unwritten: false,
            all_val: true,
        };
        for span in spans {
            for at in span.start..span.end {
                if skip.iter().any(|s| s.contains(span.buf, at)) {
                    continue;
                }
                match self.bufs[span.buf].bytes[at] {
                    Byte::Val(_) => {}
                    Byte::Unwritten => {
                        state.unwritten = true;
                        state.all_val = false;
                    }
                    Byte::Either(_) | Byte::Any => state.all_val = false,
                }
            }
        }
        state
    }

    fn floats(&self, span: Span) -> Vec<f32> {
        self.bytes(span)
            .chunks_exact(4)
            .map(|c| {
                let mut b = [0u8; 4];
                for (o, i) in b.iter_mut().zip(c) {
                    *o = i.value().unwrap_or(0);
                }
                f32::from_le_bytes(b)
            })
            .collect()
    }

    /// Whether any byte of `span` holds [`Byte::Any`].
    fn any_unknown(&self, span: Span) -> bool {
        self.bytes(span).contains(&Byte::Any)
    }

    /// Applies a launch that was enqueued: its outputs hold what the kernel's host model
    /// says (a builtin's, or a user kernel's: half written, or faulted). An output
    /// computed from a byte the model does not know is not known either. Returns whether
    /// the launch's work faults when it runs.
    pub(crate) fn run_launch(&mut self, launch: &ResolvedLaunch) -> bool {
        match launch.user {
            Some(kernel) if kernel.faults() => {
                for span in launch.outputs().collect::<Vec<_>>() {
                    for b in &mut self.bufs[span.buf].bytes[span.start..span.end] {
                        *b = b.faulted();
                    }
                }
                return true;
            }
            Some(UserKernel::StopAt) => {
                // flag = 1 when x[0] >= t, t the second info word's f32, else left as
                // it was (rule 30's flag, set on the end token only).
                let (x, y) = (launch.args[0].0, launch.args[1].0);
                let first = Span {
                    end: x.start + 4,
                    ..x
                };
                let flag = Span {
                    end: y.start + 4,
                    ..y
                };
                // Past its first word, an output it declared and never writes.
                for b in &mut self.bufs[y.buf].bytes[flag.end..y.end] {
                    *b = b.untouched();
                }
                if self.any_unknown(first) {
                    self.bufs[flag.buf].bytes[flag.start..flag.end].fill(Byte::Any);
                } else if self.floats(first)[0] >= f32::from_bits(launch.info[1] as u32) {
                    self.set(flag, &1u32.to_le_bytes());
                } else {
                    for b in &mut self.bufs[flag.buf].bytes[flag.start..flag.end] {
                        *b = b.untouched();
                    }
                }
                return false;
            }
            Some(UserKernel::Partial) => {
                // y[i] = x[i] for the first half of y's elements; the rest is untouched.
                let (x, y) = (launch.args[0].0, launch.args[1].0);
                let half = (y.end - y.start) / 4 / 2 * 4;
                let copied: Vec<Byte> = self
                    .bytes(Span {
                        end: x.start + half,
                        ..x
                    })
                    .to_vec();
                let out = &mut self.bufs[y.buf].bytes[y.start..y.end];
                for (o, c) in out.iter_mut().zip(&copied) {
                    *o = *c;
                }
                for o in &mut out[half..] {
                    *o = o.untouched();
                }
                return false;
            }
            _ => {}
        }
        let unknown = launch.inputs().any(|s| self.any_unknown(s));
        let mut values: Vec<Vec<f32>> = launch.args.iter().map(|(s, _)| self.floats(*s)).collect();
        if launch.user == Some(UserKernel::Affine) {
            // y[i] = a * x[i] + b; a and b ride in the info words as f32 bits.
            let a = f32::from_bits(launch.info[0] as u32);
            let b = f32::from_bits(launch.info[1] as u32);
            let (x, y) = values.split_at_mut(1);
            for (o, i) in y[0].iter_mut().zip(&x[0]) {
                *o = a * i + b;
            }
        } else {
            launch.builtin.model(&mut values, &launch.info);
        }
        for ((span, access), v) in launch.args.iter().zip(values) {
            if access.writes() {
                if unknown {
                    self.bufs[span.buf].bytes[span.start..span.end].fill(Byte::Any);
                } else {
                    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                    self.set(*span, &bytes);
                }
            }
        }
        false
    }

    /// What a replay of `recs` reads before anything in it wrote it (rule 14's check,
    /// per byte).
    pub(crate) fn replay_inputs(&self, recs: &[Rec]) -> InputState {
        let mut written: Vec<Span> = Vec::new();
        let mut state = InputState {
            unwritten: false,
            all_val: true,
        };
        for rec in recs {
            let s = self.inputs(&rec.inputs(), &written);
            state.unwritten |= s.unwritten;
            state.all_val &= s.all_val;
            written.extend(rec.outputs());
        }
        state
    }

    /// Applies `recs` `times` times, in order; whether any of their work faults.
    pub(crate) fn run_recs(&mut self, recs: &[Rec], times: u32) -> bool {
        let mut faults = false;
        for _ in 0..times {
            for rec in recs {
                match rec {
                    Rec::Launch(l) => faults |= self.run_launch(l),
                    Rec::Write { dst, bytes } => self.set(*dst, bytes),
                }
            }
        }
        faults
    }

    /// Whether two launch arguments alias in a way a GPU would race on (overlapping but
    /// not identical ranges of one buffer, one of them written).
    pub(crate) fn races(args: &[(Span, Access)]) -> bool {
        args.iter().enumerate().any(|(i, (a, x))| {
            args[i + 1..]
                .iter()
                .any(|(b, y)| a.overlaps(b) && a != b && (x.writes() || y.writes()))
        })
    }
}
