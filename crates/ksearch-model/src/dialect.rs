//! The CUDA ⇄ Metal type names that differ between the two dialects, in one table read both ways:
//! translation (`translate`), back-translation (`back_translate`) and the analysis of CUDA sources all ask
//! here, so a name added once is known to each.
//!
//! Invariant: every CUDA spelling maps to exactly one Metal name, and every Metal name back to its first
//! (canonical) CUDA spelling. Names the dialects share (`float`, `int`, `float4`) are not listed.

use crate::dtype::Dtype;

/// One type under its CUDA spellings and its Metal name.
struct TypeName {
    /// CUDA spellings, the canonical one first.
    cuda: &'static [&'static str],
    /// Metal's spellings, the canonical one first.
    metal: &'static [&'static str],
    /// The element type (of each lane, for a vector).
    element: Dtype,
    /// A vector of two (`half2`), not a scalar.
    pair: bool,
    /// Size in bytes.
    bytes: usize,
}

const TYPES: &[TypeName] = &[
    TypeName {
        cuda: &["__half", "half"],
        metal: &["half", "float16_t"],
        element: Dtype::Float16,
        pair: false,
        bytes: 2,
    },
    TypeName {
        cuda: &["__half2", "half2"],
        metal: &["half2"],
        element: Dtype::Float16,
        pair: true,
        bytes: 4,
    },
    TypeName {
        cuda: &["__nv_bfloat16", "nv_bfloat16"],
        metal: &["bfloat", "bfloat16_t"],
        element: Dtype::Bfloat16,
        pair: false,
        bytes: 2,
    },
    TypeName {
        cuda: &["__nv_bfloat162", "nv_bfloat162"],
        metal: &["bfloat2"],
        element: Dtype::Bfloat16,
        pair: true,
        bytes: 4,
    },
];

fn by_cuda(name: &str) -> Option<&'static TypeName> {
    TYPES.iter().find(|t| t.cuda.contains(&name))
}

/// The Metal name of a CUDA type name the dialects spell differently (`__nv_bfloat16` → `bfloat`).
pub fn metal_of(cuda: &str) -> Option<&'static str> {
    by_cuda(cuda).map(|t| t.metal[0])
}

/// The canonical CUDA name of a Metal type name the dialects spell differently (`bfloat` → `__nv_bfloat16`).
pub fn cuda_of(metal: &str) -> Option<&'static str> {
    TYPES
        .iter()
        .find(|t| t.metal.contains(&metal))
        .map(|t| t.cuda[0])
}

/// The dtype of a CUDA scalar type name of this table (`__half`, `nv_bfloat16`).
pub fn dtype_of(cuda: &str) -> Option<Dtype> {
    by_cuda(cuda).filter(|t| !t.pair).map(|t| t.element)
}

/// Size in bytes of a CUDA type name of this table.
pub fn bytes_of(cuda: &str) -> Option<usize> {
    by_cuda(cuda).map(|t| t.bytes)
}

/// The 16-bit float a CUDA type name of this table is made of, scalar or pair: `Float16` or `Bfloat16`.
pub fn half_family(cuda: &str) -> Option<Dtype> {
    by_cuda(cuda).map(|t| t.element)
}

/// `text` with every CUDA type name of this table, as a whole identifier, renamed to Metal's
/// (`const __nv_bfloat162*` → `const bfloat2*`); other identifiers are left alone.
pub fn metal_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(metal_of(word).unwrap_or(word));
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_maps_both_ways_to_one_type() {
        for t in TYPES {
            for c in t.cuda {
                assert_eq!(metal_of(c), Some(t.metal[0]), "{c}");
                assert_eq!(bytes_of(c), Some(t.bytes));
            }
            for m in t.metal {
                assert_eq!(cuda_of(m), Some(t.cuda[0]), "{m}");
            }
        }
        assert_eq!(metal_of("float"), None);
        assert_eq!(cuda_of("float4"), None);
        assert_eq!(dtype_of("nv_bfloat16"), Some(Dtype::Bfloat16));
        assert_eq!(dtype_of("__half2"), None);
        assert_eq!(half_family("__nv_bfloat162"), Some(Dtype::Bfloat16));
        assert_eq!(half_family("half2"), Some(Dtype::Float16));
    }

    #[test]
    fn text_is_renamed_by_whole_identifiers() {
        assert_eq!(
            metal_text("const __nv_bfloat162* a, __half b, my__half c, nv_bfloat16 d"),
            "const bfloat2* a, half b, my__half c, bfloat d"
        );
    }
}
