"""The smoke ``runtime`` check against stand-in servers: small Python HTTP servers run as real processes.

The stand-ins play the parts a real runtime can get wrong (never starting, never healthy, answering without
tokens, TGI with flash attention disabled), so each failure path of the check runs for real: process start,
health polling, HTTP requests, process-group kill. The real runtime is served in the local-cpu image
(tests/e2e/test_runtime_e2e.py). IMAGEBUILD_SMOKE_MODEL points the check at an empty directory: the stand-ins
load nothing, and this host has no transformers to make the tiny model with.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.test_smoke_helpers import checks_by_name, cpu_manifest, run_smoke, write_json

STANDIN = textwrap.dedent(
    """
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    mode, port, pidfile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    open(pidfile, "w").write(str(os.getpid()))
    if mode == "crash":
        print("stand-in: CUDA error: no kernel image is available", flush=True)
        sys.exit(3)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health" and mode != "never-healthy":
                self._send(200, {"status": "ok"})
            else:
                self._send(503, {"status": "loading"})

        def _sse(self, events):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for event in events:
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\\n\\n")
                self.wfile.flush()

        def do_POST(self):
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(0.01)
            try:
                body = json.loads(raw)
                assert isinstance(body, dict)
            except (ValueError, AssertionError):
                return self._send(400 if mode != "naive" else 500, {"error": "not a JSON object"})
            need = {"/v1/completions": "prompt", "/v1/chat/completions": "messages", "/generate": "inputs"}
            limit = body.get("max_tokens", body.get("parameters", {}).get("max_new_tokens", 1))
            if need.get(self.path, "") not in body or not 1 <= limit <= 64:
                return self._send(400 if mode != "naive" else 500, {"error": "refused"})
            if self.path == "/v1/chat/completions":
                n = body["max_tokens"]
                if body.get("stream"):
                    return self._sse([{"choices": [{"index": 0, "delta": {"content": " tok"}}]}] * n)
                message = {"role": "assistant", "content": " tok" * n}
                self._send(200, {"choices": [{"index": 0, "message": message}], "usage": {"completion_tokens": n}})
            elif self.path == "/v1/completions":
                n = 0 if mode == "no-tokens" else body["max_tokens"]
                text = "" if mode == "no-tokens" else " tok" * n
                usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
                self._send(200, {"choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage})
            elif self.path == "/generate":
                n = body["parameters"]["max_new_tokens"]
                self._send(200, {"generated_text": " tok" * n, "details": {"generated_tokens": n}})
            else:
                self._send(404, {"error": self.path})

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)

# A stand-in TGI server package: its registry disabled flash attention because flash_attn_2_cuda is missing.
STANDIN_TGI_PACKAGE = {
    "text_generation_server/__init__.py": "",
    "text_generation_server/models/__init__.py": "FLASH_ATTENTION = False\n",
    "text_generation_server/utils/__init__.py": "",
    "text_generation_server/utils/flash_attn.py": "import flash_attn_2_cuda  # noqa: F401\n",
    "text_generation_server/utils/paged_attention.py": "",
}


def _runtime(tmp_path: Path, mode: str, **fields: Any) -> dict[str, Any]:
    script = tmp_path / "standin_server.py"
    script.write_text(STANDIN, encoding="utf-8")
    runtime: dict[str, Any] = {
        "name": f"standin-{mode}",
        "kind": "pip",
        "entrypoint": sys.executable,
        "serve": [sys.executable, str(script), mode, "{port}", str(tmp_path / "server.pid")],
        "serve_env": {},
        "health": "/health",
        "api": "openai",
        "startup_timeout_s": 60,
        "attention": {},
    }
    runtime.update(fields)
    return runtime


def _run_check(tmp_path: Path, runtime: dict[str, Any], *args: str, extra_paths: tuple[str, ...] = ()):
    manifest = write_json(tmp_path / "manifest.json", cpu_manifest(runtime=runtime))
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    report = tmp_path / "report.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--only",
        "runtime",
        "--report",
        str(report),
        *args,
        env={"IMAGEBUILD_SMOKE_MODEL": str(model)},
        extra_paths=extra_paths,
    )
    return proc, checks_by_name(report)["runtime"]


def _assert_server_gone(tmp_path: Path) -> None:
    pid = int((tmp_path / "server.pid").read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the stand-in server (pid {pid}) still runs after the check")


def test_standin_server_that_generates_passes_with_timings_and_baseline(tmp_path: Path) -> None:
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "ok"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert check["status"] == "passed", check
    assert check["numbers"]["completion_tokens"] == 32 and check["numbers"]["completion_sample"].startswith(" tok")
    assert check["latency"]["server_start_s"] > 0 and check["latency"]["ttft_s"] >= 0.01
    assert check["throughput"]["tokens_per_s"] > 0
    _assert_server_gone(tmp_path)

    # The same numbers against a baseline that was much faster: a latency rise fails the check.
    fast = {"name": "runtime", "status": "passed", "throughput": {}, "latency": {"ttft_s": 1e-6}}
    base = write_json(tmp_path / "base.json", {"schema_version": 1, "passed": True, "arch": "cpu", "checks": [fast]})
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "ok"), "--baseline", str(base))
    assert proc.returncode == 1 and check["status"] == "failed", check
    assert "latency regression: ttft_s" in check["reason"]


def test_standin_server_that_answers_hostile_requests_with_500_fails_naming_each(tmp_path: Path) -> None:
    """A server that generates but answers malformed or out-of-range requests with 500 (transformers serve
    before the guard, issue 21) fails the hostile part, one line per case; the stand-in that refuses with 400
    passes it (above) and its report holds each case's status."""
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "naive"))
    assert proc.returncode == 1 and check["status"] == "failed", check
    for case in ("malformed-json", "missing-messages", "negative-max-tokens", "huge-max-tokens"):
        assert f"hostile client: {case}: answered 500" in check["reason"], check["reason"]
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "ok", limits=None))
    hostile = check["numbers"]["hostile"]
    assert {k: v for k, v in hostile.items() if isinstance(v, int)} == {
        "malformed-json": 400,
        "not-an-object": 400,
        "missing-prompt": 400,
        "missing-messages": 400,
        "negative-max-tokens": 400,
        "huge-max-tokens": 400,
        "huge-max-tokens-chat": 400,
    }
    assert check["numbers"]["chat_sample"].startswith(" tok") and check["numbers"]["chat_stream_sample"]
    assert hostile["recovery_s_max"] < 10 and hostile["disconnect_mid_stream_s"] < 10


def test_standin_server_that_does_not_start_fails_with_its_log(tmp_path: Path) -> None:
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "crash"))
    assert proc.returncode == 1 and check["status"] == "failed", check
    assert "exited with code 3 before /health answered" in check["reason"]
    assert "no kernel image is available" in check["reason"]  # the log's last line is in the reason
    assert check["numbers"]["server_exit_code"] == 3


def test_standin_server_never_healthy_times_out_and_is_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "never-healthy", startup_timeout_s=2))
    assert proc.returncode == 1 and check["status"] == "failed", check
    assert "/health did not answer 200 within 2 s" in check["reason"]
    assert time.monotonic() - started < 60
    _assert_server_gone(tmp_path)


def test_standin_server_that_returns_no_tokens_fails(tmp_path: Path) -> None:
    proc, check = _run_check(tmp_path, _runtime(tmp_path, "no-tokens"))
    assert proc.returncode == 1 and check["status"] == "failed", check
    assert "answered without tokens (token count 0)" in check["reason"]
    _assert_server_gone(tmp_path)


def test_standin_server_entrypoint_missing_fails(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, "ok", serve=["text-generation-launcher-not-installed", "--port", "{port}"])
    proc, check = _run_check(tmp_path, runtime)
    assert proc.returncode == 1 and "'text-generation-launcher-not-installed' is not on PATH" in check["reason"]


def test_standin_server_tgi_with_promised_flash_attention_disabled_fails_by_name(tmp_path: Path) -> None:
    package = tmp_path / "standin_tgi"
    for rel, text in STANDIN_TGI_PACKAGE.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text, encoding="utf-8")
    runtime = _runtime(tmp_path, "ok", kind="tgi", api="tgi", attention={"cpu": {"flash": True, "paged": True}})
    proc, check = _run_check(tmp_path, runtime, extra_paths=(str(package),))
    assert proc.returncode == 1 and check["status"] == "failed", check
    assert "flash attention promised for cpu but TGI disabled it" in check["reason"]
    assert "flash_attn_2_cuda" in check["reason"]
    assert "paged" not in check["reason"]  # paged attention imports fine in the stand-in: that promise holds
    # The server itself served: the attention failure is reported on its own, by name.
    assert check["numbers"]["completion_tokens"] == 32, check["numbers"]
    assert json.dumps(check["numbers"]["argv"]).count("{port}") == 0
