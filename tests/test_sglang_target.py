"""Issue 31 item 1: SGLang 0.5.23 as a second target on the CUDA 13 wheel stack, rendered and locked, a runtime kind of
its own (imagebuild/matrix/runtime_sglang.py). Its wheels are manylinux_2_34 only (the platform's glibc 2.36 admits
them) and it pins torch 2.14.1; its torch set is resolved beside sglang so that the later set fits it (alone, torch's
set took cuda-bindings 13.5.0, which sglang's cuda-python 13.4.4 refuses).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imagebuild.lock import lockfile
from imagebuild.lock.pipsets import name_of
from imagebuild.matrix import RUNTIME_KINDS, load_matrix
from imagebuild.matrix.runtime_sglang import SglangRuntime
from imagecontract.models import Manifest
from tests.test_smoke_helpers import checks_by_name, run_smoke

REPO = Path(__file__).resolve().parents[1]
TARGET = "cuda13.0-torch2.14.1-sglang"
FOLDER = REPO / "dockerfiles" / TARGET
PLATFORMS = ("linux/amd64", "linux/arm64")


@pytest.fixture(scope="module")
def lock() -> dict:
    return lockfile.read(REPO / "matrix.lock.json")[0]


def _sets(lock: dict, target: str, oci: str) -> dict[str, dict]:
    prefix = f"pip:{target}@{oci}:"
    return {k[len(prefix) :]: v for k, v in lock["inputs"].items() if k.startswith(prefix)}


def _pins(entry: dict) -> dict[str, str]:
    return {name_of(p["name"]): p["version"] for p in entry["packages"]}


def test_the_target_is_the_cuda13_stack_with_the_sglang_runtime() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    target = matrix.target(TARGET)
    assert target.platform_name == "cuda13.0" and target.torch.version == "2.14.1"
    assert target.runtime is not None and target.runtime.kind == "sglang"
    assert tuple(target.oci_platforms) == PLATFORMS
    # its kernels' 12.0a cubins do not run on sm_121: required, so a build for DGX Spark fails naming them
    assert "sglang-kernel:common_ops*" in target.coverage_required


@pytest.mark.parametrize("oci", PLATFORMS)
def test_locked_from_pypi_wheels_for_bookworms_glibc(lock: dict, oci: str) -> None:
    sets = _sets(lock, TARGET, oci)
    assert set(sets) == {"base", "torch", "runtime"}
    assert all(v["status"] == "locked" and v["spec"]["platform"].endswith("-manylinux_2_36") for v in sets.values())
    files = [f["file"] for v in sets.values() for p in v["packages"] for f in p["files"]]
    assert files and all(f.endswith(".whl") for f in files)
    machine = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[oci]
    sglang = [f for f in files if f.startswith("sglang-0.5.23-")]
    assert sglang == [f"sglang-0.5.23-cp311-cp311-manylinux_2_34_{machine}.whl"]
    torch, runtime = _pins(sets["torch"]), _pins(sets["runtime"])
    assert torch["torch"] == "2.14.1" and runtime["sglang"] == "0.5.23"
    assert not set(torch) & set(runtime), "a package of the torch set is installed again by the runtime set"
    # the torch set was resolved beside sglang: its cuda-bindings is the release line sglang's cuda-python needs
    assert sets["torch"]["spec"]["resolved_with"] == ["sglang==0.5.23"]
    assert re.match(r"13\.4\.", torch["cuda-bindings"]) and re.match(r"13\.4\.", runtime["cuda-python"])


def test_the_vllm_targets_torch_set_is_resolved_beside_vllm_and_unchanged_by_it(lock: dict) -> None:
    sets = _sets(lock, "cuda13.0-torch2.14", "linux/amd64")
    assert sets["torch"]["spec"]["resolved_with"] == ["vllm==0.33.0"]
    assert _pins(sets["torch"])["torch"] == "2.14.0"
    text = (REPO / "dockerfiles" / "cuda13.0-torch2.14" / "requirements" / "torch.txt").read_text()
    assert all(line in text for line in sets["torch"]["requirements"])


def test_the_manifests_name_the_sglang_runtime() -> None:
    for name, oci in (("manifest.json", "linux/amd64"), ("manifest.linux-arm64.json", "linux/arm64")):
        data = json.loads((FOLDER / name).read_text())
        assert Manifest.from_dict(data).to_dict() == data
        runtime = data["runtime"]
        assert runtime["kind"] == "sglang" and runtime["entrypoint"] == "sglang" and runtime["api"] == "openai"
        assert runtime["serve"][:4] == ["sglang", "serve", "--model-path", "{model}"] and "{port}" in runtime["serve"]
        assert data["platform"]["oci"] == oci and data["versions"]["torch"] == "2.14.1"


def _sglang(**fields) -> dict:
    base = {"kind": "sglang", "packages": ["sglang==0.5.23"], "serve": ["serve", "--model-path", "{model}"]}
    return {**base, **fields}


def test_the_sglang_kind_is_registered_and_checked() -> None:
    assert "sglang" in RUNTIME_KINDS
    runtime = SglangRuntime.model_validate(_sglang())
    assert runtime.entrypoint == "sglang" and runtime.api == "openai" and runtime.startup_timeout_s == 900
    for fields, why in [
        ({"requirements": "runtimes/x.txt", "packages": []}, "not a requirements file"),
        ({"packages": ["vllm==0.33.0"]}, "packages must pin sglang"),
        ({"serve": ["-m", "sglang.launch_server"]}, "serve must start with the `serve` subcommand"),
        ({"packages": ["sglang>=0.5"]}, "should match pattern"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)):
            SglangRuntime.model_validate(_sglang(**fields))


def test_the_serve_check_is_skipped_with_its_reason_on_a_cpu(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    report = tmp_path / "report.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(FOLDER / "manifest.json"),
        "--only",
        "runtime",
        "--report",
        str(report),
        env={"IMAGEBUILD_SMOKE_MODEL": str(model)},
    )
    check = checks_by_name(report)["runtime"]
    assert check["status"] == "skipped", (proc.stdout, proc.stderr, check)
    assert "serves on the image's GPU and none is usable" in check["reason"]
    assert check["numbers"]["kind"] == "sglang"
