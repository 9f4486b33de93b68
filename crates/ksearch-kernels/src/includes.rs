//! Local includes, found as a compiler finds them: a quoted include next to the including file first, then
//! in the source's own folder and each folder given with `-I` (the roots), in order; a header counts only
//! when its real path lies below a root, so no link or `..` leads out; the whole tree is bounded. The
//! translator reads the headers it finds into the file (`translate/includes.rs`), the checker copies them
//! beside its confined compiler (`check/includes.rs`); what an include names and where it may be found is
//! decided here for both.

use std::path::{Path, PathBuf};

/// Headers followed at most (a guard against include trees that are not a kernel's).
pub const MAX_FILES: usize = 2000;
/// Bytes of headers read at most.
pub const MAX_BYTES: u64 = 64 << 20;

/// The name a directive includes and whether it is quoted, if it is an `#include` of a literal name (a
/// macro-made include is left to the compiler, which reports it if it is missing).
pub fn included(directive: &str) -> Option<(String, bool)> {
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

/// A folder headers are searched in: its real path, and how findings show it (as the user gave it).
#[derive(Debug, Clone)]
pub struct Root {
    pub real: PathBuf,
    pub shown: PathBuf,
}

/// A root that is no folder.
#[derive(Debug)]
pub struct BadRoot {
    pub folder: PathBuf,
    pub err: std::io::Error,
}

/// The roots of `main` (shown as `shown`) and `dirs`: `main`'s own folder first.
pub fn roots(main: &Path, shown: &str, dirs: &[PathBuf]) -> Result<Vec<Root>, BadRoot> {
    let own = match main.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let shown_own = Path::new(shown).parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    for (k, (d, shown_d)) in std::iter::once((own, shown_own))
        .chain(dirs.iter().map(|d| (d.as_path(), d.as_path())))
        .enumerate()
    {
        let bad = |err: std::io::Error| BadRoot {
            folder: d.to_path_buf(),
            err,
        };
        let real = d.canonicalize().map_err(|e| {
            bad(if k == 0 {
                e
            } else {
                std::io::Error::new(e.kind(), format!("{e} (a folder given with -I)"))
            })
        })?;
        if !real.is_dir() {
            return Err(bad(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not a folder (given with -I / --include)",
            )));
        }
        out.push(Root {
            real,
            shown: shown_d.to_path_buf(),
        });
    }
    Ok(out)
}

/// The root a real path lies below (the first, when roots nest).
pub fn root_of<'r>(roots: &'r [Root], real: &Path) -> Option<(usize, &'r Root)> {
    roots
        .iter()
        .enumerate()
        .find(|(_, r)| real.starts_with(&r.real))
}

/// The headers taken so far, against [`MAX_FILES`] and [`MAX_BYTES`].
#[derive(Debug, Default)]
pub struct Taken {
    files: usize,
    bytes: u64,
}

impl Taken {
    /// Counts one more header of `bytes`; why not, when a limit is passed (the caller names where).
    pub fn take(&mut self, bytes: u64) -> Result<(), String> {
        self.files += 1;
        self.bytes += bytes;
        if self.files > MAX_FILES {
            return Err(format!(
                "more than {MAX_FILES} local headers: is an -I folder wider than the kernel's own headers?"
            ));
        }
        if self.bytes > MAX_BYTES {
            return Err(format!("local headers over {} MB in all", MAX_BYTES >> 20));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_include_names_its_file_and_says_whether_it_is_quoted() {
        assert_eq!(included("#include \"a/b.h\""), Some(("a/b.h".into(), true)));
        assert_eq!(
            included("#  include <x.h> // c"),
            Some(("x.h".into(), false))
        );
        assert_eq!(included("#include HEADER"), None);
        assert_eq!(included("#define X"), None);
    }

    #[test]
    fn roots_are_real_folders_the_first_the_sources_own() {
        let d = tempfile::tempdir().unwrap();
        let inc = tempfile::tempdir().unwrap();
        let main = d.path().join("k.cu");
        let r = roots(&main, "src/k.cu", &[inc.path().to_path_buf()]).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].shown, Path::new("src"));
        assert_eq!(root_of(&r, &r[1].real.join("h.cuh")).unwrap().0, 1);
        // Nested roots: a header below both belongs to the first.
        let nested = roots(&main, "k.cu", &[d.path().to_path_buf()]).unwrap();
        assert_eq!(
            root_of(&nested, &nested[1].real.join("h.cuh")).unwrap().0,
            0
        );
        let e = roots(&main, "k.cu", &[d.path().join("none")]).unwrap_err();
        assert!(e.err.to_string().contains("-I"), "{}", e.err);
        assert!(
            roots(Path::new("k.cu"), "k.cu", &[]).is_ok(),
            "a bare file name is in `.`"
        );
    }

    #[test]
    fn the_tree_is_bounded_in_files_and_bytes() {
        let mut t = Taken::default();
        for _ in 0..MAX_FILES {
            t.take(1).unwrap();
        }
        assert!(t.take(1).unwrap_err().contains("more than 2000"));
        let mut t = Taken::default();
        assert!(t.take(MAX_BYTES + 1).unwrap_err().contains("MB in all"));
    }
}
