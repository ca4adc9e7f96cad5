"""The GPU evidence scripts (bench/gpu_*.sh) in their CPU mode (IB_DEVICE=cpu): the same manifest writer, the
same arguments and report paths as on the GPU machine, with the GPU work done on the CPU device. A script whose
manifest stops fitting the contract, or that imports a module that moved, is red here rather than on the next
GPU run (issue 24: gpu_smoke.sh wrote `base_image: null` and `obtained: "preinstalled"` for weeks)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from imagecontract.models import Manifest, ModelError, SmokeReport

REPO = Path(__file__).resolve().parents[1]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script(name: str, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "IMAGEBUILD_MANIFEST")}
    full.update({"IB_DEVICE": "cpu", "OUT": str(out), "PYTHON": sys.executable, **env})
    return subprocess.run(
        ["bash", f"bench/{name}"], cwd=REPO, env=full, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_gpu_manifest_fits_the_contract(device: str) -> None:
    gm = _module("gpu_manifest")
    runtime = gm.serve_runtime(REPO / "dockerfiles/local-cpu/manifest.json", device)
    data = gm.build(device, "sm_90", True, runtime)
    manifest = Manifest.from_dict(data)
    assert manifest.platform.kind == device
    assert manifest.torch.obtained == "wheel"
    assert manifest.runtime is not None
    argv = manifest.runtime.serve
    assert argv[argv.index("--device") + 1] == device  # the server loads the model onto this device
    # every file it names is on this machine (the guard: the checkout's copy of what the image holds), not only
    # in an image: the H200 run after issue 21's guard failed with "can't open file /opt/imagebuild/..."
    named = [a for a in argv if "/" in a and a.endswith(".py")]
    assert named and all(Path(a).is_file() for a in named), named
    if device == "cuda":
        assert manifest.supports("sm_90") and manifest.included("imagebuild-kernels")
        assert manifest.attention_backends == {"sm_90": ["flash", "efficient", "cudnn", "math"]}


def test_a_manifest_that_does_not_fit_is_refused_before_it_is_written(tmp_path: Path, monkeypatch) -> None:
    gm = _module("gpu_manifest")
    real = gm.build

    def broken(*args: object) -> dict[str, object]:
        data = real(*args)
        data["platform"]["base_image"] = None  # what gpu_smoke.sh wrote before issue 24
        return data

    monkeypatch.setattr(gm, "build", broken)
    out = tmp_path / "manifest.json"
    assert gm.main(["--out", str(out), "--device", "cuda"]) == 2
    assert not out.exists()
    with pytest.raises(ModelError, match="platform.base_image"):
        Manifest.from_dict(broken("cuda", "sm_90", False, None))


def test_gpu_smoke_cpu_mode(tmp_path: Path) -> None:
    """bench/gpu_smoke.sh end to end on the CPU: manifest, suite, rerun against the baseline, sabotage, evidence."""
    proc = _script("gpu_smoke.sh", tmp_path, IB_SABOTAGE_MODES="scale")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    manifest = Manifest.from_dict(json.loads((tmp_path / "manifest.json").read_text()))
    assert manifest.runtime is not None and manifest.included("imagebuild-kernels")
    report = SmokeReport.from_dict(json.loads((tmp_path / "report.json").read_text()))
    assert report.passed
    names = {c.name: c.status for c in report.checks}
    assert names["silu"] == names["linear"] == names["attention"] == "passed"
    assert (tmp_path / "junit.xml").is_file()
    evidence = json.loads((tmp_path / "smoke_cpu_mode.json").read_text())
    assert evidence["exit_code"] == 0 and evidence["kernels_built"] is True
    assert evidence["bench_command"].startswith("OUT=$OUT IB_DEVICE=cpu bash bench/gpu_smoke.sh")
    assert evidence["rerun_vs_baseline"]["exit_code"] in (0, 1)  # a shared CPU may well be 10% slower
    sab = evidence["sabotage"]
    assert sab["exit_code"] == 0 and sab["controls_passed"] and sab["all_caught"]
    caught = {(r["op"], r["dtype"]) for r in sab["sabotages"] if r.get("caught")}
    for op in ("F.silu", "silu_and_mul", "F.linear", "skinny_linear", "sdpa"):
        assert {(op, "float16"), (op, "bfloat16")} <= caught, op


def test_gpu_smoke_rejects_an_unknown_device(tmp_path: Path) -> None:
    proc = _script("gpu_smoke.sh", tmp_path, IB_DEVICE="rocm")
    assert proc.returncode == 2 and proc.stderr.startswith("error: IB_DEVICE must be cuda or cpu")


def test_gpu_issue13_cpu_mode(tmp_path: Path) -> None:
    proc = _script("gpu_issue13.sh", tmp_path, IB_COVERAGE_ROOT=str(REPO / "kernels"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "gpu_issue13: ok" in proc.stdout
    doctor = json.loads((tmp_path / "doctor.json").read_text())
    assert doctor["image_arches"] == ["sm_80", "sm_90"]
    json.loads((tmp_path / "coverage_raw.json").read_text())


def test_gpu_tunableop_cpu_mode(tmp_path: Path) -> None:
    proc = _script("gpu_tunableop.sh", tmp_path)
    summary = json.loads((tmp_path / "tunableop_h200.json").read_text())
    wrong = [s for s in summary["steps"] if not s["as_expected"]]
    assert proc.returncode == 0 and not wrong, wrong or proc.stdout[-3000:]
    assert {s["name"] for s in summary["steps"]} >= {"check_live_dev0", "merge_devices", "entrypoint_installs"}
    assert summary["command"].startswith("IB_DEVICE=cpu bench/gpu_tunableop.sh")


def test_gpu_kernels_cpu_mode(tmp_path: Path) -> None:
    proc = _script("gpu_kernels.sh", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    plan = json.loads((tmp_path / "kernels_plan.json").read_text())
    assert plan["unseen"]["models"] and plan["unseen"]["rows"]
    # off the measured region the rule picks F.linear (issue 24: ours there was up to 0.695x of it)
    assert all(r["cfg"] == -1 for r in plan["unseen"]["rows"] if not r["measured"])


def test_gpu_issue24_cpu_mode(tmp_path: Path) -> None:
    """The one-call driver of this round's GPU evidence, in CPU mode (sabotage and rerun off: tested above)."""
    proc = _script("gpu_issue24.sh", tmp_path, IB_SABOTAGE="0", IB_RERUN="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    log = (tmp_path / "gpu_issue24_h200.log").read_text()
    assert "== gpu_smoke.sh exit 0" in log and "== gpu_kernels.sh exit 0" in log
    evidence = json.loads((tmp_path / "smoke_cpu_mode.json").read_text())
    assert evidence["exit_code"] == 0 and evidence["sabotage"]["exit_code"] == -1
    Manifest.from_dict(json.loads((tmp_path / "manifest_h200.json").read_text()))
    assert json.loads((tmp_path / "kernels_plan.json").read_text())["unseen"]["rows"]
