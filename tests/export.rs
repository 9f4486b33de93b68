//! `ksearch export --format mlx-python`: the module imports, and its generated test (fresh inputs against
//! the task's float64 reference) passes. Off a GPU it exercises the baseline fallback; on the H200 the
//! same test runs the kernel (bench/h200.sh).

mod common;
use common::*;
use std::process::Command;

#[test]
fn the_exported_mamba_module_imports_and_matches_the_reference() {
    let out_dir = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let seed = repo().join("tasks/mamba-scan/seeds/mlx-cuda/expert");
    let out = run(
        store.path(),
        &[
            "export",
            seed.to_str().unwrap(),
            "--task",
            "mamba-scan",
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let module = out_dir.path().join("mamba_scan.py");
    let text = std::fs::read_to_string(&module).unwrap();
    assert!(
        text.contains("def mamba_scan(u, delta, A, Bm, Cm, Dskip, z, delta_bias):"),
        "the reference's inputs, in order"
    );

    let env = ksearch::pyenv::ensure(None).unwrap();
    env.ensure_target(ksearch::target::Target::MlxCuda).unwrap();
    env.install_test_requirements().unwrap();
    let run_py = |args: &[&str]| {
        Command::new(&env.python)
            .args(args)
            .current_dir(out_dir.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap()
    };
    let probe = run_py(&[
        "-c",
        "import mamba_scan, mlx.core as mx; print(mamba_scan._available())",
    ]);
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let t = run_py(&[
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "mamba_scan_test.py",
    ]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&t.stdout),
        String::from_utf8_lossy(&t.stderr)
    );
    assert!(t.status.success() && log.contains("1 passed"), "{log}");
}
