"""The host side of `imagebuild smoke`: the suite's report is read once and checked against SmokeReport before
anything is written where publish looks (issue 20). A stand-in container (no engine) writes the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagebuild.errors import SmokeFailed
from imagebuild.plan.imageref import ImageRef

IMAGE_ID = "sha256:" + "2" * 64
FITS = {"schema_version": 1, "passed": True, "checks": [{"name": "environment", "status": "passed"}]}


class StandInContainer:
    """Writes `document` as the suite's report.json into the folder mounted at /out, exits 0."""

    def __init__(self, document: object) -> None:
        self.document, self.out = document, Path()
        self.attrs = {"Image": IMAGE_ID}

    def start(self) -> None:
        (self.out / "report.json").write_text(json.dumps(self.document))

    def wait(self, timeout: int) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self, **_: object) -> bytes:
        return b"smoke: passed\n"

    def remove(self, force: bool = False, v: bool = False) -> None:
        return None


class StandInClient:
    def __init__(self, document: object) -> None:
        self.container = StandInContainer(document)
        self.containers = self

    def create(self, *_: object, volumes: dict[str, Any], **__: object) -> StandInContainer:
        self.container.out = Path(next(iter(volumes)))
        return self.container


def _run(tmp_path: Path, document: object) -> Any:
    pytest.importorskip("docker")
    from imagebuild.prove.smoke import run_smoke

    image = type("StandInImage", (), {"id": IMAGE_ID})()
    ref = ImageRef(IMAGE_ID, "t")
    report = tmp_path / "smoke" / "report.json"
    return run_smoke(StandInClient(document), image, "none", report, report.with_name("junit.xml"), "t", ref)  # type: ignore[arg-type]


def test_a_report_that_does_not_fit_is_never_written(tmp_path: Path) -> None:
    with pytest.raises(SmokeFailed, match="does not fit the contract: checks: missing"):
        _run(tmp_path, {"schema_version": 1, "passed": True})
    assert not (tmp_path / "smoke" / "report.json").exists(), "a report that does not fit was written"
    with pytest.raises(SmokeFailed, match="not JSON"):
        _run_text(tmp_path)


def _run_text(tmp_path: Path) -> Any:
    class NotJson(StandInContainer):
        def start(self) -> None:
            (self.out / "report.json").write_text("{")

    client = StandInClient(None)
    client.container = NotJson(None)
    pytest.importorskip("docker")
    from imagebuild.prove.smoke import run_smoke

    image = type("StandInImage", (), {"id": IMAGE_ID})()
    report = tmp_path / "smoke" / "report.json"
    return run_smoke(client, image, "none", report, report.with_name("junit.xml"), "t")  # type: ignore[arg-type]


def test_a_fitting_report_is_written_once_with_what_the_host_knows(tmp_path: Path) -> None:
    outcome = _run(tmp_path, FITS)
    written = json.loads(outcome.report_path.read_text())
    assert written["image_id"] == IMAGE_ID and written["image"]["target"] == "t"
    assert (written["gpu"], written["exit_code"], written["image_ref"]) == ("none", 0, "t")
    assert outcome.report.image_id == IMAGE_ID and outcome.report.refusal() is None
