"""The Ray bridge's pieces that need no cluster (the cluster itself: tests/testsuite/cluster.rs)."""

from __future__ import annotations

import json

import pytest

from ksearch_worker import ray_bridge


def test_the_worker_on_a_node_gets_no_secret_and_its_own_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    env = ray_bridge.worker_env({"KSEARCH_WRITABLE": "/build"}, "/tmp/private")
    assert "OPENAI_API_KEY" not in env and "HF_TOKEN" not in env
    assert "RAY_ADDRESS" not in env, "candidate code is not told where the cluster is"
    assert env["LANG"] == "C.UTF-8" and env["KSEARCH_WRITABLE"] == "/build"
    assert all(env[k] == "/tmp/private" for k in ("TMPDIR", "TMP", "TEMP", "HOME"))


def test_only_a_successful_hello_carries_where_the_worker_runs() -> None:
    where = {"node": "n1", "pid": 7, "network_isolated": True}
    ok = json.dumps({"id": 1, "nonce": "x", "ok": True, "result": {"target": "cpu"}})
    assert json.loads(ray_bridge.with_remote(ok, where))["result"]["remote"] == where
    failed = json.dumps({"id": 1, "nonce": "x", "ok": False, "error": {"kind": "k", "message": "m"}})
    assert ray_bridge.with_remote(failed, where) == failed
    assert ray_bridge.with_remote("not json", where) == "not json"
