"""Capture the llama-server response bodies of tests/data/import/llama_server_raw.

    flock /tmp/crossbench-cpu.lock python tests/data/import/capture_llama_server_raw.py OUT_DIR

Starts crossbench's CPU llama-server (default pin) with the fixture pair three times
(baseline, draft-simple n=2, n=4) and sends three built-in prompts twice each, greedy, 16
tokens, ignore_eos, no prompt cache: code-01 and math-01 to the native /completion (with
return_tokens, so the bodies carry token ids), creative-01 to /v1/completions. Files are
named {model}_{arm}_t{trial}_p{prompt}.json with model "tiny".
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from crossbench.engines.llamacpp.build import install
from crossbench.fixtures.resolve import ensure_fixtures
from crossbench.load.workloads import load_workload

PROMPTS = ("code-01", "math-01", "creative-01")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(out: Path) -> None:
    binary = install().binary()
    target, draft = ensure_fixtures("tiny", 0)
    prompts = [p for p in load_workload("builtin:mixed").prompts if p.id in PROMPTS]
    spec = ["--spec-type", "draft-simple", "--spec-draft-model", str(draft),
            "--spec-draft-n-max"]
    arms = {"baseline": [], "draft-n2": [*spec, "2"], "draft-n4": [*spec, "4"]}
    out.mkdir(parents=True, exist_ok=True)
    for arm, extra in arms.items():
        port = free_port()
        proc = subprocess.Popen([str(binary), "--model", str(target), "--host", "127.0.0.1",
                                 "--port", str(port), "--ctx-size", "1024", "--parallel", "1",
                                 "--metrics", "--no-webui", *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            for trial in range(2):
                for p in prompts:
                    common = {"prompt": p.text, "temperature": 0, "cache_prompt": False,
                              "ignore_eos": True, "seed": 0}
                    if p.id == "creative-01":
                        url, body = "/v1/completions", {**common, "max_tokens": 16}
                    else:
                        url, body = "/completion", {**common, "n_predict": 16,
                                                    "return_tokens": True}
                    req = urllib.request.Request(f"http://127.0.0.1:{port}{url}",
                                                 json.dumps(body).encode(),
                                                 {"Content-Type": "application/json"})
                    data = urllib.request.urlopen(req, timeout=60).read()
                    (out / f"tiny_{arm}_t{trial}_p{p.id}.json").write_bytes(data)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
