//! `ksearch translate`: CUDA fixtures (tests/translate/*.cu) → MLX candidates. Metal candidates must pass
//! the Metal checker (`ksearch::check`); untranslatable constructs come back with their codes.

use ksearch::check;
use ksearch::target::Target;
use ksearch::translate::{self, Severity, Translation};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/translate")
        .join(name)
}

fn tr(name: &str, target: Target) -> Translation {
    translate::translate_file(&fixture(name), target).unwrap()
}

/// A translation that must be complete: no error diagnostic, a candidate with a valid plan.
fn complete(name: &str, target: Target) -> Translation {
    let t = tr(name, target);
    assert!(
        codes(&t, Severity::Error).is_empty(),
        "{name}: {:?}",
        t.diagnostics
    );
    t.candidate.as_ref().unwrap().validate().unwrap();
    t
}

fn codes(t: &Translation, severity: Severity) -> Vec<&str> {
    t.diagnostics
        .iter()
        .filter(|d| d.severity == severity)
        .map(|d| d.code.as_str())
        .collect()
}

fn body<'a>(t: &'a Translation, kernel: &str) -> &'a str {
    let c = t.candidate.as_ref().expect("a candidate");
    let k = c.plan.kernel.iter().find(|k| k.name == kernel).unwrap();
    &c.files[&k.source]
}

/// The Metal checker's error findings on a translated candidate (dtypes from the CUDA parameters).
fn metal_check_errors(t: &Translation) -> Vec<String> {
    translate::check_metal(t)
        .unwrap()
        .iter()
        .filter(|f| f.severity == check::Severity::Error)
        .map(|f| format!("{}:{}: {} {}", f.file, f.line, f.code, f.message))
        .collect()
}

const COMMON: [&str; 5] = [
    "vector_add.cu",
    "reduce_shared.cu",
    "warp_reduce.cu",
    "histogram.cu",
    "softmax.cu",
];

#[test]
fn the_common_kernels_become_metal_candidates_that_pass_the_checker() {
    for f in COMMON {
        let t = complete(f, Target::MlxMetal);
        let c = t.candidate.as_ref().unwrap();
        assert_eq!(c.plan.target, Target::MlxMetal);
        for src in c.files.values() {
            for cuda in [
                "threadIdx",
                "blockIdx",
                "blockDim",
                "__syncthreads",
                "__shfl",
                "atomicAdd",
                "__shared__",
            ] {
                assert!(!src.contains(cuda), "{f}: `{cuda}` left in\n{src}");
            }
        }
        let errors = metal_check_errors(&t);
        assert!(
            errors.is_empty(),
            "{f}: the checker found\n{}",
            errors.join("\n")
        );
        // The harness is not vacuous: a body with CUDA left in fails it.
        let mut bad = t.clone();
        let c = bad.candidate.as_mut().unwrap();
        let src = c.plan.kernel[0].source.clone();
        c.files
            .insert(src, "int i = threadIdx.x; __syncthreads();\n".into());
        assert!(
            !metal_check_errors(&bad).is_empty(),
            "{f}: a CUDA body passed the checker"
        );
        assert_eq!(t.stats.not_translated, 0, "{f}");
        assert!(
            t.stats.seen > 0 && t.stats.translated == t.stats.seen,
            "{f}"
        );
    }
}

#[test]
fn vector_add_maps_indices_and_takes_the_host_launch() {
    let t = tr("vector_add.cu", Target::MlxMetal);
    let b = body(&t, "vector_add");
    assert!(b.contains("int i = thread_position_in_grid.x;"), "{b}");
    assert!(b.contains("c[i] = a[i] + b[i];"), "{b}");
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    assert_eq!(l.inputs, ["a", "b"]);
    assert_eq!(l.outputs, ["c"]);
    assert_eq!(l.scalars[0].0.src(), "n");
    // <<<(n + 255) / 256, 256>>> is a grid of that many blocks times 256 threads.
    let grid = &l.grid.as_ref().unwrap()[0];
    let env = [("n".to_string(), 1000.0)].into_iter().collect();
    assert_eq!(grid.0.eval_int(&env).unwrap(), 1024);
    assert!(codes(&t, Severity::Info).contains(&"T010"));
}

#[test]
fn reductions_use_threadgroup_memory_barriers_and_simd_shuffles() {
    let t = tr("reduce_shared.cu", Target::MlxMetal);
    let b = body(&t, "reduce_sum");
    assert!(b.contains("threadgroup float sdata[BLOCK];"), "{b}");
    assert!(
        b.contains("threadgroup_barrier(mem_flags::mem_threadgroup)"),
        "{b}"
    );
    assert_eq!(t.analysis.kernels[0].shared_bytes, Some(1024));
    // No host launch: a grid inferred from the bounds guard is a warning, and stated in the plan's description.
    assert!(codes(&t, Severity::Warning).contains(&"T011"));
    assert!(
        t.candidate
            .as_ref()
            .unwrap()
            .plan
            .description
            .contains("assumed grid")
    );

    let t = tr("warp_reduce.cu", Target::MlxMetal);
    let b = body(&t, "row_sum");
    assert!(b.contains("simd_shuffle_xor(v, offset)"), "{b}");
    assert!(b.contains("int lane = thread_index_in_simdgroup;"), "{b}");
    assert!(
        b.contains("int warp = simdgroup_index_in_threadgroup;"),
        "{b}"
    );
    let header = &t.candidate.as_ref().unwrap().files["header.metal"];
    assert!(header.contains("simd_shuffle_down(v, offset)"), "{header}");
    assert!(
        header.contains("constant constexpr int WARPS = 8;"),
        "{header}"
    );
    assert!(codes(&t, Severity::Warning).contains(&"T021"));
    let k = &t.analysis.kernels[0];
    assert!(k.concepts.iter().any(|c| c == "shuffle_xor"));
    assert!(k.brief.contains("simd_shuffle_xor"), "{}", k.brief);
}

#[test]
fn histogram_atomics_use_metal_atomics_with_zeroed_outputs() {
    let t = tr("histogram.cu", Target::MlxMetal);
    let b = body(&t, "histogram");
    assert!(b.contains("threadgroup atomic_int local[BINS];"), "{b}");
    assert!(
        b.contains("atomic_fetch_add_explicit(&local[v], 1, memory_order_relaxed)"),
        "{b}"
    );
    assert!(
        b.contains("atomic_store_explicit(&local[b], 0, memory_order_relaxed)"),
        "{b}"
    );
    assert!(b.contains("threads_per_grid.x"), "grid-stride step: {b}");
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    assert!(l.atomic_outputs);
    assert_eq!(l.init_value, Some(0.0));
    assert!(codes(&t, Severity::Info).contains(&"T013"));
    let k = &t.analysis.kernels[0];
    assert_eq!(k.constructs["atomic_global"], 1);
    assert_eq!(k.constructs["atomic_shared"], 1);
    assert!(k.grid_stride);
}

#[test]
fn softmax_helpers_get_address_spaces_and_attributes() {
    let t = tr("softmax.cu", Target::MlxMetal);
    let header = &t.candidate.as_ref().unwrap().files["header.metal"];
    assert!(
        header.contains("threadgroup float* scratch, uint3 thread_position_in_threadgroup"),
        "{header}"
    );
    let b = body(&t, "softmax_rows");
    assert!(
        b.contains("m = block_max(m, red, thread_position_in_threadgroup"),
        "{b}"
    );
    assert!(b.contains("metal::fast::exp(xr[j] - m)"), "{b}");
    assert!(
        b.contains("const device float* xr = x + row * cols;"),
        "{b}"
    );
    // dim3 block(THREADS); dim3 grid(rows); launch<<<grid, block>>>
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    let env = [("rows".to_string(), 3.0)].into_iter().collect();
    assert_eq!(l.grid.as_ref().unwrap()[0].0.eval_int(&env).unwrap(), 768);
    assert_eq!(l.threadgroup.as_ref().unwrap()[0].0.src(), "256");
}

#[test]
fn the_common_kernels_become_mlx_cuda_candidates() {
    for f in COMMON {
        let t = complete(f, Target::MlxCuda);
        let c = t.candidate.as_ref().unwrap();
        for l in &c.plan.launch {
            let k = c.plan.kernel.iter().find(|k| k.name == l.kernel).unwrap();
            let src = &c.files[&k.source];
            assert!(!src.contains("threadgroup"), "{f}: {src}");
            for s in &l.scalars {
                // MLX-CUDA passes scalars as int32 pointers: every use reads s[0].
                let s = s.0.src();
                assert!(
                    src.contains(&format!("{s}[0]")),
                    "{f}: `{s}` not read as {s}[0]\n{src}"
                );
            }
        }
    }
    let t = tr("softmax.cu", Target::MlxCuda);
    assert!(t.candidate.as_ref().unwrap().files["header.cuh"].contains("#define FLT_MAX"));
}

#[test]
fn cp_async_and_wmma_come_back_with_their_codes() {
    let t = tr("cp_async.cu", Target::MlxMetal);
    let errors = codes(&t, Severity::Error);
    assert!(errors.contains(&"T101"), "{:?}", t.diagnostics);
    assert!(body(&t, "scale_tiles").contains("// TODO(T101)"));
    assert!(
        body(&t, "scale_tiles").contains("__pipeline_memcpy_async"),
        "the CUDA is kept in the comment"
    );
    // The cp.async PTX form is emulated (ptx.rs): a synchronous copy into the threadgroup array.
    let copy = body(&t, "copy_asm");
    assert!(
        copy.contains(
            "threadgroup uchar* dst = (threadgroup uchar*)(&buf[thread_position_in_threadgroup.x]);"
        ) && copy.contains(
            "ksearch_cp_async((threadgroup uchar*)(dst), (const device uchar*)(&x[i]), 4, 4)"
        ) && !copy.contains("TODO"),
        "{copy}"
    );
    assert!(t.stats.not_translated > 0);
    assert!(t.stats.constructs["async_copy"].not_translated > 0);
    // On mlx-cuda cp.async is legal (sm_90a): kept, reported as information.
    let t = tr("cp_async.cu", Target::MlxCuda);
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    assert!(codes(&t, Severity::Info).contains(&"T101"));

    let t = tr("wmma.cu", Target::MlxMetal);
    let errors = codes(&t, Severity::Error);
    assert!(errors.contains(&"T102"), "{:?}", t.diagnostics);
    // Every write of the output was inside the tensor-core code: the folder is a skeleton and says so.
    assert!(errors.contains(&"T004"), "{:?}", t.diagnostics);
    assert!(body(&t, "wmma_gemm").contains("// TODO(T102)"));
    let k = &t.analysis.kernels[0];
    assert!(k.uses("wmma") && k.uses("half"));
}

#[test]
fn templates_in_place_parameters_and_dynamic_shared_memory() {
    let t = tr("misc_template_inplace.cu", Target::MlxMetal);
    let c = t.candidate.as_ref().unwrap();
    let l = &c.plan.launch[0];
    assert_eq!(
        l.inputs,
        ["data", "alpha"],
        "the float scalar is an input of one element"
    );
    assert_eq!(l.outputs, ["data_out"]);
    assert_eq!(l.template, ["TILE", "SMEM_STAGE"]);
    assert_eq!(
        c.plan.tunable["TILE"].default, 16,
        "the value of the host launch"
    );
    assert_eq!(l.type_args["T"], "data");
    assert_eq!(
        c.plan.tunable["SMEM_STAGE"].default, 256,
        "1024 bytes of float"
    );
    let b = body(&t, "scale_inplace");
    assert!(b.contains("threadgroup float stage[SMEM_STAGE];"), "{b}");
    assert!(b.contains("data_out[r * cols + c] ="), "{b}");
    assert!(b.contains("int r = thread_position_in_grid.y;"), "{b}");
    assert!(
        b.contains("alpha[0]"),
        "a float scalar is read from its one-element input: {b}"
    );
    for code in ["T015", "T016", "T017", "T019", "T022", "T030"] {
        assert!(
            t.diagnostics.iter().any(|d| d.code == code),
            "{code}: {:?}",
            t.diagnostics
        );
    }
    let g = grid_at(l, &[("cols", 40.0), ("rows", 20.0)]);
    assert_eq!(g, [48, 32, 1]);

    let t = tr("misc_template_inplace.cu", Target::MlxCuda);
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    assert_eq!(l.shared_memory.as_ref().unwrap().0.src(), "1024");
    assert!(body(&t, "scale_inplace").contains("extern __shared__ float stage[];"));
}

#[test]
fn unsupported_constructs_are_marked_never_dropped() {
    let t = tr("misc_unsupported.cu", Target::MlxMetal);
    let errors = codes(&t, Severity::Error);
    for code in ["T104", "T105", "T106", "T107", "T108", "T110", "T112"] {
        assert!(errors.contains(&code), "{code}: {:?}", t.diagnostics);
    }
    let b = body(&t, "everything");
    for code in ["T104", "T105", "T106", "T107", "T108", "T110", "T112"] {
        assert!(b.contains(&format!("TODO({code})")), "{code}\n{b}");
    }
    // A commented-out statement inside an `if` stays that if's body.
    assert!(b.contains("if (i == 0) { // TODO(T108)"), "{b}");
    // `grid` came from cooperative groups, so its use is not translated either.
    assert!(b.contains("// grid.sync();"), "{b}");
    let t = tr("misc_unsupported.cu", Target::MlxCuda);
    let errors = codes(&t, Severity::Error);
    assert!(
        errors.contains(&"T105") && errors.contains(&"T107"),
        "{errors:?}"
    );
    assert!(!errors.contains(&"T108"), "printf is legal CUDA");
}

#[test]
fn json_output_has_kernels_stats_and_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cand");
    let o = Command::new(env!("CARGO_BIN_EXE_ksearch"))
        .args([
            "translate",
            fixture("cp_async.cu").to_str().unwrap(),
            "--to",
            "mlx-metal",
            "--json",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "cp.async is marked, not translated: an incomplete result; {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.join("plan.toml").is_file(),
        "the folder is written all the same"
    );
    let stdout = String::from_utf8(o.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    for key in [
        "seen",
        "translated",
        "not_translated",
        "lines",
        "constructs",
    ] {
        assert!(v["stats"].get(key).is_some(), "stats.{key}: {v}");
    }
    let diags = v["diagnostics"].as_array().unwrap();
    assert!(
        diags
            .iter()
            .any(|d| d["code"] == "T101" && d["severity"] == "error")
    );
    for d in diags {
        for key in ["code", "severity", "line", "message"] {
            assert!(d.get(key).is_some(), "{d}");
        }
    }
    assert!(
        !diags
            .iter()
            .any(|d| d["code"] == "T005" && d["severity"] == "error"),
        "{v}"
    );
    assert_eq!(v["kernels"].as_array().unwrap().len(), 2);
    assert!(
        v["kernels"][0]["brief"]
            .as_str()
            .unwrap()
            .contains("mlx-metal")
    );
    assert!(out.join("plan.toml").is_file() && out.join("scale_tiles.metal").is_file());
    ksearch::candidate::Candidate::load(&out).unwrap();
}

#[test]
fn bad_input_names_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("host_only.cu");
    std::fs::write(&f, "int main() { return 0; }\n").unwrap();
    let e = translate::translate_file(&f, Target::MlxMetal)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host_only.cu") && e.contains("__global__"),
        "{e}"
    );
    let e = translate::translate_file(&dir.path().join("missing.cu"), Target::MlxMetal)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.cu"), "{e}");
    let e = translate::translate_file(&fixture("vector_add.cu"), Target::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--to mlx-metal"), "{e}");
}

#[test]
fn every_code_is_documented() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/translate.md"))
            .unwrap();
    for c in &translate::rules().code {
        assert!(
            doc.contains(&format!("### {}", c.code)),
            "docs/translate.md lacks {}",
            c.code
        );
    }
}

/// The CUDA bodies of knowledge/patterns.toml, wrapped as kernels, translate to Metal that the checker
/// accepts (a sanity check of the translator on code it was not written against).
#[test]
fn knowledge_pattern_cuda_bodies_translate() {
    let k = ksearch::knowledge::get();
    let mut checked = 0;
    for p in &k.patterns {
        let field = |name: &str| p.rest.get(name).cloned();
        let names = |v: Option<toml::Value>| -> Vec<String> {
            v.and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|x| x.as_str())
                .map(|s| s.split(':').next().unwrap().trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let inputs = names(field("inputs"));
        let outputs: Vec<String> = names(field("outputs"));
        let scalars = names(field("scalars"));
        let templates: Vec<(String, i64)> = field("template")
            .and_then(|t| t.as_table().cloned())
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_integer().unwrap()))
            .collect();
        let mut body = p.cuda.clone();
        for s in &scalars {
            body = body.replace(&format!("{s}[0]"), s);
        }
        let mut params: Vec<String> = inputs.iter().map(|i| format!("const float* {i}")).collect();
        params.extend(outputs.iter().map(|o| format!("float* {o}")));
        params.extend(scalars.iter().map(|s| format!("int {s}")));
        let tpl = if templates.is_empty() {
            String::new()
        } else {
            format!(
                "template <{}>\n",
                templates
                    .iter()
                    .map(|(n, _)| format!("int {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let header = field("cuda_header")
            .and_then(|h| h.as_str().map(str::to_string))
            .unwrap_or_default();
        let src = format!(
            "{header}\n{tpl}__global__ void {}({}) {{\n{body}\n}}\n",
            p.id,
            params.join(", ")
        );
        let mut t = translate::translate(&src, &p.id, Target::MlxMetal);
        if let Some(c) = t.candidate.as_mut() {
            for (n, v) in &templates {
                c.plan.tunable.insert(
                    n.clone(),
                    ksearch::candidate::Tunable {
                        values: vec![*v],
                        default: *v,
                    },
                );
            }
        }
        // The bodies come without a launch: a guessed grid (T011) is the file's, not the body's translation.
        let body_errors: Vec<&str> = codes(&t, Severity::Error)
            .into_iter()
            .filter(|c| *c != "T011")
            .collect();
        if body_errors.is_empty() {
            let errors = metal_check_errors(&t);
            assert!(
                errors.is_empty(),
                "pattern {}:\n{}\n{}",
                p.id,
                errors.join("\n"),
                body_of(&t)
            );
            checked += 1;
        } else {
            eprintln!("pattern {}: {:?}", p.id, codes(&t, Severity::Error));
        }
    }
    assert!(
        checked >= 4,
        "only {checked} patterns translated without errors"
    );
}

fn body_of(t: &Translation) -> String {
    t.candidate
        .as_ref()
        .map(|c| {
            c.files
                .values()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n----\n")
        })
        .unwrap_or_default()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A task with `cuda_source` gets the analyzer's brief in the prompts of the MLX targets.
#[test]
fn a_tasks_cuda_kernel_is_briefed_in_mlx_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let task_dir = dir.path().join("softmax");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/softmax"),
        &task_dir,
    );
    std::fs::copy(fixture("softmax.cu"), task_dir.join("kernel.cu")).unwrap();
    let toml_path = task_dir.join("task.toml");
    let text = std::fs::read_to_string(&toml_path).unwrap();
    std::fs::write(&toml_path, format!("cuda_source = \"kernel.cu\"\n{text}")).unwrap();
    let task = ksearch::task::Task::load(&task_dir).unwrap();

    let brief = translate::task_brief(&task, Target::MlxMetal);
    assert!(
        brief.contains("softmax_rows") && brief.contains("threadgroup_barrier"),
        "{brief}"
    );
    assert!(translate::task_brief(&task, Target::Cpu).is_empty());
    let ctx = |cuda_brief: &str| {
        serde_json::json!({
            "task": {"name": "softmax", "description": "d", "spec": "s", "workloads": []},
            "target": {"name": "mlx-metal", "notes": ""},
            "hardware": "h", "knowledge": "", "cuda_brief": cuda_brief,
        })
    };
    let prompt = ksearch::prompts::render("_task.j2", ctx(&brief)).unwrap();
    assert!(
        prompt.contains("## The CUDA kernel this task comes from (kernel.cu)"),
        "{prompt}"
    );
    let prompt = ksearch::prompts::render("_task.j2", ctx("")).unwrap();
    assert!(!prompt.contains("CUDA kernel this task"));

    // A path outside the task folder is refused, naming the file and the field.
    std::fs::write(
        &toml_path,
        format!("cuda_source = \"../kernel.cu\"\n{text}"),
    )
    .unwrap();
    let e = ksearch::task::Task::load(&task_dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains("task.toml") && e.contains("cuda_source"), "{e}");
}

/// Kernels written in other styles than the main fixtures (extern "C", size_t indices, dynamic shared
/// memory, dim3 launches, 2D tiles, float4 casts, half precision): every one translates to Metal without
/// errors and passes the checker, and to mlx-cuda without errors.
#[test]
fn kernels_in_other_styles_translate_and_pass_the_checker() {
    let dir = fixture("variants");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    files.sort();
    assert!(files.len() >= 7);
    // Kernel-only files: a grid the analysis cannot size from a bounds guard is a guess, an error (T011)
    // stated in the plan's description; every other part must translate cleanly.
    let clean = |t: &Translation, f: &Path| {
        let errors: Vec<&str> = codes(t, Severity::Error)
            .into_iter()
            .filter(|c| *c != "T011")
            .collect();
        assert!(errors.is_empty(), "{}: {:?}", f.display(), t.diagnostics);
        if codes(t, Severity::Error).contains(&"T011") {
            let plan = &t.candidate.as_ref().unwrap().plan;
            assert!(plan.description.contains("assumed grid"), "{}", f.display());
        }
    };
    for f in files {
        let t = translate::translate_file(&f, Target::MlxMetal).unwrap();
        clean(&t, &f);
        let errors = metal_check_errors(&t);
        assert!(
            errors.is_empty(),
            "{}: the checker found\n{}\n{}",
            f.display(),
            errors.join("\n"),
            body_of(&t)
        );
        let t = translate::translate_file(&f, Target::MlxCuda).unwrap();
        clean(&t, &f);
    }
    // Launch facts from those styles.
    let t = translate::translate_file(&dir.join("histogram_u8.cu"), Target::MlxMetal).unwrap();
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    let g = grid_at(l, &[("width", 100.0), ("height", 50.0)]);
    assert_eq!(
        g,
        [112, 64, 1],
        "dim3 grid((width + block.x - 1) / block.x, ...)"
    );
    let t =
        translate::translate_file(&dir.join("reduce_dynamic_smem.cu"), Target::MlxMetal).unwrap();
    assert_eq!(
        t.candidate.as_ref().unwrap().plan.tunable["SMEM_SDATA"].default,
        256
    );
    let t = translate::translate_file(&dir.join("vec4_scale.cu"), Target::MlxMetal).unwrap();
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    assert_eq!(
        l.outputs,
        ["y"],
        "a store through reinterpret_cast is a write, not a read"
    );
    let t = translate::translate_file(&dir.join("matmul_tiled.cu"), Target::MlxMetal).unwrap();
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    let g = grid_at(l, &[("M", 40.0), ("N", 20.0)]);
    assert_eq!(
        g,
        [32, 48, 1],
        "blockIdx.y * TILE + threadIdx.y guarded by M"
    );
    // The first access decides: written then read back → output; read first → in place; += first → zeroed.
    let t = translate::translate_file(&dir.join("softmax_writeback.cu"), Target::MlxMetal).unwrap();
    let c = t.candidate.as_ref().unwrap();
    let launch = |k: &str| c.plan.launch.iter().find(|l| l.kernel == k).unwrap();
    assert_eq!(launch("softmax_writeback").outputs, ["y", "colsum"]);
    assert_eq!(launch("softmax_writeback").inputs, ["x"]);
    assert_eq!(launch("scale_inplace").inputs, ["v"]);
    assert_eq!(launch("scale_inplace").outputs, ["v_out"]);
    assert_eq!(launch("accumulate").outputs, ["acc"]);
    assert_eq!(launch("accumulate").init_value, Some(0.0));
}

/// tests/translate/tasks/<name> is the contract of each main fixture (tensors named after the kernel's
/// parameters): both translations fit it, so they can be evaluated against its reference
/// (bench/translate_h200.sh does it on the H200).
#[test]
fn translations_fit_the_fixture_tasks() {
    for f in COMMON {
        let name = f.trim_end_matches(".cu");
        let task = ksearch::task::Task::load(&fixture("tasks").join(name)).unwrap();
        for target in [Target::MlxMetal, Target::MlxCuda] {
            let t = tr(f, target);
            let c = t.candidate.as_ref().unwrap();
            c.check_against(&task)
                .unwrap_or_else(|e| panic!("{f} → {target}: {e}"));
            for w in task.workloads(false) {
                let rw = task.resolve(w).unwrap();
                c.resolve(&task, &rw)
                    .unwrap_or_else(|e| panic!("{f} → {target} on {}: {e}", w.name));
            }
        }
    }
}

/// A translated launch's grid, evaluated with the given dims.
fn grid_at(l: &ksearch::candidate::Launch, dims: &[(&str, f64)]) -> Vec<i64> {
    let env = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    l.grid
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.0.eval_int(&env).unwrap())
        .collect()
}

#[test]
fn the_exit_status_says_whether_the_translation_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_ksearch"))
            .args([
                "translate",
                fixture(name).to_str().unwrap(),
                "--to",
                "mlx-metal",
                "--out",
            ])
            .arg(dir.path().join(name))
            .output()
            .unwrap()
    };
    let clean = run("vector_add.cu");
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    let marked = run("wmma.cu");
    assert_eq!(marked.status.code(), Some(1));
    let text = String::from_utf8_lossy(&marked.stdout);
    assert!(
        text.contains("incomplete: ") && text.contains("finish them by hand"),
        "{text}"
    );
    assert!(dir.path().join("wmma.cu/plan.toml").is_file());
}

fn role(t: &Translation, kernel: &str, param: &str) -> translate::ParamRole {
    let k = t
        .analysis
        .kernels
        .iter()
        .find(|k| k.name == kernel)
        .unwrap();
    k.params.iter().find(|p| p.name == param).unwrap().role
}

#[test]
fn pointers_moved_before_use_stay_inputs_and_const_parameters_are_never_outputs() {
    use translate::ParamRole::{Input, Output, Scalar};
    for target in [Target::MlxMetal, Target::MlxCuda] {
        let t = tr("roles_tiled.cu", target);
        for (kernel, param, want) in [
            ("sgemm_tiled", "A", Input),
            ("sgemm_tiled", "B", Input),
            ("sgemm_tiled", "C", Output),
            ("sgemm_tiled", "K", Scalar),
            ("row_sums", "rows", Input),
            ("row_sums", "sums", Output),
            ("copy_walk", "src", Input),
            ("copy_walk", "dst", Output),
            ("copy_walk", "n", Scalar),
        ] {
            assert_eq!(
                role(&t, kernel, param),
                want,
                "{kernel}.{param} on {target:?}"
            );
        }
        // Neither is a store, so no kernel here is uncertain about its roles.
        for code in ["T028", "T029", "T003", "T018"] {
            assert!(
                !t.diagnostics.iter().any(|d| d.code == code),
                "{code} on {target:?}: {:?}",
                t.diagnostics
            );
        }
        let c = t.candidate.as_ref().expect("a candidate");
        let gemm = c
            .plan
            .launch
            .iter()
            .find(|l| l.kernel == "sgemm_tiled")
            .unwrap();
        assert_eq!(gemm.inputs, ["A", "B"], "{target:?}");
        assert_eq!(gemm.outputs, ["C"], "{target:?}");
    }
}

#[test]
fn a_translation_it_cannot_make_right_says_so_with_an_error_and_a_failing_exit() {
    use translate::ParamRole::Input;
    for target in [Target::MlxMetal, Target::MlxCuda] {
        let t = tr("roles_uncertain.cu", target);
        let errors = |code: &str, kernel: &str| {
            t.diagnostics.iter().any(|d| {
                d.code == code
                    && d.severity == Severity::Error
                    && d.kernel.as_deref() == Some(kernel)
            })
        };
        assert!(errors("T028", "scale_const_cast"), "{:?}", t.diagnostics);
        assert_eq!(
            role(&t, "scale_const_cast", "x"),
            Input,
            "const stays an input"
        );
        assert!(errors("T029", "twice_in_place"), "{:?}", t.diagnostics);
        assert!(errors("T029", "update_after_write"), "{:?}", t.diagnostics);
        assert!(
            !errors("T029", "axpy"),
            "read before its write: a sound split"
        );
        assert_eq!(
            role(&t, "axpy", "alpha"),
            Input,
            "a float scalar is an input of one element"
        );
        // A float scalar is never an int32: it becomes an input tensor of one element.
        assert!(
            t.diagnostics.iter().any(|d| d.code == "T030"),
            "{:?}",
            t.diagnostics
        );
        // The kernel with no output is left out; the file's other kernels are still written.
        let c = t.candidate.as_ref().unwrap();
        assert!(!c.plan.launch.iter().any(|l| l.kernel == "scale_const_cast"));
        let l = c.plan.launch.iter().find(|l| l.kernel == "axpy").unwrap();
        assert!(l.inputs.contains(&"alpha".to_string()), "{:?}", l.inputs);
        assert!(!l.scalars.iter().any(|s| s.0.src() == "alpha"));
        assert!(
            body(&t, "axpy").contains("alpha[0] * x[i]"),
            "{}",
            body(&t, "axpy")
        );
    }
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ksearch"))
        .args(["translate", "--to", "mlx-cuda", "--out"])
        .arg(out.path().join("c"))
        .arg(fixture("roles_uncertain.cu"))
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn deep_nesting_is_refused_with_a_clear_error_and_a_stray_latin1_byte_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let n = 10_000;
    let deep = dir.path().join("deep.cu");
    std::fs::write(
        &deep,
        format!(
            "__global__ void k(float* y, const float* x) {{\n int i = threadIdx.x;\n y[i] = {}x[i]{};\n{}y[i] += 1.0f;{}\n}}\n",
            "(".repeat(n),
            ")".repeat(n),
            "{".repeat(n),
            "}".repeat(n)
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ksearch"))
        .args(["translate", "--to", "mlx-metal", "--out"])
        .arg(dir.path().join("out-deep"))
        .arg(&deep)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("deep.cu:3") && err.contains("nested"), "{err}");

    // Just under the bound, on a test thread's small stack: translated, not crashed.
    let ok = dir.path().join("nested.cu");
    let m = translate::MAX_NESTING - 20;
    std::fs::write(
        &ok,
        format!(
            "__global__ void k(float* y, const float* x) {{\n int i = threadIdx.x;\n y[i] = {}x[i]{};\n}}\n",
            "(".repeat(m),
            ")".repeat(m)
        ),
    )
    .unwrap();
    let src = std::fs::read_to_string(&ok).unwrap();
    let depth = translate::nesting(&src).0;
    assert!(
        depth > translate::MAX_NESTING - 40 && depth <= translate::MAX_NESTING,
        "{depth}"
    );
    let t = translate::translate_file(&ok, Target::MlxCuda).unwrap();
    assert!(t.candidate.is_some(), "{:?}", t.diagnostics);

    let latin = dir.path().join("latin.cu");
    std::fs::write(
        &latin,
        b"// r\xe9sum\xe9 of the kernel\n__global__ void k(float* y, const float* x) { int i = threadIdx.x; y[i] = x[i]; }\n",
    )
    .unwrap();
    let t = translate::translate_file(&latin, Target::MlxCuda).unwrap();
    assert_eq!(t.candidate.unwrap().plan.launch[0].outputs, ["y"]);
}

/// Cooperative groups a Metal kernel can express become its built-ins (a block group is the threadgroup, a
/// tile of 32 a SIMD group), cache-hinted loads and stores become plain accesses, and what has no
/// equivalent (a tile of 16) stays an error. A launch whose grid the file computes from host values the
/// kernel never takes is an error too: the translation guessed, and says so.
#[test]
fn cooperative_groups_and_cache_hints_map_to_metal_and_unreadable_launches_are_errors() {
    let t = tr("cooperative.cu", Target::MlxMetal);
    let b = body(&t, "row_sum");
    for want in [
        "s += x[row * N + j];",
        "s = simd_sum(s);",
        "if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = s;",
        "threadgroup_barrier(mem_flags::mem_threadgroup);",
        "out[row] = t;",
    ] {
        assert!(b.contains(want), "{want} missing from\n{b}");
    }
    assert!(!b.contains("cg::") && !b.contains("TODO"), "{b}");
    let errors: Vec<&ksearch::translate::Diagnostic> = t
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    let row_sum: Vec<&str> = errors
        .iter()
        .filter(|d| d.kernel.as_deref() == Some("row_sum"))
        .map(|d| d.code.as_str())
        .collect();
    assert_eq!(row_sum, ["T011"], "{:?}", t.diagnostics);
    let guess = errors
        .iter()
        .find(|d| d.kernel.as_deref() == Some("row_sum"))
        .unwrap();
    assert!(
        guess
            .message
            .contains("the <<<...>>> launch at line 34 could not be converted"),
        "{}",
        guess.message
    );
    // A tile of 16 has no SIMD-group equivalent.
    assert!(
        errors
            .iter()
            .any(|d| d.code == "T104" && d.kernel.as_deref() == Some("row_max16")),
        "{:?}",
        t.diagnostics
    );
    // mlx-cuda keeps cooperative groups (MLX's generated source declares `cg`).
    let t = tr("cooperative.cu", Target::MlxCuda);
    assert!(body(&t, "row_sum").contains("cg::reduce(warp, s, cg::plus<float>())"));
    assert!(
        !codes(&t, Severity::Error).contains(&"T104"),
        "{:?}",
        t.diagnostics
    );
}

/// `CUDA_KERNEL_LOOP(i, n)`, the grid-stride macro of Caffe-era code, is read through: the analysis sees
/// the loop and its bound, so the grid is inferred (a warning), not guessed blind (an error).
#[test]
fn index_macros_are_expanded_before_the_analysis() {
    let t = tr("variants/kernel_loop_macro.cu", Target::MlxCuda);
    let k = &t.analysis.kernels[0];
    assert!(k.grid_stride, "{k:?}");
    assert!(
        codes(&t, Severity::Warning).contains(&"T011"),
        "{:?}",
        t.diagnostics
    );
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
}

/// What NVRTC needs of the mlx-cuda header: file-scope structs with their `;`, `__align__` structs and
/// template structs kept (their users are), `uint` defined, and a vector cast of an input that keeps the
/// `const` MLX gives inputs. A header of the project's own is an error, not a silent drop.
#[test]
fn file_scope_types_reach_the_header_whole_and_local_includes_are_errors() {
    let t = complete("file_scope_types.cu", Target::MlxCuda);
    let c = t.candidate.as_ref().unwrap();
    let header = &c.files["header.cuh"];
    for want in [
        "typedef unsigned int uint;",
        "struct Pair { float a; float b; };",
        "struct alignas(16) Vec4 { float x, y, z, w; };",
        "template <typename T>\nstruct Acc {",
        "__device__ float twice(Pair p)",
    ] {
        assert!(header.contains(want), "{want} missing from\n{header}");
    }
    assert!(
        header.trim_end().lines().filter(|l| *l == "};").count() >= 1,
        "{header}"
    );
    let b = body(&t, "uses_types");
    assert!(b.contains("reinterpret_cast<const float4*>(x)[i]"), "{b}");
    // The Metal header: the same types, member functions without CUDA's qualifiers.
    let t = tr("file_scope_types.cu", Target::MlxMetal);
    let header = &t.candidate.as_ref().unwrap().files["header.metal"];
    assert!(
        header.contains("void add(T v) { sum += v; }") && !header.contains("__device__"),
        "{header}"
    );

    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("with_include.cu");
    std::fs::write(
        dir.path().join("helpers.cuh"),
        "__device__ inline float half_of(float v) { return v * 0.5f; }\n",
    )
    .unwrap();
    std::fs::write(
        &f,
        "#include \"helpers.cuh\"\n__global__ void k(const float* x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = half_of(x[i]);\n}\n",
    )
    .unwrap();
    // The header beside the file is read in: its helper reaches the translation.
    let t = translate::translate_file(&f, Target::MlxCuda).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    let header = &t.candidate.as_ref().unwrap().files["header.cuh"];
    assert!(header.contains("half_of"), "{header}");
    // A header found nowhere is still T033.
    std::fs::remove_file(dir.path().join("helpers.cuh")).unwrap();
    let t = translate::translate_file(&f, Target::MlxCuda).unwrap();
    assert!(
        codes(&t, Severity::Error).contains(&"T033"),
        "{:?}",
        t.diagnostics
    );
}

/// Headers found through `-I` are read in, and the translation carries from them only what its kernels
/// use, directly or through what they use: a library's host code and API stay out. Findings in a header
/// name the header and its own line.
#[test]
fn headers_are_read_in_and_only_what_the_kernels_use_is_carried() {
    let dir = tempfile::tempdir().unwrap();
    let inc = dir.path().join("include");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(
        inc.join("lib.cuh"),
        "#pragma once\n#include <vector>\n#define BLOCK 128\n#define UNUSED_LIMIT 7\n\
         struct Host { std::vector<int> v; };\n\
         struct Pair { float a, b; };\n\
         __device__ inline float scale_of(Pair p) { return p.a * SCALE; }\n\
         __device__ inline float unused_helper(float v) { return v; }\n\
         void host_api(Host& h);\n\
         #define SCALE 2.0f\n\
         __device__ inline float bad(float v) { return __not_a_cuda_function(v); }\n",
    )
    .unwrap();
    let f = dir.path().join("k.cu");
    std::fs::write(
        &f,
        "#include \"lib.cuh\"\n\
         __global__ void k(const float* x, float* y, int n) {\n\
           int i = blockIdx.x * BLOCK + threadIdx.x;\n\
           Pair p = {x[i], 0.f};\n\
           if (i < n) y[i] = scale_of(p);\n\
         }\n\
         void launch(const float* x, float* y, int n) { k<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(x, y, n); }\n",
    )
    .unwrap();
    // Without -I the header is not found.
    let t = translate::translate_file(&f, Target::MlxCuda).unwrap();
    assert!(codes(&t, Severity::Error).contains(&"T033"));
    // A header's own include found nowhere is a warning that names the header.
    std::fs::write(
        inc.join("extra.cuh"),
        "#include \"missing_helpers.cuh\"\n#define EXTRA 1\n",
    )
    .unwrap();
    let h = dir.path().join("h.cu");
    std::fs::write(
        &h,
        "#include \"extra.cuh\"\n__global__ void h(float* y) { y[threadIdx.x] = EXTRA; }\n",
    )
    .unwrap();
    let t =
        translate::translate_file_with(&h, Target::MlxCuda, std::slice::from_ref(&inc)).unwrap();
    let w = t.diagnostics.iter().find(|d| d.code == "T033").unwrap();
    assert!(
        w.severity == Severity::Warning
            && w.file.as_deref().is_some_and(|f| f.ends_with("extra.cuh")),
        "{w:?}"
    );
    let t =
        translate::translate_file_with(&f, Target::MlxCuda, std::slice::from_ref(&inc)).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    let header = &t.candidate.as_ref().unwrap().files["header.cuh"];
    for kept in [
        "#define BLOCK 128",
        "struct Pair",
        "scale_of",
        "#define SCALE",
    ] {
        assert!(header.contains(kept), "{kept} missing:\n{header}");
    }
    for left in [
        "UNUSED_LIMIT",
        "struct Host",
        "unused_helper",
        "host_api",
        "bad(",
        "vector",
    ] {
        assert!(!header.contains(left), "{left} carried:\n{header}");
    }
    // The launch's block size came from the header's constant.
    let plan = &t.candidate.as_ref().unwrap().plan;
    assert_eq!(
        plan.launch[0].threadgroup.as_ref().unwrap()[0]
            .0
            .to_string(),
        "128"
    );
    // A kernel in a header is found, and its findings name the header and the header's line.
    std::fs::write(
        inc.join("kern.cuh"),
        "\n\n__global__ void g(float* y) { y[threadIdx.x] = __not_a_cuda_function(1.0f); }\n",
    )
    .unwrap();
    let g = dir.path().join("g.cu");
    std::fs::write(&g, "#include \"kern.cuh\"\n").unwrap();
    let t =
        translate::translate_file_with(&g, Target::MlxMetal, std::slice::from_ref(&inc)).unwrap();
    assert_eq!(t.analysis.kernels.len(), 1);
    let d = t
        .diagnostics
        .iter()
        .find(|d| d.file.is_some())
        .unwrap_or_else(|| panic!("{:?}", t.diagnostics));
    assert!(
        d.file.as_deref().unwrap().ends_with("kern.cuh") && d.line == 3,
        "{d:?}"
    );
}

/// A bounds guard over arithmetic of sizes (`i < B * T`) sizes the inferred grid; it was a grid over `B`.
#[test]
fn a_guard_over_a_product_sizes_the_grid() {
    let t = tr("guard_product.cu", Target::MlxCuda);
    assert_eq!(t.analysis.kernels[0].guards[&0], "B * T");
    assert!(
        codes(&t, Severity::Warning).contains(&"T011"),
        "{:?}",
        t.diagnostics
    );
    let l = &t.candidate.as_ref().unwrap().plan.launch[0];
    assert_eq!(grid_at(l, &[("B", 3.0), ("T", 100.0)]), [512, 1, 1]);
}

/// A function-pointer template parameter (`template <float (*op)(float)>`, ggml's unary kernels) has no MLX
/// template argument: an error that names it, and a plan that still validates (it was a plan whose template
/// named `(*op)(float)`, refused as a whole with no diagnostic).
#[test]
fn a_function_template_parameter_is_an_error_not_an_invalid_plan() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("unary.cu");
    std::fs::write(
        &f,
        "__device__ float twice(float v) { return 2.0f * v; }\n\
         template <float (*op)(float), int B>\n\
         __global__ void unary(const float* x, float* y, int n) {\n\
           int i = blockIdx.x * B + threadIdx.x;\n\
           if (i < n) y[i] = op(x[i]);\n\
         }\n\
         void launch(const float* x, float* y, int n) { unary<twice, 256><<<(n + 255) / 256, 256>>>(x, y, n); }\n",
    )
    .unwrap();
    for target in [Target::MlxCuda, Target::MlxMetal] {
        let t = translate::translate_file(&f, target).unwrap();
        let t034: Vec<_> = t.diagnostics.iter().filter(|d| d.code == "T034").collect();
        assert!(
            t034.len() == 1
                && t034[0].message.contains("`op`")
                && t034[0].severity == Severity::Error,
            "{:?}",
            t.diagnostics
        );
        let k = &t.analysis.kernels[0];
        assert_eq!(k.template_ints, vec!["B".to_string()]);
        t.candidate.as_ref().unwrap().validate().unwrap();
        // B keeps its value from the launch (the function before it is counted in the order).
        let plan = &t.candidate.as_ref().unwrap().plan;
        assert_eq!(plan.tunable["B"].default, 256, "{plan:?}");
    }
}

/// What only host code names is not carried from a header: the translated file's host function takes a
/// host-only type of the header (a stream, a context with `std::vector`), which must not reach the kernels'
/// header, where Metal (and NVRTC) would refuse it.
#[test]
fn what_only_host_code_names_stays_out_of_the_translation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ctx.cuh"),
        "#include <vector>\nstruct Context { std::vector<int> streams; };\n#define BLOCK 256\n",
    )
    .unwrap();
    let f = dir.path().join("fill.cu");
    std::fs::write(
        &f,
        "#include \"ctx.cuh\"\n\
         __global__ void fill(float* y, float v, int n) {\n\
           int i = blockIdx.x * BLOCK + threadIdx.x;\n\
           if (i < n) y[i] = v;\n\
         }\n\
         void fill_host(Context& ctx, float* y, float v, int n) { fill<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(y, v, n); }\n",
    )
    .unwrap();
    for target in [Target::MlxCuda, Target::MlxMetal] {
        let t = translate::translate_file(&f, target).unwrap();
        let c = t.candidate.as_ref().unwrap();
        let header = c
            .files
            .iter()
            .find(|(n, _)| n.starts_with("header."))
            .map(|(_, h)| h.as_str())
            .unwrap();
        assert!(header.contains("#define BLOCK 256"), "{header}");
        assert!(
            !header.contains("Context") && !header.contains("vector"),
            "{header}"
        );
    }
}

/// A header's `__device__` prototype is no device variable (it was T117), and a guarded header (`#ifndef
/// X_H`) is read at file scope, so its helpers are carried (they sat inside the guard's `#ifndef` block,
/// where the translation takes nothing).
#[test]
fn a_guarded_header_with_prototypes_is_carried() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ops.cuh"),
        "#ifndef OPS_CUH\n#define OPS_CUH\n__device__ float twice(float v);\n\
         __device__ float twice(float v) { return 2.0f * v; }\n#endif\n",
    )
    .unwrap();
    let f = dir.path().join("k.cu");
    std::fs::write(
        &f,
        "#include \"ops.cuh\"\n__global__ void k(const float* x, float* y, int n) {\n\
         int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = twice(x[i]);\n}\n\
         void run(const float* x, float* y, int n) { k<<<(n + 255) / 256, 256>>>(x, y, n); }\n",
    )
    .unwrap();
    let t = translate::translate_file(&f, Target::MlxCuda).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    let header = &t.candidate.as_ref().unwrap().files["header.cuh"];
    assert!(header.contains("return 2.0f * v;"), "{header}");
}

/// What real CUDA libraries do around their kernels, met in ggml and translated as CUDA's compiler reads
/// it (each of these made a translation that MLX's NVRTC refused, found by bench/differential.py on the
/// H200): `#ifdef __cplusplus` around `extern "C" {` and `#ifdef __CUDACC__` decided as CUDA decides them;
/// a namespace's helpers called as `ns::f` or through `using ns::f;`; a `__device__ const` with its value
/// (a constant, not state the host sets); a template's partial specialization used by its template's name.
#[test]
fn cuda_library_idioms_translate_as_the_compiler_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lib.h"),
        "#ifdef __cplusplus\nextern \"C\" {\n#endif\n    enum order_t { ORDER_ASC, ORDER_DESC };\n\
         #ifdef __cplusplus\n}\n#endif\n\
         #ifdef __CUDACC__\ntemplate <typename... A> __device__ void unused_impl(A&&...) {}\n\
         #define UNUSED_VARS(...) unused_impl(__VA_ARGS__)\n#else\n\
         #define UNUSED_VARS(...) do { } while (0)\n#endif\n\
         template <int N, typename T> struct tile {};\n\
         template <int N> struct tile<N, float> { static constexpr int ne = N; float v[N]; };\n",
    )
    .unwrap();
    let file = dir.path().join("k.cu");
    std::fs::write(
        &file,
        "#include \"lib.h\"\nnamespace interp {\n__device__ const float a = -0.75f;\n\
         static __device__ float w(float x) { return a * x; }\n}\n\
         template <order_t o> __device__ float pick(float x) { return o == ORDER_ASC ? x : -x; }\n\
         __global__ void k(const float* x, float* y, int n, int unused) {\n    using interp::w;\n\
         \x20   UNUSED_VARS(unused);\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    tile<4, float> t;\n\
         \x20   if (i < n) y[i] = pick<ORDER_ASC>(w(x[i])) + interp::w((float)t.ne);\n}\n\
         void host(const float* x, float* y, int n) { k<<<(n + 127) / 128, 128>>>(x, y, n, 0); }\n",
    )
    .unwrap();
    let t = translate::translate_file_with(&file, Target::MlxCuda, &[]).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    let c = t.candidate.as_ref().unwrap();
    let header = &c.files["header.cuh"];
    for part in [
        "enum order_t",
        "__device__ const float a = -0.75f;",
        "struct tile<N, float>",
        "#define UNUSED_VARS(...) unused_impl(__VA_ARGS__)",
        "void unused_impl(",
    ] {
        assert!(header.contains(part), "{part:?} not carried:\n{header}");
    }
    assert!(
        !header.contains("do { } while"),
        "the non-CUDA branch:\n{header}"
    );
    assert!(!header.contains("extern \"C\""), "{header}");
    let body = body(&t, "k");
    assert!(
        !body.contains("interp::") && !body.contains("using interp"),
        "{body}"
    );
    // A name declared in two scopes keeps its qualifier: stripped, the call would bind to the other one.
    let two = dir.path().join("two.cu");
    std::fs::write(
        &two,
        "namespace q {\n__device__ float deq(int v) { return v * 0.5f; }\n}\n\
         __device__ float deq(float v) { return v; }\n\
         __global__ void k2(const int* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   if (i < n) y[i] = q::deq(x[i]) + deq(1.0f);\n}\n\
         void host(const int* x, float* y, int n) { k2<<<(n + 127) / 128, 128>>>(x, y, n); }\n",
    )
    .unwrap();
    let t2 = translate::translate_file_with(&two, Target::MlxCuda, &[]).unwrap();
    let c2 = t2.candidate.as_ref().unwrap();
    let k2 = &c2.files["k2.cu"];
    assert!(k2.contains("q::deq(x[i])"), "{k2}");
    // On Metal the constant is a program-scope constant, not a TODO.
    let m = translate::translate_file_with(&file, Target::MlxMetal, &[]).unwrap();
    assert!(
        !codes(&m, Severity::Error).contains(&"T117"),
        "{:?}",
        m.diagnostics
    );
    let header = &m.candidate.as_ref().unwrap().files["header.metal"];
    assert!(
        header.contains("constant constexpr float a = -0.75f;"),
        "{header}"
    );
}

/// A cuda candidate folder (`ksearch translate FOLDER`): its kernels read as any CUDA, its plan kept whole.
fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn plan_text(c: &ksearch::candidate::Candidate) -> String {
    let mut p = c.plan.clone();
    p.kernel.clear();
    p.description.clear();
    p.name.clear();
    p.target = Target::Cpu;
    toml::to_string(&p).unwrap()
}

#[test]
fn a_cuda_candidate_translates_under_its_own_plan() {
    let task = ksearch::task::Task::load(&repo_path("tasks/gqa-paged-decode")).unwrap();
    let naive = repo_path("tasks/gqa-paged-decode/seeds/cuda/naive");
    let shipped = ksearch::candidate::Candidate::load(&repo_path(
        "tasks/gqa-paged-decode/seeds/mlx-cuda/naive",
    ))
    .unwrap();
    // The naive kernel as a whole CUDA function becomes, for mlx-cuda, the body the mlx-cuda seed was
    // written as by hand (scalars read as `B[0]`), under the same launches and tunables.
    let t = translate::translate_and_check(&naive, Target::MlxCuda, &[]).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    let c = t.candidate.as_ref().unwrap();
    c.check_against(&task).unwrap();
    assert_eq!(c.plan.target, Target::MlxCuda);
    assert_eq!(
        ksearch::cpplex::compact(body(&t, "paged_decode_naive")).trim(),
        ksearch::cpplex::compact(&shipped.files["paged_decode.cu"]).trim()
    );
    assert_eq!(plan_text(c), plan_text(&shipped));
    // For Metal too, through the checker, with nothing it refuses.
    let t = translate::translate_and_check(&naive, Target::MlxMetal, &[]).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    t.candidate.as_ref().unwrap().check_against(&task).unwrap();
    assert!(body(&t, "paged_decode_naive").contains("simd_shuffle_xor"));

    // The expert: outputs written only inside its header's helpers are the launch's outputs all the same;
    // both kernels, their helpers, the buffer, the tunables and the constraints come through.
    let expert = repo_path("tasks/gqa-paged-decode/seeds/cuda/expert");
    let cuda = ksearch::candidate::Candidate::load(&expert).unwrap();
    let t = translate::translate_and_check(&expert, Target::MlxCuda, &[]).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    let c = t.candidate.as_ref().unwrap();
    c.check_against(&task).unwrap();
    assert_eq!(plan_text(c), plan_text(&cuda));
    assert!(body(&t, "paged_decode_split").contains("part, B[0])"));
    // Each kernel file's translation carries the helpers its kernel uses, in a header of its own.
    let header = |k: usize| &c.files[c.plan.kernel[k].header.as_ref().unwrap()];
    assert!(
        header(0).contains("locate") && !header(0).contains("void merge"),
        "{}",
        header(0)
    );
    assert!(header(1).contains("void merge"), "{}", header(1));
}

#[test]
fn a_cuda_candidate_whose_kernel_names_its_parameters_otherwise_is_refused_with_the_names() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("plan.toml"),
        "name = \"k\"\ntarget = \"cuda\"\ndescription = \"d\"\n[[kernel]]\nname = \"scale\"\nsource = \"k.cu\"\n\
         [[launch]]\nkernel = \"scale\"\ninputs = [\"x\"]\noutputs = [\"y\"]\nscalars = [\"N\"]\n\
         grid = [\"N\", \"1\", \"1\"]\nthreadgroup = [\"256\", \"1\", \"1\"]\n",
    )
    .unwrap();
    let kernel = |params: &str| {
        std::fs::write(
            dir.join("k.cu"),
            format!(
                "__global__ void scale({params}) {{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = 2.0f * in[i];\n}}\n"
            ),
        )
        .unwrap();
        translate::translate_and_check(dir, Target::MlxCuda, &[]).unwrap()
    };
    let t = kernel("const float* in, float* out, int n");
    assert!(t.candidate.is_none());
    let msg = t
        .diagnostics
        .iter()
        .find(|d| d.code == "T035")
        .map(|d| d.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("`in` is the launch's `x`") && msg.contains("`n` is the launch's `N`"),
        "{:?}",
        t.diagnostics
    );
    let t = kernel("const float* in, float* out");
    assert!(t.candidate.is_none() && codes(&t, Severity::Error).contains(&"T036"));
    // Named as the plan names them: translated.
    std::fs::write(
        dir.join("k.cu"),
        "__global__ void scale(const float* x, float* y, int N) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < N) y[i] = 2.0f * x[i];\n}\n",
    )
    .unwrap();
    let t = translate::translate_and_check(dir, Target::MlxCuda, &[]).unwrap();
    assert!(codes(&t, Severity::Error).is_empty(), "{:?}", t.diagnostics);
    assert!(body(&t, "scale").contains("N[0]"), "{}", body(&t, "scale"));
}

/// Every shipped cuda seed carries over to mlx-cuda under its own plan, complete (a search found on NVIDIA
/// starts on MLX from any of them); the naive ones to mlx-metal too, through the checker. The experts' tensor-core
/// PTX and cp.async have no Metal form: they come back with their codes (T101, T103), never silently.
#[test]
fn every_shipped_cuda_seed_carries_over_to_mlx() {
    for (task, seed) in crate::common::shipped_seeds("cuda") {
        let t = ksearch::task::Task::load(&repo_path(&format!("tasks/{task}"))).unwrap();
        let cuda = translate::translate_and_check(&seed, Target::MlxCuda, &[]).unwrap();
        assert!(
            codes(&cuda, Severity::Error).is_empty(),
            "{}: {:?}",
            seed.display(),
            cuda.diagnostics
        );
        cuda.candidate
            .as_ref()
            .unwrap()
            .check_against(&t)
            .unwrap_or_else(|e| panic!("{}: {e}", seed.display()));
        let metal = translate::translate_and_check(&seed, Target::MlxMetal, &[]).unwrap();
        let errors = codes(&metal, Severity::Error);
        // Every naive seed, and the GQA expert (shared memory in its helpers, a namespace, helpers filling
        // local arrays), is a complete Metal candidate; the MLA and trimul experts size dynamic shared memory.
        if seed.ends_with("naive") || task == "gqa-paged-decode" {
            assert!(
                errors.is_empty(),
                "{}: {:?}",
                seed.display(),
                metal.diagnostics
            );
            metal.candidate.as_ref().unwrap().check_against(&t).unwrap();
        } else {
            // Their PTX is emulated now; their plans' dynamic shared memory is what Metal cannot carry.
            assert!(errors.contains(&"T038"), "{}: {errors:?}", seed.display());
        }
    }
}

#[test]
fn shared_memory_declared_in_helpers_becomes_storage_the_kernel_passes() {
    let t = complete("helper_shared.cu", Target::MlxMetal);
    assert!(
        metal_check_errors(&t).is_empty(),
        "{:?}",
        metal_check_errors(&t)
    );
    let c = t.candidate.as_ref().unwrap();
    let header = &c.files["header.metal"];
    // Each helper's __shared__ variables are a struct over its template parameters; a helper calling one
    // with storage holds it as a member and passes it on.
    for want in [
        "struct block_sum_threadgroup {\n  float partial[32];\n};",
        "struct row_mean_threadgroup {\n  float total;\n  block_sum_threadgroup block_sum_tg;\n};",
        "template <int TILE>\nstruct tile_max_threadgroup {\n  static constant constexpr int HALF = TILE / 2, SIDES = TILE / HALF * 1;\n  float tile[SIDES][HALF];\n};",
        "threadgroup float (&partial)[32] = shared_storage.partial;",
        "threadgroup float& total = shared_storage.total;",
        "threadgroup float (&tile)[SIDES][HALF] = shared_storage.tile;",
        "threadgroup row_mean_threadgroup& shared_storage)",
        "threadgroup tile_max_threadgroup<TILE>& shared_storage)",
        "simdgroup_index_in_threadgroup, shared_storage.block_sum_tg);",
        // A helper filling the caller's local array takes thread memory.
        "inline void load_pair(const device float* p, thread float* out)",
    ] {
        assert!(header.contains(want), "{want}\n---\n{header}");
    }
    assert!(
        !header.contains("__shared__ float") && !header.contains("threadgroup float partial"),
        "{header}"
    );
    let b = body(&t, "center_rows");
    for want in [
        "threadgroup row_mean_threadgroup row_mean_tg;",
        "threadgroup tile_max_threadgroup<256> tile_max_tg;",
        "simdgroup_index_in_threadgroup, row_mean_tg);",
        "tile_max<256>(row, cols, thread_position_in_threadgroup, tile_max_tg);",
    ] {
        assert!(b.contains(want), "{want}\n---\n{b}");
    }
    // CUDA keeps shared memory in helpers: the mlx-cuda translation leaves them as they are.
    let cuda = complete("helper_shared.cu", Target::MlxCuda);
    let h = &cuda.candidate.as_ref().unwrap().files["header.cuh"];
    assert!(
        h.contains("static __shared__ float partial[32];") && !h.contains("_threadgroup"),
        "{h}"
    );
}

#[test]
fn shared_memory_in_a_helper_called_with_deduced_template_arguments_is_an_error() {
    let t = tr("helper_shared_deduced.cu", Target::MlxMetal);
    let d = t
        .diagnostics
        .iter()
        .find(|d| d.code == "T037")
        .expect("T037");
    assert_eq!((d.severity, d.line), (Severity::Error, 17), "{d:?}");
    assert!(
        d.message.contains("`block_total`") && d.message.contains("deduced"),
        "{}",
        d.message
    );
    assert!(
        tr("helper_shared_deduced.cu", Target::MlxCuda)
            .diagnostics
            .iter()
            .all(|d| d.code != "T037")
    );
}

/// What the hoisting cannot name is reported (T037), each where it is, never translated into a struct that
/// names what is not in scope: partly deduced template arguments, a local of the kernel in them, a helper
/// defined after its caller, one defined twice, a shared pointer in a helper.
#[test]
fn shared_memory_in_helpers_that_cannot_be_hoisted_is_reported_where_it_is() {
    let launch = "void launch(const float* x, float* y, int n, cudaStream_t s) { k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n); }\n";
    let cases = [
        (
            "partly deduced",
            "template <int B, typename T> __device__ T bsum(T v) { __shared__ T p[B]; p[threadIdx.x % B] = v; __syncthreads(); return p[0]; }\n\
             __global__ void k(const float* x, float* y, int n) { const int i = blockIdx.x * 256 + threadIdx.x; float t = bsum<32>(i < n ? x[i] : 0.0f); if (i < n) y[i] = t; }\n",
            "deduced template arguments",
        ),
        (
            "a local of the kernel",
            "template <typename T, int W> __device__ T red(T v) { __shared__ T p[W]; p[threadIdx.x % W] = v; __syncthreads(); return p[0]; }\n\
             __global__ void k(const float* x, float* y, int n) { constexpr int NW = 8; const int i = blockIdx.x * 256 + threadIdx.x; float t = red<float, NW>(i < n ? x[i] : 0.0f); if (i < n) y[i] = t; }\n",
            "name `NW`, a local of `k`",
        ),
        (
            "defined after its caller",
            "__device__ float bsum(float v);\n__device__ float twice(float v) { return bsum(v) + bsum(v); }\n\
             __device__ float bsum(float v) { __shared__ float p[32]; p[threadIdx.x % 32] = v; __syncthreads(); return p[0]; }\n\
             __global__ void k(const float* x, float* y, int n) { const int i = blockIdx.x * 256 + threadIdx.x; float t = twice(i < n ? x[i] : 0.0f); if (i < n) y[i] = t; }\n",
            "`bsum` is defined after `twice`",
        ),
        (
            "overloads calling a helper with storage",
            "__device__ float bsum(float v) { __shared__ float p[32]; p[threadIdx.x % 32] = v; __syncthreads(); return p[0]; }\n\
             __device__ float total(float v) { return bsum(v); }\n__device__ float total(float v, float w) { return bsum(v + w); }\n\
             __global__ void k(const float* x, float* y, int n) { const int i = blockIdx.x * 256 + threadIdx.x; float t = total(i < n ? x[i] : 0.0f); if (i < n) y[i] = t; }\n",
            "`total` is defined more than once",
        ),
        (
            "a shared pointer",
            "__device__ float pick(const float* x) { __shared__ const float* row; if (threadIdx.x == 0) row = x; __syncthreads(); return row[threadIdx.x]; }\n\
             __global__ void k(const float* x, float* y, int n) { const int i = blockIdx.x * 256 + threadIdx.x; float t = pick(x + blockIdx.x * 256); if (i < n) y[i] = t; }\n",
            "a __shared__ pointer",
        ),
    ];
    for (what, body, says) in cases {
        let src = format!("#include <cuda_runtime.h>\n{body}{launch}");
        let t = translate::translate(&src, "k", Target::MlxMetal);
        let found: Vec<&str> = t
            .diagnostics
            .iter()
            .filter(|d| d.code == "T037")
            .map(|d| d.message.as_str())
            .collect();
        assert!(
            found.iter().any(|m| m.contains(says)),
            "{what}: {found:?}\n{:?}",
            t.diagnostics
        );
        // CUDA keeps shared memory in helpers: nothing to report there.
        let cuda = translate::translate(&src, "k", Target::MlxCuda);
        assert!(cuda.diagnostics.iter().all(|d| d.code != "T037"), "{what}");
    }
}

/// A helper's pointer parameter takes the memory its arguments point into, whatever the expression: an
/// offset added to a device pointer (`off + x`), an `auto` pointer, a field of a struct of device pointers
/// are device memory; a local array and the address of a local are thread memory.
#[test]
fn helper_pointer_parameters_take_the_memory_their_arguments_point_into() {
    let src = "#include <cuda_runtime.h>\n\
        struct Rows { const float* a; };\n\
        struct Acc { float buf[2]; };\n\
        __device__ float load2(const float* p, int j) { return p[j] + p[j + 1]; }\n\
        __device__ void bump(float* p) { *p += 1.0f; }\n\
        __device__ void zero2(float* p) { p[0] = 0.0f; p[1] = 0.0f; }\n\
        __device__ float first(const float* p) { return p[0]; }\n\
        __device__ void fill(float* out, float v) { out[0] = v; out[1] = v; }\n\
        __device__ void set(float* out, float v) { *out = v; }\n\
        __global__ void k(const float* x, float* y, int n) {\n\
          const int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
          if (i >= n) return;\n\
          auto row = x + 2 * i;\n\
          int off = 2 * i;\n\
          Rows r; r.a = x + i;\n\
          float pair[2]; float one;\n\
          fill(pair, 1.0f); set(&one, 2.0f);\n\
          auto v = x[i]; bump(&v);\n\
          Acc acc; zero2(acc.buf);\n\
          y[i] = load2(row, 0) + load2(off + x, 0) + first(r.a) + pair[1] + one + v + acc.buf[1];\n\
        }\n\
        void launch(const float* x, float* y, int n, cudaStream_t s) { k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n); }\n";
    let t = translate::translate(src, "k", Target::MlxMetal);
    let errors: Vec<_> = t
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error || d.code == "T023")
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    let header = &t.candidate.as_ref().unwrap().files["header.metal"];
    for want in [
        "float load2(const device float* p, int j)",
        "float first(const device float* p)",
        "void fill(thread float* out, float v)",
        "void set(thread float* out, float v)",
        // An `auto` value read through a pointer is a value: its address is thread memory.
        "void bump(thread float* p)",
        // An array field of a local struct is thread memory.
        "void zero2(thread float* p)",
    ] {
        assert!(header.contains(want), "{want}\n---\n{header}");
    }
    assert!(
        metal_check_errors(&t).is_empty(),
        "{:?}",
        metal_check_errors(&t)
    );
}

/// PTX the Metal translation does not emulate stays an error where it is (T103, T101), never passed through.
#[test]
fn inline_ptx_other_than_the_emulated_forms_is_still_an_error() {
    let fixture = std::fs::read_to_string(fixture("mma_gemm.cu")).unwrap();
    for (what, from, to, code) in [
        (
            "another MMA shape",
            "m16n8k16.row.col",
            "m16n8k8.row.col",
            "T103",
        ),
        (
            "ldmatrix",
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
            "T103",
        ),
        (
            "a bulk copy",
            "cp.async.cg.shared.global [%0], [%1], 16, %2;",
            "cp.async.bulk.shared::cluster.global [%0], [%1], 16, [%2];",
            "T101",
        ),
    ] {
        let src = fixture.replace(from, to);
        assert_ne!(src, fixture, "{what}");
        let t = translate::translate(&src, "mma_gemm", Target::MlxMetal);
        assert!(
            codes(&t, Severity::Error).contains(&code),
            "{what}: {:?}",
            t.diagnostics
        );
    }
}
