//! Where each provider lives and how it is authenticated: the environment first (as the vendors' SDKs
//! do), then the config file, then built-in defaults. Keys stay in `Secret`, which never prints.
//!
//! ```toml
//! # ~/.config/ksearch/config.toml (or $KSEARCH_CONFIG)
//! [providers.openai]
//! api_key = "sk-..."
//! base_url = "https://api.openai.com/v1"
//!
//! [prices.openai."my-finetune"]
//! input_per_mtok = 3.0
//! output_per_mtok = 12.0
//! ```

use super::{LlmConfig, LlmError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An API key. Debug prints `[redacted]`; the value is read only to build a request header.
#[derive(Clone)]
pub(crate) struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Replaces the key wherever it occurs in `text`. Keys shorter than 8 characters ("none", "x", as
/// local servers accept) are left alone: replacing them would mangle ordinary text.
pub(crate) fn redact(text: &str, secret: Option<&Secret>) -> String {
    match secret {
        Some(s) if s.0.len() >= 8 && text.contains(&s.0) => text.replace(&s.0, "[redacted]"),
        _ => text.to_string(),
    }
}

#[derive(Default, Deserialize)]
pub(crate) struct FileConfig {
    #[serde(default)]
    providers: BTreeMap<String, ProviderEntry>,
    #[serde(default)]
    pub prices: Option<toml::Table>,
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEntry {
    api_key: Option<String>,
    base_url: Option<String>,
}

/// `$XDG_CONFIG_HOME/ksearch`, else `~/.config/ksearch`.
pub(crate) fn config_dir(env: &LlmEnv) -> Option<PathBuf> {
    env.var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.var("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|d| d.join("ksearch"))
}

/// The config file: `cfg.config_file`, else `$KSEARCH_CONFIG` (both must exist), else the default
/// path (may be absent).
pub(crate) fn load(cfg: &LlmConfig) -> Result<FileConfig, LlmError> {
    let (path, explicit) = match cfg.config_file.clone() {
        Some(p) => (p, true),
        None => match cfg.env.var("KSEARCH_CONFIG") {
            Some(p) => (PathBuf::from(p), true),
            None => match config_dir(&cfg.env) {
                Some(d) => (d.join("config.toml"), false),
                None => return Ok(FileConfig::default()),
            },
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileConfig::default());
        }
        Err(e) => {
            return Err(LlmError::Config(format!(
                "cannot read the config file {}: {e}",
                path.display()
            )));
        }
    };
    let mut file: FileConfig =
        toml::from_str(&text).map_err(|e| LlmError::Config(toml_error(&path, &text, &e)))?;
    if file.providers.values().any(|p| p.api_key.is_some()) {
        warn_if_readable_by_others(&path);
    }
    file.path = Some(path);
    Ok(file)
}

/// A TOML error without the quoted source line, which may hold a key.
pub(crate) fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    let line = e
        .span()
        .map(|s| {
            format!(
                " line {}:",
                text[..s.start.min(text.len())].lines().count().max(1)
            )
        })
        .unwrap_or_default();
    format!("{}:{line} {}", path.display(), e.message())
}

fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            "{} holds API keys and is readable by other users; consider chmod 600",
            path.display()
        );
    }
}

/// The environment the LLM layer reads its variables from (API keys, base URLs, `KSEARCH_CONFIG`,
/// `XDG_CONFIG_HOME`, `HOME`): the process's, or variables the caller gives, which then are the only
/// ones seen. A program (or a test) that runs several clients with different settings gives each its
/// own instead of changing the process's environment, which every thread shares. A `command:`
/// provider's process inherits the process's environment either way.
#[derive(Clone, Default, PartialEq)]
pub enum LlmEnv {
    #[default]
    Process,
    Vars(BTreeMap<String, String>),
}

impl LlmEnv {
    /// Exactly these variables, nothing from the process.
    pub fn vars<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> LlmEnv {
        LlmEnv::Vars(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// A non-empty variable.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        match self {
            LlmEnv::Process => std::env::var(name).ok(),
            LlmEnv::Vars(vars) => vars.get(name).cloned(),
        }
        .filter(|v| !v.trim().is_empty())
    }
}

/// The names only: the values may be keys.
impl std::fmt::Debug for LlmEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlmEnv::Process => f.write_str("Process"),
            LlmEnv::Vars(vars) => f.debug_tuple("Vars").field(&vars.keys()).finish(),
        }
    }
}

/// How to reach one provider.
pub(crate) struct ProviderInfo {
    /// The config file section (`[providers.<section>]`); the OpenAI variants share `openai`.
    pub section: &'static str,
    pub base_env: &'static str,
    pub default_base: &'static str,
    /// Tried in order; the first names the variable in messages.
    pub key_env: &'static [&'static str],
    /// Hosted APIs need a key unless pointed at a loopback address; local servers never do.
    pub key_required: bool,
}

pub(crate) fn provider(name: &str) -> Option<ProviderInfo> {
    let hosted = |section, base_env, default_base, key_env| ProviderInfo {
        section,
        base_env,
        default_base,
        key_env,
        key_required: true,
    };
    let local = |section, base_env, default_base, key_env| ProviderInfo {
        section,
        base_env,
        default_base,
        key_env,
        key_required: false,
    };
    Some(match name {
        "openai" | "openai-responses" | "openai-chat" => hosted(
            "openai",
            "OPENAI_BASE_URL",
            "https://api.openai.com/v1",
            &["OPENAI_API_KEY"],
        ),
        "anthropic" => hosted(
            "anthropic",
            "ANTHROPIC_BASE_URL",
            "https://api.anthropic.com",
            &["ANTHROPIC_API_KEY"],
        ),
        "gemini" => hosted(
            "gemini",
            "GEMINI_BASE_URL",
            "https://generativelanguage.googleapis.com",
            &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        ),
        "openrouter" => hosted(
            "openrouter",
            "OPENROUTER_BASE_URL",
            "https://openrouter.ai/api/v1",
            &["OPENROUTER_API_KEY"],
        ),
        "llamacpp" => local(
            "llamacpp",
            "LLAMACPP_BASE_URL",
            "http://127.0.0.1:8080/v1",
            &["LLAMACPP_API_KEY"],
        ),
        "ollama" => local(
            "ollama",
            "OLLAMA_BASE_URL",
            "http://127.0.0.1:11434/v1",
            &["OLLAMA_API_KEY"],
        ),
        "lmstudio" => local(
            "lmstudio",
            "LMSTUDIO_BASE_URL",
            "http://127.0.0.1:1234/v1",
            &["LMSTUDIO_API_KEY"],
        ),
        "vllm" => local(
            "vllm",
            "VLLM_BASE_URL",
            "http://127.0.0.1:8000/v1",
            &["VLLM_API_KEY"],
        ),
        "mlx-lm" => local(
            "mlx-lm",
            "MLX_LM_BASE_URL",
            "http://127.0.0.1:8080/v1",
            &["MLX_LM_API_KEY"],
        ),
        _ => return None,
    })
}

pub(crate) struct Endpoint {
    /// Without a trailing slash.
    pub base_url: String,
    pub key: Option<Secret>,
}

/// Base URL: `cfg.base_url`, else the environment, else the config file, else the default.
/// Key: the environment, else the config file.
pub(crate) fn endpoint(
    p: &ProviderInfo,
    cfg: &LlmConfig,
    file: &FileConfig,
) -> Result<Endpoint, LlmError> {
    let entry = file.providers.get(p.section);
    let base = cfg
        .base_url
        .clone()
        .or_else(|| cfg.env.var(p.base_env))
        .or_else(|| entry.and_then(|e| e.base_url.clone()))
        .unwrap_or_else(|| p.default_base.to_string());
    let base = base.trim().trim_end_matches('/').to_string();
    let url = reqwest::Url::parse(&base)
        .map_err(|e| LlmError::Config(format!("the base URL `{base}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::Config(format!(
            "the base URL `{base}` is not http(s)"
        )));
    }
    let key = p
        .key_env
        .iter()
        .find_map(|v| cfg.env.var(v))
        .or_else(|| entry.and_then(|e| e.api_key.clone()))
        .filter(|k| !k.trim().is_empty())
        .map(|k| Secret(k.trim().to_string()));
    if key.is_none() && p.key_required && !is_loopback(&url) {
        let file = file
            .path
            .clone()
            .or_else(|| config_dir(&cfg.env).map(|d| d.join("config.toml")))
            .map(|f| format!(" in {}", f.display()))
            .unwrap_or_default();
        let vars = match p.key_env {
            [first, rest @ ..] if !rest.is_empty() => format!("{first} (or {})", rest.join(", ")),
            all => all.join(""),
        };
        return Err(LlmError::Config(format!(
            "no API key for {}: set {vars}, or api_key under [providers.{}]{file}",
            p.section, p.section
        )));
    }
    Ok(Endpoint {
        base_url: base,
        key,
    })
}

pub(crate) fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_variables_are_the_only_ones_seen_and_never_print_their_values() {
        let env = LlmEnv::vars([("OPENAI_API_KEY", "sk-given-0123456789"), ("EMPTY", " ")]);
        assert_eq!(
            env.var("OPENAI_API_KEY").as_deref(),
            Some("sk-given-0123456789")
        );
        assert_eq!(env.var("EMPTY"), None, "blank is unset");
        // PATH is set in any process that runs this test; given variables hide it.
        assert!(LlmEnv::Process.var("PATH").is_some());
        assert_eq!(env.var("PATH"), None);
        let shown = format!("{env:?}");
        assert!(shown.contains("OPENAI_API_KEY"), "{shown}");
        assert!(!shown.contains("sk-given"), "{shown}");
        let cfg = LlmConfig {
            env,
            ..LlmConfig::default()
        };
        assert!(!format!("{cfg:?}").contains("sk-given"));
        // Not stored with a run: a config read back uses the process's environment.
        let back: LlmConfig = serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(back.env, LlmEnv::Process);
    }
}
