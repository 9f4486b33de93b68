//! `ksearch export`: the best kernel as a self-contained Python module for MLX programs, with the
//! reference's signature, a fallback to the task's baseline for shapes, dtypes or machines the kernel
//! does not support, and a test that checks it against the reference on fresh inputs.
//!
//! The module's code is a template (`templates/mlx_module.py.j2`); what differs per kernel is data (the
//! plan, its expressions, the kernel bodies), embedded as JSON.

use crate::candidate::Candidate;
use crate::target::Target;
use crate::task::Task;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const MODULE: &str = include_str!("../templates/mlx_module.py.j2");
const TEST: &str = include_str!("../templates/mlx_module_test.py.j2");
/// The worker's declaration of cluster kernels, embedded in modules whose plan launches in clusters.
const CLUSTER_PY: &str = include_str!("../python/ksearch_worker/cluster.py");
/// The worker's headers-as-files (MLX hashes a kernel's whole source at every call), embedded in CUDA modules.
const HEADER_FILE_PY: &str = include_str!("../python/ksearch_worker/header_file.py");

/// The Python identifier the function gets: the task's name with `-` as `_`.
pub fn function_name(task: &Task) -> String {
    let f: String = task
        .name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if f.starts_with(|c: char| c.is_ascii_digit()) {
        format!("k_{f}")
    } else {
        f
    }
}

fn spec(task: &Task, c: &Candidate) -> Result<Value> {
    let t = &task.toml;
    let target = c.plan.target;
    if !target.is_mlx() {
        bail!(
            "--format mlx-python exports MLX kernels; this candidate is for {target}{}",
            if target == Target::Cuda {
                " (`ksearch translate` it to mlx-cuda or mlx-metal first)"
            } else {
                ""
            }
        );
    }
    let shapes = |list: &[crate::task::TensorSpec]| -> Value {
        list.iter()
            .map(|s| {
                (
                    s.name.clone(),
                    json!(
                        s.shape
                            .iter()
                            .map(|e| e.0.src().to_string())
                            .collect::<Vec<_>>()
                    ),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut type_vars = serde_json::Map::new();
    for i in &t.input {
        if t.types.contains_key(&i.dtype) && !type_vars.contains_key(&i.dtype) {
            type_vars.insert(i.dtype.clone(), json!(i.name));
        }
    }
    let launches: Vec<Value> = c
        .plan
        .launch
        .iter()
        .map(|l| {
            json!({
                "kernel": l.kernel, "inputs": l.inputs, "outputs": l.outputs,
                "scalars": l.scalars.iter().map(|s| s.0.src().to_string()).collect::<Vec<_>>(),
                "grid": l.grid.iter().flatten().map(|e| e.0.src().to_string()).collect::<Vec<_>>(),
                "threadgroup": l.threadgroup.iter().flatten().map(|e| e.0.src().to_string()).collect::<Vec<_>>(),
                // A tunable's chosen value, or a dim's name (evaluated per call).
                "template": l.template.iter().map(|n| (n.clone(), json!(c.params().get(n).map_or(n.clone(), |v| v.to_string())))).collect::<serde_json::Map<_, _>>(),
                "when": l.when.as_ref().map(|e| e.0.src().to_string()),
                "type_args": l.type_args, "shared_memory": l.shared_memory.as_ref().map(|e| e.0.src().to_string()),
                "cluster": l.cluster.as_ref().map(|c| c.iter().map(|e| e.0.src().to_string()).collect::<Vec<_>>()),
                "init_value": l.init_value, "atomic_outputs": l.atomic_outputs,
            })
        })
        .collect();
    let kernels: serde_json::Map<String, Value> = c
        .plan
        .kernel
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                json!({"source": crate::codegen::mlx_source(c, k), "header": crate::codegen::mlx_header(c, k), "header_name": k.header}),
            )
        })
        .collect();
    let mut combos = Vec::new();
    let mut resolved = Vec::new();
    for w in &t.workload {
        let rw = task.resolve(w).map_err(anyhow::Error::msg)?;
        let combo: serde_json::Map<String, Value> = t
            .input
            .iter()
            .map(|i| (i.name.clone(), json!(rw.dtypes[&i.name].name())))
            .collect();
        if !combos.contains(&Value::Object(combo.clone())) {
            combos.push(Value::Object(combo));
        }
        let size: i64 = rw.shapes.values().map(|s| s.iter().product::<i64>()).sum();
        resolved.push((
            size,
            json!({"name": rw.name, "dims": rw.dims, "shapes": rw.shapes, "dtypes": rw.dtypes}),
        ));
    }
    resolved.sort_by_key(|(s, _)| *s);
    // Dims no input shape fixes (attention's CAUSAL) become keyword-only arguments; one that every
    // workload gives the same value defaults to it.
    let in_shapes: std::collections::BTreeSet<String> = t
        .input
        .iter()
        .flat_map(|i| i.shape.iter().flat_map(|e| e.0.vars()))
        .collect();
    let options: Vec<Value> = t
        .dims
        .keys()
        .filter(|d| !in_shapes.contains(*d))
        .map(|d| {
            let mut values: Vec<i64> = t.workload.iter().filter_map(|w| w.dims.get(d).copied()).collect();
            values.sort_unstable();
            values.dedup();
            json!({"name": d, "default": if values.len() == 1 { json!(values[0]) } else { Value::Null },
                   "about": t.dims[d].replace('"', "'")})
        })
        .collect();
    let baseline = task
        .baselines_for(target)
        .first()
        .map(|b| b.function.clone());
    let read = |name: &str| std::fs::read_to_string(task.dir.join(name)).unwrap_or_default();
    Ok(json!({
        "function": function_name(task), "task": task.name(), "candidate": c.hash(), "target": target.name(),
        "inputs": t.input.iter().map(|i| i.name.clone()).collect::<Vec<_>>(), "options": options,
        "outputs": t.output.iter().map(|o| o.name.clone()).collect::<Vec<_>>(),
        "input_shapes": shapes(&t.input), "output_shapes": shapes(&t.output),
        "output_dtypes": t.output.iter().map(|o| (o.name.clone(), json!(o.dtype))).collect::<serde_json::Map<_, _>>(),
        "type_vars": type_vars,
        "inits": t.input.iter().map(|i| (i.name.clone(), json!(i.init.clone().unwrap_or_else(|| "normal(0, 1)".into())))).collect::<serde_json::Map<_, _>>(),
        "kernels": kernels, "launches": launches,
        "buffers": c.plan.buffer.iter().map(|b| json!({"name": b.name, "shape": b.shape.iter().map(|e| e.0.src().to_string()).collect::<Vec<_>>(), "dtype": b.dtype, "when": b.when.as_ref().map(|e| e.0.src().to_string())})).collect::<Vec<_>>(),
        "params": c.params(), "constraints": c.plan.constraints.iter().map(|e| e.0.src().to_string()).collect::<Vec<_>>(),
        "dtype_combos": combos,
        "baseline": baseline, "baselines_py": read("baselines.py"), "reference_py": read("reference.py"),
        "tolerances": t.tolerance,
        "test_workloads": resolved.into_iter().take(3).map(|(_, v)| v).collect::<Vec<_>>(),
    }))
}

/// Writes `<function>.py` and `<function>_test.py` into `out`; returns their paths.
pub fn mlx_python(task: &Task, c: &Candidate, out: &Path) -> Result<(PathBuf, PathBuf)> {
    // A Metal kernel that would not compile or run on a Mac is not exported (docs/check.md); a checker
    // that cannot run (no C++ compiler) does not block the export.
    match crate::check::check_loaded(c, Some(task)) {
        Ok(f) if crate::check::has_errors(&f) => bail!(
            "refusing to export candidate {}: {}",
            c.hash(),
            crate::check::summary(&f)
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("ksearch check could not run: {e}"),
    }
    let spec = spec(task, c)?;
    let function = function_name(task);
    let backend = if c.plan.target == Target::MlxMetal {
        "Metal"
    } else {
        "CUDA"
    };
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template("module", MODULE)?;
    env.add_template("test", TEST)?;
    // A JSON string is a valid Python string literal: the module parses it back at import.
    let literal = serde_json::to_string(&serde_json::to_string(&spec)?)?;
    let ctx = json!({
        "function": function, "module": function, "task": task.name(), "candidate": c.hash(), "target": c.plan.target.name(),
        "backend": backend, "inputs": spec["inputs"], "options": spec["options"], "outputs": spec["outputs"], "baseline": spec["baseline"],
        "description": task.toml.description.replace('"', "'"), "spec_literal": literal,
        "cluster_py": if c.plan.launch.iter().any(|l| l.cluster.is_some()) { CLUSTER_PY } else { "" },
        "header_file_py": if c.plan.target == Target::MlxCuda { HEADER_FILE_PY } else { "" },
    });
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let module = out.join(format!("{function}.py"));
    let test = out.join(format!("{function}_test.py"));
    std::fs::write(
        &module,
        env.get_template("module")?
            .render(minijinja::value::Serde(&ctx))?,
    )?;
    std::fs::write(
        &test,
        env.get_template("test")?
            .render(minijinja::value::Serde(&ctx))?,
    )?;
    Ok((module, test))
}
