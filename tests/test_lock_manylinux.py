"""The lock resolves wheels for the base's glibc, the tags the build's pip accepts (issue 31).

The first real build of cuda13.0-torch2.14 failed on a hash: under uv's manylinux_2_28 policy the lock recorded
llguidance 1.7.6's sdist (its only x86_64 wheel for cp311 is manylinux_2_31), and the image's pip, binary only and
offered every tag of bookworm's glibc 2.36 by image/cross/cross.py, took that wheel instead. A platform's `glibc`
now sets the lock's policy (manylinux_2_<minor>), so uv and pip choose among the same files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imagebuild.lock.inputs import MANYLINUX, uv_platform
from imagebuild.matrix import load_matrix

REPO = Path(__file__).resolve().parents[1]
_MANYLINUX_TAG = re.compile(r"manylinux_2_([0-9]+)_")
_LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}


def _lock() -> dict:
    return json.loads((REPO / "matrix.lock.json").read_text(encoding="utf-8"))


def _glibc_minor(filename: str) -> int:
    """The newest glibc minor a wheel's platform tags ask for (0 for a pure or non-manylinux wheel)."""
    platforms = filename[: -len(".whl")].split("-")[-1].split(".")
    found = [int(m.group(1)) for p in platforms if (m := _MANYLINUX_TAG.match(p + "_"))]
    found += [minor for p in platforms for legacy, minor in _LEGACY.items() if p.startswith(legacy + "_")]
    return min(found) if found else 0


def test_uv_platform_follows_the_base_glibc() -> None:
    assert MANYLINUX == "manylinux_2_28"
    assert uv_platform("linux/amd64") == "x86_64-manylinux_2_28"
    assert uv_platform("linux/amd64", "2.36") == "x86_64-manylinux_2_36"
    assert uv_platform("linux/arm64", "2.34") == "aarch64-manylinux_2_34"


def test_glibc_must_be_a_two_part_glibc_version() -> None:
    from imagebuild.matrix.models import Platform

    base = {"kind": "cpu", "base_image": "local/debian:bookworm", "python_version": "3.11"}
    assert Platform.model_validate({**base, "glibc": "2.36"}).glibc == "2.36"
    for bad in ("2.36; rm -rf /", "3.1", "2", "2.36.1", "２.36"):
        with pytest.raises(ValueError):
            Platform.model_validate({**base, "glibc": bad})


def test_wheel_glibc_reader() -> None:
    assert _glibc_minor("llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl") == 31
    assert _glibc_minor("x-1-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl") == 17
    assert _glibc_minor("x-1-py3-none-any.whl") == 0


def test_every_locked_wheel_runs_on_the_sets_policy() -> None:
    """Each pip set's platform is its target platform's policy, and no file it locks asks for a newer glibc."""
    matrix = load_matrix(REPO / "matrix.yaml")
    policy = {name: p.glibc for name, p in matrix.model.platforms.items()}
    checked = 0
    for key, entry in _lock()["inputs"].items():
        if not key.startswith("pip:") or "platform" not in entry.get("spec", {}):
            continue
        plat = entry["spec"]["platform"]
        minor = int(re.fullmatch(r"(x86_64|aarch64)-manylinux_2_([0-9]+)", plat).group(2))
        target = key.split(":")[1].split("@")[0]
        for name, glibc in policy.items():
            if target.startswith(name + "-") and glibc:
                assert minor == int(glibc.split(".")[1]), f"{key}: resolved for {plat}, the base has glibc {glibc}"
        for package in entry.get("packages", []):
            for file in package["files"]:
                if file["file"].endswith(".whl"):
                    assert _glibc_minor(file["file"]) <= minor, f"{key}: {file['file']} needs a newer glibc"
                    checked += 1
    assert checked > 400


@pytest.mark.parametrize("oci", ["linux/amd64", "linux/arm64"])
def test_vllm_stack_locks_wheels_only(oci: str) -> None:
    """The image installs every cuda13.0 set with --only-binary=:all:: an sdist in the lock can never install (the
    hash of whatever wheel pip picks instead cannot match)."""
    sets = {k: v for k, v in _lock()["inputs"].items() if k.startswith(f"pip:cuda13.0-torch2.14@{oci}:")}
    # cuda-compiler: nvcc of torch's CUDA release, for our kernels' compile stage (issue 31 item 2)
    assert {k.rsplit(":", 1)[1] for k in sets} == {"base", "torch", "runtime", "cuda-compiler"}
    sdists = [
        f["file"] for v in sets.values() for p in v["packages"] for f in p["files"] if not f["file"].endswith(".whl")
    ]
    assert sdists == []
    assert all(v["spec"]["platform"].endswith("manylinux_2_36") for v in sets.values())
