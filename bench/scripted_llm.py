"""An OpenAI-compatible chat server for benchmarks: every reply comes after a fixed latency, as a slow LLM's
would. A request for code gets a valid candidate of the matmul task (the CPU seed's plan with other tunable
defaults, a different combination per request, so no reply repeats an evaluated candidate); the world
model's first request gets the tests' initial tree (tests/fixtures/llm/matmul/init.json), and each tree
edit a note on the node and one new action under it (as many as a propose edit asks for, within its cap). Serves requests at once (one thread each), as a
provider does.

    python3 bench/scripted_llm.py --latency 3 --port 0   # prints the URL, then serves until killed
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED_PLAN = ROOT / "tasks/matmul/seeds/cpu/naive/plan.toml"
INIT_TREE = ROOT / "tests/fixtures/llm/matmul/init.json"
# Tunable combinations in the order replies give them: the plan's constraint holds (MR > 1 needs the i-k-j
# order), and the seed's own (all defaults) is left out.
COMBOS = [c for c in (dict(zip(("LOOP_ORDER", "MR", "UNROLL", "BN"), v, strict=True))
                      for v in itertools.product((1, 0), (1, 2, 4, 8), (1, 2, 4, 8), (0, 64, 256)))
          if (c["LOOP_ORDER"] == 1 or c["MR"] == 1) and c != {"LOOP_ORDER": 0, "MR": 1, "UNROLL": 1, "BN": 0}]


def with_defaults(plan: str, values: dict[str, int]) -> str:
    """The plan with each named tunable's `default = N` line set to its value."""
    out, section = [], None
    for line in plan.splitlines(keepends=True):
        header = re.match(r"\[tunable\.(\w+)\]", line)
        if header:
            section = header.group(1)
        elif line.startswith("["):
            section = None
        if section in values and line.startswith("default = "):
            line = f"default = {values[section]}\n"
        out.append(line)
    return "".join(out)


def reply(prompt: str, n: int) -> str:
    """The reply to the n-th request, by what its prompt asks."""
    if "Before any code is written" in prompt:
        return INIT_TREE.read_text()
    if "You maintain the world model" in prompt:
        node = re.search(r"The action of node `([^`]+)`", prompt)
        parent = node.group(1) if node else "root"
        ops: list[dict[str, object]] = []
        if node:
            ops.append({"op": "update_node", "node_id": parent, "patch": {
                "notes": "CURRENT: measured.", "overall_rating_0_to_10": 6, "confidence_0_to_1": 0.6}})
        # As many new actions as the edit asks for (cycles starting together), within its cap on new nodes.
        wanted = re.search(r"\(at least (\d+) open actions in all\)", prompt)
        cap = re.search(r"at most (\d+) new nodes", prompt)
        count = min(int(wanted.group(1)), int(cap.group(1)) if cap else 3) if wanted else 1
        for i in range(count):
            ops.append({"op": "insert_node", "parent_id": parent, "node": {
                "node_id": f"v{n}_{i}", "decision": "other tunables", "choice": f"variant {n}.{i}",
                "action": {"title": f"Try variant {n}.{i} of the tunables", "description": "Other tile and block sizes.",
                           "difficulty_1_to_5": 2, "score_0_to_1": 0.6}}})
        return "```json\n" + json.dumps({"ops": ops}) + "\n```"
    plan = with_defaults(SEED_PLAN.read_text(), COMBOS[n % len(COMBOS)])
    return f"Other tunable defaults.\n\n### plan.toml\n```toml\n{plan}```\n"


class Handler(BaseHTTPRequestHandler):
    latency_s = 3.0
    counter = itertools.count()
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        users = [m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"]
        with Handler.lock:
            n = next(Handler.counter)
        time.sleep(Handler.latency_s)
        text = reply(users[0] if users else "", n)
        body = json.dumps({
            "id": f"b{n}", "object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 300, "total_tokens": 1300},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=3.0)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    Handler.latency_s = args.latency
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
