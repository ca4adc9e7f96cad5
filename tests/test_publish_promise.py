"""publish refuses (exit 5) to move a tag to an image whose arches or platforms differ from what the tag promises,
naming both sets; the gate reads each smoke report once and hands signing the passing ones (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.building.specs import PlanOptions, plan
from imagebuild.errors import PublishFailed
from imagebuild.matrix import load_matrix
from imagebuild.plan.git import GitInfo
from imagebuild.release.gate import SmokeReports
from imagebuild.release.promise import check_promises

REPO = Path(__file__).resolve().parents[1]
GIT = GitInfo("r", "abc1234", "2026-01-01T00:00:00+00:00")


def _labels(target: str, arch: str | None = None, oci: str | None = None) -> dict[str, object]:
    """The labels a build of target gives its image: the Dockerfile's and the build's (--label)."""
    platforms = (oci,) if oci else ()
    (spec,) = plan(load_matrix(REPO / "matrix.yaml"), [target], PlanOptions(arch=arch, platforms=platforms), env={})
    assert spec.plan is not None
    return dict(spec.plan.all_labels(GIT, "x"))


def test_a_gfx942_build_never_takes_the_tag_that_promises_both_arches() -> None:
    gfx942 = _labels("rocm6.1-torch2.3", arch="gfx942")
    with pytest.raises(PublishFailed) as refused:
        check_promises([gfx942], ["rocm6.1-torch2.3"], index=False)
    assert refused.value.exit_code == 5
    message = str(refused.value)
    assert "promises arches gfx90a;gfx942 on linux/amd64" in message and "has arches gfx942 on linux/amd64" in message
    check_promises([gfx942], ["rocm6.1-torch2.3-gfx942", "rocm6.1-torch2.3-gfx942-abc1234"], index=False)
    check_promises([_labels("rocm6.1-torch2.3")], ["rocm6.1-torch2.3", "latest"], index=False)


def test_a_platform_alone_never_takes_another_platform_s_tag() -> None:
    arm = _labels("local-cpu", oci="linux/arm64")
    amd = _labels("local-cpu", oci="linux/amd64")
    check_promises([arm], ["local-cpu-linux-arm64"], index=False)
    check_promises([amd], ["local-cpu", "local-cpu-abc1234"], index=False)  # the plain name: the first platform
    with pytest.raises(
        PublishFailed, match="promises arches none \\(CPU\\) on linux/amd64, the image has .* linux/arm64"
    ):
        check_promises([arm], ["local-cpu"], index=False)
    check_promises([amd, arm], ["local-cpu", "v1"], index=True)  # the index under the plain name: every platform
    with pytest.raises(PublishFailed, match="on linux/amd64, linux/arm64, the image has .* on linux/amd64"):
        check_promises([amd], ["local-cpu"], index=True)


def test_an_image_without_a_key_is_not_held_to_a_promise() -> None:
    check_promises([{"io.imagebuild.arches": "gfx942"}, None], ["anything"], index=False)


def test_the_gate_reads_each_report_once_and_returns_the_passing_ones(tmp_path: Path) -> None:
    image = "sha256:" + "a" * 64
    good = {"schema_version": 1, "passed": True, "image_id": image, "arch": "gfx942"}
    good["checks"] = [{"name": "environment", "status": "passed"}]
    (tmp_path / "build/smoke/t").mkdir(parents=True)
    (tmp_path / "build/smoke/t/report.json").write_text(json.dumps(good))
    (tmp_path / "build/smoke/bad.json").write_text("{")
    (tmp_path / "build/smoke/u").mkdir()
    (tmp_path / "build/smoke/u/report.json").write_text(json.dumps({**good, "passed": False}))
    reports = SmokeReports.load(tmp_path)
    assert len(reports.paths) == 2 and not reports.every
    (passed,) = reports.lets_publish(image)
    assert passed.path.parent.name == "t" and passed.arch == "gfx942" and passed.report.image_id == image
    assert reports.lets_publish("sha256:" + "b" * 64) == []
    every = SmokeReports.load(
        tmp_path, [tmp_path / "build/smoke/t/report.json", tmp_path / "build/smoke/u/report.json"]
    )
    assert every.every and every.lets_publish(image) == [], "--report: each named report must pass"
