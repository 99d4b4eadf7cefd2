//! `ScalarType`: the type of a scalar's fields (a number, or an array of numbers of one
//! type), as a kernel declares it ([`Param::scalar`](crate::Param::scalar)) and as a
//! launch's value or a slot update carries it ([`Arg::scalar`](crate::Arg::scalar),
//! [`GraphHandle::set`](crate::GraphHandle::set)): what the core compares, so a value of
//! the right size and the wrong type (an `f32` read as a `u32` index) is refused.

/// The type of a scalar parameter's fields, as a kernel's own source declares it (WGSL's
/// `u32`, CUDA's `float`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`.
    U16,
    /// `i16`.
    I16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `f32`.
    F32,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f64`.
    F64,
}

impl ScalarType {
    /// Its size in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            ScalarType::U8 | ScalarType::I8 => 1,
            ScalarType::U16 | ScalarType::I16 => 2,
            ScalarType::U32 | ScalarType::I32 | ScalarType::F32 => 4,
            ScalarType::U64 | ScalarType::I64 | ScalarType::F64 => 8,
        }
    }

    /// Its Rust name.
    pub const fn name(self) -> &'static str {
        match self {
            ScalarType::U8 => "u8",
            ScalarType::I8 => "i8",
            ScalarType::U16 => "u16",
            ScalarType::I16 => "i16",
            ScalarType::U32 => "u32",
            ScalarType::I32 => "i32",
            ScalarType::F32 => "f32",
            ScalarType::U64 => "u64",
            ScalarType::I64 => "i64",
            ScalarType::F64 => "f64",
        }
    }
}

impl std::fmt::Display for ScalarType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A type [`Param::scalar`](crate::Param::scalar) declares: a number, or an array of numbers
/// of one type.
pub trait ScalarParam {
    /// The type of its fields.
    const ELEMENT: ScalarType;
}

macro_rules! scalar_param {
    ($($t:ty => $e:ident),* $(,)?) => {
        $(impl ScalarParam for $t {
            const ELEMENT: ScalarType = ScalarType::$e;
        })*
    };
}

scalar_param!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    u64 => U64, i64 => I64, f64 => F64,
);

impl<T: ScalarParam, const N: usize> ScalarParam for [T; N] {
    const ELEMENT: ScalarType = T::ELEMENT;
}

/// A scalar's type as errors name it: its fields' type, `[t; n]` for an array, or "a
/// struct".
pub(crate) fn type_name(bytes: usize, element: Option<ScalarType>) -> String {
    match element {
        Some(t) if bytes as u32 == t.bytes() => t.name().to_string(),
        Some(t) => format!("[{t}; {}]", bytes as u32 / t.bytes().max(1)),
        None => format!("a {bytes}-byte struct"),
    }
}
