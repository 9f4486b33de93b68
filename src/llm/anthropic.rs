//! Anthropic's Messages API (`/v1/messages`).

use super::config::Endpoint;
use super::http::{self, json_excerpt};
use super::{Backend, Failure, LlmConfig, LlmError, Reply, Request, Role, Usage};
use reqwest::blocking::Client;
use serde_json::{Value, json};
use std::time::Duration;

const VERSION: &str = "2023-06-01";
/// The API requires `max_tokens`; this is the default when a request sets none.
const DEFAULT_MAX_TOKENS: u32 = 8192;

pub(crate) struct Anthropic {
    client: Client,
    ep: Endpoint,
    model: String,
    reasoning_effort: Option<String>,
    temperature: Option<f32>,
}

impl Anthropic {
    pub fn new(client: Client, ep: Endpoint, model: &str, cfg: &LlmConfig) -> Anthropic {
        Anthropic {
            client,
            ep,
            model: model.to_string(),
            reasoning_effort: cfg.reasoning_effort.clone(),
            temperature: cfg.temperature,
        }
    }

    fn body(&self, req: &Request) -> Value {
        let system: Vec<&str> = req
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let messages: Vec<Value> = req
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
            .collect();
        let mut max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        let mut body = json!({"model": self.model, "messages": messages});
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        // Reasoning: adaptive thinking steered by `effort` on Claude 4.6 and later (which reject
        // token budgets), a thinking budget before. Either way it rules out temperature and needs
        // room under max_tokens.
        match self.reasoning_effort.as_deref() {
            Some(effort) if budget_thinking(&self.model) => {
                let budget = match effort {
                    "low" => 2048,
                    "high" => 24576,
                    _ => 8192,
                };
                max_tokens = max_tokens.max(budget + 4096);
                body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
            }
            Some(effort) => {
                max_tokens = max_tokens.max(16384);
                body["thinking"] = json!({"type": "adaptive"});
                body["output_config"] = json!({"effort": effort});
            }
            None => {
                if let Some(t) = req.temperature.or(self.temperature) {
                    body["temperature"] = json!(t);
                }
            }
        }
        body["max_tokens"] = json!(max_tokens);
        body
    }
}

impl Backend for Anthropic {
    fn call(&mut self, req: &Request, timeout: Duration) -> Result<Reply, Failure> {
        // The base may be given with or without the version segment.
        let url = match self.ep.base_url.ends_with("/v1") {
            true => format!("{}/messages", self.ep.base_url),
            false => format!("{}/v1/messages", self.ep.base_url),
        };
        let key = self
            .ep
            .key
            .as_ref()
            .map(|k| ("x-api-key", k.expose().to_string()));
        let mut headers = http::headers(&self.ep, key);
        headers.insert(
            "anthropic-version",
            reqwest::header::HeaderValue::from_static(VERSION),
        );
        let v = http::post_json(&self.client, &url, headers, &self.body(req), timeout)?;
        Ok(parse(&v)?)
    }
}

/// Claude 4.5 and earlier take a thinking budget in tokens; later models think adaptively.
fn budget_thinking(model: &str) -> bool {
    let Some(rest) = model.strip_prefix("claude-") else {
        return false;
    };
    if rest.starts_with('3') {
        return true;
    }
    // claude-<family>-<major>[-<minor>][-<date>]
    let mut parts = rest.split('-').skip(1);
    let major: u32 = match parts.next().and_then(|p| p.parse().ok()) {
        Some(m) => m,
        None => return false,
    };
    let minor: u32 = parts
        .next()
        .filter(|p| p.len() <= 2)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    (major, minor) < (4, 6)
}

fn parse(v: &Value) -> Result<Reply, LlmError> {
    let text: String = v["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    if text.trim().is_empty() {
        let why = match v["stop_reason"].as_str() {
            Some(r) => format!("no text (stop_reason {r}): {}", json_excerpt(v)),
            None => format!("no text: {}", json_excerpt(v)),
        };
        return Err(LlmError::BadBody(why));
    }
    let u = &v["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    // Cache reads and writes count as input at the plain rate; we ask for no caching, so they are
    // normally zero.
    let usage = u.is_object().then(|| Usage {
        input_tokens: n("input_tokens")
            + n("cache_creation_input_tokens")
            + n("cache_read_input_tokens"),
        output_tokens: n("output_tokens"),
        reasoning_tokens: 0,
    });
    Ok(Reply { text, usage })
}

#[cfg(test)]
mod tests {
    use super::budget_thinking;

    #[test]
    fn which_models_take_a_thinking_budget() {
        for m in [
            "claude-sonnet-4-5",
            "claude-sonnet-4-5-20250929",
            "claude-sonnet-4-20250514",
            "claude-opus-4-1",
            "claude-haiku-4-5",
            "claude-3-7-sonnet-latest",
        ] {
            assert!(budget_thinking(m), "{m}");
        }
        for m in [
            "claude-opus-4-6",
            "claude-sonnet-4-6",
            "claude-opus-5",
            "claude-sonnet-5-5",
            "other",
        ] {
            assert!(!budget_thinking(m), "{m}");
        }
    }
}
