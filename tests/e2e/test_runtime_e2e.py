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
    assert argv[:2] == ["python3", "/opt/imagebuild/imagecontract/serve_guard.py"] and "{port}" not in argv
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
