//! Graph slots (rules 26 and 27): the parameters a capture exposes by name, so a sealed
//! graph can change without a new capture, and nothing else can. A launch inside a
//! window marks a scalar or buffer argument as a slot ([`Arg::slot`](crate::Arg::slot))
//! or its grid as one, bounded by a maximum ([`Dims::slot`](crate::Dims::slot),
//! [`Dims::up_to`](crate::Dims::up_to)); the graph lists its slots ([`SlotInfo`]), and
//! each update is checked against what was recorded, refused with a [`SlotRefused`]
//! naming the slot and what differs, and changes nothing when refused.
//!
//! This file holds the user's view (names, kinds, what a refusal says) and the table a
//! window builds and a graph keeps: one definition per slot name, checked as each use is
//! recorded.

/// A grid's workgroups per dimension (the kernel module's `Grid`, spelled out: the
/// launch model imports this file).
type Grid = [u32; 3];

use std::fmt;

use crate::branch_refusal::BranchRace;
use crate::ids::{GraphId, MemoryId};
use crate::memory::Access;
use crate::range::ByteRange;
use crate::scalar_type::ScalarType;
use crate::subject::Subject;

/// The longest slot name, in bytes: a name is held inline, so a launch naming a slot and
/// an update allocate nothing, and no name is kept past its last use.
pub const MAX_SLOT_NAME: usize = 23;

/// A slot's name, up to [`MAX_SLOT_NAME`] bytes, held inline (`Copy`, compared by its
/// bytes). A longer name is kept as its first bytes, marked too long: a launch naming it
/// is refused (`InvalidArgument`, `what: "slot name"`), so no graph has such a slot.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotName {
    len: u8,
    /// Whether the name given was longer than [`MAX_SLOT_NAME`] (its first bytes kept).
    long: bool,
    bytes: [u8; MAX_SLOT_NAME],
}

impl SlotName {
    /// The slot called `name`.
    pub fn new(name: &str) -> Self {
        let mut end = name.len().min(MAX_SLOT_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; MAX_SLOT_NAME];
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        SlotName {
            len: end as u8,
            long: end < name.len(),
            bytes,
        }
    }

    /// The name as given (its first [`MAX_SLOT_NAME`] bytes, for a name too long).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)])
            .expect("cut at a character boundary")
    }

    /// Whether the name given was longer than [`MAX_SLOT_NAME`] bytes.
    pub fn is_too_long(&self) -> bool {
        self.long
    }
}

impl From<&str> for SlotName {
    fn from(name: &str) -> Self {
        SlotName::new(name)
    }
}

impl fmt::Debug for SlotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for SlotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())?;
        if self.long {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// What a slot is, as its capture recorded it: what every update is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// A scalar argument of this many bytes, of fields of one type (`None`: a struct
    /// of several, [`Arg::scalar_struct`](crate::Arg::scalar_struct)).
    Scalar {
        /// Its size in bytes.
        bytes: usize,
        /// The type of its fields, where they share one.
        element: Option<ScalarType>,
    },
    /// A buffer argument: `len` bytes, with the access every launch using it has
    /// (merged: a slot one launch reads and another writes is read-write).
    Buffer {
        /// The bytes each launch is given.
        len: u64,
        /// What the launches do to them.
        access: Access,
    },
    /// A grid, within a declared maximum.
    Grid {
        /// The largest grid an update may set.
        max: Grid,
    },
}

impl SlotKind {
    /// What the kind is called in errors.
    pub fn name(&self) -> &'static str {
        match self {
            SlotKind::Scalar { .. } => "scalar",
            SlotKind::Buffer { .. } => "buffer",
            SlotKind::Grid { .. } => "grid",
        }
    }
}

impl fmt::Display for SlotKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotKind::Scalar {
                bytes,
                element: Some(t),
            } => write!(
                f,
                "a {bytes}-byte scalar ({})",
                crate::scalar_type::type_name(*bytes, Some(*t))
            ),
            SlotKind::Scalar {
                bytes,
                element: None,
            } => write!(f, "a {bytes}-byte scalar"),
            SlotKind::Buffer { len, access } => write!(f, "a {len}-byte {access:?} buffer"),
            SlotKind::Grid { max } => write!(f, "a grid up to {max:?}"),
        }
    }
}

/// One slot of a sealed graph: its name, its kind, and the recorded launches that use it
/// (counted from 0 over the window's launches and work, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// The slot's name.
    pub name: SlotName,
    /// What it is, as recorded.
    pub kind: SlotKind,
    /// The recorded launches that use it, in order.
    pub launches: Vec<u64>,
}

/// Why an update, or a slot's use inside a window, was refused: what differs from what
/// the slot was recorded as.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotMismatch {
    /// The graph has no slot of this name; `slots` are the names it has.
    Unknown {
        /// The graph's slot names, in order.
        slots: Vec<SlotName>,
    },
    /// The update (or use) is of another kind than the slot.
    Kind {
        /// The slot's kind.
        slot: SlotKind,
        /// What was given.
        given: &'static str,
    },
    /// A scalar of another size.
    ScalarSize {
        /// The slot's size in bytes.
        slot: usize,
        /// The size given.
        given: usize,
    },
    /// A scalar of the slot's size and another type (an `f32` or `i32` for a `u32`
    /// position): its bytes would mean something else to the kernel.
    ScalarType {
        /// The type the slot was recorded with.
        slot: Option<ScalarType>,
        /// The type given.
        given: Option<ScalarType>,
        /// The size of both.
        bytes: usize,
    },
    /// A buffer (range) of another length.
    BufferLength {
        /// The slot's length in bytes.
        slot: u64,
        /// The length given.
        given: u64,
    },
    /// A buffer argument with another access.
    Access {
        /// The slot's access.
        slot: Access,
        /// The access given.
        given: Access,
    },
    /// A buffer of another device.
    Device,
    /// A grid with an empty dimension: a launch runs at least one workgroup.
    GridEmpty {
        /// The grid given.
        given: Grid,
    },
    /// A grid past the slot's maximum.
    GridPastMax {
        /// The slot's maximum.
        max: Grid,
        /// The grid given.
        given: Grid,
    },
    /// Inside a window: a launch gave the slot another value (or buffer, or range, or
    /// maximum) than an earlier launch of the same window did; a slot has one value.
    Conflicting {
        /// What the earlier use recorded, rendered.
        recorded: String,
        /// What this use gave, rendered.
        given: String,
    },
    /// A rebind that would make two unjoined branches of the graph's window race
    /// (rule 29, checked again on the sealed graph, rule 27): the slot's launch over the
    /// new bytes, and the launch of another lane that uses them, one of them writing.
    BranchRace(Box<BranchRace>),
    /// A rebind that would make two arguments of one recorded launch write common bytes
    /// (refused at launch too: the device writes them in no order).
    Aliased {
        /// The launch, counted from 0 over the window's launches and work.
        launch: u64,
        /// Its two arguments, by index (below
        /// [`MAX_KERNEL_PARAMS`](crate::MAX_KERNEL_PARAMS)).
        args: [u8; 2],
        /// The buffer both would write.
        memory: MemoryId,
        /// The bytes both would write.
        range: ByteRange,
    },
    /// The user's own work has no slots: its parameters change only by a new capture.
    Work,
    /// The device's graphs cannot change after their seal (the backend's reason).
    Unsupported(&'static str),
}

impl fmt::Display for SlotMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotMismatch::Unknown { slots } if slots.is_empty() => {
                write!(f, "the graph has no slots (its capture named none)")
            }
            SlotMismatch::Unknown { slots } => {
                write!(f, "the graph has no such slot; its slots: ")?;
                for (i, s) in slots.iter().enumerate() {
                    write!(f, "{}{s}", if i == 0 { "" } else { ", " })?;
                }
                Ok(())
            }
            SlotMismatch::Kind { slot, given } => {
                write!(f, "the slot is {slot}, not a {given}")
            }
            SlotMismatch::ScalarSize { slot, given } => {
                write!(f, "the slot is a {slot}-byte scalar, given {given} bytes")
            }
            SlotMismatch::ScalarType { slot, given, bytes } => write!(
                f,
                "the slot is {}, given {}",
                crate::scalar_type::type_name(*bytes, *slot),
                crate::scalar_type::type_name(*bytes, *given)
            ),
            SlotMismatch::BranchRace(race) => write!(f, "the rebind would make a {race}"),
            SlotMismatch::Aliased {
                launch,
                args,
                memory,
                range,
            } => write!(
                f,
                "arguments {} and {} of launch {launch} would both write {memory}{range}, \
                 which the device writes in no order",
                args[0], args[1]
            ),
            SlotMismatch::BufferLength { slot, given } => {
                write!(f, "the slot is {slot} bytes long, given {given} bytes")
            }
            SlotMismatch::Access { slot, given } => {
                write!(
                    f,
                    "the slot's launches access it as {slot:?}, given {given:?}"
                )
            }
            SlotMismatch::Device => write!(f, "the buffer belongs to another device"),
            SlotMismatch::GridEmpty { given } => {
                write!(
                    f,
                    "the grid {given:?} has an empty dimension: at least one workgroup each"
                )
            }
            SlotMismatch::GridPastMax { max, given } => {
                write!(
                    f,
                    "the grid {given:?} is not within the slot's maximum {max:?}"
                )
            }
            SlotMismatch::Conflicting { recorded, given } => write!(
                f,
                "an earlier launch of this window recorded it as {recorded}, this one gives \
                 {given}: a slot has one value"
            ),
            SlotMismatch::Work => write!(
                f,
                "the user's own work has no slots: its parameters change only by a new capture"
            ),
            SlotMismatch::Unsupported(why) => write!(f, "{why}"),
        }
    }
}

/// An update of a graph's slot refused, or a slot's use in a window refused: which
/// graph (or stream, inside a window), which slot, what differs. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRefused {
    /// The graph updated, or the stream whose window recorded the use.
    pub subject: Subject,
    /// The slot.
    pub slot: SlotName,
    /// What differs.
    pub mismatch: SlotMismatch,
}

impl fmt::Display for SlotRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slot {} of {}: {}",
            self.slot, self.subject, self.mismatch
        )
    }
}

/// A slot's recorded definition and the value it holds now.
#[derive(Clone, Debug)]
pub(crate) struct SlotDef {
    pub(crate) name: SlotName,
    pub(crate) kind: SlotKind,
    pub(crate) launches: Vec<u64>,
}

/// The slots a window recorded and a graph keeps, one definition per name, in the order
/// their first use was recorded.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotTable {
    defs: Vec<SlotDef>,
}

impl SlotTable {
    /// The definition of `name`.
    pub(crate) fn get(&self, name: SlotName) -> Option<&SlotDef> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// Whether the table has no slot.
    pub(crate) fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// Checks a use of `name` as `kind` against the table: the first use defines the
    /// slot; a later one must be of the same kind (a buffer slot's accesses merge).
    /// Changes nothing; [`add`](Self::add) records the use once the launch is recorded.
    pub(crate) fn check(&self, name: SlotName, kind: SlotKind) -> Result<(), SlotMismatch> {
        let Some(def) = self.get(name) else {
            return Ok(());
        };
        match (def.kind, kind) {
            (SlotKind::Scalar { bytes: a, .. }, SlotKind::Scalar { bytes: b, .. }) if a != b => {
                Err(SlotMismatch::ScalarSize { slot: a, given: b })
            }
            (
                SlotKind::Scalar {
                    bytes,
                    element: slot,
                },
                SlotKind::Scalar { element: given, .. },
            ) if slot != given => Err(SlotMismatch::ScalarType { slot, given, bytes }),
            (SlotKind::Buffer { len: a, .. }, SlotKind::Buffer { len: b, .. }) if a != b => {
                Err(SlotMismatch::BufferLength { slot: a, given: b })
            }
            (SlotKind::Grid { max: a }, SlotKind::Grid { max: b }) if a != b => {
                Err(SlotMismatch::Conflicting {
                    recorded: format!("a grid up to {a:?}"),
                    given: format!("a grid up to {b:?}"),
                })
            }
            (a, b) if std::mem::discriminant(&a) != std::mem::discriminant(&b) => {
                Err(SlotMismatch::Kind {
                    slot: a,
                    given: b.name(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Records a use of `name` as `kind` by recorded launch `launch` (checked first).
    pub(crate) fn add(&mut self, name: SlotName, kind: SlotKind, launch: u64) {
        match self.defs.iter_mut().find(|d| d.name == name) {
            Some(def) => {
                if let (SlotKind::Buffer { access, .. }, SlotKind::Buffer { access: more, .. }) =
                    (&mut def.kind, kind)
                {
                    *access = access.merge(more);
                }
                if def.launches.last() != Some(&launch) {
                    def.launches.push(launch);
                }
            }
            None => self.defs.push(SlotDef {
                name,
                kind,
                launches: vec![launch],
            }),
        }
    }

    /// Every slot, as the user sees it.
    pub(crate) fn infos(&self) -> Vec<SlotInfo> {
        self.defs
            .iter()
            .map(|d| SlotInfo {
                name: d.name,
                kind: d.kind,
                launches: d.launches.clone(),
            })
            .collect()
    }

    /// The names, in order (what an unknown slot's refusal lists).
    pub(crate) fn names(&self) -> Vec<SlotName> {
        self.defs.iter().map(|d| d.name).collect()
    }

    /// The definition of `name` in graph `graph`, or the refusal naming the slots it has.
    pub(crate) fn find(
        &self,
        graph: GraphId,
        name: SlotName,
    ) -> Result<&SlotDef, Box<SlotRefused>> {
        self.get(name).ok_or_else(|| {
            Box::new(SlotRefused {
                subject: Subject::graph(graph),
                slot: name,
                mismatch: SlotMismatch::Unknown {
                    slots: self.names(),
                },
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_their_bytes_and_a_long_one_is_marked() {
        let a = SlotName::new("pos");
        let b = SlotName::from(String::from("pos").as_str());
        assert_eq!(a, b);
        assert_eq!(a.as_str(), "pos");
        assert_ne!(a, SlotName::new("len"));
        assert!(!a.is_too_long());
        let exact = "k".repeat(MAX_SLOT_NAME);
        assert!(!SlotName::new(&exact).is_too_long());
        let long = SlotName::new(&format!("{exact}v"));
        assert!(long.is_too_long());
        assert_ne!(long, SlotName::new(&exact), "a long name is not its cut");
        // Cut at a character boundary.
        let wide = SlotName::new(&"é".repeat(20));
        assert_eq!(wide.as_str(), "é".repeat(11));
        assert!(wide.is_too_long());
        assert!(std::mem::size_of::<Option<SlotName>>() <= 26);
    }

    #[test]
    fn a_slot_keeps_its_first_kind() {
        let mut t = SlotTable::default();
        let pos = SlotName::new("pos");
        let scalar = |bytes, element| SlotKind::Scalar { bytes, element };
        let u32_ = Some(ScalarType::U32);
        t.add(pos, scalar(4, u32_), 0);
        assert_eq!(t.check(pos, scalar(4, u32_)), Ok(()));
        assert_eq!(
            t.check(pos, scalar(8, Some(ScalarType::U64))),
            Err(SlotMismatch::ScalarSize { slot: 4, given: 8 })
        );
        // The same size of another type: another slot, refused.
        assert_eq!(
            t.check(pos, scalar(4, Some(ScalarType::F32))),
            Err(SlotMismatch::ScalarType {
                slot: u32_,
                given: Some(ScalarType::F32),
                bytes: 4
            })
        );
        assert!(matches!(
            t.check(pos, SlotKind::Grid { max: [4, 1, 1] }),
            Err(SlotMismatch::Kind { given: "grid", .. })
        ));
        let kv = SlotName::new("kv");
        t.add(
            kv,
            SlotKind::Buffer {
                len: 64,
                access: Access::Read,
            },
            1,
        );
        t.add(
            kv,
            SlotKind::Buffer {
                len: 64,
                access: Access::Write,
            },
            2,
        );
        let kv = t.get(kv).expect("recorded");
        assert_eq!(
            kv.kind,
            SlotKind::Buffer {
                len: 64,
                access: Access::ReadWrite
            }
        );
        assert_eq!(kv.launches, [1, 2]);
    }
}
