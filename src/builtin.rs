//! Built-in tasks and the evaluation worker travel inside the binary, so `ksearch` works from any
//! directory. They are unpacked once into the cache, under a folder named by their content hash.

use anyhow::{Context, Result, bail};
use include_dir::{Dir, include_dir};
use std::path::{Path, PathBuf};

static TASKS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/tasks");
static PYTHON: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/python");
static RECORDINGS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/recordings");

/// A recording shipped with ksearch (`recordings/NAME.jsonl`), by name, with or without the folder and
/// extension, so `--llm replay:recordings/matmul-world-model.jsonl` works from any directory.
pub fn recording(name: &str) -> Option<&'static str> {
    let stem = name.strip_prefix("recordings/").unwrap_or(name);
    let stem = stem.strip_suffix(".jsonl").unwrap_or(stem);
    RECORDINGS
        .get_file(format!("{stem}.jsonl"))
        .and_then(|f| f.contents_utf8())
}

/// The names of the shipped recordings.
pub fn recording_names() -> Vec<String> {
    RECORDINGS
        .files()
        .filter_map(|f| f.path().file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .collect()
}

/// `$KSEARCH_HOME`, else `$XDG_CACHE_HOME/ksearch`, else `~/.cache/ksearch`.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("KSEARCH_HOME") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("ksearch");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache").join("ksearch")
}

fn wanted(path: &Path) -> bool {
    !path
        .components()
        .any(|c| c.as_os_str() == "__pycache__" || c.as_os_str() == ".pytest_cache")
        && path.extension().is_none_or(|e| e != "pyc")
}

fn files<'a>(dir: &'a Dir<'a>, out: &mut Vec<&'a include_dir::File<'a>>) {
    for f in dir.files() {
        if wanted(f.path()) {
            out.push(f);
        }
    }
    for d in dir.dirs() {
        files(d, out);
    }
}

fn content_hash(dir: &Dir<'_>) -> String {
    let mut all = Vec::new();
    files(dir, &mut all);
    all.sort_by_key(|f| f.path());
    let mut h = blake3::Hasher::new();
    for f in all {
        h.update(f.path().to_string_lossy().as_bytes());
        h.update(&[0]);
        h.update(f.contents());
    }
    h.finalize().to_hex()[..12].to_string()
}

/// Unpacks `dir` under `<cache>/<label>-<hash>` unless already there; returns that folder.
fn unpack(dir: &Dir<'_>, label: &str) -> Result<PathBuf> {
    let dest = cache_root().join(format!("{label}-{}", content_hash(dir)));
    if dest.join(".complete").exists() {
        mark_used(&dest);
        return Ok(dest);
    }
    let parent = dest.parent().expect("cache folder has a parent");
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // Unpack beside the destination, then rename, so a reader never sees half a folder.
    let tmp = tempdir_in(parent, label)?;
    let mut all = Vec::new();
    files(dir, &mut all);
    for f in all {
        let p = tmp.join(f.path());
        std::fs::create_dir_all(p.parent().unwrap())?;
        std::fs::write(&p, f.contents()).with_context(|| format!("writing {}", p.display()))?;
    }
    std::fs::write(tmp.join(".complete"), b"")?;
    match std::fs::rename(&tmp, &dest) {
        Ok(()) => {}
        // Another process won the race: use its copy.
        Err(_) if dest.join(".complete").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Err(e) => return Err(e).with_context(|| format!("moving into {}", dest.display())),
    }
    Ok(dest)
}

/// Renews a cache folder's date: `ksearch gc` takes "unused for N days" from it.
pub fn mark_used(dir: &Path) {
    let _ = std::fs::File::open(dir).and_then(|f| f.set_modified(std::time::SystemTime::now()));
}

fn tempdir_in(parent: &Path, label: &str) -> Result<PathBuf> {
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let p = parent.join(format!(".{label}-tmp-{nonce}"));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

/// The cache folder name this binary unpacks its worker into (`gc` keeps it).
pub fn worker_dir_name() -> String {
    format!("python-{}", content_hash(&PYTHON))
}

/// The folder holding the `ksearch_worker` package and `requirements.txt`.
pub fn python_dir() -> Result<PathBuf> {
    unpack(&PYTHON, "python")
}

pub fn requirements() -> &'static str {
    PYTHON
        .get_file("requirements.txt")
        .and_then(|f| f.contents_utf8())
        .unwrap_or("")
}

/// Names of the built-in tasks.
pub fn task_names() -> Vec<String> {
    let mut names: Vec<String> = TASKS
        .dirs()
        .filter(|d| d.get_file(d.path().join("task.toml")).is_some())
        .map(|d| d.path().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

/// Resolves a task argument: a folder holding `task.toml`, or the name of a built-in task.
pub fn task_dir(arg: &str) -> Result<PathBuf> {
    let p = Path::new(arg);
    if p.join("task.toml").is_file() {
        return Ok(p.to_path_buf());
    }
    let names = task_names();
    if names.iter().any(|n| n == arg) {
        return Ok(unpack(&TASKS, "tasks")?.join(arg));
    }
    if p.is_dir() {
        bail!(
            "{}: not a task folder (no task.toml); see docs/formats.md §1",
            p.display()
        );
    }
    bail!(
        "no task `{arg}`: give a folder holding task.toml, or one of the built-in tasks: {}",
        names.join(", ")
    )
}
