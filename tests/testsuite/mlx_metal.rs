//! The Metal path on a machine without Metal: for every shipped mlx-metal seed, `ksearch eval` says
//! plainly that nothing ran, and returns the Metal source MLX generates for each launch (through
//! export tracing with MLX's CPU build), whose signature must hold every buffer of the launch.

use crate::common::*;
use ksearch::candidate::Candidate;

#[test]
fn every_shipped_metal_seed_gets_its_generated_signature_checked() {
    if cfg!(target_os = "macos") {
        return; // there the seeds run for real
    }
    let seeds = shipped_seeds("mlx-metal");
    assert!(!seeds.is_empty(), "no mlx-metal seeds found");
    let store = tempfile::tempdir().unwrap();
    for (task, seed) in seeds {
        let out = run(
            store.path(),
            &[
                "eval",
                repo().join("tasks").join(&task).to_str().unwrap(),
                seed.to_str().unwrap(),
                "--target",
                "mlx-metal",
                "--checks",
                "1",
                "--json",
            ],
        );
        let v = last_json(&out);
        let cand = Candidate::load(&seed).unwrap();
        let task_def = ksearch::task::Task::load(&repo().join("tasks").join(&task)).unwrap();
        for w in v["workloads"].as_array().unwrap() {
            // The launches this workload runs (a plan may dispatch on shape with `when`).
            let spec = task_def
                .toml
                .workload
                .iter()
                .find(|x| x.name == w["workload"].as_str().unwrap())
                .unwrap();
            let resolved = cand
                .resolve(&task_def, &task_def.resolve(spec).unwrap())
                .unwrap();
            assert_eq!(w["status"], "unavailable", "{task}/{}: {w}", seed.display());
            assert!(
                w["message"]
                    .as_str()
                    .unwrap()
                    .contains("Metal is not available"),
                "{w}"
            );
            let sources = w["metal_sources"].as_array().unwrap();
            assert_eq!(
                sources.len(),
                resolved.launches.len(),
                "one source per launch: {w}"
            );
            for (src, launch) in sources
                .iter()
                .map(|s| s.as_str().unwrap())
                .zip(&resolved.launches)
            {
                assert!(src.contains("[[kernel]]"), "{src}");
                // MLX instantiates a template (and names the instance) only when there are template args.
                if launch.template.is_some() || !launch.type_args.is_empty() {
                    assert!(src.contains("template [[host_name("), "{src}");
                }
                for name in launch.inputs.iter().chain(&launch.outputs) {
                    assert!(
                        src.contains(&format!(" {name} [[buffer(")),
                        "`{name}` is not a buffer of the signature:\n{src}"
                    );
                }
                for s in &launch.scalar_names {
                    assert!(
                        src.contains(&format!("constant int32_t& {s} [[buffer(")),
                        "scalar `{s}` missing:\n{src}"
                    );
                }
            }
        }
    }
}
