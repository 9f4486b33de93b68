//! Defaults from configuration files, the way cargo finds `Cargo.toml`: a project's `ksearch.toml`, found
//! upward from the working directory, over the user's `~/.config/ksearch/config.toml` (its `[defaults]`
//! table, beside the providers and prices the LLM client reads). The environment (`KSEARCH_STORE`) and
//! flags override both. A store named in a project file is relative to that file's folder, so a project's
//! store is found from any of its subfolders.
//!
//! ```toml
//! # ksearch.toml (or [defaults] in ~/.config/ksearch/config.toml)
//! store = ".ksearch"
//! task = "softmax"
//! target = "cpu"
//! strategy = "world-model"
//! budget = 20
//! parallel = 4        # proposals in flight at once (docs/parallel.md)
//! devices = "2"       # one worker per device: CPU workers pinned to their cores, or GPUs
//! llm = "openai:gpt-5.2"
//! max_llm_cost = 5.0
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The values a file may set; every one optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    pub store: Option<PathBuf>,
    pub task: Option<String>,
    pub target: Option<String>,
    pub strategy: Option<String>,
    pub budget: Option<usize>,
    pub parallel: Option<usize>,
    pub devices: Option<String>,
    pub llm: Option<String>,
    pub max_llm_calls: Option<u64>,
    pub max_llm_tokens: Option<u64>,
    pub max_llm_cost: Option<f64>,
    pub max_llm_time: Option<f64>,
}

/// A config file's `[defaults]` (the user's file also holds other tables).
#[derive(Deserialize)]
struct UserFile {
    #[serde(default)]
    defaults: Option<Defaults>,
}

/// One setting with where its value came from, for `ksearch config`.
#[derive(Debug, Clone, Serialize)]
pub struct Origin {
    pub key: &'static str,
    pub value: serde_json::Value,
    pub source: String,
}

/// The layers found, lowest first: (source, values).
#[derive(Debug, Clone, Default)]
pub struct Layers {
    pub layers: Vec<(String, Defaults)>,
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
}

/// The project file for `dir`: `ksearch.toml` in it or the nearest folder above.
pub fn project_file(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join("ksearch.toml"))
        .find(|p| p.is_file())
}

/// Reads the user's and the project's files; a malformed file is an error naming it and the field.
pub fn load(cwd: &Path) -> anyhow::Result<Layers> {
    let mut layers = Vec::new();
    let user = std::env::var_os("KSEARCH_CONFIG")
        .map(PathBuf::from)
        .or_else(|| crate::llm::user_config_dir().map(|d| d.join("config.toml")));
    if let Some(path) = user.filter(|p| p.is_file()) {
        let text = read(&path)?;
        let file: UserFile = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: [defaults]: {}", path.display(), e.message()))?;
        if let Some(d) = file.defaults {
            layers.push((path.display().to_string(), d));
        }
    }
    if let Some(path) = project_file(cwd) {
        let text = read(&path)?;
        let mut d: Defaults = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {} (the fields a project file may set: store, task, target, strategy, budget, parallel, devices, llm, max_llm_calls, max_llm_tokens, max_llm_cost, max_llm_time)",
                path.display(),
                e.message()
            )
        })?;
        if let (Some(s), Some(dir)) = (&d.store, path.parent())
            && s.is_relative()
        {
            d.store = Some(dir.join(s));
        }
        layers.push((path.display().to_string(), d));
    }
    Ok(Layers { layers })
}

impl Layers {
    /// The merged values (a later layer wins) with the source of each.
    pub fn merged(&self) -> (Defaults, Vec<Origin>) {
        let mut out = Defaults::default();
        let mut origins: Vec<Origin> = Vec::new();
        for (source, d) in &self.layers {
            macro_rules! take {
                ($($f:ident),*) => {$(
                    if let Some(v) = &d.$f {
                        out.$f = Some(v.clone());
                        origins.retain(|o| o.key != stringify!($f));
                        origins.push(Origin {
                            key: stringify!($f),
                            value: serde_json::json!(v),
                            source: source.clone(),
                        });
                    }
                )*};
            }
            take!(
                store,
                task,
                target,
                strategy,
                budget,
                parallel,
                devices,
                llm,
                max_llm_calls,
                max_llm_tokens,
                max_llm_cost,
                max_llm_time
            );
        }
        (out, origins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_file_is_found_from_a_subfolder_and_its_store_is_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ksearch.toml"),
            "store = \"runs\"\nbudget = 7\ntask = \"softmax\"\nparallel = 3\ndevices = \"2\"\n",
        )
        .unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let layers = load(&sub).unwrap();
        let (d, origins) = layers.merged();
        assert_eq!(d.budget, Some(7));
        assert_eq!((d.parallel, d.devices.as_deref()), (Some(3), Some("2")));
        assert_eq!(d.store, Some(dir.path().join("runs")));
        assert!(origins.iter().all(|o| o.source.ends_with("ksearch.toml")));
    }

    #[test]
    fn a_misspelt_field_names_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ksearch.toml"), "budgett = 3\n").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("ksearch.toml") && e.contains("budgett"), "{e}");
    }
}
