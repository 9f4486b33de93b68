//! Runs the worker's own pytest suite (python/tests) in the Python environment ksearch manages, so
//! `cargo test` covers both languages.

use std::process::Command;

#[test]
fn worker_pytest_suite_passes() {
    let env = ksearch::pyenv::ensure(
        std::env::var_os("KSEARCH_PYTHON")
            .as_deref()
            .map(std::path::Path::new),
    )
    .expect("python environment");
    env.install_test_requirements().expect("pytest installs");
    // MLX's CPU build, so the MLX target's checks run too (tests/test_mlx_checks.py).
    env.ensure_target(ksearch::target::Target::MlxCuda)
        .expect("MLX installs");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&env.python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/tests",
        ])
        .current_dir(repo)
        .env("PYTHONPATH", repo.join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("pytest starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pytest failed:\n{text}");
    assert!(text.contains(" passed"), "pytest ran no test:\n{text}");
}
