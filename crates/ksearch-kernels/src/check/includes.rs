//! The local headers of a complete Metal source: its quoted includes (and angle includes that are not
//! Metal's own), found as Apple's compiler finds them (`crate::includes`: next to the including file first,
//! then in the include folders given with `-I`), followed transitively.
//!
//! The compiler that checks the source runs confined to a scratch folder (crates/ksearch-kernels/src/jail.rs) and cannot walk the
//! user's tree, so every header found is copied there, each include root as a folder of its own
//! (`inc0/` for the source's own folder, `inc1/`... for the `-I` folders) and handed to the compiler as `-I
//! incN`: the compiler resolves includes itself, with its own rules (include guards, `#pragma once`,
//! includes in inactive `#if` branches), on the same tree shape as the user's.
//!
//! Only `ksearch check FILE` follows includes: a candidate's kernel is compiled by MLX, where no file but
//! Metal's own headers exists (M013).

use super::CheckError;
use std::collections::{BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

/// One local header.
#[derive(Debug, Clone)]
pub struct Header {
    /// How findings name it: the include root as the user gave it, joined with the path below it.
    pub shown: String,
    /// Where it lies in the scratch folder (`inc1/steel/gemm/gemm.h`), which is how the compiler names it.
    pub scratch: String,
    pub text: String,
}

/// What following the includes found.
#[derive(Debug, Default)]
pub struct Local {
    pub headers: Vec<Header>,
    /// The scratch roots to hand the compiler, in search order (`inc0`, `inc1`, ...).
    pub roots: Vec<String>,
    /// Scratch folders the compiler walks through on its way to a header (`inc0/d` for `#include
    /// "d/../x.h"`), created although no header lies in them.
    pub dirs: Vec<String>,
    /// Includes found nowhere: (shown file, line, name as written); the compiler says whether they matter
    /// (an include in an inactive `#if` branch does not).
    pub missing: Vec<(String, usize, String)>,
}

/// A file whose includes are still to be followed: how it is shown, where it lies (root, path below it;
/// None for the checked file), its text.
struct Pending {
    shown: String,
    at: Option<(usize, PathBuf)>,
    text: String,
}

/// Metal's own library headers (the shim stands for them), when no local file has the name.
fn metal_header(name: &str) -> bool {
    name.starts_with("metal_") || name == "simd/simd.h"
}

/// `a/./b/../c` as `a/c`; `None` when it climbs above its start.
pub(super) fn normal(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(x) => out.push(x),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Follows the includes of `text` (the file `main`, shown as `shown`) through `dirs`.
pub fn gather(main: &Path, shown: &str, text: &str, dirs: &[PathBuf]) -> Result<Local, CheckError> {
    // Each root's real path (a header is read only when its own real path lies below it, so no link
    // leads out) and how it is shown.
    let roots = crate::includes::roots(main, shown, dirs).map_err(|b| CheckError::Io {
        file: b.folder,
        err: b.err,
    })?;
    let mut local = Local {
        roots: (0..roots.len()).map(|r| format!("inc{r}")).collect(),
        ..Default::default()
    };
    // (root, path below it) of every header taken, the scratch name of each real file (one file reached
    // through two roots is one file, for `#pragma once`), and the files still to read.
    let mut taken: BTreeSet<(usize, PathBuf)> = BTreeSet::new();
    let mut copies: std::collections::BTreeMap<PathBuf, String> = Default::default();
    let mut queue = VecDeque::from([Pending {
        shown: shown.to_string(),
        at: None,
        text: text.to_string(),
    }]);
    let mut count = crate::includes::Taken::default();
    while let Some(Pending {
        shown: from_shown,
        at: from,
        text,
    }) = queue.pop_front()
    {
        let directives = super::lex::directives(&text);
        for (line, d) in directives {
            let Some((name, quoted)) = crate::includes::included(&d) else {
                continue;
            };
            // The including file's own folder first (quoted includes only), then every root in order.
            let mut tries: Vec<(usize, PathBuf)> = Vec::new();
            if quoted {
                match &from {
                    Some((r, rel)) => {
                        tries.push((*r, rel.parent().unwrap_or(Path::new("")).join(&name)))
                    }
                    None => tries.push((0, PathBuf::from(&name))),
                }
            }
            tries.extend((0..roots.len()).map(|r| (r, PathBuf::from(&name))));
            let found = tries.into_iter().find_map(|(r, raw)| {
                let rel = normal(&raw)?;
                let real = roots[r].real.join(&rel).canonicalize().ok()?;
                (real.is_file() && real.starts_with(&roots[r].real)).then_some((r, raw, rel, real))
            });
            let Some((r, raw, rel, real)) = found else {
                if !metal_header(&name) {
                    local.missing.push((from_shown.clone(), line, name));
                }
                continue;
            };
            // The folders the compiler passes through on the name as written (`d/../x.h`).
            let mut walked = PathBuf::from(format!("inc{r}"));
            for c in raw.parent().unwrap_or(Path::new("")).components() {
                walked.push(c);
                if let Some(w) = normal(&walked).filter(|_| matches!(c, Component::Normal(_))) {
                    let w = w.display().to_string();
                    if !local.dirs.contains(&w) {
                        local.dirs.push(w);
                    }
                }
            }
            if taken.contains(&(r, rel.clone())) {
                continue;
            }
            let first = copies.get(&real).cloned();
            let size = match first {
                Some(_) => 0, // a second name of a file already copied
                None => std::fs::metadata(&real).map(|m| m.len()).unwrap_or(0),
            };
            count
                .take(size)
                .map_err(|why| CheckError::Includes(format!("{from_shown}:{line}: {why}")))?;
            let scratch = format!("inc{r}/{}", rel.display());
            taken.insert((r, rel.clone()));
            if let Some(first) = first {
                // Already copied under another root: this name leads to that copy.
                let up = "../".repeat(rel.components().count());
                local.headers.push(Header {
                    shown: roots[r].shown.join(&rel).display().to_string(),
                    scratch,
                    text: format!("#include \"{up}{first}\"\n"),
                });
                continue;
            }
            copies.insert(real.clone(), scratch.clone());
            let text = std::fs::read(&real).map_err(|e| CheckError::Io {
                file: real.clone(),
                err: e,
            })?;
            let text = ksearch_model::cpplex::decode_source(&text);
            let shown = roots[r].shown.join(&rel).display().to_string();
            local.headers.push(Header {
                shown: shown.clone(),
                scratch,
                text: text.clone(),
            });
            queue.push_back(Pending {
                shown,
                at: Some((r, rel)),
                text,
            });
        }
    }
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_found_next_to_the_includer_then_in_the_folders() {
        let d = tempfile::tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        };
        w(
            "src/k.metal",
            "#include <metal_stdlib>\n#include \"common.h\"\n#include \"lib/a.h\"\n#include \"gone.h\"\n",
        );
        w("src/common.h", "#pragma once\n");
        w("inc/lib/a.h", "#include \"b.h\"\n#include \"common.h\"\n");
        w("inc/lib/b.h", "#include \"../lib/a.h\"\n");
        let main = d.path().join("src/k.metal");
        let text = std::fs::read_to_string(&main).unwrap();
        let l = gather(&main, "src/k.metal", &text, &[d.path().join("inc")]).unwrap();
        let scratch: Vec<&str> = l.headers.iter().map(|h| h.scratch.as_str()).collect();
        assert_eq!(scratch, ["inc0/common.h", "inc1/lib/a.h", "inc1/lib/b.h"]);
        assert_eq!(l.headers[0].shown, "src/common.h");
        assert_eq!(l.roots, ["inc0", "inc1"]);
        assert_eq!(
            l.missing,
            [("src/k.metal".to_string(), 4, "gone.h".to_string())]
        );
    }

    #[test]
    fn a_link_out_of_the_folder_is_not_followed_and_a_file_reached_twice_is_one_copy() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("k/lib")).unwrap();
        std::fs::write(d.path().join("secret.h"), "x").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret.h"), d.path().join("k/leak.h")).unwrap();
        std::fs::write(d.path().join("k/lib/a.h"), "#pragma once\n").unwrap();
        std::fs::write(d.path().join("k/metal_utils.h"), "\n").unwrap();
        let main = d.path().join("k/m.metal");
        let src = "#include \"leak.h\"\n#include \"lib/a.h\"\n#include \"a.h\"\n#include \"metal_utils.h\"\n#include <metal_stdlib>\n";
        let l = gather(&main, "k/m.metal", src, &[d.path().join("k/lib")]).unwrap();
        let scratch: Vec<&str> = l.headers.iter().map(|h| h.scratch.as_str()).collect();
        assert_eq!(scratch, ["inc0/lib/a.h", "inc1/a.h", "inc0/metal_utils.h"]);
        assert_eq!(l.headers[1].text, "#include \"../inc0/lib/a.h\"\n");
        assert_eq!(l.missing.len(), 1, "{:?}", l.missing);
        assert_eq!(l.missing[0].2, "leak.h");
    }

    #[test]
    fn an_include_that_climbs_out_of_its_root_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("secret.h"), "x").unwrap();
        let main = d.path().join("a/k.metal");
        let l = gather(&main, "a/k.metal", "#include \"../secret.h\"\n", &[]).unwrap();
        assert!(l.headers.is_empty());
        assert_eq!(l.missing.len(), 1);
    }
}
