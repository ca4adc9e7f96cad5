"""The publish gate's evidence: smoke reports read once per command, each checked against SmokeReport once.

`SmokeReports.load` reads the files publish looks at (--report, else every report.json under build/smoke);
`passing(image IDs)` gives the reports that let one image be published, as `Passed` (path and model), and those
are what the publish report names and what signing attests: no report is parsed a second time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagecontract import kinds
from imagecontract.models import ModelError, SmokeReport

MAX_REPORT_BYTES = 64 * 1024 * 1024  # a smoke report is kilobytes; a file past this is not one


@dataclass(frozen=True)
class Passed:
    """A smoke report that passed for one image: where it was, and the document."""

    path: Path
    report: SmokeReport

    @property
    def arch(self) -> str:
        return self.report.arch or kinds.CPU_ARCH


@dataclass(frozen=True)
class SmokeReports:
    """The reports one publish looks at, each read and checked once."""

    documents: tuple[tuple[Path, SmokeReport | None], ...]  # (path, its report; None: unreadable or not one)
    every: bool  # named with --report: each must pass for the image

    @classmethod
    def load(cls, root: Path, given: Sequence[Path] = ()) -> SmokeReports:
        """The reports named with --report (each must exist), else every report under build/smoke."""
        for path in given:
            if not path.is_file():
                raise ConfigError(f"smoke report {path} not found")
        paths = list(given) or sorted((root / "build" / "smoke").rglob("report.json"))  # <target>/<os>-<arch>/ too
        return cls(tuple((p, _read(p)) for p in paths), bool(given))

    @property
    def paths(self) -> list[Path]:
        return [p for p, _ in self.documents]

    def passing(self, *image_ids: str) -> list[Passed]:
        """The reports that passed for one of these IDs of one image (config digest, or the containerd store's
        manifest digest), in order."""
        found = []
        for path, report in self.documents:  # the rule of publish.report_refusal, on the model read once
            if report is not None and report.image_id in image_ids and report.refusal() is None:
                found.append(Passed(path, report))
        return found

    def first(self, *image_ids: str) -> Passed | None:
        found = self.passing(*image_ids)
        return found[0] if found else None

    def lets_publish(self, *image_ids: str) -> list[Passed]:
        """The passing reports when they suffice: all of those named with --report, else at least one."""
        found = self.passing(*image_ids)
        return found if found and (not self.every or len(found) == len(self.documents)) else []


def _read(path: Path) -> SmokeReport | None:
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return None
        return SmokeReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError, ModelError):
        return None
