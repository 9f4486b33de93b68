//! The CUDA→MLX knowledge layer as data (`knowledge/*.toml`): the concept map, MLX patterns, hardware
//! profiles and the properties expert kernels have. Parsed strictly here and rendered into the prompts
//! of the MLX targets, so an LLM writing Metal gets decades of CUDA practice restated for Apple GPUs.

use ksearch_model::target::Target;
use serde::Deserialize;
use std::sync::OnceLock;

const CONCEPTS: &str = include_str!("../../../knowledge/concept_map.toml");
const PATTERNS: &str = include_str!("../../../knowledge/patterns.toml");
const HARDWARE: &str = include_str!("../../../knowledge/hardware.toml");
const ASSERTIONS: &str = include_str!("../../../knowledge/assertions.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concept {
    pub id: String,
    pub cuda: String,
    pub metal: String,
    pub mlx_cuda: String,
    pub constraint: String,
    pub cuda_example: String,
    pub metal_example: String,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Pattern {
    pub id: String,
    pub name: String,
    pub when: String,
    pub idea: String,
    pub constraints: String,
    pub metal: String,
    pub cuda: String,
    #[serde(flatten)]
    pub rest: toml::Table,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Profile {
    pub id: String,
    pub vendor: String,
    pub name: String,
    pub bandwidth_gbs: f64,
    #[serde(default)]
    pub fp32_tflops: Option<f64>,
    #[serde(flatten)]
    pub rest: toml::Table,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Assertion {
    pub id: String,
    pub family: String,
    pub property: String,
    pub why: String,
    #[serde(flatten)]
    pub rest: toml::Table,
}

#[derive(Debug, Clone, Deserialize)]
struct ConceptFile {
    concept: Vec<Concept>,
}
#[derive(Debug, Clone, Deserialize)]
struct PatternFile {
    pattern: Vec<Pattern>,
}
#[derive(Debug, Clone, Deserialize)]
struct HardwareFile {
    profile: Vec<Profile>,
}
#[derive(Debug, Clone, Deserialize)]
struct AssertionFile {
    assertion: Vec<Assertion>,
}

#[derive(Debug, Clone)]
pub struct Knowledge {
    pub concepts: Vec<Concept>,
    pub patterns: Vec<Pattern>,
    pub profiles: Vec<Profile>,
    pub assertions: Vec<Assertion>,
}

/// The embedded knowledge; the files are checked by the test suite, so a parse failure is a build defect.
pub fn get() -> &'static Knowledge {
    static K: OnceLock<Knowledge> = OnceLock::new();
    K.get_or_init(|| load().unwrap_or_else(|e| panic!("embedded knowledge is invalid: {e}")))
}

pub fn load() -> Result<Knowledge, String> {
    let parse = |what: &str, text: &str| -> Result<toml::Value, String> {
        toml::from_str(text).map_err(|e| format!("knowledge/{what}: {e}"))
    };
    let c: ConceptFile = parse("concept_map.toml", CONCEPTS)?
        .try_into()
        .map_err(|e: toml::de::Error| format!("knowledge/concept_map.toml: {e}"))?;
    let p: PatternFile = parse("patterns.toml", PATTERNS)?
        .try_into()
        .map_err(|e: toml::de::Error| format!("knowledge/patterns.toml: {e}"))?;
    let h: HardwareFile = parse("hardware.toml", HARDWARE)?
        .try_into()
        .map_err(|e: toml::de::Error| format!("knowledge/hardware.toml: {e}"))?;
    let a: AssertionFile = parse("assertions.toml", ASSERTIONS)?
        .try_into()
        .map_err(|e: toml::de::Error| format!("knowledge/assertions.toml: {e}"))?;
    Ok(Knowledge {
        concepts: c.concept,
        patterns: p.pattern,
        profiles: h.profile,
        assertions: a.assertion,
    })
}

/// The knowledge section of a prompt for `target` (empty for the CPU target), with the properties of the
/// task's kernel `family` when it has one, less those the task lists as not applicable.
pub fn prompt_section(target: Target, family: Option<&str>, not_applicable: &[String]) -> String {
    if !target.is_gpu() {
        return String::new();
    }
    let k = get();
    let mut out = String::new();
    // The concept map restates CUDA for MLX; on the cuda target the kernels are CUDA itself.
    if target.is_mlx() {
        out.push_str(
            "## CUDA practice restated for MLX (concept map: construct → equivalent; hard constraint)\n",
        );
        for c in &k.concepts {
            let there = match target {
                Target::MlxMetal => c.metal.as_str(),
                _ if !c.mlx_cuda.is_empty() => c.mlx_cuda.as_str(),
                _ => c.cuda.as_str(),
            };
            out.push_str(&format!("- {} → {}; {}\n", c.cuda, there, c.constraint));
        }
        out.push('\n');
    }
    out.push_str("## Patterns that pay on this target\n");
    for p in &k.patterns {
        out.push_str(&format!("- {}: {} When: {}\n", p.name, p.idea, p.when));
    }
    if let Some(f) = family {
        let props: Vec<&Assertion> = k
            .assertions
            .iter()
            .filter(|a| a.family == f && !not_applicable.contains(&a.id))
            .collect();
        if !props.is_empty() {
            out.push_str(&format!(
                "\n## Properties expert {f} kernels have (keep them)\n"
            ));
            for a in props {
                out.push_str(&format!("- {} ({})\n", a.property, a.why));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knowledge_files_parse_and_are_complete() {
        let k = load().unwrap();
        assert!(k.concepts.len() >= 35, "{} concepts", k.concepts.len());
        assert!(k.patterns.len() >= 8, "{} patterns", k.patterns.len());
        let mut ids: Vec<&str> = k.concepts.iter().map(|c| c.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), k.concepts.len(), "concept ids are unique");
        for c in &k.concepts {
            assert!(
                !c.cuda.is_empty() && !c.metal.is_empty() && !c.constraint.is_empty(),
                "{}",
                c.id
            );
            assert!(
                !c.cuda_example.trim().is_empty() && !c.metal_example.trim().is_empty(),
                "{}",
                c.id
            );
        }
        for p in &k.patterns {
            assert!(
                !p.metal.trim().is_empty() && !p.cuda.trim().is_empty(),
                "{}",
                p.id
            );
        }
        for chip in ["M1", "M2", "M3", "M4", "M5", "H100", "H200"] {
            assert!(
                k.profiles.iter().any(|p| p.name.contains(chip)),
                "no hardware profile for {chip}"
            );
        }
        for p in &k.profiles {
            assert!(p.bandwidth_gbs > 0.0, "{}", p.id);
        }
        for f in ["attention", "scan", "reduction", "matmul"] {
            assert!(
                k.assertions.iter().filter(|a| a.family == f).count() >= 3,
                "too few {f} assertions"
            );
        }
    }

    #[test]
    fn every_pattern_has_a_case_in_the_h200_run() {
        // bench/patterns_cuda.py compiles and checks each CUDA example on the device machine; a pattern
        // it has no case for would go unchecked there.
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/patterns_cuda.py"),
        )
        .unwrap();
        for p in &load().unwrap().patterns {
            assert!(
                script.contains(&format!("\"{}\": Case(", p.id)),
                "pattern `{}` has no case in bench/patterns_cuda.py",
                p.id
            );
        }
    }

    #[test]
    fn prompts_get_knowledge_on_mlx_targets_only() {
        assert!(prompt_section(Target::Cpu, None, &[]).is_empty());
        let metal = prompt_section(Target::MlxMetal, Some("scan"), &[]);
        assert!(metal.contains("threadgroup") && metal.contains("Properties expert scan kernels"));
        assert!(prompt_section(Target::MlxCuda, None, &[]).contains("grid"));
    }
}
