//! End to end against a real LLM: llama.cpp's llama-server serving Gemma 3 270M (base model), started by
//! `scripts/test` through `scripts/llama-server.sh`, which sets KSEARCH_LLAMA_URL. It checks the
//! plumbing only: round trip, token usage, extraction of whatever the model says, and that its unusable
//! kernels are recorded as failures rather than crashing anything. The model is far too small to write
//! kernels; nothing here judges their quality.

use crate::common::*;
use ksearch::llm::{Llm, LlmConfig, Message, Request};

/// The server's base URL, or `None` outside `scripts/test`. Under CI its absence is a failure.
fn server() -> Option<String> {
    match std::env::var("KSEARCH_LLAMA_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "KSEARCH_LLAMA_URL is not set: CI must run the tests through scripts/test"
            );
            eprintln!("skipped: no llama-server (run the tests through scripts/test)");
            None
        }
    }
}

#[test]
fn a_real_llama_server_round_trip_reports_usage() {
    let Some(url) = server() else { return };
    let cfg = LlmConfig {
        base_url: Some(url),
        timeout_s: 120.0,
        ..Default::default()
    };
    let mut llm = Llm::from_spec("llamacpp:gemma3-270m", &cfg).unwrap();
    let mut req = Request::new(
        "probe",
        vec![Message::user("Complete: The capital of France is")],
    );
    req.max_tokens = Some(16);
    req.temperature = Some(0.0);
    let r = llm.complete(req).unwrap();
    assert!(!r.text.trim().is_empty(), "an empty reply");
    let usage = r.usage.expect("llama-server reports usage");
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0,
        "{usage:?}"
    );
    assert_eq!(llm.meter().calls, 1);
}

#[test]
fn a_search_with_a_real_small_model_records_its_unusable_replies_and_ends_cleanly() {
    let Some(url) = server() else { return };
    let store = tempfile::tempdir().unwrap();
    let mut args = vec![
        "run",
        "softmax",
        "--strategy",
        "once",
        "--llm",
        "llamacpp:gemma3-270m",
        "--llm-base-url",
        url.as_str(),
        "--budget",
        "2",
        "--max-llm-calls",
        "3",
        "--llm-timeout",
        "180",
        "--llm-max-output",
        "200",
        "--json",
    ];
    args.extend_from_slice(QUICK);
    let out = run(store.path(), &args);
    let v = last_json(&out);
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    // The seed passes; whatever the model wrote was parsed, and either evaluated or rejected with a reason.
    // A model whose every reply was unusable did not do the search's job: the run says `stopped` and exits 1.
    match v["status"].as_str() {
        Some("completed") => assert_eq!(out.status.code(), Some(0), "{}", stderr(&out)),
        Some("stopped") => {
            assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
            assert!(v["stopped"].as_str().is_some_and(|w| !w.is_empty()), "{v}");
        }
        other => panic!("status {other:?}: {}", stderr(&out)),
    }
    assert!(v["evaluations"].as_u64().unwrap() >= 1);
    let cassette = store.path().join("gemma.jsonl");
    let shown = run(
        store.path(),
        &[
            "show",
            v["run_id"].as_str().unwrap(),
            "--cassette",
            cassette.to_str().unwrap(),
        ],
    );
    assert!(shown.status.success(), "{}", stderr(&shown));
    let exchanges: Vec<serde_json::Value> = std::fs::read_to_string(&cassette)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        !exchanges.is_empty() && exchanges.len() <= 3,
        "{}",
        exchanges.len()
    );
    for e in &exchanges {
        assert_eq!(e["provider"], "llamacpp");
        if e["outcome"]["status"] == "ok" {
            assert!(
                e["outcome"]["usage"]["output_tokens"].as_u64().unwrap() > 0,
                "{e}"
            );
        }
    }
    // A base model does not answer in our format: the run says what was wrong with its reply.
    if v["evaluations"] == 1 {
        let why = v["stopped"].as_str().unwrap_or("");
        assert!(why.contains("unusable") || why.contains("budget"), "{why}");
    }
}

/// `scripts/llama-server.sh` gives each start a server of its own: a second test run's server, started and
/// stopped beside this run's, leaves this run's server serving.
#[test]
fn a_second_server_started_and_stopped_beside_this_one_leaves_it_serving() {
    let Some(url) = server() else { return };
    let health = |u: &str| {
        let base = u.trim_end_matches('/').trim_end_matches("/v1");
        let out = std::process::Command::new("curl")
            .args(["-sf", "--max-time", "10", &format!("{base}/health")])
            .output()
            .unwrap();
        out.status.success()
    };
    assert!(health(&url), "this run's server at {url} is not healthy");
    let started = std::process::Command::new("bash")
        .args([
            repo().join("scripts/llama-server.sh").to_str().unwrap(),
            "start",
        ])
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", stderr(&started));
    let other = String::from_utf8_lossy(&started.stdout).trim().to_string();
    assert!(
        other.starts_with("http://127.0.0.1:") && other != url,
        "{other}"
    );
    assert!(health(&other));
    let stopped = std::process::Command::new("bash")
        .args([
            repo().join("scripts/llama-server.sh").to_str().unwrap(),
            "stop",
            &other,
        ])
        .output()
        .unwrap();
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    // The signal is asynchronous: the stopped server stops answering within seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while health(&other) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stopped server still answers"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(health(&url), "stopping the other server stopped this run's");
}
