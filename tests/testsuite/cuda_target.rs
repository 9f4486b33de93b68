//! The cuda target without a GPU: a plan's launches as the worker receives them (the template's plan order
//! beside its values, type arguments, grids, scalars), what a plan for it may hold, and an evaluation on a
//! machine with no NVIDIA GPU, which must say so and fail. The worker's side (name expressions, NVRTC in the
//! jail for sm_90a on every shipped cuda seed) is python/tests/test_cuda_target.py; the seeds' device code
//! runs on the CPU emulation in `cuda_seeds_cpu`.
use crate::common;
use crate::common::repo;
use ksearch::candidate::Candidate;
use serde_json::json;

#[test]
fn a_launch_reaches_the_worker_with_the_template_in_the_plans_order() {
    let task_dir = repo().join("tasks/gqa-paged-decode");
    let task = ksearch::task::Task::load(&task_dir).unwrap();
    let c = Candidate::load(&task_dir.join("seeds/cuda/expert")).unwrap();
    let w = task
        .toml
        .workload
        .iter()
        .find(|w| w.name == "b16_kv2k")
        .unwrap();
    let rw = task.resolve(w).unwrap();
    let plan = c.resolve(&task, &rw).unwrap();
    let split = serde_json::to_value(&plan.launches[0]).unwrap();
    // N = 32768, B = 16, CH = 256: 128 + 16 work items of NW = 4 warps, one block per (item, KV head).
    assert_eq!(split["kernel"], "paged_decode_split");
    assert_eq!(split["grid"], json!([32 * 4 * (128 + 16), 4, 1]));
    assert_eq!(split["threadgroup"], json!([128, 1, 1]));
    assert_eq!(
        split["template"],
        json!({"CH": 256, "D": 128, "Hkv": 4, "Hq": 32, "KT": 2, "NW": 4})
    );
    // The worker instantiates paged_decode_split<D, Hq, Hkv, CH, NW, KT, T>: the order the kernel declares.
    assert_eq!(
        split["template_order"],
        json!(["D", "Hq", "Hkv", "CH", "NW", "KT"])
    );
    assert_eq!(split["type_args"], json!({"T": "bfloat16"}));
    assert_eq!(split["scalars"], json!([16]));
    assert_eq!(split["outputs"], json!(["part"]));
    let merge = serde_json::to_value(&plan.launches[1]).unwrap();
    assert_eq!(merge["grid"], json!([128 * 16 * 32, 1, 1]));
    assert_eq!(merge["template_order"], json!(["D", "Hq", "CH"]));
    // The candidate's own header is part of it (found by its kernels' includes), so its hash covers it.
    assert!(c.files.contains_key("paged.cuh"));
    let mut changed = c.clone();
    changed
        .files
        .get_mut("paged.cuh")
        .unwrap()
        .push_str("\n// edited\n");
    assert_ne!(changed.hash(), c.hash());
}

#[test]
fn a_cuda_plan_is_refused_where_it_asks_for_what_the_target_has_not() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let write = |plan_extra: &str, source: &str| {
        std::fs::write(
            dir.join("plan.toml"),
            format!(
                "name = \"k\"\ntarget = \"cuda\"\ndescription = \"d\"\n[[kernel]]\nname = \"scale\"\nsource = \"k.cu\"\n\
                 [[launch]]\nkernel = \"scale\"\ninputs = [\"x\"]\noutputs = [\"y\"]\nscalars = [\"N\"]\n\
                 grid = [\"N\", \"1\", \"1\"]\nthreadgroup = [\"256\", \"1\", \"1\"]\n{plan_extra}"
            ),
        )
        .unwrap();
        std::fs::write(dir.join("k.cu"), source).unwrap();
        Candidate::load(dir).map(|_| ()).map_err(|e| e.to_string())
    };
    let good = "__global__ void scale(const float* x, float* y, int N) { }\n";
    write("", good).unwrap();
    write("shared_memory = \"4096\"\n", good).unwrap();
    // A file that defines no such kernel (a body, as the MLX targets take) is refused when the plan loads.
    let err = write("", "y[0] = x[0];\n").unwrap_err();
    assert!(
        err.contains("defines no `__global__` function `scale`"),
        "{err}"
    );
    let err = write("", "__device__ void scale(const float* x) { }\n").unwrap_err();
    assert!(err.contains("no `__global__` function"), "{err}");
    let err = write("cluster = [\"2\", \"1\", \"1\"]\n", good).unwrap_err();
    assert!(err.contains("__cluster_dims__"), "{err}");
    let err = write("atomic_outputs = true\n", good).unwrap_err();
    assert!(err.contains("atomic_outputs"), "{err}");
    // What a kernel includes from outside the compiler's paths is refused before anything runs.
    let err = write(
        "",
        "#include \"/etc/passwd\"\n__global__ void scale(const float* x, float* y, int N) { }\n",
    )
    .unwrap_err();
    assert!(err.contains("include"), "{err}");
}

#[test]
fn an_evaluation_without_an_nvidia_gpu_says_so_and_fails() {
    if std::path::Path::new("/dev/nvidia0").exists() {
        return; // a machine with the device evaluates for real (bench/h200_cuda.sh)
    }
    let env = ksearch::pyenv::ensure(None).expect("the managed worker environment");
    let tmp = tempfile::tempdir().unwrap();
    let out = common::ksearch(tmp.path())
        .arg("--python")
        .arg(&env.python)
        .args(["eval", "--target", "cuda", "gqa-paged-decode"])
        .arg(repo().join("tasks/gqa-paged-decode/seeds/cuda/naive"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("backend_unavailable")
            && (text.contains("no CUDA device") || text.contains("needs CuPy")),
        "{text}"
    );
}

/// The cuda target end to end through the binary, on a machine without an NVIDIA GPU: the worker imports a
/// `cupy` that is python/tests/fake_cupy.py (device arrays in numpy, a kernel a Python stand-in,
/// python/tests/fake_cuda_kernels.py), everything else real: the compile request with the candidate's files, the
/// jailed NVRTC compiling the shipped seed for sm_90a, the launches with the plan's arguments, the checks, the
/// timing, the recheck, the baselines that cannot run here (no torch) named with why, the result as the Rust side
/// reads it.
#[test]
fn an_evaluation_runs_end_to_end_on_a_stand_in_device() {
    let env = ksearch::pyenv::ensure(None).expect("the managed worker environment");
    env.install_test_requirements()
        .expect("the test packages (NVRTC and the CUDA headers)");
    let tmp = tempfile::tempdir().unwrap();
    let shim = tmp.path().join("shim");
    std::fs::create_dir_all(shim.join("cupy")).unwrap();
    std::fs::write(
        shim.join("cupy/__init__.py"),
        "import fake_cupy, fake_cuda_kernels\nfrom fake_cupy import *\n__version__ = fake_cupy.__version__\n",
    )
    .unwrap();
    let path = std::env::join_paths([shim, repo().join("python/tests")]).unwrap();
    let out = common::ksearch(&tmp.path().join("store"))
        .env("PYTHONPATH", path)
        .arg("--python")
        .arg(&env.python)
        .args([
            "eval",
            "--target",
            "cuda",
            "gqa-paged-decode",
            "--workload",
            "b1_kv8k",
            "--json",
        ])
        .arg(repo().join("tasks/gqa-paged-decode/seeds/cuda/naive"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let v = common::last_json(&out);
    assert_eq!(v["target"], "cuda", "{v:#}");
    assert_eq!(v["hardware"]["name"], "Fake H200", "{v:#}");
    let w = &v["workloads"][0];
    assert_eq!(w["workload"], "b1_kv8k", "{v:#}");
    assert_eq!(w["status"], "passed", "{v:#}");
    assert!(w["median_s"].as_f64().unwrap() > 0.0, "{v:#}");
    assert!(w["sampled_checks"].as_u64().unwrap() >= 1, "{v:#}");
    // Both of the task's cuda baselines need torch, which this environment lacks: named, with why, not timed.
    let missing = w["baselines_unavailable"].as_object().unwrap();
    assert_eq!(
        missing.keys().collect::<Vec<_>>(),
        ["flashinfer_decode", "torch_gather_sdpa"],
        "{v:#}"
    );
    assert!(
        missing["torch_gather_sdpa"]
            .as_str()
            .unwrap()
            .contains("torch")
    );
    let human = common::ksearch(&tmp.path().join("store"))
        .env(
            "PYTHONPATH",
            std::env::join_paths([tmp.path().join("shim"), repo().join("python/tests")]).unwrap(),
        )
        .arg("--python")
        .arg(&env.python)
        .args([
            "eval",
            "--target",
            "cuda",
            "gqa-paged-decode",
            "--workload",
            "b1_kv8k",
        ])
        .arg(repo().join("tasks/gqa-paged-decode/seeds/cuda/naive"))
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout).to_string();
    assert!(
        human.contains("baseline torch_gather_sdpa not timed: it cannot run here"),
        "{human}"
    );
}

/// A cuda candidate is no MLX module: export refuses it and says how to get one (translate it first).
#[test]
fn exporting_a_cuda_candidate_points_to_translate() {
    let tmp = tempfile::tempdir().unwrap();
    let out = common::ksearch(tmp.path())
        .arg("export")
        .arg(repo().join("tasks/gqa-paged-decode/seeds/cuda/naive"))
        .args(["--task", "gqa-paged-decode", "--out"])
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("this candidate is for cuda") && err.contains("ksearch translate"),
        "{err}"
    );
    assert!(!tmp.path().join("out").exists());
}
