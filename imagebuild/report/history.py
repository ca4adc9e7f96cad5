"""Smoke numbers over time: each smoke report the page is built from adds one point per row to
build/report/smoke-history.json (a report is overwritten by the next smoke run; this file keeps what it said).

The file is read into pydantic models that refuse what they do not expect (a point's `when` must be an ISO 8601
time with a zone, its numbers finite numbers or null, its series short printable text). A point that does not fit
is skipped: the page is still made, the file gets one warning line naming it and its skipped points, and the
skipped points are written back as they were (nothing of the file is lost; fixing them is the user's). A file that
is not a history at all, or cannot be read (a FIFO, a device, past the size limit), is a warning and is left as it
is: this run's points are not kept.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from imagebuild.report.evidence import Evidence, skipped_warning, validation_said
from imagebuild.report.model import HistoryPoint, Row
from imagecontract.atomic import write_atomic

MAX_POINTS = 5000  # the oldest go first


def _utc(value: str) -> str:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("not an ISO 8601 time") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("a time without a zone")
    return when.astimezone(UTC).isoformat(timespec="seconds")


def _measured(value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError("must be a finite number, 0 or more")
    return value


Time = Annotated[str, StringConstraints(max_length=64), AfterValidator(_utc)]
Number = Annotated[float | None, AfterValidator(_measured)]


class PointModel(BaseModel):
    """One point as the file must hold it (the fields of model.HistoryPoint, nothing else)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    series: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
    image_id: Annotated[str, StringConstraints(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")] | None
    when: Time
    passed: bool
    tokens_per_s: Number
    server_start_s: Number
    ttft_s: Number
    report_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class HistoryModel(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    schema_version: Literal[1]
    points: Annotated[list[Any], Field(max_length=4 * MAX_POINTS)]


class Loaded:
    """The history as read: its points, the entries kept as they were, and whether the file may be written."""

    def __init__(self, points: list[HistoryPoint], kept: list[Any], writable: bool) -> None:
        self.points, self.kept, self.writable = points, kept, writable


def load(ev: Evidence, path: Path) -> Loaded:
    doc = ev.json(path)
    if doc is None:  # absent: a new file; unreadable or not JSON (already a warning): left as it is
        return Loaded([], [], path not in ev.unreadable)
    try:
        history = HistoryModel.model_validate(doc)
    except ValidationError as exc:
        ev.warnings.append(
            f"{ev.rel(path)}: not a smoke history ({validation_said(exc)}): left as it is, this run's points not kept"
        )
        return Loaded([], [], False)
    points, kept, skipped = [], [], []
    for i, entry in enumerate(history.points):
        try:
            points.append(HistoryPoint(**PointModel.model_validate(entry).model_dump()))
        except ValidationError as exc:
            kept.append(entry)
            skipped.append(f"points[{i}] ({validation_said(exc)})")
    if skipped:
        what = "points skipped (kept in the file as they are)"
        ev.warnings.append(skipped_warning(ev.rel(path), skipped, len(history.points), what))
    return Loaded(points, kept, True)


def update(ev: Evidence, rows: list[Row], path: Path, write: bool = True) -> list[HistoryPoint]:
    """The history with a point for each row's smoke report that is not in it yet; written back when `write`
    (and the file was a history or absent)."""
    loaded = load(ev, path)
    points = loaded.points
    seen = {(p.series, p.report_sha256) for p in points}
    for row in rows:
        if row.smoke.report is None or row.smoke.when is None:
            continue
        data = ev.raw(ev.root / row.smoke.report)
        if data is None:
            continue
        sha = hashlib.sha256(data).hexdigest()
        series = f"{row.target} {row.oci} {row.arch}"
        if (series, sha) in seen:
            continue
        seen.add((series, sha))
        points.append(
            HistoryPoint(
                series=series,
                image_id=row.image_id,
                when=_utc(row.smoke.when),
                passed=row.smoke.status == "passed",
                tokens_per_s=row.smoke.tokens_per_s,
                server_start_s=row.smoke.server_start_s,
                ttft_s=row.smoke.ttft_s,
                report_sha256=sha,
            )
        )
    points.sort(key=lambda p: (p.when, p.series))
    points = points[-MAX_POINTS:]
    if write and loaded.writable:
        doc = {"schema_version": 1, "points": [asdict(p) for p in points] + loaded.kept}
        write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return points
