"""Smoke numbers over time: each smoke report the page is built from adds one point per row to
build/report/smoke-history.json (a report is overwritten by the next smoke run; this file keeps what it said).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from imagebuild.report.evidence import Evidence
from imagebuild.report.model import HistoryPoint, Row
from imagecontract.atomic import write_atomic
from imagecontract.models import ModelError

MAX_POINTS = 5000  # the oldest go first


def load(ev: Evidence, path: Path) -> list[HistoryPoint]:
    doc = ev.json(path)
    if doc is None:
        return []
    try:
        if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
            raise ModelError("no points list")
        return [HistoryPoint(**p) for p in doc["points"] if isinstance(p, dict)]
    except (TypeError, ModelError) as exc:
        ev.warnings.append(f"{ev.rel(path)}: not a smoke history ({str(exc)[:100]}): started again")
        return []


def update(ev: Evidence, rows: list[Row], path: Path, write: bool = True) -> list[HistoryPoint]:
    """The history with a point for each row's smoke report that is not in it yet; written back when `write`."""
    points = load(ev, path)
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
                when=row.smoke.when,
                passed=row.smoke.status == "passed",
                tokens_per_s=row.smoke.tokens_per_s,
                server_start_s=row.smoke.server_start_s,
                ttft_s=row.smoke.ttft_s,
                report_sha256=sha,
            )
        )
    points.sort(key=lambda p: (p.when, p.series))
    points = points[-MAX_POINTS:]
    if write:
        doc = {"schema_version": 1, "points": [asdict(p) for p in points]}
        write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return points
