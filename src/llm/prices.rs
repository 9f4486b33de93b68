//! Prices per model (`data/prices.toml`, embedded), overridable by the user's `prices.toml` and the
//! config file's `[prices]`.

use super::config::{self, FileConfig};
use super::{LlmError, Usage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

const BUILTIN: &str = include_str!("../../data/prices.toml");

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Reasoning tokens are billed as output unless this is given.
    #[serde(default)]
    pub reasoning_per_mtok: Option<f64>,
}

impl Price {
    pub fn cost(&self, u: &Usage) -> f64 {
        let reasoning = u.reasoning_tokens.min(u.output_tokens);
        let visible = u.output_tokens - reasoning;
        let r = self.reasoning_per_mtok.unwrap_or(self.output_per_mtok);
        (u.input_tokens as f64 * self.input_per_mtok
            + visible as f64 * self.output_per_mtok
            + reasoning as f64 * r)
            / 1e6
    }
}

/// provider → model → price.
pub(crate) type PriceTable = BTreeMap<String, BTreeMap<String, Price>>;

fn parse(text: &str, origin: &Path) -> Result<PriceTable, LlmError> {
    toml::from_str(text).map_err(|e| LlmError::Config(config::toml_error(origin, text, &e)))
}

/// Built-in prices, then `<config dir>/prices.toml`, then `[prices]` of the config file.
pub(crate) fn load(file: &FileConfig, env: &config::LlmEnv) -> Result<PriceTable, LlmError> {
    let mut table = parse(BUILTIN, Path::new("data/prices.toml"))?;
    if let Some(path) = config::config_dir(env).map(|d| d.join("prices.toml"))
        && let Ok(text) = std::fs::read_to_string(&path)
    {
        merge(&mut table, parse(&text, &path)?);
    }
    if let Some(p) = &file.prices {
        let origin = file.path.clone().unwrap_or_default();
        let extra: PriceTable = p.clone().try_into().map_err(|e: toml::de::Error| {
            LlmError::Config(format!("{} [prices]: {}", origin.display(), e.message()))
        })?;
        merge(&mut table, extra);
    }
    Ok(table)
}

fn merge(into: &mut PriceTable, from: PriceTable) {
    for (provider, models) in from {
        into.entry(provider).or_default().extend(models);
    }
}

/// The model's price: exact name, else without a date suffix, else the provider's `*`.
pub(crate) fn lookup(table: &PriceTable, provider: &str, model: &str) -> Option<Price> {
    let provider = match provider {
        "openai-responses" | "openai-chat" => "openai",
        p => p,
    };
    let models = table.get(provider)?;
    models
        .get(model)
        .or_else(|| undated(model).and_then(|m| models.get(m)))
        .or_else(|| models.get("*"))
        .copied()
}

/// `gpt-5.2-2025-12-11` → `gpt-5.2`, `claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`.
fn undated(model: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (head, last) = model.rsplit_once('-')?;
    if last.len() == 8 && digits(last) {
        return Some(head);
    }
    let (head2, mid) = head.rsplit_once('-')?;
    let (head3, year) = head2.rsplit_once('-')?;
    (year.len() == 4
        && mid.len() == 2
        && last.len() == 2
        && digits(year)
        && digits(mid)
        && digits(last))
    .then_some(head3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_prices_parse_and_resolve() {
        let t = parse(BUILTIN, Path::new("data/prices.toml")).unwrap();
        assert!(lookup(&t, "openai", "gpt-5.2").is_some());
        assert_eq!(
            lookup(&t, "openai-responses", "gpt-5.2-2025-12-11"),
            lookup(&t, "openai", "gpt-5.2")
        );
        assert_eq!(
            lookup(&t, "anthropic", "claude-sonnet-4-5-20250929"),
            lookup(&t, "anthropic", "claude-sonnet-4-5")
        );
        assert_eq!(
            lookup(&t, "ollama", "qwen3:8b").unwrap().cost(&usage()),
            0.0
        );
        assert_eq!(lookup(&t, "openai", "no-such-model"), None);
        assert_eq!(lookup(&t, "command", "x"), None);
    }

    fn usage() -> Usage {
        Usage {
            input_tokens: 1_000_000,
            output_tokens: 2_000_000,
            reasoning_tokens: 500_000,
        }
    }

    #[test]
    fn reasoning_is_output_unless_priced() {
        let mut p = Price {
            input_per_mtok: 1.0,
            output_per_mtok: 10.0,
            reasoning_per_mtok: None,
        };
        assert_eq!(p.cost(&usage()), 21.0);
        p.reasoning_per_mtok = Some(2.0);
        assert_eq!(p.cost(&usage()), 1.0 + 15.0 + 1.0);
    }

    #[test]
    fn dates_are_stripped() {
        assert_eq!(undated("gpt-5.2-2025-12-11"), Some("gpt-5.2"));
        assert_eq!(undated("claude-3-5-20241022"), Some("claude-3-5"));
        assert_eq!(undated("gpt-5-mini"), None);
        assert_eq!(undated("claude-sonnet-4-5"), None);
    }
}
