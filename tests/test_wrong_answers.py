"""Inputs that used to give a wrong answer instead of an error (issue 12): a smoke run of no check that
"passed", a publish gate that trusted `passed` over the checks, a NaN baseline that switched regression
detection off, and arch lists that silently meant something else."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix.arches import parse_target, requested_arches
from imagebuild.release.publish import find_passing_report, report_refusal
from imagecontract.models import SmokeReport
from smoke import baseline as baseline_mod
from smoke.manifest import ManifestError
from smoke.report import verdict
from smoke.result import FAILED, PASSED, SKIPPED, CheckResult
from tests.test_smoke_helpers import cpu_manifest, run_smoke, write_json

IMAGE = "sha256:" + "a" * 64


# --- smoke: a report of nothing is not a pass -------------------------------------------------------------


@pytest.mark.parametrize("only", [",", " ", ";,;", ""])
def test_only_naming_no_check_is_a_usage_error(tmp_path: Path, only: str) -> None:
    report = tmp_path / "report.json"
    manifest = write_json(tmp_path / "manifest.json", cpu_manifest())
    proc = run_smoke(tmp_path, "--manifest", str(manifest), "--only", only, "--report", str(report))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: --only names no check") and len(proc.stderr.strip().splitlines()) == 1
    assert not report.exists()


@pytest.mark.parametrize(
    ("statuses", "passed"),
    [
        ([], False),
        ([SKIPPED], False),
        ([SKIPPED, SKIPPED], False),
        ([PASSED, FAILED], False),
        ([PASSED, SKIPPED], True),
        ([PASSED], True),
    ],
)
def test_verdict_needs_a_check_that_ran_and_none_that_failed(statuses: list[str], passed: bool) -> None:
    results = [CheckResult(f"c{i}", status=status) for i, status in enumerate(statuses)]
    assert verdict(results)[0] is passed


# --- the publish gate: the checks must agree with `passed` ------------------------------------------------


def smoke_report(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "schema_version": 1,
        "image_id": IMAGE,
        "passed": True,
        "exit_code": 0,
        "checks": [{"name": "environment", "status": "passed"}, {"name": "runtime", "status": "skipped"}],
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        (smoke_report(checks=[{"name": "silu", "status": "failed"}, {"name": "env", "status": "passed"}]), "failed"),
        (smoke_report(checks=[]), "ran no check"),
        (smoke_report(checks=[{"name": "attention", "status": "skipped"}]), "ran no check"),
        (smoke_report(checks=None), "not a smoke report (checks: expected a list"),
        (smoke_report(checks=["passed"]), "not a smoke report (checks[0]: expected an object"),
        (smoke_report(exit_code=1), "exited 1"),
        (smoke_report(passed=False), "did not pass"),
        (smoke_report(passed="true"), "not a smoke report (passed: expected bool"),
        ({k: v for k, v in smoke_report().items() if k != "schema_version"}, "schema_version: missing"),
        (smoke_report(image_id="sha256:" + "b" * 64), "another image"),
        ([], "not a smoke report"),
    ],
)
def test_publish_gate_refuses_a_report_whose_checks_disagree(tmp_path: Path, report: object, reason: str) -> None:
    refusal = report_refusal(report, IMAGE)
    assert refusal is not None and reason in refusal
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert find_passing_report(IMAGE, [path]) is None


def test_publish_gate_accepts_a_real_pass(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(smoke_report()))
    assert report_refusal(smoke_report(), IMAGE) is None and find_passing_report(IMAGE, [path]) == path
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert find_passing_report(IMAGE, [binary, path]) == path


# --- baselines: a NaN must not switch regression detection off ---------------------------------------------


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_baseline_is_a_one_line_usage_error(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "base.json"
    path.write_text(
        '{"schema_version": 1, "passed": true, "arch": "cpu", '
        '"checks": [{"name": "silu", "status": "passed", "throughput": {"F.silu_GBps": NUMBER}}]}'.replace(
            "NUMBER", bad
        )
    )
    with pytest.raises(ManifestError, match="F.silu_GBps"):
        baseline_mod.load(str(path))
    manifest = write_json(tmp_path / "manifest.json", cpu_manifest())
    proc = run_smoke(tmp_path, "--manifest", str(manifest), "--only", "silu", "--baseline", str(path))
    assert proc.returncode == 2 and proc.stderr.startswith("error: baseline ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_baseline_that_is_not_a_smoke_report_names_the_key(tmp_path: Path) -> None:
    path = write_json(tmp_path / "base.json", {"schema_version": 1, "arch": "cpu", "checks": []})
    with pytest.raises(ManifestError, match=r"not a smoke report \(passed: missing\)"):
        baseline_mod.load(str(path))


def test_a_binary_baseline_is_a_one_line_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xff")
    with pytest.raises(ManifestError, match="not a UTF-8 JSON document"):
        baseline_mod.load(str(path))


def test_a_nan_measurement_fails_instead_of_passing() -> None:
    res = CheckResult("silu", throughput={"F.silu_GBps": math.nan})
    check = {"name": "silu", "status": "passed", "throughput": {"F.silu_GBps": 5.0}}
    base = SmokeReport.from_dict({"schema_version": 1, "passed": True, "arch": "cpu", "checks": [check]})
    summary = baseline_mod.apply([res], base, "cpu", 0.1)
    assert res.status == FAILED and summary["regressions"]


# --- arch lists -------------------------------------------------------------------------------------------


def test_empty_arch_argument_is_an_error_not_the_default(cli) -> None:
    for target in ("rocm6.1-torch2.3", "local-cpu"):
        done = cli("arches", target, "--arch", "")
        assert done.exit_code == 2 and done.exception is None
        assert done.stderr.startswith("error: empty arch list"), done.stderr
    with pytest.raises(ConfigError, match="empty arch list"):
        requested_arches("rocm", "  ", {}, ["gfx942"])
    # an empty variable still counts as unset, as torch's own build reads it
    assert requested_arches("rocm", None, {"PYTORCH_ROCM_ARCH": ""}, ["gfx942"])[1] == "matrix default"


@pytest.mark.parametrize("raw", ["compute_90", "COMPUTE_80", "compute_90+PTX"])
def test_a_ptx_arch_is_not_silently_a_gpu(raw: str) -> None:
    with pytest.raises(ConfigError, match="PTX") as info:
        parse_target(raw)
    assert info.value.hint is not None and "+PTX" in info.value.hint


@pytest.mark.parametrize(
    ("kind", "variable", "value"),
    [
        ("rocm", "PYTORCH_ROCM_ARCH", "gfx94"),
        ("cuda", "TORCH_CUDA_ARCH_LIST", "compute_90"),
        ("cuda", "TORCH_CUDA_ARCH_LIST", "9.5"),
    ],
)
def test_an_arch_error_from_the_environment_names_the_variable(kind: str, variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        requested_arches(kind, None, {variable: value}, [])
    assert str(info.value).startswith(f"env {variable}: ") and value in str(info.value)


def test_environment_arch_error_through_the_cli(cli) -> None:
    done = cli("arches", "rocm6.1-torch2.3", env={"PYTORCH_ROCM_ARCH": "gfx94"})
    assert done.exit_code == 2 and done.stderr.startswith("error: env PYTORCH_ROCM_ARCH: unknown GPU target 'gfx94'")
