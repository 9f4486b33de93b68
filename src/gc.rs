//! `ksearch gc`: what neither the store nor this version of ksearch needs any more. In the store, candidates
//! no run refers to (left by `ksearch runs rm`) and the build folders of evaluators that are gone (a killed
//! run's: a live evaluator holds a lock on its folder, `eval::BUILD_OWNER`); in the cache folder
//! (`builtin::cache_root`), the unpacked worker folders and the Python environments of other versions, and
//! reference outputs, each unused for a while (every use renews a folder's date). Everything removed here is
//! made again on demand (a resumed run recomputes a reference it needs), so collecting loses no result, only
//! time. The unpacked built-in tasks of other versions stay: runs of those versions name them as their task
//! folder.

use crate::store::Store;
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// One thing `gc` removes (or, with `--dry-run`, would remove).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Item {
    /// `candidate` (in the store), `build` (a build folder no live evaluator holds), `version` (an unpacked
    /// folder or environment of another version), `reference` (cached reference outputs).
    pub kind: &'static str,
    /// The candidate's hash, or the path.
    pub name: String,
    pub bytes: u64,
}

/// The cache entries this binary uses (kept whatever their age): its unpacked folders and environment.
pub fn current_cache_entries() -> Vec<String> {
    [
        crate::builtin::worker_dir_name(),
        crate::pyenv::venv_dir_name(),
    ]
    .into_iter()
    .collect()
}

/// An unpack in progress is never collected, whatever `--older-than` says.
const UNPACK_GRACE: Duration = Duration::from_secs(3600);

/// Cache entries under `root` that can go: folders of other versions (`python-*`, `venv-*` not in `keep`,
/// and leftovers of interrupted unpacks, `.python-tmp-…`, after an hour at least) and cached references,
/// each last used (modified) more than `older_than` ago. Other entries (the llama server build, measured peaks) are
/// not ksearch's to collect.
pub fn stale_cache(root: &Path, keep: &[String], older_than: Duration) -> Vec<(Item, PathBuf)> {
    let now = SystemTime::now();
    let age = |p: &Path| age(p, now);
    let old = |p: &Path| age(p) >= older_than;
    let mut out = Vec::new();
    for entry in read_dir_sorted(root) {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // `.python-tmp-…`: an unpack not (yet) renamed into place.
        let unpacking = name.starts_with('.');
        let versioned = ["python-", "venv-"]
            .iter()
            .any(|p| name.trim_start_matches('.').starts_with(p));
        if versioned
            && !keep.iter().any(|k| k == name)
            && old(&entry)
            && !(unpacking && age(&entry) < UNPACK_GRACE)
        {
            out.push((item("version", &entry), entry));
        }
    }
    for entry in read_dir_sorted(&root.join("references")) {
        if old(&entry) {
            out.push((item("reference", &entry), entry));
        }
    }
    out
}

/// How long ago `path` was last modified (zero where that cannot be read).
fn age(path: &Path, now: SystemTime) -> Duration {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .map(|t| now.duration_since(t).unwrap_or_default())
        .unwrap_or_default()
}

/// Evaluators' build folders under `build_root` that no live evaluator holds: the owner file's lock can be
/// taken, so its process is gone. A folder without an owner file (one being set up, or one from a version
/// before the lock) goes only once older than `older_than`.
pub fn dead_build_folders(build_root: &Path, older_than: Duration) -> Vec<(Item, PathBuf)> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    for entry in read_dir_sorted(build_root) {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with(crate::eval::BUILD_PREFIX) || !entry.is_dir() {
            continue;
        }
        let dead = match std::fs::File::open(entry.join(crate::eval::BUILD_OWNER)) {
            // Taken and dropped at once: the folder is ours to remove (a run starting now makes a new one).
            Ok(owner) => owner.try_lock().is_ok(),
            Err(_) => age(&entry, now) >= older_than,
        };
        if dead {
            out.push((item("build", &entry), entry));
        }
    }
    out
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn item(kind: &'static str, path: &Path) -> Item {
    Item {
        kind,
        name: path.display().to_string(),
        bytes: size_of(path),
    }
}

/// Bytes a file or folder holds (symbolic links counted as themselves, never followed).
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    read_dir_sorted(path).iter().map(|p| size_of(p)).sum()
}

/// What `gc` found and removed.
#[derive(Debug, Serialize)]
pub struct Report {
    pub removed: Vec<Item>,
    pub bytes: u64,
    pub dry_run: bool,
    /// Entries that could not be removed, with why.
    pub failed: Vec<String>,
}

/// Collects the store in `store_dir` (if there is one) and the cache under `cache_root`.
pub fn collect(
    store_dir: &Path,
    cache_root: &Path,
    older_than: Duration,
    dry_run: bool,
) -> Result<Report> {
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    if store_dir.join("ksearch.db").is_file() {
        let store = Store::open(store_dir)?;
        let mut orphans = store.orphaned_candidates()?;
        if !dry_run {
            let hashes: Vec<String> = orphans.iter().map(|(h, _)| h.clone()).collect();
            // Checked again as they go: one a run took up meanwhile stays.
            let gone = store.remove_orphaned_candidates(&hashes)?;
            orphans.retain(|(h, _)| gone.contains(h));
        }
        removed.extend(orphans.into_iter().map(|(name, bytes)| Item {
            kind: "candidate",
            name,
            bytes,
        }));
    }
    let dead = dead_build_folders(&crate::eval::build_root(store_dir), older_than);
    for (it, path) in dead.into_iter().chain(stale_cache(
        cache_root,
        &current_cache_entries(),
        older_than,
    )) {
        if !dry_run {
            let gone = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = gone {
                failed.push(format!("{}: {e}", path.display()));
                continue;
            }
        }
        removed.push(it);
    }
    let bytes = removed.iter().map(|i| i.bytes).sum();
    Ok(Report {
        removed,
        bytes,
        dry_run,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths of `found`, relative to `root`.
    fn names(found: &[(Item, PathBuf)], root: &Path) -> Vec<String> {
        found
            .iter()
            .map(|(_, p)| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    const WEEK: Duration = Duration::from_secs(7 * 86_400);

    /// A temporary folder holding these (empty) subfolders.
    fn folders(names: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for d in names {
            std::fs::create_dir_all(root.path().join(d)).unwrap();
        }
        root
    }

    fn set_age(path: &Path, days: u64) {
        let t = SystemTime::now() - Duration::from_secs(days * 86_400);
        std::fs::File::open(path).unwrap().set_modified(t).unwrap();
    }

    #[test]
    fn only_build_folders_no_live_evaluator_holds_are_dead() {
        let root = folders(&[
            "worker-live",
            "worker-killed",
            "worker-new",
            "worker-old",
            "other",
        ]);
        let r = root.path();
        // A live evaluator's lock (another open file description, as another process would hold).
        let held =
            std::fs::File::create(r.join("worker-live").join(crate::eval::BUILD_OWNER)).unwrap();
        held.lock().unwrap();
        // A killed evaluator's owner file: its lock went with the process.
        std::fs::write(r.join("worker-killed").join(crate::eval::BUILD_OWNER), b"").unwrap();
        std::fs::write(r.join("worker-killed/kernel.so"), b"12345").unwrap();
        set_age(&r.join("worker-old"), 30);
        set_age(&r.join("other"), 30);
        let dead = dead_build_folders(r, WEEK);
        assert_eq!(dead[0].0.bytes, 5);
        assert_eq!(names(&dead, r), ["worker-killed", "worker-old"]);
        // The live one is kept even with no age limit; once its evaluator lets go it is dead too.
        assert_eq!(
            names(&dead_build_folders(r, Duration::ZERO), r),
            ["worker-killed", "worker-new", "worker-old"]
        );
        drop(held);
        assert!(names(&dead_build_folders(r, WEEK), r).contains(&"worker-live".to_string()));
    }

    #[test]
    fn only_old_entries_of_other_versions_and_old_references_are_stale() {
        let root = folders(&[
            "python-aaaaaaaaaaaa",
            "python-bbbbbbbbbbbb",
            "venv-cccccccccccc",
            "tasks-dddddddddddd",
            ".python-tmp-1-2",
            "llama",
            "references",
        ]);
        let r = root.path();
        std::fs::write(r.join("python-aaaaaaaaaaaa/x.py"), b"12345").unwrap();
        std::fs::write(r.join("references/old.npz"), b"1234567").unwrap();
        std::fs::write(r.join("references/new.npz"), b"1").unwrap();
        std::fs::write(r.join("peaks.json"), b"{}").unwrap();
        for p in [
            "python-aaaaaaaaaaaa",
            "python-bbbbbbbbbbbb",
            "venv-cccccccccccc",
            "tasks-dddddddddddd",
            "llama",
            "peaks.json",
            "references/old.npz",
        ] {
            set_age(&r.join(p), 30);
        }
        let keep = vec!["python-bbbbbbbbbbbb".to_string()];
        let stale = stale_cache(r, &keep, WEEK);
        assert_eq!(
            names(&stale, r),
            [
                "python-aaaaaaaaaaaa",
                "venv-cccccccccccc",
                "references/old.npz"
            ]
        );
        assert_eq!(stale[0].0.bytes, 5);
        assert_eq!(stale[2].0.bytes, 7);
        // Nothing is old enough under a longer threshold; an unpack in progress stays even at 0 days.
        assert!(stale_cache(r, &keep, Duration::from_secs(60 * 86_400)).is_empty());
        assert!(
            !stale_cache(r, &keep, Duration::ZERO)
                .iter()
                .any(|(_, p)| p.ends_with(".python-tmp-1-2"))
        );
    }
}
