"""Helpers for the smoke-suite tests (no tests here): manifests matching this host, running ``python -m smoke``."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]


def host_torch_release() -> str:
    match = re.match(r"\d+\.\d+\.\d+", torch.__version__)
    assert match, torch.__version__
    return match.group(0)


def cpu_manifest(**overrides: Any) -> dict[str, Any]:
    """A local-cpu style manifest (docs/contracts.md) whose versions are this host's."""
    data: dict[str, Any] = {
        "schema_version": 1,
        "target": "local-cpu",
        "platform": {"name": "cpu", "kind": "cpu", "version": None, "base_image": "local/debian:bookworm"},
        "torch": {"version": host_torch_release(), "obtained": "wheel", "patches": []},
        "gpu_arches": [],
        "experimental_arches": [],
        "components": {
            "imagebuild-kernels": {"included": False, "arches": [], "experimental": [], "reason": "test"},
        },
        "attention_backends": {"cpu": ["math"]},
        "runtime": None,
        "tunableop": {"enabled": False, "tuning": False, "filename": "/data/tunableop/tunableop_results%d.csv"},
        "versions": {
            "torch": host_torch_release(),
            "rocm": None,
            "cuda": None,
            "python": ".".join(platform.python_version_tuple()[:2]),
        },
    }
    data.update(overrides)
    return data


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run_smoke(
    tmp: Path,
    *args: str,
    sitecustomize: str | None = None,
    env: dict[str, str] | None = None,
    extra_paths: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m smoke`` from the repo root; ``sitecustomize``: code run at start (to break torch)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("IMAGEBUILD_MANIFEST", "PYTHONPATH")}
    paths = [str(REPO), *extra_paths]
    if sitecustomize is not None:
        site = tmp / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(textwrap.dedent(sitecustomize), encoding="utf-8")
        paths.insert(0, str(site))
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "smoke", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def checks_by_name(report_path: Path) -> dict[str, dict[str, Any]]:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    return {c["name"]: c for c in report["checks"]}


# Blocks any installed imagebuild_kernels so a test decides which ops exist.
NO_KERNELS = "import sys\nsys.modules['imagebuild_kernels'] = None\n"

# Registers plain-torch versions of the image's ops (the contract of kernels/), optionally broken.
REFERENCE_OPS = (
    NO_KERNELS
    + """
import torch
BROKEN = {broken!r}
lib = torch.library.Library("imagebuild", "DEF")
lib.define("silu_and_mul(Tensor x) -> Tensor")
lib.define("skinny_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")

def silu_and_mul(x):
    d = x.shape[-1] // 2
    a, b = x[..., :d].float(), x[..., d:].float()
    out = (a / (1 + torch.exp(-a)) * b).to(x.dtype)
    if BROKEN == "silu_and_mul_tail" and d > 1:
        out[..., -1] = 0
    return out

def skinny_linear(x, weight, bias):
    out = x.float() @ weight.float().t()
    if bias is not None and BROKEN != "skinny_linear_bias":
        out = out + bias.float()
    return out.to(x.dtype)

lib.impl("silu_and_mul", silu_and_mul, "CPU")
lib.impl("skinny_linear", skinny_linear, "CPU")
"""
)
