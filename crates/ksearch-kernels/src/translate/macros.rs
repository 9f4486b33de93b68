//! Function-like macros built on CUDA's thread indices (and ones that open or close a brace of their own),
//! expanded before the analysis reads a file.
//!
//! `CUDA_KERNEL_LOOP(i, n)` (Caffe, PyTorch's legacy kernels, mmcv and many more) hides a grid-stride loop
//! and its bound behind a macro, so the analysis saw no thread index, no guard and no loop: the kernel's
//! launch became a blind guess. Each use is replaced by the macro's body with its arguments, on the same
//! line, so line numbers still match the file. Only macros whose body names `threadIdx`, `blockIdx`,
//! `blockDim` or `gridDim`, or has a brace it does not match, are expanded, and only when a use's arguments close on its own line; bodies that
//! stringify or paste (`#`, `##`) are left alone.

use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;

struct Macro {
    name: String,
    params: Vec<String>,
    body: String,
}

const PASSES: usize = 3;
/// Lines a use of an attribute macro may span (ggml's `DEPRECATED(...)` around a long prototype: 17).
const MAX_JOINED: usize = 48;

/// `src` with every use of an index macro expanded (unchanged, and not copied, when it has none), and
/// CUDA's `__align__(n)` written as C++'s `alignas(n)` (which the parser, NVRTC and Metal all read).
pub fn expand(src: &str) -> Cow<'_, str> {
    let src: Cow<'_, str> = if src.contains("__align__(") {
        Cow::Owned(src.replace("__align__(", "alignas("))
    } else {
        Cow::Borrowed(src)
    };
    let macros = index_macros(&src);
    let qualifiers = qualifier_macros(&src);
    let attributes = attribute_macros(&src);
    if macros.is_empty() && qualifiers.is_empty() && attributes.is_empty() {
        return src;
    }
    let mut lines: Vec<String> = src.split('\n').map(str::to_string).collect();
    let mut in_define = false;
    let defines: Vec<bool> = lines
        .iter()
        .map(|l| {
            let this = in_define || l.trim_start().starts_with('#');
            in_define = this && l.trim_end().ends_with('\\');
            this
        })
        .collect();
    // A use of a function-like attribute macro that spans lines (`DEPRECATED(\n  API double f(int),\n  "why");`)
    // is read whole: its lines are joined, comments cut, into its first line; the others become blank.
    for i in 0..lines.len() {
        if defines[i] {
            continue;
        }
        for m in attributes.iter().filter(|m| !m.params.is_empty()) {
            let code = cut_comment(&lines[i]);
            let Some(at) = find_word(code, &m.name) else {
                continue;
            };
            let call = code[at + m.name.len()..].trim_start();
            if !call.starts_with('(') || split_args(&call[1..]).is_some() {
                continue; // not a use, or one on one line: the loop below
            }
            let mut joined = code.to_string();
            for k in 1..MAX_JOINED {
                if i + k >= lines.len() || defines[i + k] {
                    break;
                }
                let next = cut_comment(&lines[i + k]);
                // A use's arguments hold no block nor a statement's end: past one, this is no use to join.
                if next.contains('{') || (next.contains(';') && !next.contains(')')) {
                    break;
                }
                joined.push(' ');
                joined.push_str(next);
                let whole = without_attribute_macro(&joined, m);
                if find_word(&whole, &m.name).is_none() {
                    lines[i] = whole;
                    for l in &mut lines[i + 1..=i + k] {
                        l.clear();
                    }
                    break;
                }
            }
        }
    }
    for (line, is_define) in lines.iter_mut().zip(defines) {
        if is_define {
            continue;
        }
        for (name, body) in &qualifiers {
            if line.contains(name.as_str()) {
                *line = replace_word(line, name, body);
            }
        }
        for m in &attributes {
            if line.contains(m.name.as_str()) {
                *line = without_attribute_macro(line, m);
            }
        }
        for _ in 0..PASSES {
            let mut changed = false;
            for m in &macros {
                if let Some(next) = expand_line(line, m) {
                    *line = next;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }
    Cow::Owned(lines.join("\n"))
}

/// Words a qualifier macro may stand for: type qualifiers, CUDA's function specifiers, and storage classes
/// (`#define GGML_API extern`: a library's export macro before every declaration of its API).
const QUALIFIERS: &[&str] = &[
    "__restrict__",
    "__restrict",
    "restrict",
    "const",
    "volatile",
    "__device__",
    "__host__",
    "__global__",
    "__forceinline__",
    "__noinline__",
    "__inline__",
    "inline",
    "static",
    "extern",
];

/// Object-like macros that stand for qualifiers only (`#define RESTRICT __restrict__`, `#define DEVICE_INLINE
/// __device__ __forceinline__`): the parser cannot know them, and reads `float * RESTRICT p = q;` as
/// something else than a pointer declaration (an alias, then a store, lost) and `DEVICE_INLINE float f()` as
/// no device function. Their uses are replaced by what they stand for, outside preprocessor lines.
fn qualifier_macros(src: &str) -> Vec<(String, String)> {
    static DEF: OnceLock<Regex> = OnceLock::new();
    let def = DEF.get_or_init(|| {
        Regex::new(r"(?m)^\s*#\s*define\s+([A-Za-z_]\w*)[ \t]+([A-Za-z_][\w \t]*?)\s*$")
            .expect("a valid pattern")
    });
    if !src.contains("#define") {
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for c in def.captures_iter(src) {
        let body = c[2].split_whitespace().collect::<Vec<_>>();
        if !body.is_empty() && body.iter().all(|w| QUALIFIERS.contains(w)) {
            let name = c[1].to_string();
            if !QUALIFIERS.contains(&name.as_str()) {
                out.push((name, body.join(" ")));
            }
        }
    }
    // A name defined twice (under `#if`s, say `__restrict` on one compiler and `__restrict__` on another)
    // is left to the compiler, as is one that redefines a keyword.
    static ANY: OnceLock<Regex> = OnceLock::new();
    let any = ANY.get_or_init(|| {
        Regex::new(r"(?m)^\s*#\s*define\s+([A-Za-z_]\w*)").expect("a valid pattern")
    });
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for c in any.captures_iter(src) {
        *seen.entry(c[1].to_string()).or_default() += 1;
    }
    out.retain(|(n, _)| seen.get(n) == Some(&1));
    out
}

/// Macros that stand for attributes and nothing else the parser needs (`#define NORETURN [[noreturn]]`,
/// `#define PRINTF_LIKE(...) __attribute__((format(printf, __VA_ARGS__)))`, or empty on another compiler;
/// `#define DEPRECATED(func, hint) func __attribute__((deprecated(hint)))`), and empty ones: attributes
/// removed, every definition of the name (under `#if`s the tracker could not decide) must leave the same
/// thing, nothing or one parameter. A library's API is written with them before every declaration, and unknown to the parser
/// they make each one unreadable, with the types and enums among them (ggml.h: 115 such places).
/// `body`: empty, or the parameter a use is replaced by.
/// A macro's parameters and what its body leaves without attributes.
type Left = (Vec<String>, String);

fn attribute_macros(src: &str) -> Vec<Macro> {
    static DEF: OnceLock<Regex> = OnceLock::new();
    let def = DEF.get_or_init(|| {
        Regex::new(r"^\s*#\s*define\s+([A-Za-z_]\w*)(\(([^)]*)\))?(.*)$").expect("a valid pattern")
    });
    if !src.contains("#define") {
        return Vec::new();
    }
    // Each name's definitions, as (params, what is left without attributes); None: not attributes only.
    let mut defs: std::collections::BTreeMap<String, Vec<Option<Left>>> = Default::default();
    let mut lines = src.split('\n');
    while let Some(l) = lines.next() {
        let Some(c) = def.captures(l) else { continue };
        let mut body = c.get(4).map_or("", |m| m.as_str()).to_string();
        while body.trim_end().ends_with('\\') {
            body = body.trim_end().trim_end_matches('\\').to_string();
            body.push(' ');
            body.push_str(lines.next().unwrap_or(""));
        }
        let params: Vec<String> = c
            .get(3)
            .map(|p| {
                p.as_str()
                    .split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let left =
            strip_attributes(&body).map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
        let usable = left.as_ref().is_some_and(|left| {
            (left.is_empty() || params.iter().any(|p| p == left && p != "..."))
                && !body.contains('#')
        });
        let left = left.unwrap_or_default();
        defs.entry(c[1].to_string())
            .or_default()
            .push(usable.then_some((params, left)));
    }
    // Every definition must leave the same: expanded so, the text is what the compiler reads, attributes
    // aside. Never the compiler's own names (`#define __syncthreads()` in another vendor's branch must not
    // take the barrier away) nor the qualifiers.
    defs.into_iter()
        .filter(|(name, _)| !name.starts_with("__") && !QUALIFIERS.contains(&name.as_str()))
        .filter_map(|(name, ds)| {
            let first = ds.first().cloned().flatten()?;
            ds.iter()
                .all(|d| d.as_ref() == Some(&first))
                .then_some(Macro {
                    name,
                    params: first.0,
                    body: first.1,
                })
        })
        .collect()
}

/// Attributes that change no layout, value or code the translation keeps: what a library's API macros are
/// made of. `aligned`, `packed`, `vector_size`, `align(n)` and the rest are not among them.
const HARMLESS_ATTRIBUTES: &[&str] = &[
    "deprecated",
    "format",
    "noreturn",
    "visibility",
    "unused",
    "maybe_unused",
    "used",
    "always_inline",
    "noinline",
    "cold",
    "hot",
    "nonnull",
    "dllexport",
    "dllimport",
    "warn_unused_result",
    "nodiscard",
    "pure",
    "const",
    "malloc",
    "returns_nonnull",
    "nothrow",
    "leaf",
];

/// `body` without its attributes (`__attribute__((...))`, `__declspec(...)`, `[[...]]`, `_Noreturn`), or
/// None where one of them is not harmless (`HARMLESS_ATTRIBUTES`) or does not close.
fn strip_attributes(body: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let next = ["__attribute__", "__declspec", "[["]
            .iter()
            .filter_map(|a| rest.find(a).map(|i| (i, *a)))
            .min();
        let Some((i, a)) = next else {
            out.push_str(rest);
            break;
        };
        out.push_str(&rest[..i]);
        let after = &rest[i + a.len()..];
        let (open, close) = if a == "[[" { ('[', ']') } else { ('(', ')') };
        // Depth of the attribute list itself: inside `__attribute__((`, `__declspec(` or `[[`.
        let list = if a == "__declspec" { 1 } else { 2 };
        let mut depth: usize = if a == "[[" { 2 } else { 0 };
        let mut end = None;
        let mut names = vec![String::new()];
        for (j, ch) in after.char_indices() {
            if ch == open {
                depth += 1;
            } else if ch == close {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    end = Some(j + 1);
                    break;
                }
            } else if depth == 0 && !ch.is_whitespace() {
                break;
            } else if depth == list && ch == ',' {
                names.push(String::new());
            } else if depth == list && (ch.is_alphanumeric() || ch == '_' || ch == ':') {
                names.last_mut()?.push(ch);
            }
        }
        let e = end?;
        // Each attribute named (`format(printf, 1, 2), nonnull`, `gnu::cold`) must be harmless.
        for n in names.iter().filter(|n| !n.is_empty()) {
            let n = n.rsplit("::").next().unwrap_or(n).trim_matches('_');
            if !HARMLESS_ATTRIBUTES.contains(&n) {
                return None;
            }
        }
        rest = &after[e..];
    }
    Some(out.replace("_Noreturn", " "))
}

/// The line with every use of an attribute macro replaced by what it leaves (nothing, or its argument).
fn without_attribute_macro(line: &str, m: &Macro) -> String {
    if m.params.is_empty() && !line.contains(&format!("{}(", m.name)) {
        return replace_word(line, &m.name, &m.body);
    }
    let mut out = line.to_string();
    for _ in 0..8 {
        let Some(at) = find_word(&out, &m.name) else {
            break;
        };
        let rest = &out[at + m.name.len()..];
        let open = rest.len() - rest.trim_start().len();
        if !rest[open..].starts_with('(') {
            break;
        }
        let Some((args, used)) = split_args(&rest[open + 1..]) else {
            break;
        };
        let with = m
            .params
            .iter()
            .position(|p| *p == m.body)
            .and_then(|i| args.get(i))
            .map_or(String::new(), |a| a.trim().to_string());
        out = format!("{}{with}{}", &out[..at], &rest[open + 1 + used..]);
    }
    out
}

/// A line without its `//` comment (a `//` inside a string literal is taken for one: rare in code a
/// macro's use spans).
fn cut_comment(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// Where `word` first stands alone in `hay`.
fn find_word(hay: &str, word: &str) -> Option<usize> {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut from = 0;
    while let Some(i) = hay[from..].find(word).map(|i| i + from) {
        if !ident(hay[..i].chars().next_back()) && !ident(hay[i + word.len()..].chars().next()) {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}

fn index_macros(src: &str) -> Vec<Macro> {
    static DEF: OnceLock<Regex> = OnceLock::new();
    let def = DEF.get_or_init(|| {
        Regex::new(r"^\s*#\s*define\s+([A-Za-z_]\w*)\(([^)]*)\)(.*)$").expect("a valid pattern")
    });
    if !src.contains("#define") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut lines = src.split('\n');
    while let Some(l) = lines.next() {
        let Some(c) = def.captures(l) else { continue };
        let mut body = c[3].to_string();
        while body.trim_end().ends_with('\\') {
            body = body.trim_end().trim_end_matches('\\').to_string();
            body.push(' ');
            body.push_str(lines.next().unwrap_or(""));
        }
        let body = body.trim().to_string();
        let uses_indices = ["threadIdx", "blockIdx", "blockDim", "gridDim"]
            .iter()
            .any(|b| body.contains(b));
        // A macro that opens or closes a brace it does not close or open (`TABLE_BEGIN(T, name, n)` for
        // `static const T name[n] = {`) cannot be read by the parser where it is used: everything after it
        // would be lost to the error.
        let unbalanced = body.matches('{').count() != body.matches('}').count();
        if !(uses_indices || unbalanced) || body.contains('#') {
            continue;
        }
        let params: Vec<String> = c[2]
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        if params.iter().any(|p| p == "...") {
            continue;
        }
        out.push(Macro {
            name: c[1].to_string(),
            params,
            body,
        });
    }
    out
}

/// The line with its first use of `m` expanded, or None.
fn expand_line(line: &str, m: &Macro) -> Option<String> {
    let mut from = 0;
    while let Some(at) = line[from..].find(&m.name).map(|i| i + from) {
        from = at + m.name.len();
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &line[from..];
        let open = rest.len() - rest.trim_start().len();
        if !rest[open..].starts_with('(') {
            continue;
        }
        let (args, used) = split_args(&rest[open + 1..])?;
        if args.len() != m.params.len() {
            continue;
        }
        let mut body = m.body.clone();
        for (p, a) in m.params.iter().zip(&args) {
            let a = a.trim();
            // An expression keeps its own precedence; a name stays a name (it may be declared there).
            let simple = a.chars().all(|c| c.is_alphanumeric() || c == '_');
            body = replace_word(
                &body,
                p,
                &if simple {
                    a.to_string()
                } else {
                    format!("({a})")
                },
            );
        }
        return Some(format!("{}{body}{}", &line[..at], &rest[open + 1 + used..]));
    }
    None
}

/// The arguments of a use up to its closing parenthesis (on this line), and the bytes they took (the
/// parenthesis included).
fn split_args(s: &str) -> Option<(Vec<String>, usize)> {
    let mut depth = 0usize;
    let mut args = vec![String::new()];
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' if depth == 0 => {
                if args.len() == 1 && args[0].trim().is_empty() {
                    args.clear();
                }
                return Some((args, i + 1));
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        args.last_mut()?.push(c);
    }
    None
}

fn replace_word(hay: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(hay.len());
    let mut rest = hay;
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        out.push_str(&rest[..i]);
        if ident(before) || ident(after) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_stride_macro_is_expanded_in_place_and_lines_are_kept() {
        let src = "#define CUDA_KERNEL_LOOP(i, n) \\\n  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)\n\n__global__ void k(int n, float* y) {\n  CUDA_KERNEL_LOOP(index, n - 1) { y[index] = 0; }\n}\n";
        let out = expand(src);
        assert_eq!(out.lines().count(), src.lines().count());
        let line = out.lines().nth(4).unwrap();
        assert!(
            line.contains(
                "for (int index = blockIdx.x * blockDim.x + threadIdx.x; index < ((n - 1));"
            ),
            "{line}"
        );
        assert!(line.ends_with("{ y[index] = 0; }"), "{line}");
        // The definition itself stays as it was.
        assert!(out.starts_with("#define CUDA_KERNEL_LOOP(i, n) \\\n"));
    }

    #[test]
    fn qualifier_macros_become_what_they_stand_for_outside_the_preprocessor() {
        let src = "#define RESTRICT __restrict__\n#define DEV_INLINE __device__ __forceinline__\n#if defined(RESTRICT)\n#endif\nDEV_INLINE float f(float v) { return v; }\n__global__ void k(float* y_ptr) { float * RESTRICT y = y_ptr; y[0] = f(1.0f); }\n";
        let out = expand(src);
        assert_eq!(out.lines().count(), src.lines().count());
        assert!(out.contains("#if defined(RESTRICT)"), "{out}");
        assert!(out.contains("__device__ __forceinline__ float f("), "{out}");
        assert!(out.contains("float * __restrict__ y = y_ptr;"), "{out}");
        // One defined twice (under #if) is the compiler's to choose.
        let src2 = "#ifdef MSVC\n#define R __restrict\n#else\n#define R\n#endif\n__global__ void k(float * R y) { y[0] = 1; }\n";
        assert!(matches!(expand(src2), Cow::Borrowed(_)));
        // A macro with anything else in it is left alone.
        let src = "#define N 128\n#define CONST_N const int n\n__global__ void k(float* y) { y[0] = N; }\n";
        assert!(matches!(expand(src), Cow::Borrowed(_)));
    }

    /// A library's API macros (ggml.h: an export macro, `NORETURN`, a printf-format attribute, `DEPRECATED`
    /// wrapping a declaration over several lines), each defined differently per compiler, leave what the
    /// compiler reads once their attributes go: the declarations and the enum among them parse.
    #[test]
    fn attribute_macros_leave_what_they_wrap_over_lines_and_definitions() {
        let src = "#ifdef __GNUC__\n#define NORETURN __attribute__((noreturn))\n\
                   #define FMT(...) __attribute__((format(printf, __VA_ARGS__)))\n\
                   #define DEPRECATED(func, hint) func __attribute__((deprecated(hint)))\n#else\n\
                   #define NORETURN [[noreturn]]\n#define FMT(...)\n#define DEPRECATED(func, hint) func\n#endif\n\
                   NORETURN FMT(3, 4) void fail(const char * f, ...);\n\
                   DEPRECATED(\n    double old_size(int t), // use (new) size\n    \"use size()\");\n\
                   enum order { ASC, DESC };\n";
        let out = expand(src);
        assert_eq!(out.lines().count(), src.lines().count(), "{out}");
        let code: Vec<&str> = out.lines().skip(9).map(str::trim).collect();
        assert_eq!(code[0], "void fail(const char * f, ...);", "{out}");
        assert_eq!(code[1], "double old_size(int t);", "{out}");
        assert_eq!(&code[2..4], ["", ""], "{out}");
        assert_eq!(code[4], "enum order { ASC, DESC };");
        // Never the compiler's own names, nor attributes that change a layout; a name in a comment is no use.
        let src = "#ifdef OTHER_VENDOR\n#define __syncthreads()\n#define __shared__\n\
                   #define ALIGN(n) __declspec(align(n))\n#else\n#define ALIGN(n) __attribute__((aligned(n)))\n#endif\n\
                   struct ALIGN(16) v3 { float x, y, z; };\n__shared__ float t[4]; __syncthreads();\n";
        assert!(matches!(expand(src), Cow::Borrowed(_)), "{}", expand(src));
        let src = "#define DEPRECATED(f, h) f __attribute__((deprecated(h)))\nint x = 1; // was DEPRECATED(\nint y = 2;\n";
        assert_eq!(expand(src).lines().nth(2), Some("int y = 2;"));
        // Definitions that leave different things are the compiler's to choose.
        let src = "#ifdef A\n#define WRAP(f) f __attribute__((cold))\n#else\n#define WRAP(f) static f\n#endif\nWRAP(int g(void));\n";
        assert!(expand(src).contains("WRAP(int g(void));"));
    }

    #[test]
    fn a_macro_that_opens_a_brace_is_expanded_where_it_is_used() {
        let src = "#define TABLE_BEGIN(T, name, n) static const __device__ T name[n] = {\n#define TABLE_END() };\nTABLE_BEGIN(int, t, 2)\n  1, 2\nTABLE_END()\n";
        let out = expand(src);
        assert!(
            out.contains("\nstatic const __device__ int t[2] = {\n  1, 2\n};\n"),
            "{out}"
        );
    }

    #[test]
    fn other_macros_and_pasting_ones_are_left_alone() {
        let src = "#define SQR(x) ((x) * (x))\n#define IDX(a) a##_id + threadIdx.x\n__global__ void k(float* y) { y[0] = SQR(2); y[IDX(t)] = 1; }\n";
        assert!(matches!(expand(src), Cow::Borrowed(_)));
    }
}
