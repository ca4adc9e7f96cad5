"""Assemble the page: rows from the matrix and the evidence, the registry's attestations when asked, the lookup
table, the smoke history and the plots."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from imagebuild.engine.cosign import Verifier
from imagebuild.matrix import Matrix
from imagebuild.report import lookup, plots
from imagebuild.report.bench import documents as bench_documents
from imagebuild.report.escape import UnsafeSvg
from imagebuild.report.evidence import Evidence, said
from imagebuild.report.history import update
from imagebuild.report.model import Page, Plot
from imagebuild.report.rows import Inspect, rows_for

HISTORY = Path("build/report/smoke-history.json")


def make_page(
    matrix: Matrix,
    root: Path,
    *,
    inspect: Inspect | None = None,
    registry: str | None = None,
    verifier: Verifier | None = None,
    bench_dir: Path | None = None,
    revision: str | None = None,
    keep_history: bool = True,
    now: datetime | None = None,
) -> Page:
    ev = Evidence(root)
    rows = rows_for(matrix, ev, inspect)
    if registry is not None and verifier is not None:
        from imagebuild.report.registry import apply

        apply(rows, registry, verifier, ev.warnings)
    points = update(ev, rows, root / HISTORY, write=keep_history)
    page_plots = [p for p in [_drawn(ev, HISTORY, lambda: plots.runtime_plot(points))] if p is not None]
    bench = bench_dir if bench_dir is not None else root / "bench" / "results"
    for path, doc in bench_documents(ev, bench):
        plot = _drawn(ev, path, lambda: plots.kernel_plot(path, doc, ev.rel(path)))  # noqa: B023 (called at once)
        if plot is not None:
            page_plots.append(plot)
    try:
        shown = str(matrix.path.resolve().relative_to(root.resolve()))
    except ValueError:  # a matrix outside the evidence root: its name (the page names no machine's folders)
        shown = matrix.path.name
    return Page(
        generated=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        matrix=shown,
        matrix_sha256=matrix.sha256,
        revision=revision,
        rows=rows,
        lookup=lookup.table(rows),
        plots=page_plots,
        evidence=sorted(set(ev.read)),
        warnings=ev.warnings,
        registry=registry,
    )


def _drawn(ev: Evidence, source: Path, draw: Callable[[], Plot | None]) -> Plot | None:
    """A plot, or None with a warning when its drawing is refused (escape.UnsafeSvg: it would run something)."""
    try:
        return draw()
    except UnsafeSvg as exc:
        ev.warnings.append(f"{said(ev.rel(source))}: plot not shown: {exc}")
        return None


def engine_inspect(warnings: list[str]) -> Inspect | None:
    """Size and labels of a built image from the engine; None, with a warning, when none answers."""
    from imagebuild.engine.interface import EngineError
    from imagebuild.engine.sdk import docker_engine
    from imagebuild.errors import ImagebuildError

    try:
        engine = docker_engine()
    except ImagebuildError as exc:
        warnings.append(f"sizes and TunableOp labels unknown: {exc}")
        return None

    def inspect(image_id: str) -> dict[str, object] | None:
        try:
            image = engine.image(image_id)
        except EngineError:
            return None
        return {"size": image.size, "labels": dict(image.labels)}

    return inspect
