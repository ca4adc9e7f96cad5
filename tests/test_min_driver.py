"""The matrix field platforms.<p>.min_driver end to end (issue 20): matrix -> plan manifest -> the image's
manifest.json -> the smoke environment check, which fails on an older kernel driver (files under a fake root)."""

from __future__ import annotations

import json
from pathlib import Path

from imagebuild.matrix import load_matrix
from imagebuild.plan.target_plan import plan_for
from smoke.checks.environment import check_driver, driver_version
from smoke.result import CheckResult

REPO = Path(__file__).resolve().parents[1]
NVIDIA = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder@U16)\n"


def _root(tmp_path: Path, nvidia: str | None = None, amdgpu: str | None = None) -> str:
    if nvidia is not None:
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text(nvidia)
    if amdgpu is not None:
        (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
        (tmp_path / "sys/module/amdgpu/version").write_text(amdgpu)
    return str(tmp_path)


def test_the_field_reaches_the_manifest_the_image_reads() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    cuda = plan_for(matrix, matrix.target("cuda12.1-torch2.3"))
    assert cuda.document.platform.min_driver == "525" == cuda.manifest["platform"]["min_driver"]
    committed = json.loads((REPO / "dockerfiles/cuda12.1-torch2.3/manifest.json").read_text())
    assert committed["platform"]["min_driver"] == "525"
    rocm = plan_for(matrix, matrix.target("rocm6.1-torch2.3"))
    assert "min_driver" not in rocm.manifest["platform"]  # unset: not written, not checked


def test_the_loaded_driver_version_is_read_per_vendor(tmp_path: Path) -> None:
    root = _root(tmp_path, nvidia=NVIDIA, amdgpu="6.7.0\n")
    assert driver_version("nvidia", root) == "550.54.14"
    assert driver_version("amd", root) == "6.7.0"
    assert driver_version("cpu", root) is None
    assert driver_version("nvidia", str(tmp_path / "none")) is None
    legacy = _root(
        tmp_path / "legacy", nvidia="NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.57.02  Tue Jul 13\n"
    )
    assert driver_version("nvidia", legacy) == "470.57.02"


def test_an_older_driver_fails_the_environment_check(tmp_path: Path) -> None:
    old = CheckResult("environment")
    check_driver("525", "nvidia", old, _root(tmp_path / "old", nvidia=NVIDIA.replace("550.54.14", "470.57.02")))
    assert old.finish().status == "failed" and "driver 470.57.02 is older than 525" in (old.reason or "")
    new = CheckResult("environment")
    check_driver("525", "nvidia", new, _root(tmp_path / "new", nvidia=NVIDIA))
    assert new.finish().status == "passed" and new.numbers["driver_version"] == "550.54.14"
    unread = CheckResult("environment")
    check_driver("525", "nvidia", unread, str(tmp_path / "nothing"))
    assert unread.finish().status == "passed" and "not checked" in unread.warnings[0]
    unset = CheckResult("environment")
    check_driver(None, "nvidia", unset, str(tmp_path / "nothing"))
    assert unset.numbers == {} and unset.warnings == []
