//! `pip install ksearch`: the wheel maturin builds (binary mode, `pyproject.toml`) installs into a fresh
//! virtual environment, and the `ksearch` it puts on that environment's path lists the built-in tasks and
//! completes a short search from a folder outside the repository (`scripts/wheel-check.sh`).

use crate::common::*;

#[test]
fn the_wheel_installs_and_searches_outside_the_repository() {
    let out = std::process::Command::new("bash")
        .arg(repo().join("scripts/wheel-check.sh"))
        .output()
        .expect("bash starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status.code(),
        stderr(&out)
    );
    assert!(stdout.contains("completed 2 evaluations"), "{stdout}");
    assert!(
        stdout.contains("ksearch tasks and a search ran outside the repository"),
        "{stdout}"
    );
}
