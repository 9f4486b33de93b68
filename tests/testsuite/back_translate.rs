//! Back-translation (Metal -> MLX-CUDA): every shipped mlx-metal seed becomes an mlx-cuda candidate with
//! the same plan (kernels, launches, buffers, tunables, constraints) that its task accepts, with no Metal
//! construct left in the bodies; constructs outside the emulated subset are errors naming file and line.
//! Whether the results are right is measured on the H200 by bench/back_translate.sh.

use crate::common;
use crate::common::*;
use ksearch::back_translate::{PRELUDE, back_translate, back_translate_dir};
use ksearch::candidate::Candidate;
use ksearch::target::Target;
use ksearch::task::Task;
use std::path::Path;

/// Identifiers outside comments and strings, crudely: enough to spot Metal leftovers.
fn code_words(src: &str) -> Vec<String> {
    let mut words = Vec::new();
    for line in src.lines() {
        let code = line.split("//").next().unwrap_or("");
        if code.trim_start().starts_with('#') {
            continue;
        }
        words.extend(
            code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .filter(|w| !w.is_empty())
                .map(str::to_string),
        );
    }
    words
}

#[test]
fn every_shipped_metal_seed_back_translates_into_a_valid_mlx_cuda_candidate() {
    let seeds = shipped_seeds("mlx-metal");
    assert!(
        seeds.len() >= 4,
        "expected the mamba-scan and ssd Metal seeds at least"
    );
    let mut checked = Vec::new();
    for (task_name, seed) in seeds {
        let what = format!(
            "{task_name}/{}",
            seed.file_name().unwrap().to_string_lossy()
        );
        let metal = Candidate::load(&seed).unwrap();
        let bt = back_translate_dir(&seed).unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = tempfile::tempdir().unwrap();
        bt.candidate.write_dir(out.path()).unwrap();
        // The folder written is a candidate its task accepts for mlx-cuda.
        let cuda = Candidate::load(out.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
        // A task still being written (it does not load) is reported, not held against the seed.
        match Task::load(&repo().join("tasks").join(&task_name)) {
            Ok(task) => {
                cuda.check_against(&task)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                checked.push(what.clone());
            }
            Err(e) => eprintln!("{what}: task not loadable, plan not checked against it: {e}"),
        }
        let (m, c) = (&metal.plan, &cuda.plan);
        assert_eq!(c.target, Target::MlxCuda, "{what}");
        assert_eq!(c.name, m.name, "{what}");
        assert_eq!(c.constraints, m.constraints, "{what}");
        assert_eq!(c.tunable, m.tunable, "{what}");
        assert_eq!(c.buffer, m.buffer, "{what}");
        assert_eq!(
            c.kernel.iter().map(|k| &k.name).collect::<Vec<_>>(),
            m.kernel.iter().map(|k| &k.name).collect::<Vec<_>>(),
            "{what}"
        );
        assert_eq!(c.launch.len(), m.launch.len(), "{what}");
        for (lc, lm) in c.launch.iter().zip(&m.launch) {
            assert_eq!(lc.kernel, lm.kernel, "{what}");
            assert_eq!(lc.inputs, lm.inputs, "{what}");
            assert_eq!(lc.outputs, lm.outputs, "{what}");
            assert_eq!(lc.grid, lm.grid, "{what}");
            assert_eq!(lc.threadgroup, lm.threadgroup, "{what}");
            assert_eq!(lc.type_args, lm.type_args, "{what}");
            assert_eq!(lc.init_value, lm.init_value, "{what}");
            // Scalars and template ints are kept in order; a grid guard may append names it needs.
            assert_eq!(lc.scalars[..lm.scalars.len()], lm.scalars[..], "{what}");
            assert_eq!(lc.template[..lm.template.len()], lm.template[..], "{what}");
            assert!(!lc.atomic_outputs, "{what}");
        }
        // Bodies: no Metal construct left; every scalar read as name[0]; the prelude in every header.
        for k in &c.kernel {
            let body = &cuda.files[&k.source];
            let header = &cuda.files[k.header.as_ref().unwrap()];
            assert!(
                header.contains(PRELUDE),
                "{what}: {} lacks the prelude",
                k.name
            );
            let words = code_words(body);
            for bad in [
                "device",
                "threadgroup",
                "constant",
                "thread",
                "metal::exp",
                "threadgroup_barrier",
                "simd_sum",
                "simd_shuffle_up",
                "half",
                "bfloat16_t",
            ] {
                assert!(
                    !words.iter().any(|w| w == bad),
                    "{what}: `{bad}` left in {}:\n{body}",
                    k.source
                );
            }
            for l in c.launch.iter().filter(|l| l.kernel == k.name) {
                for s in &l.scalars {
                    let s = s.0.src();
                    if words.iter().any(|w| w == s) {
                        assert!(
                            body.contains(&format!("{s}[0]")),
                            "{what}: scalar `{s}` is not read as `{s}[0]`"
                        );
                    }
                }
            }
        }
    }
    for must in [
        "mamba-scan/naive",
        "mamba-scan/expert",
        "ssd/naive",
        "ssd/expert",
    ] {
        assert!(checked.iter().any(|c| c == must), "{must} was not checked");
    }
}

#[test]
fn a_grid_that_is_not_whole_threadgroups_gets_a_guard_and_whole_ones_do_not() {
    let naive = back_translate_dir(&repo().join("tasks/mamba-scan/seeds/mlx-metal/naive")).unwrap();
    let k = &naive.report.kernels[0];
    let guard = k
        .ghost_guard
        .as_deref()
        .expect("B * D over TG is not whole groups");
    assert!(guard.contains("B[0]") && guard.contains("D[0]"), "{guard}");
    let body = &naive.candidate.files[&k.cuda_source];
    assert!(
        body.contains("ksbt_grid") && body.contains("return;"),
        "{body}"
    );

    let expert = back_translate_dir(&repo().join("tasks/ssd/seeds/mlx-metal/expert")).unwrap();
    for k in &expert.report.kernels {
        // 256 * chunks over 256 is whole; state_pass (B * H * P * N over 256) is not
        assert_eq!(
            k.ghost_guard.is_some(),
            k.kernel == "state_pass",
            "{}",
            k.kernel
        );
    }
}

fn metal_candidate(dir: &Path, plan_extra: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("plan.toml"),
        format!(
            r#"name = "t"
target = "mlx-metal"
{plan_extra}
[[kernel]]
name = "k"
source = "k.metal"

[[launch]]
kernel = "k"
inputs = ["x"]
outputs = ["y"]
scalars = ["N"]
grid = ["TG * ((N + TG - 1) // TG)", "1", "1"]
threadgroup = ["TG", "1", "1"]
template = ["TG"]

[tunable.TG]
values = [64, 128]
default = 128
"#
        ),
    )
    .unwrap();
    std::fs::write(dir.join("k.metal"), body).unwrap();
}

#[test]
fn the_command_writes_the_folder_and_reports_json() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("reduce");
    metal_candidate(
        &src,
        "",
        "threadgroup float part[TG / 32];\nconst uint i = thread_position_in_grid.x;\nfloat v = i < uint(N) ? x[i] : 0.0f;\nv = simd_sum(v);\nif (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = v;\nthreadgroup_barrier(mem_flags::mem_threadgroup);\nif (i < uint(N)) y[i] = v + part[0];\n",
    );
    let out = tmp.path().join("out");
    let o = run(
        tmp.path(),
        &[
            "back-translate",
            src.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = last_json(&o);
    let k = &v["report"]["kernels"][0];
    assert_eq!(k["cuda_source"], "k.cu");
    assert!(
        k["ghost_guard"].is_null(),
        "TG * ceil(N / TG) over TG is whole"
    );
    assert!(
        k["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "thread_index_in_simdgroup")
    );
    let body = std::fs::read_to_string(out.join("k.cu")).unwrap();
    assert!(body.contains("__shared__ float part[TG / 32];"), "{body}");
    assert!(body.contains("ksbt::simd_sum(v)"), "{body}");
    assert!(body.contains("uint(N[0])"), "{body}");
    assert!(
        body.contains("const uint thread_index_in_simdgroup ="),
        "{body}"
    );
    let plan = Candidate::load(&out).unwrap();
    assert_eq!(plan.plan.target, Target::MlxCuda);
}

#[test]
fn unsupported_constructs_and_wrong_targets_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad");
    metal_candidate(
        &bad,
        "",
        "const uint i = thread_position_in_grid.x;\ntexture2d<float> t;\ny[i] = x[i];\n",
    );
    let o = run(tmp.path(), &["back-translate", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("k.metal:2") && e.contains("texture2d"), "{e}");

    // --out must not be the Metal candidate's own folder
    let good = tmp.path().join("good");
    metal_candidate(
        &good,
        "",
        "const uint i = thread_position_in_grid.x;\nif (i < uint(N)) y[i] = x[i];\n",
    );
    let o = run(
        tmp.path(),
        &[
            "back-translate",
            good.to_str().unwrap(),
            "--out",
            good.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--out another folder"),
        "{}",
        stderr(&o)
    );
    assert!(Candidate::load(&good).unwrap().plan.target == Target::MlxMetal);

    let cuda = repo().join("tasks/ssd/seeds/mlx-cuda/naive");
    let c = Candidate::load(&cuda).unwrap();
    let e = back_translate(&c, "plan.toml").unwrap_err().to_string();
    assert!(e.contains("mlx-cuda") && e.contains("mlx-metal"), "{e}");
}

#[test]
fn a_grid_name_the_body_already_uses_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("clash");
    metal_candidate(
        &dir,
        "",
        "const uint i = thread_position_in_grid.x;\nif (i < uint(N)) y[i] = x[i];\n",
    );
    // A grid over a dim the launch does not pass, that the body declares itself.
    let plan = std::fs::read_to_string(dir.join("plan.toml"))
        .unwrap()
        .replace("\"TG * ((N + TG - 1) // TG)\"", "\"M\"");
    std::fs::write(dir.join("plan.toml"), plan).unwrap();
    std::fs::write(
        dir.join("k.metal"),
        "const uint M = 3;\nconst uint i = thread_position_in_grid.x;\nif (i < uint(N)) y[i] = x[i] + M;\n",
    )
    .unwrap();
    let e = back_translate_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("`M`") && e.contains("body already uses"), "{e}");
    // Without the clash, M is passed as an extra scalar and read as M[0] by the guard.
    std::fs::write(
        dir.join("k.metal"),
        "const uint i = thread_position_in_grid.x;\nif (i < uint(N)) y[i] = x[i];\n",
    )
    .unwrap();
    let bt = back_translate_dir(&dir).unwrap();
    let names: Vec<&str> = bt.candidate.plan.launch[0]
        .scalars
        .iter()
        .map(|s| s.0.src())
        .collect();
    assert_eq!(names, ["N", "M"]);
    assert!(bt.candidate.files["k.cu"].contains("M[0]"));
}

/// The Metal examples of the knowledge patterns (what the LLM is shown as good MLX Metal code) are all
/// inside the subset: each back-translates, its scalars read as `name[0]` and no Metal construct left.
#[test]
fn every_knowledge_pattern_metal_body_back_translates() {
    let k = ksearch::knowledge::get();
    assert!(k.patterns.len() >= 8);
    for p in &k.patterns {
        let names = |key: &str| -> Vec<String> {
            p.rest
                .get(key)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str())
                        .map(|s| s.split(':').next().unwrap().trim().to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let template: Vec<(String, i64)> = p
            .rest
            .get("template")
            .and_then(|v| v.as_table())
            .map(|t| {
                t.iter()
                    .map(|(k, v)| (k.clone(), v.as_integer().unwrap()))
                    .collect()
            })
            .unwrap_or_default();
        let header = p
            .rest
            .get("metal_header")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let pass2 = p
            .rest
            .get("metal_pass2")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let scalars = names("scalars");
        let mut bodies = vec![(p.metal.clone(), names("inputs"), names("outputs"))];
        if !pass2.trim().is_empty() {
            bodies.push((pass2.to_string(), vec!["partial".into()], vec!["y".into()]));
        }
        for (body, inputs, outputs) in bodies {
            let q = |v: &[String]| {
                v.iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let tunables: String = template
                .iter()
                .map(|(k, v)| format!("[tunable.{k}]\nvalues = [{v}]\ndefault = {v}\n"))
                .collect();
            let plan = format!(
                "name = \"{id}\"\ntarget = \"mlx-metal\"\n[[kernel]]\nname = \"k\"\nsource = \"k.metal\"\n{h}\n[[launch]]\nkernel = \"k\"\ninputs = [{i}]\noutputs = [{o}]\nscalars = [{s}]\ngrid = [\"32\", \"1\", \"1\"]\nthreadgroup = [\"32\", \"1\", \"1\"]\ntemplate = [{t}]\n{tunables}",
                id = p.id,
                h = if header.is_empty() {
                    String::new()
                } else {
                    "header = \"h.metal\"".into()
                },
                i = q(&inputs),
                o = q(&outputs),
                s = q(&scalars),
                t = q(&template.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()),
            );
            let mut files = std::collections::BTreeMap::new();
            files.insert("k.metal".to_string(), body.clone());
            if !header.is_empty() {
                files.insert("h.metal".to_string(), header.to_string());
            }
            let c = Candidate {
                plan: toml::from_str(&plan).unwrap_or_else(|e| panic!("{}: {e}\n{plan}", p.id)),
                files,
            };
            let bt = back_translate(&c, &p.id).unwrap_or_else(|e| panic!("{}: {e}", p.id));
            let out = &bt.candidate.files["k.cu"];
            let words = code_words(out);
            for bad in ["device", "threadgroup", "threadgroup_barrier", "simd_sum"] {
                assert!(
                    !words.iter().any(|w| w == bad),
                    "{}: `{bad}` left:\n{out}",
                    p.id
                );
            }
            for s in &scalars {
                if code_words(&body).iter().any(|w| w == s) {
                    assert!(out.contains(&format!("{s}[0]")), "{}: {s}", p.id);
                }
            }
        }
    }
}

/// Compiles and runs one driver of tests/back_translate_cpu against the back-translated folders under
/// `generated`, and returns its output.
fn run_cpu_driver(driver: &str, generated: &Path) -> String {
    let driver = repo().join("tests/back_translate_cpu").join(driver);
    common::run_cuda_cpu_driver(&driver, generated, generated)
}

fn back_translate_into(src: &Path, generated: &Path, name: &str) {
    back_translate_dir(src)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .candidate
        .write_dir(&generated.join(name))
        .unwrap();
}

#[test]
fn the_prelude_has_metal_semantics_on_a_cpu_warp_emulation() {
    let generated = tempfile::tempdir().unwrap();
    for k in ["warp", "mma"] {
        back_translate_into(
            &repo().join("tests/back_translate_cpu").join(k),
            generated.path(),
            k,
        );
    }
    let out = run_cpu_driver("prelude_semantics.cpp", generated.path());
    assert!(out.contains("all prelude checks passed"), "{out}");
}

#[test]
fn expert_and_naive_seeds_agree_once_back_translated() {
    let generated = tempfile::tempdir().unwrap();
    for (task, seed) in [
        ("mamba-scan", "naive"),
        ("mamba-scan", "expert"),
        ("ssd", "naive"),
        ("ssd", "expert"),
    ] {
        back_translate_into(
            &repo().join(format!("tasks/{task}/seeds/mlx-metal/{seed}")),
            generated.path(),
            &format!("{task}-{seed}"),
        );
    }
    let out = run_cpu_driver("seeds_agree.cpp", generated.path());
    assert!(out.contains("back-translations agree"), "{out}");
}

#[test]
fn attention_expert_and_naive_agree_once_back_translated() {
    // attention_agree.cpp calls the kernels with these arguments; a seed whose launches change needs the
    // driver changed with it.
    let expected: [(&str, &str, &[&str], &[&str]); 4] = [
        (
            "naive",
            "attention_naive",
            &["B", "Hq", "Hkv", "Tq", "Tk", "D", "CAUSAL"],
            &[],
        ),
        (
            "expert",
            "flash_prefill",
            &["Hq", "Hkv", "Tq", "Tk", "CAUSAL"],
            &["D", "BK", "NSG"],
        ),
        (
            "expert",
            "decode_split",
            &["Hq", "Hkv", "Tq", "Tk", "CAUSAL"],
            &["D", "DSG", "MAXR", "NSPLIT"],
        ),
        (
            "expert",
            "decode_combine",
            &["B", "Hq", "Tq"],
            &["D", "NSPLIT"],
        ),
    ];
    for (seed, kernel, scalars, template) in expected {
        let c = Candidate::load(&repo().join(format!("tasks/attention/seeds/mlx-metal/{seed}")))
            .unwrap();
        let l = c.plan.launch.iter().find(|l| l.kernel == kernel).unwrap();
        let names: Vec<&str> = l.scalars.iter().map(|s| s.0.src()).collect();
        assert!(
            names == scalars && l.template == template,
            "attention/{seed}: `{kernel}` is now launched with scalars {names:?} and template {:?}; update its call in tests/back_translate_cpu/attention_agree.cpp",
            l.template
        );
    }
    let generated = tempfile::tempdir().unwrap();
    for seed in ["naive", "expert"] {
        back_translate_into(
            &repo().join(format!("tasks/attention/seeds/mlx-metal/{seed}")),
            generated.path(),
            &format!("attention-{seed}"),
        );
    }
    let out = run_cpu_driver("attention_agree.cpp", generated.path());
    assert!(out.contains("back-translations agree"), "{out}");
}

#[test]
fn headers_with_the_same_stem_stay_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("two");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plan.toml"),
        r#"name = "two"
target = "mlx-metal"
[[kernel]]
name = "k1"
source = "k1.metal"
header = "a.h"
[[kernel]]
name = "k2"
source = "k2.metal"
header = "a.metal"
[[launch]]
kernel = "k1"
outputs = ["y"]
grid = ["32", "1", "1"]
threadgroup = ["32", "1", "1"]
[[launch]]
kernel = "k2"
outputs = ["y"]
grid = ["32", "1", "1"]
threadgroup = ["32", "1", "1"]
"#,
    )
    .unwrap();
    std::fs::write(dir.join("a.h"), "inline float one() { return 1.0f; }\n").unwrap();
    std::fs::write(dir.join("a.metal"), "inline float two() { return 2.0f; }\n").unwrap();
    for k in ["k1", "k2"] {
        std::fs::write(dir.join(format!("{k}.metal")), "y[0] = 0.0f;\n").unwrap();
    }
    let bt = back_translate_dir(&dir).unwrap();
    let h1 = bt.candidate.plan.kernel[0].header.clone().unwrap();
    let h2 = bt.candidate.plan.kernel[1].header.clone().unwrap();
    assert_ne!(h1, h2);
    assert!(bt.candidate.files[&h1].contains("one()"));
    assert!(bt.candidate.files[&h2].contains("two()"));
}
