"""An emulated leg's smoke run gets its deadlines scaled (issue 29: the stock-Debian rehearsal's arm64 smoke failed
only because making the tiny model under QEMU on a loaded 2-core machine took over the suite's 300 s). The factor
travels in the container's environment (imagecontract/smoke_run.py) and is bounded on both sides. The stub engine
(no engine behind it) stands in for the container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.engine.interface import LocalImage, RunResult, RunSpec
from imagebuild.engine.stub import StubEngineForUnitTests
from imagebuild.errors import ConfigError
from imagebuild.prove.smoke import EMULATION_SCALE_ENV, emulation_scale, run_smoke
from imagecontract.smoke_run import TIME_SCALE_ENV, time_scale
from smoke.checks import runtime

IMAGE_ID = "sha256:" + "3" * 64
PASSED = {"schema_version": 1, "passed": True, "checks": [{"name": "environment", "status": "passed"}]}


@pytest.mark.parametrize(
    ("raw", "factor"),
    [("4", 4), ("20", 20), (None, 1), ("", 1), ("0", 1), ("21", 1), ("-3", 1), ("1_0", 1), ("\u0663", 1), ("999", 1)],
)
def test_the_image_side_reads_only_a_bounded_ascii_factor(raw: str | None, factor: int) -> None:
    assert time_scale(raw) == factor


def test_the_suite_scales_its_deadlines_by_the_hosts_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIME_SCALE_ENV, raising=False)
    assert runtime._scaled(runtime.MODEL_TIMEOUT_S) == runtime.MODEL_TIMEOUT_S
    monkeypatch.setenv(TIME_SCALE_ENV, "4")
    assert runtime._scaled(runtime.MODEL_TIMEOUT_S) == 4 * runtime.MODEL_TIMEOUT_S


def test_the_host_sends_the_factor_and_waits_that_much_longer(tmp_path: Path) -> None:
    def run(spec: RunSpec) -> RunResult:
        out = next(Path(m.source) for m in spec.mounts if m.target == "/out")
        (out / "report.json").write_text(json.dumps(PASSED))
        return RunResult(0, output=b"", image_id=IMAGE_ID)

    report = tmp_path / "report.json"
    for scale in (1, 4):
        engine = StubEngineForUnitTests(on_run=run)
        run_smoke(engine, LocalImage(IMAGE_ID), "none", report, tmp_path / "junit.xml", "t", time_scale=scale)
        (spec,) = engine.runs
        assert spec.environment[TIME_SCALE_ENV] == str(scale)
        assert spec.timeout == 1800 * scale


def test_the_emulation_factor_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMULATION_SCALE_ENV, raising=False)
    assert emulation_scale() == 4
    monkeypatch.setenv(EMULATION_SCALE_ENV, "21")
    with pytest.raises(ConfigError, match=EMULATION_SCALE_ENV) as caught:
        emulation_scale()
    assert caught.value.exit_code == 2
