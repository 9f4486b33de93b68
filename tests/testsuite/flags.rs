//! Every numeric flag, given a value no run can honour, is refused with a clear error before anything
//! starts; none makes `ksearch` panic (`--timeout inf` once reached a `Duration` and did).

use std::process::Command;

const VALUES: [&str; 5] = ["0", "-1", "inf", "nan", "1e300"];

fn ksearch(args: &[&str], store: &std::path::Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ksearch"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("KSEARCH_LLM")
        .output()
        .expect("ksearch runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_numeric_flag_value_makes_ksearch_panic_or_start() {
    let store = tempfile::tempdir().unwrap();
    let missing = store.path().join("no-such-task");
    let missing = missing.to_str().unwrap();
    let run: Vec<&str> = vec!["run", missing];
    let eval: Vec<&str> = vec!["eval", missing, "cand"];
    let cases: [(&Vec<&str>, &str); 17] = [
        (&run, "--budget"),
        (&run, "--parallel"),
        (&run, "--timeout"),
        (&run, "--checks"),
        (&run, "--timing-budget"),
        (&run, "--tune-budget"),
        (&run, "--tune-total"),
        (&run, "--window"),
        (&run, "--llm-timeout"),
        (&run, "--llm-retries"),
        (&run, "--temperature"),
        (&run, "--llm-max-output"),
        (&run, "--max-llm-calls"),
        (&run, "--max-llm-cost"),
        (&run, "--max-llm-time"),
        (&eval, "--timeout"),
        (&eval, "--timing-budget"),
    ];
    for (cmd, flag) in cases {
        for v in VALUES {
            let arg = format!("{flag}={v}");
            let mut args = cmd.clone();
            args.push(&arg);
            let (code, stderr) = ksearch(&args, store.path());
            assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
            assert!(code == 1 || code == 2, "{args:?} exited {code}:\n{stderr}");
            // Refused for its value, or (a value the flag allows) stopped by the missing task.
            assert!(
                stderr.contains(flag) || stderr.contains("no-such-task"),
                "{args:?}: the error names neither the flag nor the task:\n{stderr}"
            );
        }
    }
    // The values a run cannot honour are refused for the flag itself, whatever else is wrong.
    for (flag, v) in [
        ("--timeout", "inf"),
        ("--timing-budget", "nan"),
        ("--llm-timeout", "1e300"),
        ("--max-llm-cost", "-1"),
        ("--max-llm-time", "0"),
        ("--budget", "0"),
        ("--parallel", "0"),
        ("--temperature", "nan"),
    ] {
        let arg = format!("{flag}={v}");
        let (code, stderr) = ksearch(&["run", missing, &arg], store.path());
        assert_eq!(code, 2, "{arg}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{v}' for '{flag}")),
            "{arg}: {stderr}"
        );
    }
}

/// `translate --out` and `export --out` never replace a file already there without `--force`: a hand-edited
/// plan or module would be lost without a word.
#[test]
fn outputs_that_would_replace_files_are_refused_without_force() {
    let store = tempfile::tempdir().unwrap();
    let out = store.path().join("out");
    let out_s = out.to_str().unwrap();
    let cu = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/translate/guard_product.cu"
    );
    let translate = ["translate", cu, "--to", "mlx-cuda", "--out", out_s];
    let (code, stderr) = ksearch(&translate, store.path());
    assert_eq!(code, 0, "{stderr}");
    std::fs::write(out.join("plan.toml"), "# edited by hand\n").unwrap();
    let (code, stderr) = ksearch(&translate, store.path());
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("would replace plan.toml") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("plan.toml")).unwrap(),
        "# edited by hand\n"
    );
    let mut forced = translate.to_vec();
    forced.push("--force");
    let (code, stderr) = ksearch(&forced, store.path());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        std::fs::read_to_string(out.join("plan.toml"))
            .unwrap()
            .contains("[[kernel]]")
    );

    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tasks/softmax/seeds/mlx-cuda/naive"
    );
    let export_dir = store.path().join("export");
    let export = [
        "export",
        seed,
        "--task",
        "softmax",
        "--out",
        export_dir.to_str().unwrap(),
    ];
    let (code, stderr) = ksearch(&export, store.path());
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = ksearch(&export, store.path());
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
}

/// `ksearch completions SHELL` prints a script the shell accepts, knowing the commands and flags.
#[test]
fn completion_scripts_load_in_bash_and_know_the_commands() {
    let store = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ksearch"))
            .args([
                "--store",
                store.path().to_str().unwrap(),
                "completions",
                shell,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("compare") && text.contains("preset"),
            "{shell}"
        );
        if shell == "bash" {
            let file = store.path().join("ksearch.bash");
            std::fs::write(&file, &text).unwrap();
            let loaded = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("source {} && complete -p ksearch", file.display()))
                .output()
                .unwrap();
            assert!(
                String::from_utf8_lossy(&loaded.stdout).contains("_ksearch"),
                "{}",
                String::from_utf8_lossy(&loaded.stderr)
            );
        }
    }
}

/// The toolchain is named where rustup and people look: rust-toolchain.toml gives CI's channel and the
/// components `.ci/run` uses, Cargo.toml's `rust-version` the floor, and the README states that floor.
#[test]
fn the_toolchain_ci_uses_is_pinned_and_stated() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pin: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("rust-toolchain.toml")).unwrap())
            .unwrap();
    assert_eq!(pin["toolchain"]["channel"].as_str(), Some("stable"));
    let components = pin["toolchain"]["components"].as_array().unwrap();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    for tool in ["rustfmt", "clippy"] {
        assert!(components.iter().any(|c| c.as_str() == Some(tool)));
        assert!(ci.contains(&format!("cargo {}", tool.trim_start_matches("rust"))));
    }
    let floor = env!("CARGO_PKG_RUST_VERSION");
    assert!(!floor.is_empty(), "Cargo.toml has no rust-version");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("tested with {floor}")),
        "the README does not state {floor}"
    );
}

/// `--parallel` above 1 for `once`, whose one generation has nothing to run beside it, is refused before
/// anything starts, naming the strategies that do run at once.
#[test]
fn parallel_is_refused_where_a_strategy_runs_no_lanes() {
    let store = tempfile::tempdir().unwrap();
    let (code, stderr) = ksearch(
        &[
            "run",
            "matmul",
            "--strategy",
            "once",
            "--llm",
            "llamacpp:none",
            "--llm-base-url",
            "http://127.0.0.1:9/v1",
            "--parallel",
            "2",
        ],
        store.path(),
    );
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(
        stderr.contains("strategy `once` makes one generation")
            && stderr.contains("`tune` batches of configurations"),
        "{stderr}"
    );
}
