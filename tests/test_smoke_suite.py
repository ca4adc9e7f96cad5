"""``python -m smoke`` on this CPU host, end to end: exit codes, report, JUnit, broken torch functions."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.test_smoke_helpers import NO_KERNELS, checks_by_name, cpu_manifest, run_smoke, write_json

ALL = ["environment", "imports", "silu", "linear", "attention", "tunableop", "runtime"]


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    return write_json(tmp_path / "manifest.json", cpu_manifest())


def test_cpu_suite_passes_and_reports(tmp_path: Path, manifest: Path) -> None:
    report, junit = tmp_path / "out" / "report.json", tmp_path / "out" / "junit.xml"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--report",
        str(report),
        "--junit",
        str(junit),
        sitecustomize=NO_KERNELS,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["schema_version"] == 1 and data["passed"] is True
    assert data["device"] == "cpu" and data["arch"] == "cpu"
    assert data["manifest"] == {"present": True, "path": str(manifest), "target": "local-cpu"}
    assert data["versions"]["torch"].startswith(cpu_manifest()["versions"]["torch"])
    checks = checks_by_name(report)
    assert list(checks) == ALL
    for name in ("environment", "silu", "linear", "attention"):
        assert checks[name]["status"] == "passed", checks[name]
    assert checks["tunableop"]["status"] == "skipped" and "GPU" in checks["tunableop"]["reason"]
    assert checks["runtime"]["status"] == "skipped" and "no serving runtime" in checks["runtime"]["reason"]
    assert checks["imports"]["status"] == "skipped" and "no serving runtime" in checks["imports"]["reason"]
    for name in ("silu", "linear", "attention"):
        assert checks[name]["throughput"] and all(v > 0 for v in checks[name]["throughput"].values())
    assert checks["silu"]["numbers"]["F.silu"]["float16"]["err_ratio"] < 1
    assert checks["attention"]["numbers"]["backends_expected"] == ["math"]
    # ops are absent and the manifest does not include the kernels: recorded, not failed
    assert "does not include imagebuild-kernels" in checks["silu"]["numbers"]["silu_and_mul"]["reason"]

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "7" and suite.get("failures") == "0"
    assert suite.get("skipped") == "3"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ALL
    assert cases[5].find("skipped") is not None


def test_without_manifest_runs_with_defaults(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    missing = tmp_path / "absent" / "manifest.json"
    proc = run_smoke(
        tmp_path,
        "--only",
        "attention,runtime",
        "--report",
        str(report),
        sitecustomize=NO_KERNELS,
        env={"IMAGEBUILD_KERNELS_JSON": str(tmp_path / "none.json")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "running with defaults" in proc.stdout
    data = json.loads(report.read_text())
    assert data["manifest"]["present"] is False and "defaults" in data["manifest"]["note"]
    checks = checks_by_name(report)
    assert list(checks) == ["attention", "runtime"]
    assert checks["runtime"]["reason"] == "no manifest"
    assert not missing.exists()


@pytest.mark.parametrize(
    ("check", "patch"),
    [
        (
            "silu",
            "F.silu = lambda x, inplace=False: x * torch.sigmoid(1.02 * x)",
        ),
        (
            "linear",
            "orig = F.linear\nF.linear = lambda x, w, b=None: orig(x, w, None)",
        ),
        (
            "attention",
            "orig = F.scaled_dot_product_attention\n"
            "F.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, dropout_p=0.0, "
            "is_causal=False, **kw: orig(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, **kw)",
        ),
    ],
)
def test_broken_torch_function_fails_its_check(tmp_path: Path, manifest: Path, check: str, patch: str) -> None:
    """A broken F.silu / F.linear (drops the bias) / SDPA (ignores is_causal) must fail, with exit 1."""
    site = NO_KERNELS + "import torch\nimport torch.nn.functional as F\n" + patch + "\n"
    report = tmp_path / "report.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--only",
        "silu,linear,attention",
        "--report",
        str(report),
        sitecustomize=site,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = checks_by_name(report)
    assert checks[check]["status"] == "failed"
    assert "tolerance" in checks[check]["reason"] or "tol" in checks[check]["reason"]
    for other in {"silu", "linear", "attention"} - {check}:
        assert checks[other]["status"] == "passed", checks[other]
    assert f"FAILED: {check}" in proc.stdout
    assert json.loads(report.read_text())["passed"] is False


def test_baseline_throughput_drop_fails(tmp_path: Path, manifest: Path) -> None:
    keys = ("F.silu_GBps", "eager_silu_mul_GBps")  # what the silu check measures on cpu

    def baseline(value: float) -> Path:
        check = {"name": "silu", "status": "passed", "throughput": dict.fromkeys(keys, value)}
        return write_json(
            tmp_path / f"base{value}.json", {"schema_version": 1, "passed": True, "arch": "cpu", "checks": [check]}
        )

    args = ("--manifest", str(manifest), "--only", "silu")
    report = tmp_path / "report.json"
    proc = run_smoke(tmp_path, *args, "--baseline", str(baseline(1e9)), "--report", str(report))
    assert proc.returncode == 1, proc.stdout
    silu = checks_by_name(report)["silu"]
    assert silu["status"] == "failed" and "throughput regression: F.silu_GBps" in silu["reason"]
    summary = json.loads(report.read_text())["baseline"]
    assert summary["tolerance"] == 0.10 and len(summary["regressions"]) == 2 and summary["compared"] == 2

    proc = run_smoke(tmp_path, *args, "--baseline", str(baseline(1e-9)), "--report", str(report))
    assert proc.returncode == 0, proc.stdout
    ratios = checks_by_name(report)["silu"]["numbers"]["vs_baseline"]
    assert set(ratios) == set(keys) and all(r > 1 for r in ratios.values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "silo"], "Perhaps you meant 'silu'?"),
        (["--device", "tpu"], "invalid choice"),
        (["--manifest", "/nonexistent/manifest.json"], "no such file"),
        (["--baseline", "/nonexistent/base.json"], "baseline /nonexistent/base.json"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    report = tmp_path / "r.json"
    proc = run_smoke(tmp_path, *args, "--report", str(report))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not report.exists()


def test_bad_manifest_json_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "manifest.json"
    bad.write_text('{"schema_version": 1,\n "target": }')
    proc = run_smoke(tmp_path, "--manifest", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: manifest {bad}: invalid JSON at line 2: Expecting value"


def test_image_whose_torch_does_not_import_fails_with_a_report(tmp_path: Path, manifest: Path) -> None:
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--report",
        str(report),
        "--junit",
        str(junit),
        sitecustomize="import sys\nsys.modules['torch'] = None\n",
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    checks = checks_by_name(report)
    assert checks["environment"]["status"] == "failed"
    assert checks["environment"]["reason"].startswith("import torch failed: ")
    assert {checks[n]["status"] for n in ALL[1:]} == {"skipped"}
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"  # type: ignore[union-attr]
