"""Pure functions of the smoke suite: arch names, versions, TunableOp files, baselines, JUnit."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from imagecontract.models import SmokeReport
from smoke import manifest as manifest_mod
from smoke.checks.environment import same_version
from smoke.checks.tunableop import parse_results_file, row_for, tamper
from smoke.device import gfx_from_override, gfx_from_target_version
from smoke.result import CheckResult
from tests.test_smoke_helpers import cpu_manifest, run_smoke, write_json

SAMPLE = Path("/work/shared/data/tunableop_h200_torch2.11.csv")
ROCM_FILE = """Validator,PT_VERSION,2.3.0
Validator,ROCM_VERSION,6.1.40093-bd86f1708
Validator,HIPBLASLT_VERSION,0.7.0-1549b021
Validator,GCN_ARCH_NAME,gfx942:sramecc+:xnack-
Validator,ROCBLAS_VERSION,4.1.0-a2d4e2c4-dirty
GemmTunableOp_Half_TN,tn_8192_7_28672,Gemm_Hipblaslt_TN_10814,0.0473
GemmTunableOp_Half_TN,tn_28672_4_8192,Gemm_Rocblas_45475,0.0891
"""


@pytest.mark.parametrize(
    ("value", "arch"), [(90010, "gfx90a"), (90402, "gfx942"), (90008, "gfx908"), (110000, "gfx1100")]
)
def test_gfx_from_kfd_target_version(value: int, arch: str) -> None:
    assert gfx_from_target_version(value) == arch


def test_gfx_from_override() -> None:
    assert gfx_from_override("9.4.2") == "gfx942"
    assert gfx_from_override("9.0.10") == "gfx90a"
    assert gfx_from_override("nonsense") is None


@pytest.mark.parametrize(
    ("device", "image", "ok"),
    [
        ("gfx942:sramecc+:xnack-", "gfx942", True),
        ("gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", True),
        ("gfx942:sramecc+:xnack+", "gfx942:xnack-", False),
        ("gfx90a", "gfx942", False),
        ("gfx90a:xnack-", "gfx90", False),
        ("sm_90", "sm_90", True),
        ("sm_90", "sm_80", False),
        # what `render --arch sm_90+PTX` / `Hopper` writes into the manifest: it runs on sm_90
        ("sm_90", "sm_90+PTX", True),
        # a feature LLVM does not know never loads (the contract's rule, not a second one)
        ("gfx942:sramecc+:xnack-", "gfx942:bogus+", False),
    ],
)
def test_the_image_supports_a_device_by_the_contracts_rule(tmp_path: Path, device: str, image: str, ok: bool) -> None:
    data = cpu_manifest(gpu_arches=[image], attention_backends={image: ["flash", "math"]})
    man = manifest_mod.load(str(write_json(tmp_path / "m.json", data)), str(tmp_path / "none.json"))
    assert man.supports(device) is ok
    assert man.attention_backends(device, "amd")[0] == (["flash", "math"] if ok else ["math"])


def test_a_manifest_that_does_not_fit_the_contract_names_the_key(tmp_path: Path) -> None:
    data = cpu_manifest()
    data["tunableop"]["filename"] = None
    path = write_json(tmp_path / "m.json", data)
    with pytest.raises(manifest_mod.ManifestError, match=r"m\.json: tunableop\.filename: expected str, got NoneType"):
        manifest_mod.load(str(path), None)
    proc = run_smoke(tmp_path, "--manifest", str(path), "--only", "environment")
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: manifest {path}: tunableop.filename: ")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_manifest_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = write_json(tmp_path / "m.json", cpu_manifest(schema_version=2))
    with pytest.raises(manifest_mod.ManifestError, match="schema_version: expected one of 1, got 2"):
        manifest_mod.load(str(path), None)


@pytest.mark.parametrize("target", ["cuda12.1-torch2.3", "rocm6.1-torch2.3", "local-cpu"])
def test_every_committed_manifest_loads_in_the_image_reader(target: str) -> None:
    path = Path(__file__).resolve().parents[1] / "dockerfiles" / target / "manifest.json"
    man = manifest_mod.load(str(path), "/nonexistent/kernels.json")
    assert man.present and man.target == target
    assert all(man.supports(arch) for arch in man.gpu_arches)


def test_same_version() -> None:
    assert same_version("2.3.0a0+git1b2c3", "2.3.0")
    assert same_version("6.1.40093-bd86f1708", "6.1")
    assert not same_version("6.10.1", "6.1")
    assert not same_version("2.11.0+cu130", "2.1")
    assert not same_version(None, "12.1")


def test_parse_rocm_results_file() -> None:
    validators, rows = parse_results_file(ROCM_FILE)
    assert validators["GCN_ARCH_NAME"] == "gfx942:sramecc+:xnack-" and len(validators) == 5
    assert row_for(rows, 7, 8192, 28672) and row_for(rows, 4, 28672, 8192)
    assert not row_for(rows, 8, 8192, 28672)


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample file from the GPU machine not present")
def test_parse_file_written_on_the_gpu_machine() -> None:
    validators, rows = parse_results_file(SAMPLE.read_text())
    assert validators == {"PT_VERSION": "2.11.0"}
    assert row_for(rows, 7, 8192, 28672)  # tn_8192_7_28672_ld_28672_28672_8192
    assert not row_for(rows, 8192, 7, 28672)


def test_tamper_changes_one_validator_only() -> None:
    changed = tamper(ROCM_FILE)
    before, rows_before = parse_results_file(ROCM_FILE)
    after, rows_after = parse_results_file(changed)
    assert rows_before == rows_after
    assert {k for k in before if before[k] != after[k]} == {"PT_VERSION"}
    with pytest.raises(ValueError, match="no Validator,HIP_VERSION"):
        tamper(ROCM_FILE, "HIP_VERSION")


def test_baseline_other_arch_is_not_compared() -> None:
    from smoke.baseline import apply

    res = CheckResult("silu", throughput={"x_GBps": 1.0})
    check = {"name": "silu", "status": "passed", "throughput": {"x_GBps": 100.0}}
    base = SmokeReport.from_dict({"schema_version": 1, "passed": True, "arch": "sm_90", "checks": [check]})
    summary = apply([res], base, "cpu", 0.1)
    assert res.status == "passed" and "not compared" in summary["note"]


def test_junit_has_one_testcase_per_check() -> None:
    from imagecontract.models import SmokeReport
    from smoke.report import to_junit

    report = SmokeReport(
        schema_version=1,
        passed=False,
        device="cpu",
        arch="cpu",
        gpu_name=None,
        versions={"torch": "2.13.0"},
        checks=[
            CheckResult("a").to_check(),
            CheckResult("b", status="failed", reason="x < y").to_check(),
            CheckResult("c").skip("needs a GPU").to_check(),
        ],
    )
    suite = ET.fromstring(to_junit(report)).find("testsuite")
    assert suite is not None
    assert [c.get("name") for c in suite.findall("testcase")] == ["a", "b", "c"]
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"
    assert suite.findall("testcase")[1].find("failure").get("message") == "x < y"  # type: ignore[union-attr]
