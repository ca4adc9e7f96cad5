"""The smoke suite judges a GPU by the one arch rule the preflight uses (imagecontract.targets.covers/runs_on).

Issues 32 (item 3) and 34: the environment check matched NVIDIA arches exactly (an A10, sm_86, failed the smoke
of an sm_80 image the preflight let start) and judged torch's own arch list by a rule of its own. Tests named
`..._simulated_gpu` replace the device probes (this host has no GPU); everything else is the real suite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import smoke.device
from imagecontract import preflight
from smoke import tgi_attention
from smoke.cli import main
from smoke.context import Context
from smoke.device import DeviceInfo
from smoke.manifest import Manifest as SmokeManifest
from smoke.manifest import load
from smoke.ops import op_applies
from tests.test_smoke_helpers import cpu_manifest, host_torch_release, write_json


def cuda_manifest(arches: list[str], **overrides: Any) -> dict[str, Any]:
    """A cuda-style manifest built for `arches` (each with its attention backends and TGI promises)."""
    data = cpu_manifest(
        target="cuda12.8-torch2.7",
        platform={"name": "cuda12.8", "kind": "cuda", "version": "12.8", "base_image": "nvidia/cuda:12.8"},
        gpu_arches=arches,
        components={"imagebuild-kernels": {"included": True, "arches": arches, "experimental": []}},
        attention_backends={a: ["flash", "efficient", "math"] for a in arches},
        versions={"torch": host_torch_release(), "rocm": None, "cuda": "12.8", "python": "3.10"},
    )
    return {**data, **overrides}


def fake_nvidia_gpu(monkeypatch: pytest.MonkeyPatch, arch: str, torch_arches: list[str]) -> None:
    monkeypatch.setattr(smoke.device, "cuda_available", lambda: True)
    monkeypatch.setattr(smoke.device, "gpu_arch", lambda index=0: arch)
    monkeypatch.setattr(smoke.device, "gpu_name", lambda index=0: "simulated NVIDIA GPU")
    monkeypatch.setattr(smoke.device, "torch_arch_list", lambda: list(torch_arches))
    monkeypatch.setattr(smoke.device, "native_amd_arch", lambda: None)
    versions = {"torch": host_torch_release() + "+cu128", "cuda": "12.8", "hip": None, "python": "3.10.12"}
    monkeypatch.setattr(smoke.device, "runtime_versions", lambda: dict(versions))


def fake_amd_gpu(monkeypatch: pytest.MonkeyPatch, arch: str) -> None:
    fake_nvidia_gpu(monkeypatch, arch, [arch.split(":")[0]])
    monkeypatch.setattr(smoke.device, "native_amd_arch", lambda: arch.split(":")[0])
    versions = {"torch": host_torch_release() + "+rocm6.1", "cuda": None, "hip": "6.1.40093-bd8", "python": "3.10.1"}
    monkeypatch.setattr(smoke.device, "runtime_versions", lambda: dict(versions))


def run_env(tmp_path: Path, manifest: dict[str, Any], kernels: dict[str, Any] | None = None) -> tuple[int, dict]:
    mpath = write_json(tmp_path / "manifest.json", manifest)
    kpath = tmp_path / "kernels.json"
    if kernels is not None:
        write_json(kpath, kernels)
    report = tmp_path / "report.json"
    args = ["--only", "environment", "--manifest", str(mpath), "--kernels-json", str(kpath), "--report", str(report)]
    code = main(args)
    return code, json.loads(report.read_text())["checks"][0]


# (image arches, device, passes, how the image's code runs there): CUDA's rule (cuda_fatbin.cuda_cell)
CUDA_CASES = [
    (["sm_80"], "sm_86", True, ("sm_80", "cubin compatible")),  # an A10 on an A100 image
    (["sm_80", "sm_90"], "sm_89", True, ("sm_80", "cubin compatible")),  # an L4/L40S
    (["sm_90a"], "sm_100", False, None),  # an `a` cubin runs on its own compute capability only
    (["sm_90"], "sm_100", False, None),  # another major
    (["sm_90+PTX"], "sm_100", True, ("sm_90+PTX", "ptx-jit")),  # PTX JIT-compiles forward
    (["sm_100f"], "sm_103", True, ("sm_100f", "family")),  # a family cubin runs within its family
    (["sm_100f"], "sm_110", False, None),  # ... and not beyond it
    (["sm_80"], "sm_75", False, None),  # never backwards
]


@pytest.mark.parametrize(("arches", "device", "ok", "how"), CUDA_CASES)
def test_environment_judges_a_cuda_gpu_by_the_one_rule_simulated_gpu(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arches: list[str],
    device: str,
    ok: bool,
    how: tuple[str, str] | None,
) -> None:
    fake_nvidia_gpu(monkeypatch, device, torch_arches=["sm_80", "sm_90", "sm_100", "compute_100"])
    # kernels.json as the build's verifier writes it: cubins as code objects, PTX apart (compute_90)
    cubins = [a.removesuffix("+PTX") for a in arches]
    ptx = ["compute_" + a[3:].removesuffix("+PTX") for a in arches if a.endswith("+PTX")]
    kernels = {"library": "/x/_C.so", "requested": cubins, "code_objects": cubins, "ptx": ptx}
    code, env = run_env(tmp_path, cuda_manifest(arches), kernels)
    assert (code == 0) is ok, env
    runs = {"image_arch": how[0], "runs": how[1]} if how else None
    assert env["numbers"]["arch_coverage"] == runs
    if ok:
        assert env["status"] == "passed" and env["warnings"] == [], env
    else:
        assert env["reason"].startswith(f"device arch {device} is not among the arches the image was built for")
    # the preflight's rule gives the same answer for the same facts
    assert preflight.covers(arches, device) is ok


def test_torch_arch_list_is_judged_by_the_one_rule_simulated_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's own kernels: an sm_80 cubin covers sm_86 (no warning); compute_90a PTX does not cover sm_100 (the
    old rule warned for the first and crashed on the second, int('90a'))."""
    fake_nvidia_gpu(monkeypatch, "sm_86", torch_arches=["sm_80", "sm_90"])
    code, env = run_env(tmp_path, cuda_manifest(["sm_80"]))
    assert code == 0 and env["warnings"] == [], env
    fake_nvidia_gpu(monkeypatch, "sm_100", torch_arches=["sm_90a", "compute_90a"])
    code, env = run_env(tmp_path, cuda_manifest(["sm_90+PTX"]))
    assert code == 0, env
    assert env["warnings"] == ["torch was compiled for sm_90a, compute_90a, not for sm_100"]


def test_kernels_json_is_judged_by_the_one_rule_simulated_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvidia_gpu(monkeypatch, "sm_86", torch_arches=["sm_80"])
    kernels = {"library": "/x/_C.so", "requested": ["sm_90"], "code_objects": ["sm_90"]}
    code, env = run_env(tmp_path, cuda_manifest(["sm_80"]), kernels)
    assert code == 1 and "holds code objects for sm_90, not for device arch sm_86" in env["reason"]
    # the PTX the library carries counts as what it is: JIT-compiled forward (compute_80 runs on sm_86)
    code, env = run_env(tmp_path, cuda_manifest(["sm_80"]), {**kernels, "ptx": ["compute_80"]})
    assert code == 0, env


def test_an_experimental_arch_covering_the_gpu_warns_simulated_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvidia_gpu(monkeypatch, "sm_86", torch_arches=["sm_80"])
    code, env = run_env(tmp_path, cuda_manifest(["sm_90"], experimental_arches=["sm_80"]))
    assert code == 0 and env["warnings"] == ["device arch sm_86 is experimental in this image"], env


AMD_CASES = [
    (["gfx942"], "gfx942:sramecc+:xnack-", True),
    (["gfx942:xnack-"], "gfx942:sramecc+:xnack-", True),
    (["gfx942:xnack+"], "gfx942:sramecc+:xnack-", False),  # the feature the code fixes differs
    (["gfx90a"], "gfx942:sramecc+:xnack-", False),  # exact processor: no "newer gfx9 runs it"
    (["gfx1100"], "gfx1101", False),
    (["gfx9-4-generic"], "gfx950:sramecc+:xnack-", True),  # LLVM's generic target, a member
    (["gfx942"], "amdgcn-amd-amdhsa--GFX942:xnack-:sramecc+", True),  # rocminfo's spelling, via the table
]


@pytest.mark.parametrize(("arches", "device", "ok"), AMD_CASES)
def test_environment_judges_an_amd_gpu_by_the_one_rule_simulated_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arches: list[str], device: str, ok: bool
) -> None:
    fake_amd_gpu(monkeypatch, device)
    manifest = cuda_manifest(arches, versions={"torch": host_torch_release(), "rocm": "6.1", "python": "3.10"})
    manifest["platform"] = {"name": "rocm6.1", "kind": "rocm", "version": "6.1", "base_image": "rocm/dev:6.1"}
    code, env = run_env(tmp_path, manifest)
    assert (code == 0) is ok, env
    assert env["numbers"]["arch_coverage"] == ({"image_arch": arches[0], "runs": "loads"} if ok else None)
    assert preflight.covers(arches, device) is ok


# --- the promise keys: what the image promises for a GPU it was not built for by name --------------------


@pytest.mark.parametrize(
    ("keys", "device", "found"),
    [
        (["sm_80", "sm_90"], "sm_86", ("sm_80", "cubin compatible")),
        (["sm_80", "sm_86"], "sm_89", ("sm_86", "cubin compatible")),  # the nearest older minor
        (["sm_80+PTX", "sm_90a"], "sm_90", ("sm_90a", "cubin exact")),  # exact before PTX JIT
        (["sm_80+PTX"], "sm_90", ("sm_80+PTX", "ptx-jit")),
        (["sm_100f", "sm_90"], "sm_103", ("sm_100f", "family")),
        (["sm_90a"], "sm_100", None),
        (["sm_80"], "sm_75", None),
        (["cpu"], "sm_80", None),
        (["gfx9-4-generic", "gfx942"], "gfx942:sramecc+:xnack-", ("gfx942", "loads")),  # the processor's own
        (["gfx942:xnack+", "gfx942:xnack-"], "gfx942:sramecc+:xnack-", ("gfx942:xnack-", "loads")),
        (["gfx942", "gfx942:sramecc+:xnack-"], "gfx942:sramecc+:xnack-", ("gfx942:sramecc+:xnack-", "loads")),
        (["gfx90a"], "gfx942", None),
    ],
)
def test_a_per_arch_table_is_keyed_by_the_arch_whose_code_runs(
    keys: list[str], device: str, found: tuple[str, str] | None
) -> None:
    from imagecontract.models.manifest import covering  # (imported here: the old code had none)

    assert covering(keys, device) == found


def test_an_sm86_gpu_gets_the_sm80_promises_simulated_gpu(tmp_path: Path) -> None:
    """The attention backends and TGI's flash/paged promises of an sm_80 image hold on an sm_86 GPU: its cubins
    run there (compatible-cubin coverage), so the checks test them rather than passing on `math` alone."""
    promises = {"sm_80": {"flash": True, "paged": True}}
    man = load(str(write_json(tmp_path / "m.json", cuda_manifest(["sm_80"]))), str(tmp_path / "none.json"))
    assert man.supports("sm_86") and not man.supports("sm_75")
    assert man.attention_backends("sm_86", "nvidia") == (
        ["flash", "efficient", "math"],
        "manifest[sm_80] (cubin compatible)",
    )
    assert man.attention_backends("sm_80", "nvidia") == (["flash", "efficient", "math"], "manifest[sm_80]")
    assert man.attention_backends("sm_75", "nvidia")[0] == ["math"]
    assert tgi_attention.promises_for(promises, "sm_86") == {"flash": True, "paged": True}
    broken = tgi_attention.AttentionState(False, True, "no module named flash_attn_2_cuda", None)
    assert tgi_attention.failures(promises, "sm_86", broken) == [
        "flash attention promised for sm_86 but TGI disabled it: no module named flash_attn_2_cuda"
    ]
    assert tgi_attention.promises_for({"sm_90a": {"flash": True}}, "sm_100") == {}


def test_the_kernels_op_is_required_on_a_covered_gpu_simulated_gpu(tmp_path: Path) -> None:
    man = load(str(write_json(tmp_path / "m.json", cuda_manifest(["sm_80"]))), str(tmp_path / "none.json"))

    def ctx(arch: str) -> Context:
        return Context(DeviceInfo("auto", "cuda", True, arch, vendor="nvidia"), man)

    assert op_applies(ctx("sm_86")) is None
    assert op_applies(ctx("sm_75")) == "imagebuild-kernels is built for sm_80, not sm_75"
    assert op_applies(Context(DeviceInfo("auto", "cuda", True, "sm_86"), SmokeManifest("none", False))) is None
