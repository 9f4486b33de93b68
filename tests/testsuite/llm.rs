//! The LLM layer through the real HTTP client against a scripted local server: wire formats, retries,
//! timeouts, bad bodies, budgets, key hygiene, replay and cassettes, and the command provider.

use crate::common;
use crate::common::server::{Recorded, Server, Step};
use ksearch::llm::{Budget, Exchange, Llm, LlmConfig, LlmEnv, LlmError, Message, Outcome, Request};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-SECRET-0123456789abcdef";

/// A private config folder for these tests, kept for the whole process (under target/, so `cargo clean`
/// takes it).
fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap()
            .keep();
        std::fs::write(dir.join("empty.toml"), "").unwrap();
        dir
    })
}

/// The only environment the clients of these tests see, given to each (`LlmConfig::env`): test keys
/// for the hosted providers, none for the others, and the private config folder, so the developer's own
/// keys, config and prices stay out. The process's environment is left alone: every test of the suite
/// shares it, and the `ksearch` processes other tests start inherit it.
fn env() -> LlmEnv {
    let mut vars = vec![(
        "XDG_CONFIG_HOME".to_string(),
        dir().to_str().unwrap().to_string(),
    )];
    for k in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"] {
        vars.push((k.to_string(), KEY.to_string()));
    }
    LlmEnv::vars(vars)
}

/// Fast settings: short timeout, tiny backoff, no config file of the developer's.
fn cfg(base: &str) -> LlmConfig {
    LlmConfig {
        timeout_s: 2.0,
        max_retries: 3,
        base_url: Some(base.to_string()),
        backoff_s: 0.02,
        config_file: Some(dir().join("empty.toml")),
        env: env(),
        ..LlmConfig::default()
    }
}

fn config_file(name: &str, text: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn ask(text: &str) -> Request {
    Request::new(
        "action",
        vec![Message::system("You write kernels."), Message::user(text)],
    )
}

fn record(llm: &mut Llm) -> Arc<Mutex<Vec<Exchange>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    llm.set_recorder(Box::new(move |ex: &Exchange| {
        l.lock().unwrap().push(ex.clone())
    }));
    log
}

/// (input, output) USD per million tokens from data/prices.toml.
fn price(provider: &str, model: &str) -> (f64, f64) {
    let text = std::fs::read_to_string(common::repo().join("data/prices.toml")).unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    let p = &t[provider][model];
    (
        p["input_per_mtok"].as_float().unwrap(),
        p["output_per_mtok"].as_float().unwrap(),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 + 1e-9 * b.abs()
}

fn chat_reply(text: &str, prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    })
}

fn only(reqs: &[Recorded]) -> &Recorded {
    assert_eq!(reqs.len(), 1, "{reqs:#?}");
    &reqs[0]
}

#[test]
fn openai_chat_round_trip() {
    let mut reply = chat_reply("use shared memory", 1000, 500);
    reply["usage"]["completion_tokens_details"] = json!({"reasoning_tokens": 0});
    reply["timings"] = json!({"prompt_per_second": 900.0, "predicted_per_second": 40.0});
    let server = Server::start(vec![Step::ok(&reply)]);
    let mut llm = Llm::from_spec("openai:gpt-4.1", &cfg(&format!("{}/v1", server.url()))).unwrap();
    let mut req = ask("tile it");
    req.max_tokens = Some(100);
    req.temperature = Some(0.2);
    let r = llm.complete(req).unwrap();

    let reqs = server.requests();
    let sent = only(&reqs);
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = sent.json();
    assert_eq!(body["model"], "gpt-4.1");
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "tile it"}])
    );
    assert_eq!(body["max_completion_tokens"], 100);
    assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);

    assert_eq!(r.text, "use shared memory");
    assert_eq!(
        (r.provider.as_str(), r.model.as_str(), r.attempts),
        ("openai", "gpt-4.1", 1)
    );
    let u = r.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.reasoning_tokens),
        (1000, 500, 0)
    );
    let (pin, pout) = price("openai", "gpt-4.1");
    assert!(close(
        r.cost_usd.unwrap(),
        (1000.0 * pin + 500.0 * pout) / 1e6
    ));
    assert_eq!(llm.meter().calls, 1);
    assert_eq!(llm.meter().tokens(), 1500);
}

#[test]
fn openai_responses_round_trip() {
    // No output_text: the text is read from the output message, reasoning items skipped.
    let reply = json!({
        "status": "completed",
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "vectorise "}, {"type": "output_text", "text": "the loop"}]}
        ],
        "usage": {"input_tokens": 2000, "output_tokens": 1000, "output_tokens_details": {"reasoning_tokens": 600}}
    });
    let server = Server::start(vec![Step::ok(&reply)]);
    let base = format!("{}/v1", server.url());
    let mut llm = Llm::from_spec("openai:gpt-5.2", &cfg(&base)).unwrap();
    let mut req = ask("speed up");
    req.max_tokens = Some(4000);
    req.temperature = Some(0.7);
    let r = llm.complete(req).unwrap();
    let reqs = server.requests();
    let sent = only(&reqs);
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = sent.json();
    assert_eq!(body["model"], "gpt-5.2");
    assert_eq!(
        body["input"][1],
        json!({"role": "user", "content": "speed up"})
    );
    assert_eq!(body["reasoning"]["effort"], "medium");
    assert_eq!(body["max_output_tokens"], 4000);
    assert_eq!(body["store"], false);
    assert!(
        body.get("temperature").is_none(),
        "reasoning models reject temperature"
    );
    assert_eq!(r.text, "vectorise the loop");
    let u = r.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.reasoning_tokens),
        (2000, 1000, 600)
    );
    let (pin, pout) = price("openai", "gpt-5.2");
    assert!(close(
        r.cost_usd.unwrap(),
        (2000.0 * pin + 1000.0 * pout) / 1e6
    ));

    // Chosen explicitly, with output_text and an effort from the config.
    let server = Server::start(vec![Step::ok(
        &json!({"output_text": "done", "output": []}),
    )]);
    let mut c = cfg(&format!("{}/v1", server.url()));
    c.reasoning_effort = Some("high".into());
    let mut llm = Llm::from_spec("openai-responses:my-model", &c).unwrap();
    let r = llm.complete(ask("x")).unwrap();
    assert_eq!(r.text, "done");
    assert_eq!((r.usage, r.cost_usd), (None, None));
    assert_eq!(server.requests()[0].path, "/v1/responses");
    assert_eq!(server.requests()[0].json()["reasoning"]["effort"], "high");
}

#[test]
fn anthropic_round_trip() {
    let reply = json!({
        "type": "message", "role": "assistant", "stop_reason": "end_turn",
        "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "unroll "},
                    {"type": "text", "text": "by 4"}],
        "usage": {"input_tokens": 3000, "output_tokens": 700}
    });
    let server = Server::start(vec![Step::ok(&reply)]);
    let mut llm = Llm::from_spec("anthropic:claude-sonnet-4-5", &cfg(&server.url())).unwrap();
    let req = Request::new(
        "wm-init",
        vec![
            Message::system("rule one"),
            Message::system("rule two"),
            Message::user("q1"),
            Message::assistant("a1"),
            Message::user("q2"),
        ],
    );
    let r = llm.complete(req).unwrap();
    let reqs = server.requests();
    let sent = only(&reqs);
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    let body = sent.json();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["system"], "rule one\n\nrule two");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
               {"role": "user", "content": "q2"}])
    );
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(r.text, "unroll by 4");
    let u = r.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (3000, 700));
    let (pin, pout) = price("anthropic", "claude-sonnet-4-5");
    assert!(close(
        r.cost_usd.unwrap(),
        (3000.0 * pin + 700.0 * pout) / 1e6
    ));

    // Reasoning effort: adaptive thinking on current models, a token budget on 4.5 and earlier;
    // either way no temperature.
    let server = Server::start(vec![Step::ok(&reply), Step::ok(&reply)]);
    let mut c = cfg(&server.url());
    c.reasoning_effort = Some("high".into());
    c.temperature = Some(0.5);
    for model in ["claude-opus-5", "claude-sonnet-4-5-20250929"] {
        let mut llm = Llm::from_spec(&format!("anthropic:{model}"), &c).unwrap();
        llm.complete(ask("x")).unwrap();
    }
    let bodies: Vec<Value> = server.requests().iter().map(Recorded::json).collect();
    assert_eq!(bodies[0]["thinking"], json!({"type": "adaptive"}));
    assert_eq!(bodies[0]["output_config"], json!({"effort": "high"}));
    assert_eq!(
        bodies[1]["thinking"],
        json!({"type": "enabled", "budget_tokens": 24576})
    );
    for b in &bodies {
        assert!(b.get("temperature").is_none(), "{b}");
        assert!(b["max_tokens"].as_u64().unwrap() >= 16384, "{b}");
    }
}

#[test]
fn gemini_round_trip() {
    let reply = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"text": "let me think", "thought": true}, {"text": "fuse the kernels"}]},
            "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "thoughtsTokenCount": 30}
    });
    let server = Server::start(vec![Step::ok(&reply)]);
    let mut llm = Llm::from_spec("gemini:gemini-2.5-flash", &cfg(&server.url())).unwrap();
    let mut req = Request::new(
        "improve",
        vec![
            Message::system("be terse"),
            Message::user("q1"),
            Message::assistant("a1"),
            Message::user("q2"),
        ],
    );
    req.max_tokens = Some(256);
    let r = llm.complete(req).unwrap();
    let reqs = server.requests();
    let sent = only(&reqs);
    assert_eq!(sent.path, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert!(
        !sent.path.contains("key="),
        "the key must not be in the URL"
    );
    assert_eq!(sent.header("x-goog-api-key"), Some(KEY));
    let body = sent.json();
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "be terse"}]})
    );
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [{"text": "q1"}]}, {"role": "model", "parts": [{"text": "a1"}]},
               {"role": "user", "parts": [{"text": "q2"}]}])
    );
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 256);
    assert_eq!(r.text, "fuse the kernels");
    let u = r.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.reasoning_tokens),
        (100, 50, 30)
    );
    let (pin, pout) = price("gemini", "gemini-2.5-flash");
    assert!(close(
        r.cost_usd.unwrap(),
        (100.0 * pin + 50.0 * pout) / 1e6
    ));
}

#[test]
fn openai_compatible_alias_round_trip() {
    let server = Server::start(vec![Step::ok(&chat_reply("local answer", 10, 5))]);
    let base = format!("{}/v1", server.url());
    let mut llm = Llm::from_spec("ollama:qwen3:8b", &cfg(&base)).unwrap();
    assert_eq!(llm.describe(), format!("ollama:qwen3:8b via {base}"));
    let mut req = ask("x");
    req.max_tokens = Some(64);
    let r = llm.complete(req).unwrap();
    let reqs = server.requests();
    let sent = only(&reqs);
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        None,
        "local servers get no key"
    );
    assert_eq!(sent.json()["model"], "qwen3:8b");
    assert_eq!(sent.json()["max_tokens"], 64);
    assert_eq!(r.text, "local answer");
    assert_eq!(r.cost_usd, Some(0.0), "local models cost nothing");
}

#[test]
fn rate_limit_honours_retry_after() {
    let server = Server::start(vec![
        Step::json(429, &json!({"error": "slow down"})).header("Retry-After", "1"),
        Step::ok(&chat_reply("ok", 1, 1)),
    ]);
    let mut llm = Llm::from_spec("vllm:m", &cfg(&server.url())).unwrap();
    let t0 = Instant::now();
    let r = llm.complete(ask("x")).unwrap();
    let waited = t0.elapsed();
    assert_eq!((r.text.as_str(), r.attempts), ("ok", 2));
    assert_eq!(server.requests().len(), 2);
    assert!(
        waited >= Duration::from_millis(950),
        "waited only {waited:?}"
    );
    // Bounded generously: a loaded machine is slow, a client that ignored the header is not this slow.
    assert!(waited < Duration::from_secs(30), "waited {waited:?}");
}

#[test]
fn server_error_then_success() {
    let server = Server::start(vec![
        Step::json(500, &json!({"error": "boom"})),
        Step::ok(&chat_reply("recovered", 1, 1)),
    ]);
    let mut llm = Llm::from_spec("llamacpp:m", &cfg(&server.url())).unwrap();
    // The progress line is told of each attempt and of the retry (this test's purpose only: other tests
    // of this binary report to the same sink).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    ksearch::progress::set_sink(Some(Box::new(move |slot, p| {
        if p.to_json()["purpose"] == "retried-call" {
            assert_eq!(
                slot, "llm",
                "the run's own client's calls are shown in the `llm` slot"
            );
            sink.lock().unwrap().push(p.clone());
        }
    })));
    let mut req = ask("x");
    req.purpose = "retried-call".into();
    let r = llm.complete(req).unwrap();
    ksearch::progress::set_sink(None);
    assert_eq!((r.text.as_str(), r.attempts), ("recovered", 2));
    assert_eq!(llm.meter().requests, 2);
    use ksearch::progress::Phase;
    let seen = seen.lock().unwrap();
    assert!(
        matches!(
            seen.as_slice(),
            [
                Phase::Llm { attempt: 1, .. },
                Phase::LlmRetry { attempt: 2, .. },
                Phase::Llm { attempt: 2, .. },
            ]
        ),
        "{seen:?}"
    );
}

#[test]
fn dropped_connection_then_success() {
    let server = Server::start(vec![Step::hang_up(), Step::ok(&chat_reply("again", 1, 1))]);
    let mut llm = Llm::from_spec("lmstudio:m", &cfg(&server.url())).unwrap();
    let r = llm.complete(ask("x")).unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("again", 2));
}

#[test]
fn slow_reply_times_out_then_success() {
    let server = Server::start(vec![
        Step::ok(&chat_reply("too late", 1, 1)).delay(Duration::from_secs(60)),
        Step::ok(&chat_reply("in time", 1, 1)),
    ]);
    let mut c = cfg(&server.url());
    c.timeout_s = 10.0;
    let mut llm = Llm::from_spec("mlx-lm:m", &c).unwrap();
    let t0 = Instant::now();
    let r = llm.complete(ask("x")).unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("in time", 2));
    // The late reply comes after 60 s: well before it, the 10 s timeout (the suite's floor: an honest reply
    // meets it however loaded the machine) was honoured, with room for a loaded machine.
    assert!(t0.elapsed() < Duration::from_secs(45), "{:?}", t0.elapsed());

    // With no retries the timeout is the answer.
    let server = Server::start(vec![
        Step::ok(&chat_reply("too late", 1, 1)).delay(Duration::from_secs(60)),
    ]);
    c = cfg(&server.url());
    c.timeout_s = 10.0;
    c.max_retries = 0;
    let mut llm = Llm::from_spec("mlx-lm:m", &c).unwrap();
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e:?}");
}

#[test]
fn truncated_body_is_bad_and_retried_once() {
    let body = chat_reply("a long enough reply", 1, 1);
    let server = Server::start(vec![
        Step::ok(&body).truncate_after(20),
        Step::ok(&body).truncate_after(20),
        Step::ok(&body),
    ]);
    let mut llm = Llm::from_spec("vllm:m", &cfg(&server.url())).unwrap();
    let log = record(&mut llm);
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(
        matches!(&e, LlmError::BadBody(m) if m.contains("cut short")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 2, "a bad body is retried once");
    let log = log.lock().unwrap();
    assert!(
        matches!(&log[0].outcome, Outcome::Err { kind, attempts: 2, .. } if kind == "bad_body")
    );
}

#[test]
fn non_json_body_is_bad() {
    let server = Server::start(vec![
        Step::raw(200, "<html>gateway says hi</html>").header("Content-Type", "text/html"),
        Step::ok(&chat_reply("fine", 1, 1)),
    ]);
    let mut c = cfg(&server.url());
    c.max_retries = 0;
    let mut llm = Llm::from_spec("vllm:m", &c).unwrap();
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(
        matches!(&e, LlmError::BadBody(m) if m.contains("not JSON") && m.contains("gateway says hi")),
        "{e}"
    );
    // The retry (one is allowed for a bad body) recovers when retries are on.
    let server = Server::start(vec![
        Step::raw(200, "not json"),
        Step::ok(&chat_reply("fine", 1, 1)),
    ]);
    let mut llm = Llm::from_spec("vllm:m", &cfg(&server.url())).unwrap();
    assert_eq!(llm.complete(ask("x")).unwrap().text, "fine");
}

#[test]
fn reply_without_text_is_bad() {
    let empty = json!({"choices": [{"message": {"role": "assistant", "content": null}, "finish_reason": "length"}]});
    let server = Server::start(vec![Step::ok(&empty), Step::ok(&empty)]);
    let mut llm = Llm::from_spec("openai:gpt-4.1", &cfg(&server.url())).unwrap();
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(
        matches!(&e, LlmError::BadBody(m) if m.contains("finish_reason length")),
        "{e}"
    );

    let server = Server::start(vec![Step::ok(
        &json!({"content": [], "stop_reason": "max_tokens"}),
    )]);
    let mut c = cfg(&server.url());
    c.max_retries = 0;
    let mut llm = Llm::from_spec("anthropic:claude-haiku-4-5", &c).unwrap();
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(
        matches!(&e, LlmError::BadBody(m) if m.contains("max_tokens")),
        "{e}"
    );
}

#[test]
fn exhausted_retries_are_recorded() {
    let server = Server::start(vec![
        Step::json(500, &json!({"error": "a"})),
        Step::json(502, &json!({"error": "b"})),
        Step::json(503, &json!({"error": "c"})),
        Step::ok(&chat_reply("never reached", 1, 1)),
    ]);
    let mut c = cfg(&server.url());
    c.max_retries = 2;
    let mut llm = Llm::from_spec("vllm:m", &c).unwrap();
    let log = record(&mut llm);
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(
        matches!(&e, LlmError::Http { status: 503, body_excerpt } if body_excerpt.contains('c'))
    );
    assert_eq!(server.requests().len(), 3);
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].seq, 1);
    assert_eq!(log[0].purpose, "action");
    assert_eq!(log[0].request, ask("x"));
    assert_eq!(
        log[0].outcome,
        Outcome::Err {
            kind: "http".into(),
            message: e.to_string(),
            attempts: 3
        }
    );
    assert_eq!((llm.meter().calls, llm.meter().failures), (1, 1));
}

#[test]
fn client_errors_are_not_retried() {
    let server = Server::start(vec![
        Step::json(400, &json!({"error": "bad request"})),
        Step::ok(&chat_reply("never reached", 1, 1)),
    ]);
    let mut llm = Llm::from_spec("vllm:m", &cfg(&server.url())).unwrap();
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(matches!(e, LlmError::Http { status: 400, .. }), "{e:?}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn call_cap_stops_before_sending() {
    let ok = Step::ok(&chat_reply("ok", 1, 1));
    let server = Server::start(vec![ok.clone(), ok.clone(), ok]);
    let mut c = cfg(&server.url());
    c.budget.max_calls = Some(2);
    let mut llm = Llm::from_spec("vllm:m", &c).unwrap();
    let log = record(&mut llm);
    llm.complete(ask("1")).unwrap();
    llm.complete(ask("2")).unwrap();
    let e = llm.complete(ask("3")).unwrap_err();
    assert!(
        matches!(&e, LlmError::Budget(m) if m.contains("2 calls")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 2);
    assert_eq!(llm.meter().calls, 2);
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 3, "the refusal is recorded too");
    assert!(matches!(&log[2].outcome, Outcome::Err { kind, attempts: 0, .. } if kind == "budget"));
}

#[test]
fn cost_token_and_wall_caps() {
    // $1 per call: 1000 input tokens at $1000 per million.
    let file = config_file(
        "priced.toml",
        "[prices.vllm.\"pricey\"]\ninput_per_mtok = 1000.0\noutput_per_mtok = 0.0\n",
    );
    let ok = Step::ok(&chat_reply("ok", 1000, 0));
    let server = Server::start(vec![ok.clone(), ok.clone(), ok.clone()]);
    let mut c = cfg(&server.url());
    c.config_file = Some(file);
    c.budget.max_cost_usd = Some(1.5);
    let mut llm = Llm::from_spec("vllm:pricey", &c).unwrap();
    assert_eq!(llm.complete(ask("1")).unwrap().cost_usd, Some(1.0));
    llm.complete(ask("2")).unwrap();
    let e = llm.complete(ask("3")).unwrap_err();
    assert!(
        matches!(&e, LlmError::Budget(m) if m.contains("$2.0000 spent")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 2);
    let m = serde_json::to_value(llm.meter()).unwrap();
    assert_eq!(
        (m["cost_usd"].as_f64(), m["calls"].as_u64()),
        (Some(2.0), Some(2))
    );
    assert!(m["wall_s"].as_f64().unwrap() > 0.0);

    let ok = Step::ok(&chat_reply("ok", 40, 20));
    let server = Server::start(vec![ok.clone(), ok.clone(), ok]);
    let mut c = cfg(&server.url());
    c.budget.max_tokens = Some(100);
    let mut llm = Llm::from_spec("vllm:m", &c).unwrap();
    llm.complete(ask("1")).unwrap();
    llm.complete(ask("2")).unwrap();
    let e = llm.complete(ask("3")).unwrap_err();
    assert!(
        matches!(&e, LlmError::Budget(m) if m.contains("120 tokens")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 2);

    let server = Server::start(vec![]);
    let mut c = cfg(&server.url());
    c.budget = Budget {
        max_wall_s: Some(0.0),
        ..Budget::default()
    };
    let mut llm = Llm::from_spec("vllm:m", &c).unwrap();
    assert!(matches!(llm.complete(ask("1")), Err(LlmError::Budget(_))));
    assert_eq!(server.requests().len(), 0);
}

#[test]
fn the_key_never_leaks() {
    let server = Server::start(vec![
        Step::json(
            401,
            &json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
        ),
        Step::ok(&chat_reply(&format!("your key is {KEY}"), 1, 1)),
    ]);
    let mut llm = Llm::from_spec("openai:gpt-4.1", &cfg(&server.url())).unwrap();
    let log = record(&mut llm);
    let e = llm.complete(ask("x")).unwrap_err();
    let r = llm.complete(ask("y")).unwrap();
    // The key did travel, in the header only.
    assert!(
        server
            .requests()
            .iter()
            .all(|q| q.header("authorization").unwrap().ends_with(KEY))
    );
    assert!(matches!(e, LlmError::Http { status: 401, .. }));
    assert!(e.to_string().contains("[redacted]"), "{e}");
    assert_eq!(r.text, "your key is [redacted]");
    for shown in [
        e.to_string(),
        format!("{e:?}"),
        format!("{r:?}"),
        format!("{llm:?}"),
        llm.describe(),
        serde_json::to_string(&*log.lock().unwrap()).unwrap(),
    ] {
        assert!(!shown.contains(KEY), "the key leaked into: {shown}");
        assert!(
            !shown.contains("SECRET"),
            "part of the key leaked into: {shown}"
        );
    }

    // A missing key names the variable to set; a remote provider built with a key shows none of it.
    let c = LlmConfig {
        config_file: Some(dir().join("empty.toml")),
        env: env(),
        ..LlmConfig::default()
    };
    let e = Llm::from_spec("openrouter:anthropic/claude-sonnet-4.5", &c).unwrap_err();
    assert!(
        matches!(&e, LlmError::Config(m) if m.contains("OPENROUTER_API_KEY")),
        "{e}"
    );
    let remote = LlmConfig {
        base_url: Some("https://example.invalid".into()),
        ..c
    };
    let llm = Llm::from_spec("gemini:gemini-2.5-pro", &remote).unwrap();
    assert!(!format!("{llm:?}").contains(KEY));
}

#[test]
fn key_and_base_url_from_the_config_file() {
    let server = Server::start(vec![Step::ok(&chat_reply("routed", 1, 1))]);
    let base = format!("{}/api/v1", server.url());
    let file_key = "sk-or-from-file-0123456789";
    let file = config_file(
        "openrouter.toml",
        &format!("[providers.openrouter]\napi_key = \"{file_key}\"\nbase_url = \"{base}\"\n"),
    );
    let c = LlmConfig {
        config_file: Some(file),
        env: env(),
        ..LlmConfig::default()
    };
    let mut llm = Llm::from_spec("openrouter:openai/gpt-5.2", &c).unwrap();
    assert_eq!(
        llm.describe(),
        format!("openrouter:openai/gpt-5.2 via {base}")
    );
    assert_eq!(llm.complete(ask("x")).unwrap().text, "routed");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/api/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {file_key}").as_str())
    );

    // Bad specs and bad files say what is wrong.
    let bad = config_file(
        "bad.toml",
        "[providers.openai]\napi_key = \"sk-unterminated\n",
    );
    let e = Llm::from_spec(
        "openai:gpt-5.2",
        &LlmConfig {
            config_file: Some(bad),
            env: env(),
            ..LlmConfig::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, LlmError::Config(m) if m.contains("bad.toml") && !m.contains("sk-unterminated")),
        "{e}"
    );
    for spec in ["gpt-5.2", "nosuch:model", "openai:"] {
        assert!(
            matches!(Llm::from_spec(spec, &c), Err(LlmError::Config(_))),
            "{spec}"
        );
    }
}

#[test]
fn replay_serves_the_recording_in_order_by_purpose() {
    let server = Server::start(vec![
        Step::ok(&chat_reply("first", 10, 1)),
        Step::json(400, &json!({"error": "no"})),
        Step::ok(&chat_reply("third", 10, 1)),
    ]);
    let mut llm = Llm::from_spec("vllm:m", &cfg(&server.url())).unwrap();
    let log = record(&mut llm);
    let live: Vec<Result<String, String>> = ["a", "b", "c"]
        .iter()
        .map(|q| {
            llm.complete(ask(q))
                .map(|r| r.text)
                .map_err(|e| e.to_string())
        })
        .collect();
    let recorded = log.lock().unwrap().clone();
    assert_eq!(recorded.len(), 3);

    let mut replay = Llm::replay(recorded.clone(), "run-1");
    let relog = record(&mut replay);
    let again: Vec<Result<String, String>> = ["a", "b", "c"]
        .iter()
        .map(|q| {
            replay
                .complete(ask(q))
                .map(|r| r.text)
                .map_err(|e| e.to_string())
        })
        .collect();
    assert_eq!(again, live);
    // Re-recorded as it was, but for the start times.
    let strip = |v: &[Exchange]| {
        v.iter()
            .cloned()
            .map(|mut e| {
                e.started_at = 0.0;
                e
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&relog.lock().unwrap()), strip(&recorded));
    let e = replay.complete(ask("d")).unwrap_err();
    assert!(
        matches!(&e, LlmError::Replay(m) if m.contains("not recorded")),
        "{e}"
    );

    // A prompt that differs only in its text (fresh measurements) still gets the recorded reply;
    // a call of another purpose means the search took another path, and says so.
    let mut replay = Llm::replay(recorded, "run-1");
    replay.complete(ask("a")).unwrap();
    let again = replay
        .complete(ask("changed"))
        .map(|r| r.text)
        .map_err(|e| e.to_string());
    assert_eq!(
        again, live[1],
        "the recorded outcome comes back for the drifted prompt"
    );
    let mut other = ask("c");
    other.purpose = "wm-edit".into();
    let e = replay.complete(other).unwrap_err();
    assert!(
        matches!(&e, LlmError::Replay(m) if m.contains("another path") && m.contains("call 3")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 3, "replay sends nothing");
}

#[test]
fn cassette_round_trip() {
    let server = Server::start(vec![
        Step::ok(&chat_reply("one", 3, 1)),
        Step::ok(&chat_reply("two", 3, 1)),
    ]);
    let path = dir().join("cassette.jsonl");
    let mut llm = Llm::from_spec("vllm:m", &cfg(&server.url())).unwrap();
    let file = Arc::new(Mutex::new(String::new()));
    let f = file.clone();
    llm.set_recorder(Box::new(move |ex: &Exchange| {
        let mut f = f.lock().unwrap();
        f.push_str(&serde_json::to_string(ex).unwrap());
        f.push('\n');
    }));
    llm.complete(ask("p1")).unwrap();
    llm.complete(ask("p2")).unwrap();
    std::fs::write(&path, file.lock().unwrap().as_str()).unwrap();

    let exchanges = Llm::load_cassette(&path).unwrap();
    assert_eq!(exchanges.len(), 2);
    let mut replay = Llm::replay(exchanges, "cassette");
    assert_eq!(replay.complete(ask("p1")).unwrap().text, "one");
    assert_eq!(replay.complete(ask("p2")).unwrap().text, "two");
    assert_eq!(replay.meter().tokens(), 8);

    let spec = format!("replay:{}", path.display());
    let mut replay = Llm::from_spec(&spec, &LlmConfig::default()).unwrap();
    let r = replay.complete(ask("p1")).unwrap();
    assert_eq!(
        (r.text.as_str(), r.provider.as_str(), r.model.as_str()),
        ("one", "vllm", "m")
    );

    let broken = dir().join("broken.jsonl");
    std::fs::write(
        &broken,
        format!(
            "{}\nnot json\n",
            file.lock().unwrap().lines().next().unwrap()
        ),
    )
    .unwrap();
    let e = Llm::load_cassette(&broken).unwrap_err();
    assert!(
        matches!(&e, LlmError::Replay(m) if m.contains("broken.jsonl:2")),
        "{e}"
    );
}

fn command(cmdline: &str, timeout_s: f64) -> Llm {
    let c = LlmConfig {
        timeout_s,
        backoff_s: 0.02,
        config_file: Some(dir().join("empty.toml")),
        env: env(),
        ..LlmConfig::default()
    };
    Llm::from_spec(&format!("command:{cmdline}"), &c).unwrap()
}

#[test]
fn command_provider() {
    let mut llm = command("cat >/dev/null; echo reply", 10.0);
    let r = llm.complete(ask("x")).unwrap();
    assert_eq!(r.text, "reply");
    assert_eq!(
        (r.usage, r.cost_usd, r.provider.as_str()),
        (None, None, "command")
    );

    let mut llm = command("cat", 10.0);
    let r = llm.complete(ask("hello")).unwrap();
    assert_eq!(
        r.text,
        "## System\n\nYou write kernels.\n\n## User\n\nhello"
    );

    let mut llm = command("echo \"$KSEARCH_LLM_PURPOSE\"", 10.0);
    assert_eq!(llm.complete(ask("x")).unwrap().text, "action");
}

#[test]
fn failing_command() {
    let mut llm = command("cat >/dev/null; echo oops >&2; exit 3", 10.0);
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(
        matches!(&e, LlmError::Command(m) if m.contains("status 3") && m.contains("oops")),
        "{e}"
    );
    assert_eq!(llm.meter().requests, 1, "a failing command is not retried");
}

#[test]
fn hanging_command_is_killed_at_its_timeout() {
    let pidfile = dir().join(format!("sleeper-{}.pid", std::process::id()));
    let mut c = LlmConfig {
        timeout_s: 1.0,
        max_retries: 0,
        config_file: Some(dir().join("empty.toml")),
        env: env(),
        ..LlmConfig::default()
    };
    c.budget.max_calls = Some(10);
    let spec = format!("command:sleep 30 & echo $! > '{}'; wait", pidfile.display());
    let mut llm = Llm::from_spec(&spec, &c).unwrap();
    let t0 = Instant::now();
    let e = llm.complete(ask("x")).unwrap_err();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e:?}");
    // `sleep 30` would end by itself: killed at the 1 s timeout, with room for a loaded machine.
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    // The whole process group went, the background sleep included.
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_millis(200));
    let ps = std::process::Command::new("ps")
        .args(["-o", "stat=", "-p", &pid])
        .output()
        .unwrap();
    let stat = String::from_utf8_lossy(&ps.stdout).trim().to_string();
    assert!(
        stat.is_empty() || stat.starts_with('Z'),
        "sleep {pid} still runs: {stat}"
    );
}
