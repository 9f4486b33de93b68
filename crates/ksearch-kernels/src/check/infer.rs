//! Element types of a candidate's tensors when there is no task to give them: read from how the body
//! uses each tensor (`int v = data[i]`, `const device half* p = x + o`, `y[i] = static_cast<half>(...)`,
//! `reinterpret_cast<const device float4*>(x)`, the value an atomic output receives). Unknown stays float32.

use super::lex::{Tok, view};
use ksearch_model::dtype::Dtype;
use std::collections::BTreeMap;

/// The dtype a Metal scalar or vector type name stands for.
pub fn dtype_of_type(t: &str) -> Option<Dtype> {
    let base = t.trim_end_matches(|c: char| c.is_ascii_digit());
    let base = base.strip_prefix("packed_").unwrap_or(base);
    Some(match base {
        "float" | "float32_t" => Dtype::Float32,
        "half" | "float16_t" => Dtype::Float16,
        "bfloat" | "bfloat16_t" => Dtype::Bfloat16,
        "int" | "int32_t" => Dtype::Int32,
        "uint" | "uint32_t" | "unsigned" => Dtype::Uint32,
        "short" | "int16_t" => Dtype::Int16,
        "char" | "int8_t" => Dtype::Int8,
        "uchar" | "uint8_t" => Dtype::Uint8,
        "long" | "int64_t" => Dtype::Int64,
        "bool" => Dtype::Bool,
        _ => return None,
    })
}

/// Infers dtypes for `names` from `sources` (body and header texts).
pub fn dtypes(sources: &[&str], names: &[String], atomic: bool) -> BTreeMap<String, Dtype> {
    let mut out = BTreeMap::new();
    for src in sources {
        let t = view(src).toks;
        for n in names {
            if out.contains_key(n) {
                continue;
            }
            if let Some(d) = from_uses(&t, n, atomic) {
                out.insert(n.clone(), d);
            }
        }
    }
    out
}

fn from_uses(t: &[Tok], name: &str, atomic: bool) -> Option<Dtype> {
    let at = |i: usize| t.get(i).map(|t| t.text.as_str()).unwrap_or("");
    for (i, tok) in t.iter().enumerate() {
        if !tok.is(name) || at(i.wrapping_sub(1)) == "." || at(i.wrapping_sub(1)) == "->" {
            continue;
        }
        // `TYPE v = name[` and `TYPE v = name +`/`;` (a pointer alias `TYPE* p = name`).
        if i >= 3 && at(i - 1) == "=" {
            let (ty, ptr) = if at(i - 3) == "*" {
                (at(i - 4), true)
            } else {
                (at(i - 3), false)
            };
            if (ptr || at(i + 1) == "[")
                && let Some(d) = dtype_of_type(ty)
            {
                return Some(d);
            }
        }
        // `reinterpret_cast<const device float4*>(name)` / `(device half*)name`
        if at(i.wrapping_sub(1)) == "(" && at(i.wrapping_sub(2)) == ">" {
            let mut k = i - 2;
            while k > 0 && !t[k].is("<") {
                k -= 1;
            }
            if let Some(d) = t[k..i].iter().find_map(|x| dtype_of_type(&x.text)) {
                return Some(d);
            }
        }
        if at(i.wrapping_sub(1)) == ")" && at(i.wrapping_sub(2)) == "*" {
            let mut k = i - 1;
            while k > 0 && !t[k].is("(") {
                k -= 1;
            }
            if let Some(d) = t[k..i].iter().find_map(|x| dtype_of_type(&x.text)) {
                return Some(d);
            }
        }
        // `name[...] = static_cast<TYPE>(` / `= TYPE(`
        if at(i + 1) == "[" {
            let k = closing_bracket(t, i + 1);
            if at(k + 1) == "=" {
                if at(k + 2) == "static_cast" && at(k + 3) == "<" {
                    if let Some(d) = dtype_of_type(at(k + 4)) {
                        return Some(d);
                    }
                } else if at(k + 3) == "("
                    && let Some(d) = dtype_of_type(at(k + 2))
                {
                    return Some(d);
                }
            }
        }
        // An atomic output: the value added (`atomic_fetch_add_explicit(&name[..], 1u, ...)`).
        if atomic && at(i.wrapping_sub(1)) == "&" && at(i + 1) == "[" {
            let k = closing_bracket(t, i + 1);
            if at(k + 1) == "," {
                let v = at(k + 2);
                if v.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                    return Some(if v.contains('.') || v.ends_with('f') {
                        Dtype::Float32
                    } else if v.ends_with('u') || v.ends_with('U') {
                        Dtype::Uint32
                    } else {
                        Dtype::Int32
                    });
                }
            }
        }
    }
    if atomic {
        // Integer atomics elsewhere in the kernel suggest an integer output.
        for w in t.windows(3) {
            match (w[0].text.as_str(), w[1].text.as_str(), w[2].text.as_str()) {
                ("atomic_int", _, _) | ("atomic", "<", "int") => return Some(Dtype::Int32),
                ("atomic_uint", _, _) | ("atomic", "<", "uint") => return Some(Dtype::Uint32),
                _ => {}
            }
        }
    }
    None
}

/// The index of the `]` that closes the `[` at `open` (or the end of the tokens).
fn closing_bracket(t: &[Tok], open: usize) -> usize {
    let mut depth = 0;
    for (k, tok) in t.iter().enumerate().skip(open) {
        if tok.is("[") {
            depth += 1;
        } else if tok.is("]") {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    t.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_reveal_element_types() {
        let body = "int v = data[i] & 3;\nconst device half* xr = x + 4;\ny[i] = static_cast<bfloat16_t>(1.0f);\nconst float4 q = reinterpret_cast<const device float4*>(g)[i];\natomic_fetch_add_explicit(&h[0], 1u, memory_order_relaxed);\nz[i] = w[i];";
        let names: Vec<String> = ["data", "x", "y", "g", "h", "z"].map(String::from).into();
        let d = dtypes(&[body], &names, true);
        assert_eq!(d["data"], Dtype::Int32);
        assert_eq!(d["x"], Dtype::Float16);
        assert_eq!(d["y"], Dtype::Bfloat16);
        assert_eq!(d["g"], Dtype::Float32);
        assert_eq!(d["h"], Dtype::Uint32);
        assert!(!d.contains_key("z"), "no evidence, no guess");
    }
}
