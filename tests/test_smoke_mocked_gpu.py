"""The environment check on GPUs this host lacks: the device probes are replaced (mocked), nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import smoke.device
from smoke.cli import main
from tests.test_smoke_helpers import cpu_manifest, host_torch_release, write_json

# A rocm6.1-style manifest (it fits the contract's model, as every manifest the suite reads must).
ROCM_MANIFEST: dict[str, Any] = cpu_manifest(
    target="rocm6.1-torch2.3",
    platform={"name": "rocm6.1", "kind": "rocm", "version": "6.1", "base_image": "rocm/dev-ubuntu-22.04:6.1"},
    gpu_arches=["gfx90a", "gfx942"],
    components={"imagebuild-kernels": {"included": True, "arches": ["gfx90a", "gfx942"], "experimental": []}},
    attention_backends={
        "gfx90a": ["flash", "efficient", "math"],
        "gfx942": ["flash", "efficient", "math"],
    },
    versions={"torch": host_torch_release(), "rocm": "6.1", "cuda": None, "python": "3.10"},
)


def fake_amd_gpu(monkeypatch: pytest.MonkeyPatch, arch: str, native: str | None, hip: str = "6.1.40093-bd8") -> None:
    monkeypatch.setattr(smoke.device, "cuda_available", lambda: True)
    monkeypatch.setattr(smoke.device, "gpu_arch", lambda index=0: arch)
    monkeypatch.setattr(smoke.device, "gpu_name", lambda index=0: "mocked AMD Instinct")
    monkeypatch.setattr(smoke.device, "torch_arch_list", lambda: ["gfx90a", "gfx942"])
    monkeypatch.setattr(smoke.device, "native_amd_arch", lambda: native)
    versions = {"torch": host_torch_release() + "+rocm6.1", "cuda": None, "hip": hip, "python": "3.10.12"}
    monkeypatch.setattr(smoke.device, "runtime_versions", lambda: dict(versions))


def run_env(tmp_path: Path, manifest: dict[str, Any], kernels: dict[str, Any] | None = None) -> tuple[int, dict]:
    mpath = write_json(tmp_path / "manifest.json", manifest)
    kpath = tmp_path / "kernels.json"
    if kernels is not None:
        write_json(kpath, kernels)
    report = tmp_path / "report.json"
    code = main(
        [
            "--only",
            "environment",
            "--manifest",
            str(mpath),
            "--kernels-json",
            str(kpath),
            "--report",
            str(report),
        ]
    )
    data = json.loads(report.read_text())
    return code, data["checks"][0]


def test_mocked_gpu_arch_mismatch_names_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_amd_gpu(monkeypatch, "gfx908:sramecc+:xnack-", native="gfx908")
    code, env = run_env(tmp_path, ROCM_MANIFEST)
    assert code == 1 and env["status"] == "failed"
    assert "gfx908:sramecc+:xnack-" in env["reason"] and "gfx90a, gfx942" in env["reason"]


def test_mocked_gpu_supported_arch_with_features_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_amd_gpu(monkeypatch, "gfx942:sramecc+:xnack-", native="gfx942")
    kernels = {"library": "/x/_C.so", "requested": ["gfx90a", "gfx942"], "code_objects": ["gfx90a", "gfx942"]}
    code, env = run_env(tmp_path, ROCM_MANIFEST, kernels)
    assert code == 0, env
    assert env["numbers"]["arch"] == "gfx942:sramecc+:xnack-" and env["numbers"]["kernels_json"] == kernels
    assert env["warnings"] == []


def test_mocked_gpu_kernels_without_code_object_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_amd_gpu(monkeypatch, "gfx942:sramecc+:xnack-", native="gfx942")
    kernels = {"library": "/x/_C.so", "requested": ["gfx90a", "gfx942"], "code_objects": ["gfx90a"]}
    code, env = run_env(tmp_path, ROCM_MANIFEST, kernels)
    assert code == 1 and "code objects for gfx90a, not for device arch gfx942" in env["reason"]


def test_mocked_gpu_override_while_native_supported_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_amd_gpu(monkeypatch, "gfx90a", native="gfx942")
    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "9.0.10")
    code, env = run_env(tmp_path, ROCM_MANIFEST)
    assert code == 0
    assert env["numbers"]["override_arch"] == "gfx90a"
    assert any("HSA_OVERRIDE_GFX_VERSION=9.0.10" in w and "gfx942" in w for w in env["warnings"])


def test_mocked_gpu_rocm_version_mismatch_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_amd_gpu(monkeypatch, "gfx90a", native="gfx90a", hip="6.2.41133-dd7f95766")
    code, env = run_env(tmp_path, ROCM_MANIFEST)
    assert code == 1 and "rocm version 6.2.41133-dd7f95766 does not equal the manifest's 6.1" in env["reason"]


def test_no_gpu_for_a_gpu_image_fails(tmp_path: Path) -> None:
    """Real probe on this CPU host: an image built for GPUs cannot pass its smoke without one."""
    python = cpu_manifest()["versions"]["python"]
    code, env = run_env(tmp_path, dict(ROCM_MANIFEST, versions={"torch": host_torch_release(), "python": python}))
    assert code == 1 and env["reason"] == "no GPU visible, but the image was built for gfx90a, gfx942"


def test_mocked_gpu_that_cannot_be_queried_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_amd_gpu(monkeypatch, "gfx90a", native="gfx90a")

    def broken(index: int = 0) -> str:
        raise RuntimeError("HIP error: hipErrorNoDevice")

    monkeypatch.setattr(smoke.device, "gpu_arch", broken)
    code, env = run_env(tmp_path, ROCM_MANIFEST)
    assert code == 1 and "could not be queried: RuntimeError: HIP error: hipErrorNoDevice" in env["reason"]
