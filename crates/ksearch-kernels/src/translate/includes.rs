//! A CUDA file's own headers, read into the file before the analysis, as the compiler's preprocessor
//! would: real kernels keep their types, constants and `__device__` helpers in headers beside them
//! (`common.cuh`), and without those a translation cannot compile.
//!
//! A quoted include (or an angle include that names a local file) is looked for as `crate::includes`
//! says (next to the including file, then in each folder given with `-I`), and its text replaces the `#include` line, once per file
//! (include guards and `#pragma once` are what nearly every header has). A header is read only when its
//! real path lies below the translated file's folder or an `-I` folder, so no link or `..` leads out. An
//! include found nowhere stays as written (CUDA's own headers; a missing one is T033).
//!
//! Headers bring far more than a kernel needs (host code, the library's whole API): `Flat::from_header`
//! tells the translation which lines came from a header, and it carries from those only what its kernels
//! use (crates/ksearch-kernels/src/translate/emit.rs). `Flat::origin` names a line of the flattened text by file and line.

use super::TranslateError;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A run of lines of the flattened text that came from one file.
#[derive(Debug, Clone)]
struct Segment {
    /// First line of the run in the flattened text (0-based).
    start: usize,
    /// The file as the user names it (the translated file's path, or an include folder joined with the
    /// header's path below it).
    file: String,
    /// The run's first line in that file (1-based).
    line: usize,
    /// From a header (not the translated file).
    header: bool,
}

/// The translated file with its headers read in.
#[derive(Debug, Clone)]
pub struct Flat {
    pub text: String,
    segments: Vec<Segment>,
    /// The headers read, as shown.
    pub headers: Vec<String>,
}

impl Flat {
    fn segment(&self, row: usize) -> &Segment {
        let i = self.segments.partition_point(|s| s.start <= row);
        &self.segments[i.saturating_sub(1)]
    }

    /// Whether 0-based line `row` of the flattened text came from a header.
    pub fn from_header(&self, row: usize) -> bool {
        self.segment(row).header
    }

    /// The file and 1-based line that 1-based line `line` of the flattened text came from; the file is
    /// `None` for the translated file itself.
    pub fn origin(&self, line: usize) -> (Option<&str>, usize) {
        if line == 0 {
            return (None, 0);
        }
        let s = self.segment(line - 1);
        let at = s.line + (line - 1 - s.start);
        (s.header.then_some(s.file.as_str()), at)
    }
}
/// Predefined where CUDA device code is compiled (nvcc's device pass and NVRTC alike; `__NVCC__` is nvcc's
/// only, so it stays undecided), and the marks of other vendors' compilers, never defined there: a header's `#ifdef __CUDACC__` or
/// `#ifdef __cplusplus` (around `extern "C" {`) is decided as CUDA decides it.
const CUDA_DEFINED: &[&str] = &["__cplusplus", "__CUDACC__", "__CUDA_ARCH__"];
const CUDA_UNDEFINED: &[&str] = &[
    "__HIPCC__",
    "__HIP__",
    "__HIP_PLATFORM_AMD__",
    "__MUSACC__",
    "__MUSA__",
];

/// The branches of `#if`s met so far, as far as they can be told without the compiler. A condition on
/// whether a plain name is defined (`#ifdef X`, `#ifndef X`, `#if defined(X)`, `#elif !defined(X)`) is
/// decided by the `#define`s met before it in live text; any other condition is unknown, and its branches
/// are live. A dead branch's lines become blank: a header of another vendor's port (`#if
/// defined(GGML_USE_HIP) #include "vendors/hip.h"`) is not read in, nor its code parsed. Directives stay
/// as written (tree-sitter keeps what it cannot parse inside a branch, where it does no harm), except an
/// include guard's (`#ifndef X_H` / `#define X_H` ... `#endif`), which become blank lines, so that the
/// header's items lie at file scope, where the translation takes its items. Names that begin with `__` are
/// the compiler's and stay unknown, but for those CUDA's compilers are known to define or not.
#[derive(Default)]
struct Conditions {
    stack: Vec<Chain>,
    defined: BTreeSet<String>,
    /// Defined under a condition that could not be told: whether they are defined is unknown too.
    maybe: BTreeSet<String>,
}

/// One open `#if` chain.
struct Chain {
    /// The branch in progress is live (None: unknown).
    live: Option<bool>,
    /// A branch so far was certainly taken.
    taken: bool,
    /// An include guard's, with its directives blanked.
    guard: bool,
}

impl Conditions {
    fn active(&self) -> bool {
        self.stack.iter().all(|c| c.live != Some(false))
    }

    /// Whether a condition holds, when it is one on a single name being defined.
    fn decide(&self, cond: &str) -> Option<bool> {
        let c = cond.trim();
        let (negated, c) = match c.strip_prefix('!') {
            Some(rest) => (true, rest.trim()),
            None => (false, c),
        };
        let name = c.strip_prefix("defined")?.trim();
        let name = name
            .strip_prefix('(')
            .and_then(|n| n.strip_suffix(')'))
            .unwrap_or(name)
            .trim();
        let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if CUDA_DEFINED.contains(&name) {
            return Some(!negated);
        }
        if CUDA_UNDEFINED.contains(&name) {
            return Some(negated);
        }
        if !plain || name.starts_with("__") || self.maybe.contains(name) {
            return None;
        }
        Some(self.defined.contains(name) != negated)
    }

    /// Takes one directive (its text as the lexer joined it; `next` the file's next directive, which tells
    /// an include guard); says whether its line is kept.
    /// `has_elif`: the chain an `#if` opens has an `#elif` (its directives are then kept, decided or not:
    /// blanking the `#if` of a chain whose `#elif` stays unknown would leave that `#elif` without one).
    fn step(&mut self, directive: &str, next: Option<&str>, has_elif: bool) -> bool {
        let (word, rest) = split_directive(directive);
        let outer = self.active();
        let cond = |word: &str| match word {
            "ifdef" | "elifdef" => format!("defined({rest})"),
            "ifndef" | "elifndef" => format!("!defined({rest})"),
            _ => rest.to_string(),
        };
        match word {
            "if" | "ifdef" | "ifndef" => {
                let live = if outer {
                    self.decide(&cond(word))
                } else {
                    Some(false)
                };
                let guard = outer
                    && live == Some(true)
                    && word == "ifndef"
                    && next.map(split_directive) == Some(("define", rest));
                // A chain decided whole (`#ifdef __cplusplus` / `extern "C" {` / `#endif`) loses its
                // directives as the preprocessor would: what is left parses as the compiler sees it.
                let guard = guard || (outer && live.is_some() && !has_elif);
                self.stack.push(Chain {
                    live,
                    taken: live == Some(true),
                    guard,
                });
                outer && !guard
            }
            "elif" | "elifdef" | "elifndef" | "else" => {
                let Some(mut chain) = self.stack.pop() else {
                    return true;
                };
                let outer = self.active();
                chain.live = if !outer || chain.taken {
                    Some(false)
                } else if word == "else" {
                    // After unknown branches, the else is as unknown as they were.
                    if chain.live.is_none() {
                        None
                    } else {
                        Some(true)
                    }
                } else {
                    match self.decide(&cond(word)) {
                        Some(true) if chain.live.is_none() => None,
                        other => other,
                    }
                };
                chain.taken |= chain.live == Some(true);
                let kept = outer && !chain.guard;
                self.stack.push(chain);
                kept
            }
            "endif" => {
                let chain = self.stack.pop();
                self.active() && !chain.is_some_and(|c| c.guard)
            }
            "define" if outer => {
                let name = define_of(directive).map_or("", |d| d.0).to_string();
                if self.stack.iter().all(|c| c.live == Some(true)) {
                    self.defined.insert(name);
                } else {
                    self.maybe.insert(name);
                }
                true
            }
            "undef" if outer => {
                if self.stack.iter().all(|c| c.live == Some(true)) {
                    self.defined.remove(rest);
                } else {
                    self.maybe.insert(rest.to_string());
                }
                true
            }
            _ => outer,
        }
    }
}

/// The lines of the `#if`s whose chain has an `#elif` of its own, in one pass over a file's directives.
fn chains_with_elif(directives: &std::collections::BTreeMap<usize, String>) -> BTreeSet<usize> {
    let mut open: Vec<usize> = Vec::new();
    let mut out = BTreeSet::new();
    for (line, d) in directives {
        match split_directive(d).0 {
            "if" | "ifdef" | "ifndef" => open.push(*line),
            "elif" | "elifdef" | "elifndef" => {
                if let Some(l) = open.last() {
                    out.insert(*l);
                }
            }
            "endif" => {
                open.pop();
            }
            _ => {}
        }
    }
    out
}

/// A `#define`'s name and what follows it (`#define N (4 * 8)` → `("N", " (4 * 8)")`; a function-like
/// macro's follows with its `(`).
pub(crate) fn define_of(directive: &str) -> Option<(&str, &str)> {
    let (word, rest) = split_directive(directive);
    if word != "define" {
        return None;
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| rest.split_at(end))
}

/// A directive's word and the rest (`#  ifndef X_H` → `("ifndef", "X_H")`).
fn split_directive(directive: &str) -> (&str, &str) {
    let d = directive.trim_start_matches('#').trim_start();
    let (word, rest) = d.split_once(char::is_whitespace).unwrap_or((d, ""));
    (word, rest.trim())
}

/// A file being read into the flattened text: its lines, the next one to copy, the include directives by
/// line (1-based), where it lies and how it is shown.
struct Open {
    lines: Vec<String>,
    next: usize,
    directives: std::collections::BTreeMap<usize, String>,
    /// The lines of its `#if`s whose chain has an `#elif`.
    elif_chains: BTreeSet<usize>,
    dir: PathBuf,
    shown: String,
    header: bool,
}

impl Open {
    fn new(text: &str, dir: PathBuf, shown: String, header: bool) -> Self {
        let directives = crate::check::lex::directives(text);
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        if text.ends_with('\n') {
            lines.pop();
        }
        let directives = directives.into_iter().collect();
        Open {
            lines,
            next: 0,
            elif_chains: chains_with_elif(&directives),
            directives,
            dir,
            shown,
            header,
        }
    }
}

/// Reads `main`'s local headers into its text (`text`, shown as `shown`), searching `dirs` after each
/// including file's own folder.
pub fn flatten(
    main: &Path,
    shown: &str,
    text: &str,
    dirs: &[PathBuf],
) -> Result<Flat, TranslateError> {
    // Real paths of the folders a header may lie below, with how each is shown.
    let roots = crate::includes::roots(main, shown, dirs).map_err(|b| TranslateError::Read {
        file: b.folder,
        err: b.err,
    })?;
    let main_real = main.canonicalize().unwrap_or_else(|_| main.to_path_buf());
    let mut seen: BTreeSet<PathBuf> = BTreeSet::from([main_real.clone()]);
    let mut flat = Flat {
        text: String::with_capacity(text.len()),
        segments: Vec::new(),
        headers: Vec::new(),
    };
    let mut rows = 0usize;
    let mut count = crate::includes::Taken::default();
    let mut stack = vec![Open::new(
        text,
        main_real.parent().unwrap_or(Path::new("/")).to_path_buf(),
        shown.to_string(),
        false,
    )];
    let mut resume = true; // a segment starts at the top file's next line
    let mut conditions = Conditions::default();
    let mut blank_continuation = false;
    while let Some(top) = stack.last_mut() {
        if top.next >= top.lines.len() {
            stack.pop();
            resume = true;
            continue;
        }
        let i = top.next;
        top.next += 1;
        if resume {
            flat.segments.push(Segment {
                start: rows,
                file: top.shown.clone(),
                line: i + 1,
                header: top.header,
            });
            resume = false;
        }
        let directive = top.directives.get(&(i + 1)).cloned();
        let mut kept = match &directive {
            Some(d) => {
                let next = top
                    .directives
                    .range(i + 2..)
                    .next()
                    .map(|(_, n)| n.as_str());
                conditions.step(d, next, top.elif_chains.contains(&(i + 1)))
            }
            None => conditions.active(),
        };
        if blank_continuation {
            kept = false;
        }
        let found = directive
            .as_deref()
            .filter(|_| kept)
            .and_then(crate::includes::included)
            .and_then(|(name, quoted)| {
                // The including file's own folder first (quoted includes), then each root in order.
                let mut tries: Vec<PathBuf> = Vec::new();
                if quoted {
                    tries.push(top.dir.join(&name));
                }
                tries.extend(roots.iter().map(|r| r.real.join(&name)));
                tries.into_iter().find_map(|p| {
                    let real = p.canonicalize().ok()?;
                    let (_, root) = crate::includes::root_of(&roots, &real)?;
                    real.is_file().then(|| {
                        let below = real.strip_prefix(&root.real).unwrap_or(&real).to_path_buf();
                        (real, root.shown.join(below).display().to_string())
                    })
                })
            });
        if let Some((real, header_shown)) = found {
            // The directive's line stays, blanked, so the including file's lines keep their count.
            flat.text.push('\n');
            rows += 1;
            if !seen.insert(real.clone()) {
                continue;
            }
            count
                .take(std::fs::metadata(&real).map(|m| m.len()).unwrap_or(0))
                .map_err(|why| {
                    TranslateError::Includes(format!("{}:{}: {why}", top.shown, i + 1))
                })?;
            let htext =
                ksearch_model::cpplex::read_source(&real).map_err(|err| TranslateError::Read {
                    file: real.clone(),
                    err,
                })?;
            flat.headers.push(header_shown.clone());
            let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
            stack.push(Open::new(&htext, dir, header_shown, true));
            resume = true;
            continue;
        }
        let line = &top.lines[i];
        // A blanked line's continuation lines go with it.
        blank_continuation = !kept && line.trim_end().ends_with('\\');
        // `#pragma once` means nothing once the header is read in (it is read once anyway).
        if kept && !(top.header && line.trim() == "#pragma once") {
            flat.text.push_str(line);
        }
        flat.text.push('\n');
        rows += 1;
    }
    if flat.segments.is_empty() {
        flat.segments.push(Segment {
            start: 0,
            file: shown.to_string(),
            line: 1,
            header: false,
        });
    }
    Ok(flat)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn headers_are_read_in_once_in_place_and_lines_keep_their_origin() {
        let d = tempfile::tempdir().unwrap();
        let inc = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "a.cuh",
            "#pragma once\n#include \"b.cuh\"\n#define A 1\n",
        );
        write(inc.path(), "b.cuh", "#define B 2\n#include \"a.cuh\"\n");
        let main = write(
            d.path(),
            "k.cu",
            "#include \"a.cuh\"\n#include <cuda_fp16.h>\n#include \"b.cuh\"\n#include \"gone.cuh\"\n__global__ void k() {}\n",
        );
        let src = std::fs::read_to_string(&main).unwrap();
        let flat = flatten(&main, "k.cu", &src, &[inc.path().to_path_buf()]).unwrap();
        let lines: Vec<&str> = flat.text.lines().collect();
        // a.cuh at line 1 (its own b.cuh first), b.cuh once, CUDA's header and a missing one as written.
        let b = lines.iter().position(|l| *l == "#define B 2").unwrap();
        let a = lines.iter().position(|l| *l == "#define A 1").unwrap();
        assert!(b < a, "{lines:?}");
        assert_eq!(lines.iter().filter(|l| l.contains("#define B")).count(), 1);
        assert!(!flat.text.contains("#pragma once"));
        assert!(lines.contains(&"#include <cuda_fp16.h>"));
        assert!(lines.contains(&"#include \"gone.cuh\""));
        let k = lines
            .iter()
            .position(|l| l.starts_with("__global__"))
            .unwrap();
        assert_eq!(flat.origin(k + 1), (None, 5));
        assert!(!flat.from_header(k));
        let (file, line) = flat.origin(a + 1);
        assert_eq!((file.map(|f| f.ends_with("a.cuh")), line), (Some(true), 3));
        assert!(flat.from_header(a) && flat.from_header(b));
        assert_eq!(flat.headers.len(), 2);
    }

    #[test]
    fn includes_in_branches_that_cannot_be_live_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("hip.h", "#define FROM_HIP 1\n"),
            ("musa.h", "#define FROM_MUSA 1\n"),
            ("cuda.h", "#define FROM_CUDA 1\n"),
            ("fp16.h", "#define FROM_FP16 1\n"),
            ("maybe.h", "#define FROM_MAYBE 1\n#define STRIDED 1\n"),
            ("strided.h", "#define FROM_STRIDED 1\n"),
            ("other.h", "#define FROM_OTHER 1\n"),
        ] {
            write(d.path(), name, text);
        }
        let text = "#define USE_FP16\n\
                    #if defined(USE_HIP)\n#include \"hip.h\"\n\
                    #elif defined(USE_MUSA)\n#include \"musa.h\"\n\
                    #else\n#include \"cuda.h\"\n#endif\n\
                    #ifdef USE_FP16\n#include \"fp16.h\"\n#endif\n\
                    #if CUDART_VERSION >= 12000\n#include \"maybe.h\"\n#else\n#include \"other.h\"\n#endif\n\
                    #ifndef STRIDED\n#include \"strided.h\"\n#endif\n";
        let main = write(d.path(), "k.cu", text);
        let flat = flatten(&main, "k.cu", text, &[]).unwrap();
        for (word, read) in [
            ("FROM_HIP", false),
            ("FROM_MUSA", false),
            ("FROM_CUDA", true),
            ("FROM_FP16", true),
            // A condition on a value is unknown: both branches may be live.
            ("FROM_MAYBE", true),
            ("FROM_OTHER", true),
            // Defined in a branch that may or may not be taken: whether it is defined is unknown too.
            ("FROM_STRIDED", true),
        ] {
            assert_eq!(flat.text.contains(word), read, "{word}:\n{}", flat.text);
        }
        // Dead branches are blank lines (lines keep their numbers); directives stay.
        assert!(
            flat.text.contains("#if defined(USE_HIP)\n\n#elif"),
            "{}",
            flat.text
        );
        assert!(
            flat.text.contains("#if CUDART_VERSION >= 12000\n"),
            "{}",
            flat.text
        );
    }

    #[test]
    fn a_guarded_header_lies_at_file_scope_and_dead_branches_are_blank() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "g.cuh",
            "#ifndef G_CUH\n#define G_CUH\n__device__ int g() { return 1; }\n#endif\n",
        );
        let text = "#include \"g.cuh\"\n#include \"g.cuh\"\n#if defined(NOPE)\nint a;\n#elif X > 1\nint b;\n#else\nint c;\n#endif\n#if defined(NOPE) && \\\n  defined(ALSO)\nint d;\n#endif\n";
        let main = write(d.path(), "k.cu", text);
        let flat = flatten(&main, "k.cu", text, &[]).unwrap();
        let lines: Vec<&str> = flat.text.lines().collect();
        assert!(lines.contains(&"__device__ int g() { return 1; }"));
        assert!(!flat.text.contains("#ifndef G_CUH"), "{}", flat.text);
        assert_eq!(flat.text.matches("#endif").count(), 2, "{}", flat.text);
        assert!(!flat.text.contains("int a;"), "{}", flat.text);
        assert!(
            flat.text
                .contains("#elif X > 1\nint b;\n#else\nint c;\n#endif"),
            "{}",
            flat.text
        );
        // A condition written over two lines is unknown, and kept whole.
        assert!(
            flat.text
                .contains("#if defined(NOPE) && \\\n  defined(ALSO)\nint d;\n#endif")
        );
        let k = lines.iter().position(|l| *l == "int b;").unwrap();
        assert_eq!(flat.origin(k + 1), (None, 6));
    }

    #[test]
    fn a_header_outside_the_folders_is_not_read() {
        let outside = tempfile::tempdir().unwrap();
        let secret = write(outside.path(), "secret.cuh", "#define SECRET 1\n");
        let d = tempfile::tempdir().unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&secret, d.path().join("link.cuh")).unwrap();
        // `..` from the file's folder to the folder that holds the secret.
        let rel = format!(
            "../{}/secret.cuh",
            outside.path().file_name().unwrap().to_string_lossy()
        );
        assert!(
            d.path().join(&rel).is_file(),
            "the test's path must reach the file"
        );
        let text = format!(
            "#include \"link.cuh\"\n#include \"{rel}\"\n#include \"{}\"\n",
            secret.display()
        );
        let main = write(d.path(), "k.cu", &text);
        let flat = flatten(&main, "k.cu", &text, &[]).unwrap();
        assert!(!flat.text.contains("SECRET"), "{}", flat.text);
        assert!(flat.headers.is_empty());
    }
}
