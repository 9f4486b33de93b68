//! `ksearch check` measured on two corpora: correct Metal kernels (every shipped mlx-metal seed, every Metal
//! body of knowledge/patterns.toml, and the MLX-style kernels of tests/check/good.toml) give no error; the
//! kernels of tests/check/faulty.toml, one planted fault each, are caught with the expected code (>= 90%).
//! Plus the command itself: text and JSON output, lines in the user's files, exit status.

use crate::common::*;
use ksearch::check::signature::{Input, KernelSpec};
use ksearch::check::{self, Finding, LaunchInfo, Severity};
use ksearch::dtype::Dtype;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    expect: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(default)]
    scalars: Vec<String>,
    #[serde(default)]
    template: BTreeMap<String, i64>,
    #[serde(default)]
    types: BTreeMap<String, String>,
    #[serde(default)]
    threadgroup: Option<Vec<i64>>,
    #[serde(default)]
    overshoot: Option<String>,
    #[serde(default)]
    atomic_outputs: bool,
    #[serde(default)]
    header: Option<String>,
    body: String,
}

#[derive(Deserialize)]
struct Corpus {
    case: Vec<Case>,
}

fn corpus(name: &str) -> Vec<Case> {
    let path = repo().join("tests/check").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let c: Corpus = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    c.case
}

/// `name: dtype[: elements]`
fn tensor(s: &str) -> (String, Dtype, Option<i64>) {
    let mut parts = s.split(':').map(str::trim);
    let name = parts.next().unwrap().to_string();
    let dtype = parts.next().unwrap().parse().unwrap();
    let elements = parts.next().map(|e| e.parse().unwrap());
    (name, dtype, elements)
}

fn check_case(c: &Case) -> Vec<Finding> {
    if c.kind.as_deref() == Some("source") {
        return check::check_source(&c.body, &format!("{}.metal", c.name)).unwrap();
    }
    let mut inputs: Vec<Input> = c
        .inputs
        .iter()
        .map(|s| {
            let (name, dtype, elements) = tensor(s);
            Input::Array {
                name,
                dtype,
                elements: Some(elements.unwrap_or(1 << 20)),
            }
        })
        .collect();
    inputs.extend(c.scalars.iter().map(|n| Input::Scalar { name: n.clone() }));
    let spec = KernelSpec {
        name: c.name.clone(),
        inputs,
        outputs: c
            .outputs
            .iter()
            .map(|s| {
                let (n, d, _) = tensor(s);
                (n, d)
            })
            .collect(),
        atomic_outputs: c.atomic_outputs,
        template_ints: c.template.clone().into_iter().collect(),
        template_types: c
            .types
            .iter()
            .map(|(k, v)| (k.clone(), v.parse().unwrap()))
            .collect(),
    };
    let info = LaunchInfo {
        threadgroup: c.threadgroup.clone(),
        overshoot: c.overshoot.clone(),
        plan_at: ("plan.toml".into(), 1),
    };
    let header = c.header.as_deref().map(|h| ("header.h", h));
    check::check_body(&spec, header, "kernel.metal", &c.body, &info).unwrap()
}

fn errors(f: &[Finding]) -> Vec<&Finding> {
    f.iter().filter(|f| f.severity == Severity::Error).collect()
}

#[test]
fn correct_mlx_style_kernels_give_no_error() {
    let cases = corpus("good.toml");
    assert!(cases.len() >= 10, "at least 10 correct MLX-style kernels");
    let mut bad = Vec::new();
    for c in &cases {
        assert!(c.expect.is_none(), "{}: good cases expect nothing", c.name);
        let f = check_case(c);
        if !errors(&f).is_empty() {
            bad.push(format!("{}:\n{}", c.name, check::render_text(&f)));
        }
    }
    assert!(bad.is_empty(), "false errors:\n{}", bad.join("\n"));
}

#[test]
fn planted_faults_are_caught_with_their_code() {
    let cases = corpus("faulty.toml");
    assert!(cases.len() >= 30, "at least 30 faulty kernels");
    let mut missed = Vec::new();
    for c in &cases {
        let want = c
            .expect
            .as_deref()
            .unwrap_or_else(|| panic!("{}: no expect", c.name));
        let f = check_case(c);
        println!("{} (expects {want}):\n{}", c.name, check::render_text(&f));
        if !errors(&f).iter().any(|f| f.code == want) {
            missed.push(format!(
                "{} (expected {want}), found:\n{}",
                c.name,
                check::render_text(&f)
            ));
        }
    }
    let caught = cases.len() - missed.len();
    let rate = caught as f64 / cases.len() as f64;
    println!(
        "ksearch check caught {caught} of {} planted faults ({:.0}%)",
        cases.len(),
        100.0 * rate
    );
    for m in &missed {
        println!("missed: {m}");
    }
    assert!(
        rate >= 0.9,
        "caught only {:.0}%:\n{}",
        100.0 * rate,
        missed.join("\n")
    );
}

fn load_task(name: &str) -> ksearch::task::Task {
    let dir = repo().join("tasks").join(name);
    ksearch::task::Task::load(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn every_shipped_metal_seed_passes_the_check() {
    let mut checked = 0;
    for (task, seed) in shipped_seeds("mlx-metal") {
        let t = load_task(&task);
        let f = check::check_candidate(&seed, Some(&t)).unwrap();
        assert!(
            errors(&f).is_empty(),
            "{}:\n{}",
            seed.display(),
            check::render_text(&f)
        );
        checked += 1;
    }
    // Every shipped Metal seed: attention, mamba-scan, ssd (naive, expert) and softmax (naive).
    assert!(
        checked >= 7,
        "only {checked} shipped Metal seeds were checked"
    );
}

/// `name: (shape) dtype [...]` of a pattern: the name and dtype.
fn pattern_tensor(s: &str) -> (String, Dtype) {
    let (name, rest) = s.split_once(':').unwrap();
    let dtype = rest
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no dtype in `{s}`"));
    (name.trim().to_string(), dtype)
}

/// Names listed after `key = [` in a pattern's launch text, starting at `from`.
fn listed(launch: &str, from: usize, key: &str) -> Vec<String> {
    let Some(at) = launch[from..].find(&format!("{key} = [")) else {
        return Vec::new();
    };
    let s = &launch[from + at + key.len() + 4..];
    s[..s.find(']').unwrap()]
        .split(',')
        .map(|n| n.trim().trim_matches('"').to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

#[test]
fn every_metal_pattern_of_the_knowledge_passes_the_check() {
    let k = ksearch::knowledge::get();
    assert!(k.patterns.len() >= 8);
    for p in &k.patterns {
        let get = |f: &str| -> toml::Value {
            p.rest
                .get(f)
                .cloned()
                .unwrap_or_else(|| panic!("{}: {f}", p.id))
        };
        let strings = |f: &str| -> Vec<String> {
            get(f)
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let inputs: Vec<(String, Dtype)> = strings("inputs")
            .iter()
            .map(|s| pattern_tensor(s))
            .collect();
        let outputs: Vec<(String, Dtype)> = strings("outputs")
            .iter()
            .map(|s| pattern_tensor(s))
            .collect();
        let scalars = strings("scalars");
        let template: Vec<(String, i64)> = get("template")
            .as_table()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_integer().unwrap()))
            .collect();
        let header = get("metal_header").as_str().unwrap().to_string();
        let launch = get("launch").as_str().unwrap().to_string();
        let pass2 = get("metal_pass2").as_str().unwrap().to_string();
        let dtype_of = |n: &str| {
            inputs
                .iter()
                .chain(&outputs)
                .find(|t| t.0 == n)
                .map(|t| t.1)
                .unwrap_or(Dtype::Float32)
        };
        let mut launches = vec![(
            p.metal.clone(),
            inputs.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
            outputs.clone(),
        )];
        if !pass2.is_empty() {
            let at = launch.find("pass 2").unwrap_or(0);
            let mut ins: Vec<String> = inputs.iter().map(|t| t.0.clone()).collect();
            ins.extend(listed(&launch, at, "inputs"));
            let outs: Vec<(String, Dtype)> = listed(&launch, at, "outputs")
                .iter()
                .map(|n| (n.clone(), dtype_of(n)))
                .collect();
            launches.push((pass2.clone(), ins, outs));
        }
        for (i, (body, ins, outs)) in launches.into_iter().enumerate() {
            let mut spec_inputs: Vec<Input> = ins
                .iter()
                .map(|n| Input::Array {
                    name: n.clone(),
                    dtype: dtype_of(n),
                    elements: None,
                })
                .collect();
            spec_inputs.extend(scalars.iter().map(|n| Input::Scalar { name: n.clone() }));
            let spec = KernelSpec {
                name: p.id.clone(),
                inputs: spec_inputs,
                outputs: outs,
                atomic_outputs: body.contains("atomic_fetch_"),
                template_ints: template.clone(),
                template_types: Vec::new(),
            };
            let h = (!header.is_empty()).then_some(("header.h", header.as_str()));
            let f = check::check_body(&spec, h, "pattern.metal", &body, &LaunchInfo::default())
                .unwrap();
            assert!(
                errors(&f).is_empty(),
                "pattern {} (launch {}):\n{}",
                p.id,
                i + 1,
                check::render_text(&f)
            );
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn the_command_reports_plan_and_source_lines_and_exits_non_zero_on_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    // A shipped seed, with an oversize threadgroup in its plan and a type error on line 3 of its body.
    let seed = repo().join("tasks/mamba-scan/seeds/mlx-metal/naive");
    let dir = tmp.path().join("cand");
    copy_dir(&seed, &dir);
    let plan = std::fs::read_to_string(dir.join("plan.toml"))
        .unwrap()
        .replace(
            "threadgroup = [\"TG\", \"1\", \"1\"]",
            "threadgroup = [\"TG\", \"16\", \"1\"]",
        );
    std::fs::write(dir.join("plan.toml"), &plan).unwrap();
    let launch_line = plan
        .lines()
        .position(|l| l.starts_with("[[launch]]"))
        .unwrap()
        + 1;
    let body = std::fs::read_to_string(dir.join("scan.metal")).unwrap();
    let at = body
        .lines()
        .position(|l| l.starts_with("const uint nL"))
        .unwrap();
    let mut lines: Vec<&str> = body.lines().collect();
    lines.insert(at, "float4 oops = float3(0.0f);");
    std::fs::write(dir.join("scan.metal"), lines.join("\n")).unwrap();
    let task = repo().join("tasks/mamba-scan");
    let out = run(
        &store,
        &[
            "check",
            dir.to_str().unwrap(),
            "--task",
            task.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = last_json(&out);
    let f = v["findings"].as_array().unwrap();
    let has = |code: &str, file: &str, line: usize| {
        f.iter().any(|x| {
            x["code"] == code
                && x["severity"] == "error"
                && x["file"].as_str().unwrap().ends_with(file)
                && x["line"] == line
                && !x["message"].as_str().unwrap().is_empty()
        })
    };
    assert!(has("M021", "plan.toml", launch_line), "{v}");
    assert!(has("M001", "scan.metal", at + 1), "{v}");

    // Text output and the exit status of a clean seed.
    let out = run(&store, &["check", seed.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let file = tmp.path().join("k.metal");
    std::fs::write(&file, "#include <metal_stdlib>\nusing namespace metal;\n[[kernel]] void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n  o[i] = 1.0;\n  __syncthreads();\n}\n").unwrap();
    let out = run(&store, &["check", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "{}:5: error[M010]: `__syncthreads` is CUDA",
            file.display()
        )),
        "{text}"
    );
}

#[test]
fn a_candidate_for_another_target_is_refused_with_the_field() {
    let seed = repo().join("tasks/matmul/seeds/cpu/naive");
    let e = check::check_candidate(&seed, None).unwrap_err().to_string();
    assert!(
        e.contains("plan.toml") && e.contains("field `target`") && e.contains("mlx-metal"),
        "{e}"
    );
}

#[test]
fn eval_records_a_failing_check_as_a_compile_error_and_export_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let dir = tmp.path().join("cand");
    copy_dir(&repo().join("tasks/mamba-scan/seeds/mlx-metal/naive"), &dir);
    let body = std::fs::read_to_string(dir.join("scan.metal")).unwrap();
    std::fs::write(
        dir.join("scan.metal"),
        body.replace(
            "const uint nL = uint(L);",
            "const uint nL = uint(L); __syncthreads();",
        ),
    )
    .unwrap();
    let task = repo().join("tasks/mamba-scan");
    let out = run(
        &store,
        &[
            "eval",
            task.to_str().unwrap(),
            dir.to_str().unwrap(),
            "--target",
            "mlx-metal",
            "--checks",
            "1",
            "--json",
        ],
    );
    let v = last_json(&out);
    let w = &v["workloads"].as_array().unwrap()[0];
    assert_eq!(w["status"], "compile_error", "{v}");
    assert!(
        w["message"].as_str().unwrap().contains("error[M010]"),
        "{w}"
    );

    let out = run(
        &store,
        &[
            "export",
            dir.to_str().unwrap(),
            "--task",
            task.to_str().unwrap(),
            "--out",
            tmp.path().join("out").to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("refusing to export") && e.contains("M010"),
        "{e}"
    );
    assert!(!tmp.path().join("out").exists(), "nothing is written");
}

#[test]
fn without_a_task_dtypes_come_from_the_body_and_errors_are_still_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hist");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plan.toml"),
        "name = \"hist\"\ntarget = \"mlx-metal\"\n[[kernel]]\nname = \"hist\"\nsource = \"hist.metal\"\n\
         [[launch]]\nkernel = \"hist\"\ninputs = [\"data\"]\noutputs = [\"bins\"]\nscalars = [\"n\"]\n\
         grid = [\"256 * ((n + 255) // 256)\", \"1\", \"1\"]\nthreadgroup = [\"256\", \"1\", \"1\"]\n\
         atomic_outputs = true\ninit_value = 0.0\n",
    )
    .unwrap();
    let body = "const uint i = thread_position_in_grid.x;\nif (i < uint(n)) {\n  int v = data[i] & 15;\n  atomic_fetch_add_explicit(&bins[v], 1, memory_order_relaxed);\n}\n";
    std::fs::write(dir.join("hist.metal"), body).unwrap();
    let f = check::check_candidate(&dir, None).unwrap();
    assert!(errors(&f).is_empty(), "{}", check::render_text(&f));
    assert!(
        f.iter()
            .any(|f| f.code == "M003" && f.severity == Severity::Warning)
    );
    // The same candidate with a vector type error.
    std::fs::write(
        dir.join("hist.metal"),
        body.replace(
            "int v = data[i] & 15;",
            "int v = data[i] & 15; float4 q = float2(1.0f);",
        ),
    )
    .unwrap();
    let f = check::check_candidate(&dir, None).unwrap();
    assert!(
        errors(&f)
            .iter()
            .any(|f| f.code == "M001" && f.file == "hist.metal" && f.line == 3),
        "{}",
        check::render_text(&f)
    );
}

/// `[[kernel]] void NAME(` ... `) {` of a generated source: the template line and the parameters.
fn signature_of(src: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = src.lines().collect();
    let k = lines
        .iter()
        .position(|l| l.starts_with("[[kernel]] void"))
        .unwrap_or_else(|| panic!("no kernel line in\n{src}"));
    let template = if k > 0 && lines[k - 1].starts_with("template <") {
        lines[k - 1].to_string()
    } else {
        String::new()
    };
    let mut params = Vec::new();
    for l in &lines[k + 1..] {
        let l = l.trim();
        let done = l.ends_with(") {");
        params.push(l.trim_end_matches(") {").trim_end_matches(',').to_string());
        if done {
            break;
        }
    }
    (template, params)
}

#[test]
fn the_generated_signature_is_the_one_mlx_writes() {
    if cfg!(target_os = "macos") {
        return; // MLX's export tracing path is the non-Metal one
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for (task_name, seed) in shipped_seeds("mlx-metal") {
        let task = load_task(&task_name);
        let out = run(
            tmp.path(),
            &[
                "eval",
                task.dir.to_str().unwrap(),
                seed.to_str().unwrap(),
                "--target",
                "mlx-metal",
                "--checks",
                "1",
                "--json",
            ],
        );
        let v = last_json(&out);
        let c = ksearch::candidate::Candidate::load(&seed).unwrap();
        for w in v["workloads"].as_array().unwrap() {
            let Some(sources) = w["metal_sources"].as_array() else {
                panic!("{}: no metal_sources: {w}", seed.display());
            };
            let name = w["workload"].as_str().unwrap();
            let tw = task.toml.workload.iter().find(|x| x.name == name).unwrap();
            let rw = task.resolve(tw).unwrap();
            let rp = c.resolve(&task, &rw).unwrap();
            let ours = check::workload_launches(&c, &rp, &rw);
            assert_eq!(ours.len(), sources.len(), "{name}");
            for (wl, src) in ours.iter().zip(sources) {
                let (mlx_template, mlx_params) = signature_of(src.as_str().unwrap());
                let k = c
                    .plan
                    .kernel
                    .iter()
                    .find(|k| k.name == wl.spec.name)
                    .unwrap();
                let body = &c.files[&k.source];
                let mine: Vec<String> = wl.spec.params(body).into_iter().map(|p| p.decl).collect();
                let (my_template, _) = signature_of(&wl.spec.unit(None, "k.metal", body));
                assert_eq!(mine, mlx_params, "{}: {name}", seed.display());
                assert_eq!(my_template, mlx_template, "{}: {name}", seed.display());
                compared += 1;
            }
        }
    }

    // One per launch and workload of every shipped Metal seed (87 when this was written).
    assert!(compared >= 80, "only {compared} signatures compared");
    println!("{compared} generated signatures identical to MLX's");
}

/// M020 counts an extent written as a product, and a template kernel's declaration once per instantiation
/// (the largest), never summed over its instantiations.
#[test]
fn threadgroup_sizes_count_products_and_not_the_sum_of_instantiations() {
    let m020 = |src: &str| {
        check::check_source(src, "k.metal")
            .unwrap()
            .iter()
            .filter(|f| f.code == "M020")
            .count()
    };
    let product = "#include <metal_stdlib>\nusing namespace metal;\n\
        kernel void k(device float* y [[buffer(0)]], uint t [[thread_position_in_threadgroup]]) {\n\
        threadgroup float As[128 * 128];\n  As[t] = y[t];\n\
        threadgroup_barrier(mem_flags::mem_threadgroup);\n  y[t] = As[t ^ 1];\n}\n";
    assert_eq!(m020(product), 1, "64 KB of threadgroup memory");
    let instances = |a: i32, b: i32| {
        format!(
            "#include <metal_stdlib>\nusing namespace metal;\ntemplate <int N>\n\
            kernel void k(device float* y [[buffer(0)]], uint t [[thread_position_in_threadgroup]]) {{\n\
            threadgroup float a[N];\n  a[t] = y[t];\n  threadgroup_barrier(mem_flags::mem_threadgroup);\n\
            y[t] = a[t ^ 1];\n}}\n\
            template [[host_name(\"k_a\")]] kernel void k<{a}>(device float*, uint);\n\
            template [[host_name(\"k_b\")]] kernel void k<{b}>(device float*, uint);\n"
        )
    };
    assert_eq!(
        m020(&instances(5000, 6000)),
        0,
        "20 KB and 24 KB, each within 32 KB"
    );
    assert_eq!(
        m020(&instances(5000, 9000)),
        1,
        "one instantiation holds 36 KB"
    );
    // Two arrays whose sizes trade places between instantiations: 24 KB each time, never 48.
    let traded = |first: (i32, i32), second: (i32, i32)| {
        format!(
            "#include <metal_stdlib>\nusing namespace metal;\ntemplate <int N, int M>\n\
            kernel void k(device float* y [[buffer(0)]], uint t [[thread_position_in_threadgroup]]) {{\n\
            threadgroup float a[N];\n  threadgroup float b[M];\n  a[t] = y[t];\n  b[t] = y[t];\n\
            threadgroup_barrier(mem_flags::mem_threadgroup);\n  y[t] = a[t ^ 1] + b[t ^ 1];\n}}\n\
            template [[host_name(\"k_a\")]] kernel void k<{}, {}>(device float*, uint);\n\
            template [[host_name(\"k_b\")]] kernel void k<{}, {}>(device float*, uint);\n",
            first.0, first.1, second.0, second.1
        )
    };
    assert_eq!(m020(&traded((6000, 10), (10, 6000))), 0);
    assert_eq!(
        m020(&traded((6000, 3000), (10, 6000))),
        1,
        "36 KB in the first"
    );
}

/// Idioms of large Metal libraries (MLX's kernels use each) that Apple's compiler builds: overloads on the
/// address space of `this` or of a pointer, specializations per pointer space, function constants declared
/// through a macro, `uniform<T>`, `metal::array`, a macro that spells `constant`, `sizeof(bfloat)` and
/// bfloat arithmetic braced into a bfloat. None may give an error; what Metal refuses still does.
#[test]
fn library_idioms_that_apple_compiles_pass_and_real_faults_still_fail() {
    let good = r#"#include <metal_stdlib>
using namespace metal;
#define LIB_CONST static constant constexpr const
LIB_CONST int LANES = 32;
LIB_CONST bool use_mask [[function_constant(4)]];
template <typename T> struct pair_t {
  T a; T b;
  constexpr pair_t() thread : a(0), b(0) {}
  constexpr pair_t() threadgroup : a(0), b(0) {}
  constexpr pair_t() device : a(0), b(0) {}
  constexpr pair_t(T x, T y) thread : a(x), b(y) {}
  constexpr pair_t(T x, T y) device : a(x), b(y) {}
  constexpr T sum() const thread { return a + b; }
  constexpr T sum() const device { return a + b; }
};
template <typename T> constexpr pair_t<T> operator*(pair_t<T> p, pair_t<T> q) { return {p.a * q.a, p.b * q.b}; }
static_assert((pair_t<float>(1.0f, 2.0f) * pair_t<float>(3.0f, 4.0f)).sum() == 11.0f, "product");
static_assert(sizeof(bfloat) == 2, "Metal's bfloat is two bytes");
template <typename P> struct elem;
template <typename T> struct elem<device T*> { using type = T; };
template <typename T> struct elem<threadgroup T*> { using type = T; };
template <typename T> struct elem<thread T*> { using type = T; };
template <typename T> struct elem<constant T*> { using type = T; };
inline float first(device const float* x) { return x[0]; }
inline float first(threadgroup const float* x) { return x[0]; }
template <typename T> constexpr constant bool is_wide = _disjunction<is_same<T, float>, is_same<T, uint>>::value;
struct two { float lo; float hi; };
inline two simd_shuffle_down(two v, ushort d) { return two{simd_shuffle_down(v.lo, d), simd_shuffle_down(v.hi, d)}; }
[[kernel]] void publish(volatile coherent(system) device uint* flag [[buffer(0)]], constant uint& v [[buffer(1)]]) {
  flag[0] = v;
  metal::atomic_thread_fence(metal::mem_flags::mem_device, metal::memory_order_seq_cst, metal::thread_scope::thread_scope_device);
}
[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  device const bfloat* z [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  typename elem<device const float*>::type v = first(x) + x[i];
  const uniform<int> n = make_uniform(LANES);
  metal::array<float, 2> w = {v, v};
  pair_t<bfloat> p = {z[i] * z[0], z[i]};
  simdgroup_matrix<float, 8, 8> a(1.0f), b(2.0f);
  simdgroup_matrix<float, 8, 8> c = a * b;
  two t = simd_shuffle_down(two{v, v}, 1);
  y[i] = use_mask && is_wide<float> ? w[0] * float(int(n)) + t.lo : float(p.sum()) + c.thread_elements()[0];
}
"#;
    let findings = check::check_source(good, "lib.metal").unwrap();
    assert!(
        errors(&findings).is_empty(),
        "{}",
        check::render_text(&findings)
    );
    // The same overload written twice is a redefinition on a Mac too, and a macro that does not say
    // `constant` leaves a mutable program-scope variable.
    let bad = good
        .replace(
            "inline float first(threadgroup const float* x) { return x[0]; }",
            "inline float first(device const float* x) { return x[0]; }",
        )
        .replace(
            "#define LIB_CONST static constant constexpr const",
            "#define LIB_CONST static\n#define LIB_VAR",
        )
        .replace(
            "LIB_CONST int LANES = 32;",
            "LIB_VAR int counter = 0;\nLIB_CONST constant int LANES = 32;",
        );
    let findings = check::check_source(&bad, "lib.metal").unwrap();
    let codes: Vec<&str> = errors(&findings).iter().map(|f| f.code.as_str()).collect();
    assert!(codes.contains(&"M024"), "{findings:#?}");
    assert!(
        errors(&findings)
            .iter()
            .any(|f| f.code == "M001" && f.message.contains("redefinition")),
        "{findings:#?}"
    );
}

/// A Mac has Apple's SDK frameworks (`<MetalPerformancePrimitives/...>`); this machine does not. A
/// complete source that includes one (here through a local header) is not rejected for it: the compile
/// step stops there with a warning naming the header (M005), and the rules still read every file. A
/// missing quoted header (the user's own file) and a missing non-framework system header stay errors.
#[test]
fn a_missing_apple_framework_header_skips_the_compile_but_not_the_rules() {
    let d = tempfile::tempdir().unwrap();
    let write = |p: &str, t: &str| {
        let p = d.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, t).unwrap();
    };
    write(
        "lib/ops.h",
        "#pragma once\n#include <metal_stdlib>\n#include <SomeKit/SomeKit.h>\nusing namespace metal;\ninline float twice(float v) { return somekit::scale(v, 2); }\n",
    );
    let kernel = "#include \"lib/ops.h\"\n[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n                  uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) {\n  threadgroup float s[64];\n  s[t] = twice(x[i]);\n  BARRIER_SPOT\n  y[i] = s[63 - t];\n}\n";
    let good = kernel.replace(
        "BARRIER_SPOT",
        "threadgroup_barrier(mem_flags::mem_threadgroup);",
    );
    write("k.metal", &good);
    let findings = check::check_file(&d.path().join("k.metal"), &[]).unwrap();
    assert!(
        errors(&findings).is_empty(),
        "{}",
        check::render_text(&findings)
    );
    let skipped: Vec<&Finding> = findings.iter().filter(|f| f.code == "M005").collect();
    assert_eq!(skipped.len(), 1, "{findings:#?}");
    assert_eq!(skipped[0].severity, Severity::Warning);
    assert!(skipped[0].file.ends_with("lib/ops.h") && skipped[0].line == 3);
    assert!(skipped[0].message.contains("<SomeKit/SomeKit.h>"));
    // The rules still run: a barrier under a thread-dependent branch is caught.
    let racy = kernel.replace(
        "BARRIER_SPOT",
        "if (t < 32) { threadgroup_barrier(mem_flags::mem_threadgroup); }",
    );
    write("k.metal", &racy);
    let findings = check::check_file(&d.path().join("k.metal"), &[]).unwrap();
    assert!(
        errors(&findings).iter().any(|f| f.code == "M030"),
        "{findings:#?}"
    );
    // A quoted include found nowhere is the user's missing file; `<cuda_fp16.h>` is no Apple framework.
    for include in ["\"SomeKit/SomeKit.h\"", "<cuda_fp16.h>"] {
        write(
            "lib/ops.h",
            &format!(
                "#pragma once\n#include <metal_stdlib>\n#include {include}\nusing namespace metal;\ninline float twice(float v) {{ return v * 2; }}\n"
            ),
        );
        write("k.metal", &good);
        let findings = check::check_file(&d.path().join("k.metal"), &[]).unwrap();
        assert!(
            errors(&findings)
                .iter()
                .any(|f| f.code == "M001" && f.message.contains("file not found")),
            "{include}: {findings:#?}"
        );
        assert!(!findings.iter().any(|f| f.code == "M005"), "{findings:#?}");
    }
}

/// Metal's vector constructors take scalars and smaller vectors whose components total the width; a braced
/// list of fewer scalars fills the rest with zero (`uint4 v = {a, b, c};`). A call with too few components
/// (`uint4(a, b, c)`), or a scalar standing where a vector part goes (`float4(v.xy, 1.0f)`), is refused.
#[test]
fn vector_construction_follows_metal_component_counts() {
    let good = r#"#include <metal_stdlib>
using namespace metal;
static constexpr constant int3 SHIFTS = {13, 19, 12};
[[kernel]] void k(device const uint2* x [[buffer(0)]], device float4* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  uint2 key = x[i] << uint(SHIFTS.y);
  uint4 seeds = {key.x, key.y, key.x ^ key.y};
  float4 a = float4(float2(1.0f), 2.0f, 3.0f);
  float4 b = {a.xy, a.zw};
  float4 c = float4(a.xyz, 1.0f);
  float3 d = float3(1.0f, a.yz);
  y[i] = a + b + c + float4(d, 0.0f) + float4(seeds);
}
"#;
    let findings = check::check_source(good, "vec.metal").unwrap();
    assert!(
        errors(&findings).is_empty(),
        "{}",
        check::render_text(&findings)
    );
    for (from, to) in [
        (
            "uint4 seeds = {key.x, key.y, key.x ^ key.y};",
            "uint4 seeds = uint4(key.x, key.y, key.x ^ key.y);",
        ),
        (
            "float4 c = float4(a.xyz, 1.0f);",
            "float4 c = float4(a.xy, 1.0f);",
        ),
    ] {
        let bad = good.replace(from, to);
        let findings = check::check_source(&bad, "vec.metal").unwrap();
        assert!(
            errors(&findings)
                .iter()
                .any(|f| f.code == "M001"
                    && f.line == if from.starts_with("uint4") { 7 } else { 10 }),
            "{to}: {findings:#?}"
        );
    }
}

/// M032 (a threadgroup read after other threads' writes with no barrier) does not fire when the write's
/// index is kept below a bound (`min(t, n - 1)`) and the read's index is that bound plus more (`n + j`):
/// the two touch different parts of the array (an FFT keeps partial sums below `n` while it still reads
/// the data stored from `n` on). A read below the bound, or a write bounded by `n` itself, still races.
#[test]
fn a_read_above_the_bound_of_a_bounded_write_is_no_race() {
    let good = r#"#include <metal_stdlib>
using namespace metal;
[[kernel]] void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant int& n [[buffer(2)]],
                  uint t [[thread_index_in_threadgroup]], uint i [[thread_position_in_grid]]) {
  threadgroup float s[512];
  s[t] = x[i];
  s[n + t] = x[i] * 2.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int slot = metal::min(int(t), n - 1);
  s[slot] = s[n + slot * 2];
  int j = int(t) * 3;
  float v = s[n + j];
  y[i] = v + s[slot];
}
"#;
    let findings = check::check_source(good, "bound.metal").unwrap();
    assert!(
        errors(&findings).is_empty(),
        "{}",
        check::render_text(&findings)
    );
    for (from, to) in [
        ("float v = s[n + j];", "float v = s[j];"),
        ("float v = s[n + j];", "float v = s[n - j];"),
        (
            "int slot = metal::min(int(t), n - 1);",
            "int slot = metal::min(int(t), n);",
        ),
    ] {
        let bad = good.replace(from, to);
        let findings = check::check_source(&bad, "bound.metal").unwrap();
        assert!(
            errors(&findings)
                .iter()
                .any(|f| f.code == "M032" && f.line == 13),
            "{to}: {findings:#?}"
        );
    }
}

/// Metal converts `half` to `float` in preference to `bfloat`: a library's `f(float)` / `f(bfloat)` pair
/// called with a half picks `f(float)`, and a struct converting to both `float` and `bfloat` converts to
/// `half` through `float`. A struct converting to `bool` (a mask) converts on to bfloat, and `c ? b : 0.5f`
/// mixes bfloat and float. None of this may be an error; a float vector given for a bfloat vector, a
/// pointer to float given for a pointer to bfloat, and a call no overload takes still are.
#[test]
fn half_prefers_float_to_bfloat_as_in_metal() {
    let good = r#"#include <metal_stdlib>
using namespace metal;
inline float soft(float x) { return x / (1.0f + metal::abs(x)); }
inline bfloat soft(bfloat x) { return bfloat(float(x) / (1.0f + metal::abs(float(x)))); }
struct scale8 {
  uchar bits;
  operator float() const { return float(bits) / 16.0f; }
  operator bfloat() const { return bfloat(float(bits) / 16.0f); }
};
struct all_on {
  operator bool() const { return true; }
};
inline bfloat pick(bool c, bfloat b) { return bfloat(c ? b : 0.5f); }
[[kernel]] void k(device const half* x [[buffer(0)]], device const uchar* s [[buffer(1)]],
                  device bfloat* y [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  half h = soft(x[i]);
  scale8 q = {s[i]};
  half scaled = half(q) * h;
  all_on m;
  bfloat w = m;
  bfloat4 v = bfloat4(w, w, w, pick(i > 3, w));
  y[i] = bfloat(scaled) * w + v.y * 2 - bfloat(1.0f);
}
"#;
    let findings = check::check_source(good, "bf.metal").unwrap();
    assert!(
        errors(&findings).is_empty(),
        "{}",
        check::render_text(&findings)
    );
    for (from, to, line) in [
        (
            "bfloat4 v = bfloat4(w, w, w, pick(i > 3, w));",
            "bfloat4 v = float4(1.0f);",
            21,
        ),
        (
            "all_on m;",
            "all_on m; device float* p = nullptr; device bfloat* r = p;",
            19,
        ),
        ("half h = soft(x[i]);", "half h = soft(float2(x[i]));", 16),
    ] {
        let bad = good.replace(from, to);
        let findings = check::check_source(&bad, "bf.metal").unwrap();
        assert!(
            errors(&findings)
                .iter()
                .any(|f| f.code == "M001" && f.line == line),
            "{to}: {findings:#?}"
        );
    }
}
