"""The real serving runtime of the local-cpu image (transformers serve), started by the smoke ``runtime`` check
inside the container: a tiny model made there, a generate round trip over HTTP, timings in the report; and the
same check failing, with the server's log, when the real server cannot load its model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import docker

pytestmark = [pytest.mark.docker]


def test_local_cpu_runtime_serves_a_generate_request(smoked_local_cpu: tuple[Any, Path]) -> None:
    _built, report_path = smoked_local_cpu
    report = json.loads(report_path.read_text())
    runtime = {check["name"]: check for check in report["checks"]}["runtime"]
    assert runtime["status"] == "passed", runtime
    numbers = runtime["numbers"]
    assert numbers["runtime"] == "transformers-serve" and numbers["kind"] == "pip" and numbers["api"] == "openai"
    argv = numbers["argv"]  # the guard in front, transformers serve behind it (issue 21)
    assert argv[:2] == ["python3", "/opt/imagebuild/smoke/serve_guard.py"] and "{port}" not in argv
    assert argv[argv.index("--") + 1 : argv.index("--") + 3] == ["transformers", "serve"]
    hostile = numbers["hostile"]
    assert all(400 <= code < 500 for name, code in hostile.items() if not name.endswith("_s") and "_s_" not in name)
    assert hostile["oversize-body"] == 413 and hostile["recovery_s_max"] < 10, hostile
    assert numbers["chat_sample"] and numbers["chat_stream_sample"]
    assert numbers["completion_tokens"] == 32 and numbers["completion_sample"]
    assert runtime["latency"]["server_start_s"] > 0 and runtime["latency"]["ttft_s"] > 0
    assert runtime["throughput"]["tokens_per_s"] > 0
    assert report["versions"]["torch"] == "2.13.0+cpu", "installing the runtime replaced the image's torch"


def test_local_cpu_runtime_that_cannot_load_its_model_fails_with_the_server_log(local_cpu: Any, tmp_path: Path) -> None:
    """IMAGEBUILD_SMOKE_MODEL at an empty directory: the real server exits, the check names it and its log."""
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    proc = docker(
        "run",
        "--rm",
        "--network",
        "host",
        "-e",
        "IMAGEBUILD_SMOKE_MODEL=/tmp",
        "-v",
        f"{out}:/out",
        "--entrypoint",
        "python3",
        local_cpu.image_id,
        "-m",
        "smoke",
        "--only",
        "runtime",
        "--report",
        "/out/report.json",
        check=False,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    check = json.loads((out / "report.json").read_text())["checks"][0]
    assert check["name"] == "runtime" and check["status"] == "failed", check
    assert "before /health answered" in check["reason"] and "server log ends:" in check["reason"]
    assert check["numbers"]["server_log_tail"], check["numbers"]


def test_local_cpu_guard_answers_eight_concurrent_openai_clients_and_404s_another_model(local_cpu: Any) -> None:
    """Issue 34's done-when: the official OpenAI client with its default settings (2 retries, 600 s) gets 8 of 8
    concurrent chat completions answered by the image's own serve command (the guard, max_concurrency 4, in
    front of transformers serve), and a 404 `model_not_found` for another model. The old guard answered the
    fifth at once with a 429 without Retry-After, and the client's retries failed 3 of 8."""
    import concurrent.futures
    import shlex
    import socket
    import time
    import urllib.request
    import uuid

    openai = pytest.importorskip("openai")
    manifest = json.loads(docker("run", "--rm", "--network", "none", "--entrypoint", "cat", local_cpu.image_id,
                                 "/opt/imagebuild/manifest.json").stdout)  # fmt: skip
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = "/tmp/tiny-model"
    argv = [a.replace("{model}", model).replace("{port}", str(port)) for a in manifest["runtime"]["serve"]]
    env = {**manifest["runtime"].get("serve_env", {}), "PYTHONPATH": "/opt/imagebuild", "HF_HUB_OFFLINE": "1"}
    name = f"imagebuild-e2e-guard-{uuid.uuid4().hex[:8]}"
    script = f"python3 -m smoke.tiny_model {model} && exec {shlex.join(argv)}"
    flags = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    docker("run", "-d", "--name", name, "--network", "host", *flags, "-w", "/opt/imagebuild", "--entrypoint", "sh",
           local_cpu.image_id, "-c", script)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            state = docker("inspect", "--format", "{{.State.Running}}", name, check=False).stdout.strip()
            assert state == "true" and time.monotonic() < deadline, docker("logs", name, check=False).stderr[-3000:]
            time.sleep(1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")

        def ask(i: int) -> int:
            messages = [{"role": "user", "content": f"count to {i}"}]
            answer = client.chat.completions.create(model=model, messages=messages, max_tokens=64)
            assert answer.choices[0].message.content, answer
            return answer.usage.completion_tokens if answer.usage else 0

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            tokens = list(pool.map(ask, range(8)))
        assert len(tokens) == 8 and all(t > 0 for t in tokens), tokens
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "model_not_found"
        assert [m.id for m in client.models.list()] == [model]
    finally:
        docker("rm", "-f", "-v", name, check=False)
