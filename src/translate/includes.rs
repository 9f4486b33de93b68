//! A CUDA file's own headers, read into the file before the analysis, as the compiler's preprocessor
//! would: real kernels keep their types, constants and `__device__` helpers in headers beside them
//! (`common.cuh`), and without those a translation cannot compile.
//!
//! A quoted include (or an angle include that names a local file) is looked for next to the including
//! file, then in each folder given with `-I`, and its text replaces the `#include` line, once per file
//! (include guards and `#pragma once` are what nearly every header has). A header is read only when its
//! real path lies below the translated file's folder or an `-I` folder, so no link or `..` leads out. An
//! include found nowhere stays as written (CUDA's own headers; a missing one is T033).
//!
//! Headers bring far more than a kernel needs (host code, the library's whole API): `Flat::from_header`
//! tells the translation which lines came from a header, and it carries from those only what its kernels
//! use (src/translate/emit.rs). `Flat::origin` names a line of the flattened text by file and line.

use super::TranslateError;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Headers read at most (a guard against include trees that are not a kernel's).
const MAX_FILES: usize = 2000;
/// Bytes of headers read at most.
const MAX_BYTES: u64 = 64 << 20;

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
    /// A file with no headers read in.
    pub fn alone(text: String, file: &str) -> Self {
        Flat {
            text,
            segments: vec![Segment {
                start: 0,
                file: file.to_string(),
                line: 1,
                header: false,
            }],
            headers: Vec::new(),
        }
    }

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

/// The name a directive includes, and whether it is quoted.
fn included(directive: &str) -> Option<(String, bool)> {
    let d = directive.trim_start_matches('#').trim_start();
    let rest = d.strip_prefix("include")?.trim();
    let (quoted, name) = if let Some(r) = rest.strip_prefix('"') {
        (true, r.split('"').next()?)
    } else if let Some(r) = rest.strip_prefix('<') {
        (false, r.split('>').next()?)
    } else {
        return None;
    };
    (!name.is_empty()).then(|| (name.to_string(), quoted))
}

/// A file being read into the flattened text: its lines, the next one to copy, the include directives by
/// line (1-based), where it lies and how it is shown.
struct Open {
    lines: Vec<String>,
    next: usize,
    includes: std::collections::BTreeMap<usize, (String, bool)>,
    dir: PathBuf,
    shown: String,
    header: bool,
}

impl Open {
    fn new(text: &str, dir: PathBuf, shown: String, header: bool) -> Self {
        let (_, directives) = crate::check::lex::clean(text);
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        if text.ends_with('\n') {
            lines.pop();
        }
        Open {
            lines,
            next: 0,
            includes: directives
                .into_iter()
                .filter_map(|(line, d)| included(&d).map(|i| (line, i)))
                .collect(),
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
    let own = main.parent().unwrap_or(Path::new("."));
    let own = if own.as_os_str().is_empty() {
        Path::new(".")
    } else {
        own
    };
    // Real paths of the folders a header may lie below, with how each is shown.
    let mut roots: Vec<(PathBuf, PathBuf)> = Vec::new();
    for (k, d) in std::iter::once(own)
        .chain(dirs.iter().map(PathBuf::as_path))
        .enumerate()
    {
        let real = d.canonicalize().map_err(|err| TranslateError::Read {
            file: d.to_path_buf(),
            err,
        })?;
        if !real.is_dir() {
            return Err(TranslateError::Read {
                file: d.to_path_buf(),
                err: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a folder (given with -I / --include)",
                ),
            });
        }
        let shown_root = if k == 0 {
            Path::new(shown)
                .parent()
                .unwrap_or(Path::new(""))
                .to_path_buf()
        } else {
            d.to_path_buf()
        };
        roots.push((real, shown_root));
    }
    let main_real = main.canonicalize().unwrap_or_else(|_| main.to_path_buf());
    let mut seen: BTreeSet<PathBuf> = BTreeSet::from([main_real.clone()]);
    let mut flat = Flat {
        text: String::with_capacity(text.len()),
        segments: Vec::new(),
        headers: Vec::new(),
    };
    let mut rows = 0usize;
    let mut bytes = 0u64;
    let mut stack = vec![Open::new(
        text,
        main_real.parent().unwrap_or(Path::new("/")).to_path_buf(),
        shown.to_string(),
        false,
    )];
    let mut resume = true; // a segment starts at the top file's next line
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
        let found = top.includes.get(&(i + 1)).and_then(|(name, quoted)| {
            // The including file's own folder first (quoted includes), then each root in order.
            let mut tries: Vec<PathBuf> = Vec::new();
            if *quoted {
                tries.push(top.dir.join(name));
            }
            tries.extend(roots.iter().map(|(r, _)| r.join(name)));
            tries.into_iter().find_map(|p| {
                let real = p.canonicalize().ok()?;
                let (root, shown_root) = roots.iter().find(|(r, _)| real.starts_with(r))?;
                real.is_file().then(|| {
                    let below = real.strip_prefix(root).unwrap_or(&real).to_path_buf();
                    (real, shown_root.join(below).display().to_string())
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
            if seen.len() > MAX_FILES {
                return Err(TranslateError::Includes(format!(
                    "{}:{}: more than {MAX_FILES} local headers: is an -I folder wider than the kernel's own headers?",
                    top.shown,
                    i + 1
                )));
            }
            bytes += std::fs::metadata(&real).map(|m| m.len()).unwrap_or(0);
            if bytes > MAX_BYTES {
                return Err(TranslateError::Includes(format!(
                    "{}:{}: local headers over {} MB in all",
                    top.shown,
                    i + 1,
                    MAX_BYTES >> 20
                )));
            }
            let htext = super::read_source(&real).map_err(|err| TranslateError::Read {
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
        // `#pragma once` means nothing once the header is read in (it is read once anyway).
        if !(top.header && line.trim() == "#pragma once") {
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
    fn a_header_outside_the_folders_is_not_read() {
        let outside = tempfile::tempdir().unwrap();
        let secret = write(outside.path(), "secret.cuh", "#define SECRET 1\n");
        let d = tempfile::tempdir().unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&secret, d.path().join("link.cuh")).unwrap();
        let rel = format!(
            "{}/secret.cuh",
            std::iter::repeat_n("..", 8).collect::<Vec<_>>().join("/")
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
