"""An OpenAI-compatible chat server for benchmarks: every reply comes after a fixed latency, as a slow LLM's
would, and is a valid candidate of the matmul task (the CPU seed's plan with other tunable defaults, a
different combination per request, so no reply repeats an evaluated candidate). Serves requests at once
(one thread each), as a provider does.

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

SEED_PLAN = Path(__file__).resolve().parents[1] / "tasks/matmul/seeds/cpu/naive/plan.toml"
# Tunable combinations in the order replies give them (the seed's own, all defaults, left out).
COMBOS = [dict(zip(("LOOP_ORDER", "MR", "UNROLL", "BN"), c, strict=True))
          for c in itertools.product((1, 0), (1, 2, 4, 8), (1, 2, 4, 8), (0, 64, 256))][1:]


def with_defaults(plan: str, values: dict[str, int]) -> str:
    for name, value in values.items():
        plan = re.sub(rf"(\[tunable\.{name}\][^\[]*?default = )\d+", rf"\g<1>{value}", plan, count=1)
    return plan


class Handler(BaseHTTPRequestHandler):
    latency_s = 3.0
    counter = itertools.count()
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        with Handler.lock:
            n = next(Handler.counter)
        time.sleep(Handler.latency_s)
        plan = with_defaults(SEED_PLAN.read_text(), COMBOS[n % len(COMBOS)])
        text = f"Other tunable defaults.\n\n### plan.toml\n```toml\n{plan}```\n"
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
