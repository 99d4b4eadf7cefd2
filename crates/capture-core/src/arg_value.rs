//! `ArgValue`: the value an [`InvalidArgument`](crate::ServerError::InvalidArgument)
//! refusal names, kept typed where a caller may act on it (a count, a byte size, a
//! range, a grid, which argument of a launch, which stream or graph) and rendered only
//! when the error is shown.

use std::borrow::Cow;
use std::fmt;

use crate::ids::{GraphId, GraphPoolId, StreamId};
use crate::range::ByteRange;

/// A refused value, as [`ServerError::InvalidArgument`](crate::ServerError::InvalidArgument)
/// carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgValue {
    /// No value of its own: the refused subject is the value.
    None,
    /// A count, size, index or setting.
    Number(u64),
    /// A size in bytes (shown "N bytes").
    Bytes(u64),
    /// A range of bytes.
    Range(ByteRange),
    /// Workgroups or threads per dimension: a grid, a block, a bound.
    Dims([u32; 3]),
    /// A launch's argument `index` and what was given for it (shown "… for argument
    /// N").
    Argument {
        /// The argument's position in the launch.
        index: usize,
        /// What was given for it.
        given: Box<ArgValue>,
    },
    /// Two arguments of one launch (shown "arguments A and B").
    Arguments(usize, usize),
    /// A stream.
    Stream(StreamId),
    /// A graph.
    Graph(GraphId),
    /// A graph pool.
    Pool(GraphPoolId),
    /// A name or a description: a kernel's, a file's, a setting's.
    Text(Cow<'static, str>),
}

impl ArgValue {
    /// `given` for the launch's argument `index`.
    pub fn argument(index: usize, given: impl Into<ArgValue>) -> Self {
        Self::Argument {
            index,
            given: Box::new(given.into()),
        }
    }

    /// Whether there is no value of its own (the subject is the value).
    pub fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }
}

impl fmt::Display for ArgValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => Ok(()),
            Self::Number(n) => write!(f, "{n}"),
            Self::Bytes(n) => write!(f, "{n} bytes"),
            Self::Range(range) => write!(f, "{range}"),
            Self::Dims(dims) => write!(f, "{dims:?}"),
            Self::Argument { index, given } => write!(f, "{given} for argument {index}"),
            Self::Arguments(a, b) => write!(f, "arguments {a} and {b}"),
            Self::Stream(stream) => write!(f, "{stream}"),
            Self::Graph(graph) => write!(f, "{graph}"),
            Self::Pool(pool) => write!(f, "{pool}"),
            Self::Text(text) => f.write_str(text),
        }
    }
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl From<$t> for ArgValue {
            fn from(n: $t) -> Self {
                Self::Number(u64::try_from(n).unwrap_or(u64::MAX))
            }
        }
    )*};
}

numbers!(u8, u16, u32, u64, usize);

/// A float, as it reads (a value compared against a reference, a tolerance).
impl From<f32> for ArgValue {
    fn from(x: f32) -> Self {
        Self::Text(Cow::Owned(x.to_string()))
    }
}

/// A float, as it reads.
impl From<f64> for ArgValue {
    fn from(x: f64) -> Self {
        Self::Text(Cow::Owned(x.to_string()))
    }
}

/// A signed count, as it reads.
impl From<i64> for ArgValue {
    fn from(n: i64) -> Self {
        u64::try_from(n).map_or_else(|_| Self::Text(Cow::Owned(n.to_string())), Self::Number)
    }
}

/// A signed count, as it reads.
impl From<i32> for ArgValue {
    fn from(n: i32) -> Self {
        Self::from(i64::from(n))
    }
}

impl From<ByteRange> for ArgValue {
    fn from(range: ByteRange) -> Self {
        Self::Range(range)
    }
}

impl From<[u32; 3]> for ArgValue {
    fn from(dims: [u32; 3]) -> Self {
        Self::Dims(dims)
    }
}

impl From<StreamId> for ArgValue {
    fn from(stream: StreamId) -> Self {
        Self::Stream(stream)
    }
}

impl From<GraphId> for ArgValue {
    fn from(graph: GraphId) -> Self {
        Self::Graph(graph)
    }
}

impl From<GraphPoolId> for ArgValue {
    fn from(pool: GraphPoolId) -> Self {
        Self::Pool(pool)
    }
}

impl From<&str> for ArgValue {
    fn from(text: &str) -> Self {
        Self::Text(Cow::Owned(text.to_owned()))
    }
}

impl From<String> for ArgValue {
    fn from(text: String) -> Self {
        Self::Text(Cow::Owned(text))
    }
}

impl From<Cow<'static, str>> for ArgValue {
    fn from(text: Cow<'static, str>) -> Self {
        Self::Text(text)
    }
}

impl From<&Cow<'_, str>> for ArgValue {
    fn from(text: &Cow<'_, str>) -> Self {
        Self::Text(Cow::Owned(text.clone().into_owned()))
    }
}

impl From<&String> for ArgValue {
    fn from(text: &String) -> Self {
        Self::Text(Cow::Owned(text.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_reads_as_it_was_rendered_before_it_was_typed() {
        let range = ByteRange::new(4, 8).expect("a range");
        for (value, shown) in [
            (ArgValue::None, ""),
            (ArgValue::from(7u32), "7"),
            (ArgValue::Bytes(12), "12 bytes"),
            (ArgValue::from(range), "[4..12)"),
            (ArgValue::from([0, 1, 1]), "[0, 1, 1]"),
            (
                ArgValue::argument(2, ArgValue::Bytes(3)),
                "3 bytes for argument 2",
            ),
            (ArgValue::argument(0, "a buffer"), "a buffer for argument 0"),
            (ArgValue::Arguments(1, 3), "arguments 1 and 3"),
            (ArgValue::from(StreamId::new(2)), "stream#2"),
            (ArgValue::from("builtins.cu"), "builtins.cu"),
        ] {
            assert_eq!(value.to_string(), shown, "{value:?}");
        }
        assert!(ArgValue::None.is_none() && !ArgValue::Number(0).is_none());
    }
}
