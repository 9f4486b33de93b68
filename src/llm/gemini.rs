//! Google's Gemini API (`generateContent`). The key goes in the `x-goog-api-key` header, never in the
//! URL, so it cannot leak into logs or error messages that quote the URL.

use super::config::Endpoint;
use super::http::{self, json_excerpt};
use super::{Backend, Failure, LlmConfig, LlmError, Reply, Request, Role, Usage};
use reqwest::blocking::Client;
use serde_json::{Value, json};
use std::time::Duration;

pub(crate) struct Gemini {
    client: Client,
    ep: Endpoint,
    model: String,
    reasoning_effort: Option<String>,
    temperature: Option<f32>,
}

impl Gemini {
    pub fn new(client: Client, ep: Endpoint, model: &str, cfg: &LlmConfig) -> Gemini {
        Gemini {
            client,
            ep,
            model: model.to_string(),
            reasoning_effort: cfg.reasoning_effort.clone(),
            temperature: cfg.temperature,
        }
    }

    fn body(&self, req: &Request) -> Value {
        let system: Vec<Value> = req
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| json!({"text": m.content}))
            .collect();
        let contents: Vec<Value> = req
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .map(|m| {
                let role = if m.role == Role::Assistant {
                    "model"
                } else {
                    "user"
                };
                json!({"role": role, "parts": [{"text": m.content}]})
            })
            .collect();
        let mut body = json!({"contents": contents});
        if !system.is_empty() {
            body["systemInstruction"] = json!({"parts": system});
        }
        let mut generation = json!({});
        if let Some(n) = req.max_tokens {
            generation["maxOutputTokens"] = json!(n);
        }
        if let Some(t) = req.temperature.or(self.temperature) {
            generation["temperature"] = json!(t);
        }
        // Gemini 2.x takes a thinking budget in tokens, Gemini 3 a level.
        if let Some(e) = &self.reasoning_effort {
            generation["thinkingConfig"] = if self.model.starts_with("gemini-2") {
                let budget = match e.as_str() {
                    "low" => 1024,
                    "high" => 24576,
                    _ => 8192,
                };
                json!({"thinkingBudget": budget})
            } else {
                json!({"thinkingLevel": e})
            };
        }
        if generation.as_object().is_some_and(|g| !g.is_empty()) {
            body["generationConfig"] = generation;
        }
        body
    }
}

impl Backend for Gemini {
    fn call(&mut self, req: &Request, timeout: Duration) -> Result<Reply, Failure> {
        let base = &self.ep.base_url;
        let versioned = base.ends_with("/v1beta") || base.ends_with("/v1");
        let model = self.model.trim_start_matches("models/");
        let url = match versioned {
            true => format!("{base}/models/{model}:generateContent"),
            false => format!("{base}/v1beta/models/{model}:generateContent"),
        };
        let key = self
            .ep
            .key
            .as_ref()
            .map(|k| ("x-goog-api-key", k.expose().to_string()));
        let headers = http::headers(&self.ep, key);
        let v = http::post_json(&self.client, &url, headers, &self.body(req), timeout)?;
        Ok(parse(&v)?)
    }
}

fn parse(v: &Value) -> Result<Reply, LlmError> {
    let cand = &v["candidates"][0];
    let text: String = cand["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["thought"] != true)
        .filter_map(|p| p["text"].as_str())
        .collect();
    if text.trim().is_empty() {
        let why = match (
            v["promptFeedback"]["blockReason"].as_str(),
            cand["finishReason"].as_str(),
        ) {
            (Some(b), _) => format!("the prompt was blocked ({b}): {}", json_excerpt(v)),
            (_, Some(r)) => format!("no text (finishReason {r}): {}", json_excerpt(v)),
            _ => format!("no text: {}", json_excerpt(v)),
        };
        return Err(LlmError::BadBody(why));
    }
    let u = &v["usageMetadata"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    // Thoughts are billed as output but not counted in candidatesTokenCount.
    let usage = u.is_object().then(|| Usage {
        input_tokens: n("promptTokenCount"),
        output_tokens: n("candidatesTokenCount") + n("thoughtsTokenCount"),
        reasoning_tokens: n("thoughtsTokenCount"),
    });
    Ok(Reply { text, usage })
}
