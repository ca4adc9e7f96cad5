"""Kernel benchmark results (bench/results/*.json from bench/kernels.py) as the page reads them: pydantic models
that take only what the kernel plot draws and refuse what does not fit.

A document is one the page plots when it holds a `skinny_linear` list (the other files of bench/results are other
benchmarks: not read further). Its `gpu` and `command` must be short text; each entry of the list must have
`sources` (text), `M` (an integer) and `speedup_vs_cublas` (a finite number above 0). An entry that does not fit
is skipped, and the file gets one warning line naming it and its first skipped entries; the rest is plotted.
Other keys (timings, per-launch numbers, the summary) are not the page's and are left unread.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from imagebuild.report.evidence import Evidence, said, skipped_warning, validation_said

MAX_FILES = 64  # bench documents plotted from one folder (sorted by name); more: a warning
MAX_ENTRIES = 100_000  # entries of one skinny_linear list

Text = Annotated[str, StringConstraints(max_length=300, pattern=r"^[^\x00-\x1f\x7f]*$")]


def _finite_positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a finite number above 0")
    return value


class SkinnyRow(BaseModel):
    """One shape's measurement: which model projections it is (`sources`), M, and the speed-up over cuBLAS."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    sources: Annotated[list[Text], Field(min_length=1, max_length=64)]
    M: Annotated[int, Field(ge=1, le=1 << 20)]
    speedup_vs_cublas: Annotated[float, AfterValidator(_finite_positive)]


class BenchDocument(BaseModel):
    """The parts of a kernel benchmark document the page shows; `skinny_linear` entries are checked one by one."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    gpu: Text | None = None
    command: Text | Annotated[list[Text], Field(max_length=64)] | None = None
    skinny_linear: Annotated[list[Any], Field(max_length=MAX_ENTRIES)]
    rows: list[SkinnyRow] = Field(default_factory=list, exclude=True)


def parse(ev: Evidence, path: Path, doc: dict[str, Any]) -> BenchDocument | None:
    """The document with its entries that fit; None (a warning) when the document itself does not fit."""
    try:
        bench = BenchDocument.model_validate(doc)
    except ValidationError as exc:
        ev.warnings.append(f"{said(ev.rel(path))}: not a kernel benchmark document: {validation_said(exc)}")
        return None
    rows, skipped = [], []
    for i, entry in enumerate(bench.skinny_linear):
        try:
            rows.append(SkinnyRow.model_validate(entry))
        except ValidationError as exc:
            skipped.append(f"skinny_linear[{i}] ({validation_said(exc)})")
    if skipped:
        ev.warnings.append(skipped_warning(ev.rel(path), skipped, len(bench.skinny_linear), "entries skipped"))
    return bench.model_copy(update={"rows": rows, "skinny_linear": []})


def documents(ev: Evidence, bench_dir: Path) -> list[tuple[Path, BenchDocument]]:
    """bench_dir/*.json that hold a kernel benchmark (a `skinny_linear` list), by name, each checked."""
    if not bench_dir.is_dir():
        return []
    out: list[tuple[Path, BenchDocument]] = []
    paths = sorted(bench_dir.glob("*.json"))
    for path in paths:
        doc = ev.json(path, track=False)
        if not isinstance(doc, dict) or not isinstance(doc.get("skinny_linear"), list):
            continue
        if len(out) == MAX_FILES:
            ev.warnings.append(
                f"{said(ev.rel(bench_dir))}: more than {MAX_FILES} kernel benchmark documents: "
                f"{said(path.name)} and later ones not plotted"
            )
            break
        bench = parse(ev, path, doc)
        if bench is not None:
            ev.read.append(ev.rel(path))
            out.append((path, bench))
    return out
