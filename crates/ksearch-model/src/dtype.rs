//! Element types shared by tasks, candidates and the worker (`docs/formats.md` §5).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float16,
    Bfloat16,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint32,
    Bool,
}

pub const ALL: [Dtype; 11] = [
    Dtype::Float16,
    Dtype::Bfloat16,
    Dtype::Float32,
    Dtype::Float64,
    Dtype::Int8,
    Dtype::Int16,
    Dtype::Int32,
    Dtype::Int64,
    Dtype::Uint8,
    Dtype::Uint32,
    Dtype::Bool,
];

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float32 => "float32",
            Dtype::Float64 => "float64",
            Dtype::Int8 => "int8",
            Dtype::Int16 => "int16",
            Dtype::Int32 => "int32",
            Dtype::Int64 => "int64",
            Dtype::Uint8 => "uint8",
            Dtype::Uint32 => "uint32",
            Dtype::Bool => "bool",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::Int8 | Dtype::Uint8 | Dtype::Bool => 1,
            Dtype::Float16 | Dtype::Bfloat16 | Dtype::Int16 => 2,
            Dtype::Float32 | Dtype::Int32 | Dtype::Uint32 => 4,
            Dtype::Float64 | Dtype::Int64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32 | Dtype::Float64
        )
    }

    /// The C type a CPU kernel sees; `None` where plain C11 has no portable type.
    pub fn c_type(self) -> Option<&'static str> {
        Some(match self {
            Dtype::Float32 => "float",
            Dtype::Float64 => "double",
            Dtype::Int8 => "int8_t",
            Dtype::Int16 => "int16_t",
            Dtype::Int32 => "int32_t",
            Dtype::Int64 => "int64_t",
            Dtype::Uint8 => "uint8_t",
            Dtype::Uint32 => "uint32_t",
            Dtype::Bool => "_Bool",
            Dtype::Float16 | Dtype::Bfloat16 => return None,
        })
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ALL.iter().copied().find(|d| d.name() == s).ok_or_else(|| {
            let names: Vec<_> = ALL.iter().map(|d| d.name()).collect();
            format!("unknown dtype `{s}`; expected one of {}", names.join(", "))
        })
    }
}
