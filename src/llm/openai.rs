//! OpenAI's two wire formats: Chat Completions (also spoken by OpenRouter, llama.cpp, Ollama, LM
//! Studio, vLLM and mlx-lm) and Responses (the reasoning models: gpt-5*, o1, o3, o4).

use super::config::{Endpoint, Secret};
use super::http::{self, json_excerpt};
use super::{Backend, Failure, LlmConfig, LlmError, Reply, Request, Usage};
use reqwest::blocking::Client;
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    Chat,
    Responses,
}

pub(crate) struct OpenAi {
    client: Client,
    ep: Endpoint,
    model: String,
    wire: Wire,
    /// OpenAI itself takes `max_completion_tokens`; compatible servers know `max_tokens`.
    official: bool,
    reasoning_effort: Option<String>,
    temperature: Option<f32>,
}

/// Models that OpenAI serves through the Responses API.
fn reasoning_model(model: &str) -> bool {
    ["gpt-5", "o1", "o3", "o4"]
        .iter()
        .any(|p| model.starts_with(p))
}

impl OpenAi {
    pub fn new(
        client: Client,
        ep: Endpoint,
        provider: &str,
        model: &str,
        cfg: &LlmConfig,
    ) -> OpenAi {
        let wire = match provider {
            "openai-responses" => Wire::Responses,
            "openai" if reasoning_model(model) => Wire::Responses,
            _ => Wire::Chat,
        };
        OpenAi {
            client,
            ep,
            model: model.to_string(),
            wire,
            official: provider.starts_with("openai"),
            reasoning_effort: cfg.reasoning_effort.clone(),
            temperature: cfg.temperature,
        }
    }

    fn auth(&self) -> Option<(&'static str, String)> {
        self.ep
            .key
            .as_ref()
            .map(|k: &Secret| ("authorization", format!("Bearer {}", k.expose())))
    }

    fn chat_body(&self, req: &Request) -> Value {
        let messages: Vec<Value> = req
            .messages
            .iter()
            .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
            .collect();
        let mut body = json!({"model": self.model, "messages": messages});
        if let Some(n) = req.max_tokens {
            let field = if self.official {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            body[field] = json!(n);
        }
        if let Some(t) = req.temperature.or(self.temperature) {
            body["temperature"] = json!(t);
        }
        if let Some(e) = &self.reasoning_effort {
            body["reasoning_effort"] = json!(e);
        }
        body
    }

    /// Temperature is left out: the reasoning models this wire is for reject it.
    fn responses_body(&self, req: &Request) -> Value {
        let input: Vec<Value> = req
            .messages
            .iter()
            .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
            .collect();
        let effort = self.reasoning_effort.as_deref().unwrap_or("medium");
        let mut body = json!({
            "model": self.model,
            "input": input,
            "reasoning": {"effort": effort},
            // Nothing kept on OpenAI's side: every exchange is in our own store.
            "store": false,
        });
        if let Some(n) = req.max_tokens {
            body["max_output_tokens"] = json!(n);
        }
        body
    }
}

impl Backend for OpenAi {
    fn call(&mut self, req: &Request, timeout: Duration) -> Result<Reply, Failure> {
        let (path, body) = match self.wire {
            Wire::Chat => ("/chat/completions", self.chat_body(req)),
            Wire::Responses => ("/responses", self.responses_body(req)),
        };
        let url = format!("{}{path}", self.ep.base_url);
        let headers = http::headers(&self.ep, self.auth());
        let v = http::post_json(&self.client, &url, headers, &body, timeout)?;
        Ok(match self.wire {
            Wire::Chat => parse_chat(&v)?,
            Wire::Responses => parse_responses(&v)?,
        })
    }
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn parse_chat(v: &Value) -> Result<Reply, LlmError> {
    if let Some(t) = v.get("timings") {
        // llama.cpp's own speed figures: worth a log line, not a place in the record.
        tracing::debug!(
            target: "llm",
            "llama.cpp timings: prompt {} tok/s, generation {} tok/s",
            t["prompt_per_second"],
            t["predicted_per_second"]
        );
    }
    let choice = &v["choices"][0];
    let content = &choice["message"]["content"];
    let text = match content {
        Value::String(s) => s.clone(),
        // Some servers send content parts.
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    if text.trim().is_empty() {
        let why = match (choice["finish_reason"].as_str(), v.get("error")) {
            (_, Some(err)) => format!("the reply carries an error: {}", json_excerpt(err)),
            (Some(reason), _) => format!("no text (finish_reason {reason}): {}", json_excerpt(v)),
            _ => format!("no text: {}", json_excerpt(v)),
        };
        return Err(LlmError::BadBody(why));
    }
    let u = &v["usage"];
    let usage = u.is_object().then(|| Usage {
        input_tokens: count(&u["prompt_tokens"]),
        output_tokens: count(&u["completion_tokens"]),
        reasoning_tokens: count(&u["completion_tokens_details"]["reasoning_tokens"]),
    });
    Ok(Reply { text, usage })
}

fn parse_responses(v: &Value) -> Result<Reply, LlmError> {
    let mut text = v["output_text"].as_str().unwrap_or_default().to_string();
    if text.is_empty() {
        for item in v["output"].as_array().into_iter().flatten() {
            if item["type"] != "message" {
                continue;
            }
            for c in item["content"].as_array().into_iter().flatten() {
                if c["type"] == "output_text"
                    && let Some(t) = c["text"].as_str()
                {
                    text.push_str(t);
                }
            }
        }
    }
    if text.trim().is_empty() {
        let why = match (
            v["status"].as_str(),
            v.get("error").filter(|e| !e.is_null()),
        ) {
            (_, Some(err)) => format!("the reply carries an error: {}", json_excerpt(err)),
            (Some(status), _) if status != "completed" => format!(
                "no text (status {status}, {}): {}",
                v["incomplete_details"]["reason"]
                    .as_str()
                    .unwrap_or("no reason given"),
                json_excerpt(v)
            ),
            _ => format!("no text: {}", json_excerpt(v)),
        };
        return Err(LlmError::BadBody(why));
    }
    let u = &v["usage"];
    let usage = u.is_object().then(|| Usage {
        input_tokens: count(&u["input_tokens"]),
        output_tokens: count(&u["output_tokens"]),
        reasoning_tokens: count(&u["output_tokens_details"]["reasoning_tokens"]),
    });
    Ok(Reply { text, usage })
}
