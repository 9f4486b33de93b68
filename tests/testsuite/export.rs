//! `ksearch export --format mlx-python`: the module imports, and its generated test (fresh inputs against
//! the task's float64 reference) passes. Off a GPU it exercises the baseline fallback; on the H200 the
//! same test runs the kernel (bench/h200.sh).

use crate::common::*;
use std::process::Command;

/// Exports `seed` of `task`, checks the function's signature line, runs the generated test, then runs
/// `then` (Python, in the module's folder) and returns its stdout.
fn export_and_test(task: &str, seed: &str, module: &str, signature: &str, then: &str) -> String {
    let out_dir = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let seed = repo().join(seed);
    let out = run(
        store.path(),
        &[
            "export",
            seed.to_str().unwrap(),
            "--task",
            task,
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(out_dir.path().join(format!("{module}.py"))).unwrap();
    assert!(text.contains(signature), "the reference's inputs, in order");

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
        &format!("import {module}, mlx.core as mx; print({module}._available())"),
    ]);
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let test = format!("{module}_test.py");
    let t = run_py(&["-m", "pytest", "-q", "-p", "no:cacheprovider", &test]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&t.stdout),
        String::from_utf8_lossy(&t.stderr)
    );
    assert!(t.status.success() && log.contains("2 passed"), "{log}");
    let p = run_py(&["-c", then]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    String::from_utf8_lossy(&p.stdout).to_string()
}

#[test]
fn the_exported_mamba_module_imports_and_matches_the_reference() {
    let _ = export_and_test(
        "mamba-scan",
        "tasks/mamba-scan/seeds/mlx-cuda/expert",
        "mamba_scan",
        "def mamba_scan(u, delta, A, Bm, Cm, Dskip, z, delta_bias):",
        "",
    );
}

/// Attention's CAUSAL is a dim no input shape fixes: it becomes a keyword-only argument (required, as
/// the workloads give it both values), passed through to the kernel's plan and to the baseline.
#[test]
fn the_exported_attention_module_takes_causal_as_a_keyword() {
    let probe = export_and_test(
        "attention",
        "tasks/attention/seeds/mlx-cuda/expert",
        "attention",
        "def attention(q, k, v, *, CAUSAL):",
        // The decode in thread-block clusters (NC > 0) is only taken where clusters are safe: not under
        // MLX's CUDA graphs unless the user opts in (ksearch_worker/cluster.py, embedded in the module).
        "import os, attention as a, mlx.core as mx\n\
         x = {'q': mx.zeros((1, 32, 1, 128), dtype=mx.float16), 'k': mx.zeros((1, 8, 64, 128), dtype=mx.float16)}\n\
         x['v'] = x['k']\n\
         d = {**a._dims(x), 'CAUSAL': 0}\n\
         os.environ.pop('MLX_USE_CUDA_GRAPHS', None); os.environ.pop('KSEARCH_ALLOW_CLUSTERS', None)\n\
         seen = [a._supported(x, d)]\n\
         a._SPEC['params']['NC'] = 4\n\
         seen.append(a._supported(x, d))\n\
         os.environ['KSEARCH_ALLOW_CLUSTERS'] = '1'\n\
         seen.append(a._supported(x, d))\n\
         print(seen)\n\
         import inspect, tempfile\n\
         h = a._SPEC['kernels']['attn_decode_last']['header']\n\
         line = a.by_include(h, tempfile.mkdtemp())\n\
         print(len(h) > 10000, line.startswith('#include \"') and open(line[10:-2]).read() == h,\n\
               'by_include(k[\"header\"])' in inspect.getsource(a._kernel))",
    );
    let lines: Vec<&str> = probe.trim().lines().collect();
    assert_eq!(
        lines[0], "[True, False, True]",
        "NC 0, NC 4 under graphs, NC 4 allowed"
    );
    // On CUDA the module hands MLX each header as an #include of a file holding it (header_file.py, embedded):
    // MLX hashes a kernel's whole source at every call.
    assert_eq!(lines[1], "True True True", "{probe}");
}
