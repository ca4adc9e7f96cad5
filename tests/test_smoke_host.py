"""The host side of `imagebuild smoke`: the suite's report is read once and checked against SmokeReport before
anything is written where publish looks (issue 20). The stub engine (no engine behind it) stands in for the
container: its run writes the report into the folder mounted at /out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.interface import LocalImage, RunResult, RunSpec
from imagebuild.engine.stub import StubEngineForUnitTests
from imagebuild.errors import SmokeFailed
from imagebuild.plan.imageref import ImageRef

IMAGE_ID = "sha256:" + "2" * 64
FITS = {"schema_version": 1, "passed": True, "checks": [{"name": "environment", "status": "passed"}]}


def _engine(report_text: str) -> StubEngineForUnitTests:
    """A run that writes report_text as the suite's report.json into the folder mounted at /out, exits 0."""

    def run(spec: RunSpec) -> RunResult:
        out = next(Path(m.source) for m in spec.mounts if m.target == "/out")
        (out / "report.json").write_text(report_text)
        return RunResult(0, output=b"smoke: passed\n", image_id=IMAGE_ID)

    return StubEngineForUnitTests(on_run=run)


def _run(tmp_path: Path, document: object) -> Any:
    from imagebuild.prove.smoke import run_smoke

    ref = ImageRef(IMAGE_ID, "t")
    report = tmp_path / "smoke" / "report.json"
    engine = _engine(json.dumps(document))
    return run_smoke(engine, LocalImage(IMAGE_ID), "none", report, report.with_name("junit.xml"), "t", ref)


def test_a_report_that_does_not_fit_is_never_written(tmp_path: Path) -> None:
    with pytest.raises(SmokeFailed, match="does not fit the contract: checks: missing"):
        _run(tmp_path, {"schema_version": 1, "passed": True})
    assert not (tmp_path / "smoke" / "report.json").exists(), "a report that does not fit was written"
    with pytest.raises(SmokeFailed, match="not JSON"):
        _run_text(tmp_path)


def _run_text(tmp_path: Path) -> Any:
    from imagebuild.prove.smoke import run_smoke

    report = tmp_path / "smoke" / "report.json"
    return run_smoke(_engine("{"), LocalImage(IMAGE_ID), "none", report, report.with_name("junit.xml"), "t")


def test_a_fitting_report_is_written_once_with_what_the_host_knows(tmp_path: Path) -> None:
    outcome = _run(tmp_path, FITS)
    written = json.loads(outcome.report_path.read_text())
    assert written["image_id"] == IMAGE_ID and written["image"]["target"] == "t"
    assert (written["gpu"], written["exit_code"], written["image_ref"]) == ("none", 0, "t")
    assert outcome.report.image_id == IMAGE_ID and outcome.report.refusal() is None


def test_gpu_none_runs_the_suite_on_the_cpu_on_purpose_and_auto_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--gpu none (the operator's word) asks the suite for --device cpu, so a GPU image's CPU part can pass with its
    GPU checks reported as not run (issue 31 item 4); --gpu auto on a host without a GPU leaves the suite's own
    'auto', whose environment check fails a GPU image (a runner that lost its GPU). Stub engine: no container."""
    from imagebuild.prove import smoke as prove_smoke

    monkeypatch.setattr(prove_smoke, "detect_gpu", lambda: "none")  # this host's answer, made the same everywhere
    asked = {}
    for gpu in ("none", "auto"):
        engine = _engine(json.dumps(FITS))
        prove_smoke.run_smoke(engine, LocalImage(IMAGE_ID), gpu, tmp_path / gpu / "r.json", tmp_path / "j.xml", "t")
        (spec,) = engine.runs
        asked[gpu] = spec.entrypoint
    assert asked["none"][-2:] == ("--device", "cpu")
    assert "--device" not in asked["auto"]
