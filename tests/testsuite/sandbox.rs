//! The worker's sandbox, tested from inside: candidates that compute correctly only when they cannot see
//! a secret in their environment, or cannot reach the network.

use crate::common::*;

fn eval(name: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let store = tempfile::tempdir().unwrap();
    let dir = fixture("sandbox").join(name);
    let mut cmd = ksearch(store.path());
    cmd.args(["eval", "matmul", dir.to_str().unwrap(), "--json"])
        .args(QUICK);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    last_json(&out)
}

#[test]
fn secrets_in_the_environment_do_not_reach_candidates() {
    let v = eval(
        "secret",
        &[("KSEARCH_TEST_SECRET_TOKEN", "sk-should-never-be-seen")],
    );
    assert_eq!(v["passed"], true, "the candidate saw the secret: {v}");
}

#[cfg(target_os = "linux")]
#[test]
fn candidates_cannot_reach_the_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let v = eval("network", &[("KSEARCH_TEST_PORT", &port)]);
    assert_eq!(
        v["passed"], true,
        "the candidate reached 127.0.0.1:{port}: {v}"
    );
    assert_eq!(v["sandbox"]["network_isolated"], true, "{v}");
}
