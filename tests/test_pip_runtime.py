"""The `kind: pip` runtime of local-cpu: a pinned, hashed requirements file, a wheel stage, the manifest section."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNTIME = REPO / "runtimes" / "transformers-serve"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+) --hash=sha256:[0-9a-f]{64}$")


def _stages(dockerfile: str) -> dict[str, str]:
    parts = re.split(r"^FROM \S+ AS (\S+)\n", dockerfile, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_requirements_pin_every_package_by_version_and_hash_and_never_torch() -> None:
    lines = [line for line in (RUNTIME / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    names = []
    for line in lines:
        match = PIN.match(line)
        assert match, f"not pinned by version and hash: {line!r}"
        names.append(match.group(1).lower().replace("_", "-"))
    assert "torch" not in names and not any(n.startswith("nvidia-") for n in names), "the image's torch is kept"
    assert len(names) == len(set(names))
    wanted = re.search(r"^transformers\[serving\]==(\S+)$", (RUNTIME / "requirements.in").read_text(), flags=re.M)
    assert wanted and f"transformers=={wanted.group(1)} --hash" in "\n".join(lines)
    for extra in ("fastapi", "uvicorn", "tokenizers", "safetensors"):  # what `transformers serve` imports
        assert extra in names, extra
    assert (RUNTIME / "constraints.txt").read_text().splitlines()[-1] == "torch==2.13.0"


def test_local_cpu_places_the_runtime_from_hashed_wheels_on_top_of_the_images_torch() -> None:
    """One Dockerfile for both platforms (issue 22): each platform's venv stage starts from its torch stage and places
    that platform's hashed pins, no dependency resolved and no source build, so nothing replaces the image's torch."""
    stages = _stages((REPO / "dockerfiles" / "local-cpu" / "Dockerfile").read_text())
    for arch, pins in (("amd64", "requirements.txt"), ("arm64", "requirements.linux-arm64.txt")):
        venv = stages[f"venv-{arch}"]
        assert f"COPY runtimes/transformers-serve/{pins} /src/runtime-pip/requirements.txt" in venv
        assert re.search(
            r"pip install --target /tmp/site --only-binary=:all: --no-compile --no-deps --require-hashes "
            r"-r /src/runtime-pip/requirements\.txt",
            venv,
        ), arch
        assert (RUNTIME / pins).is_file()
    assert re.search(
        r"^FROM torch-amd64 AS venv-amd64$", (REPO / "dockerfiles" / "local-cpu" / "Dockerfile").read_text(), re.M
    )
    assert "FROM venv-${TARGETARCH} AS venv" in (REPO / "dockerfiles" / "local-cpu" / "Dockerfile").read_text()


def test_local_cpu_manifest_says_how_to_serve() -> None:
    runtime = json.loads((REPO / "dockerfiles" / "local-cpu" / "manifest.json").read_text())["runtime"]
    assert runtime["kind"] == "pip" and runtime["api"] == "openai" and runtime["health"] == "/health"
    # The guard in front (issue 21: transformers serve has no limits of its own), the runtime behind it
    guard, own = runtime["serve"][: runtime["serve"].index("--")], runtime["serve"][runtime["serve"].index("--") + 1 :]
    assert guard[:2] == ["python3", "/opt/imagebuild/smoke/serve_guard.py"] and "{port}" in guard
    limits = runtime["limits"]
    assert guard[guard.index("--max-new-tokens") + 1] == str(limits["max_new_tokens"])
    assert guard[guard.index("--max-request-bytes") + 1] == str(limits["max_request_bytes"])
    assert guard[guard.index("--max-concurrency") + 1] == str(limits["max_concurrency"])
    assert own[:2] == ["transformers", "serve"] and runtime["entrypoint"] == "transformers"
    assert "{model}" in own and "{upstream_port}" in own and "{port}" not in own
    assert own[own.index("--host") + 1] == "127.0.0.1" and guard[guard.index("--host") + 1] == "127.0.0.1"
    assert runtime["serve_env"]["HF_HUB_OFFLINE"] == "1" and runtime["attention"] == {}
    assert (REPO / runtime["requirements"]).is_file()
