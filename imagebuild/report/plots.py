"""Plots as static SVG drawn by matplotlib (no script, no CDN: embedded inline, the page works offline).

matplotlib because it is the long-kept static plotting library of the Python world, writes SVG without a browser
or a server, and its SVG output is deterministic with a fixed hash salt and no date. Each plot also carries its
numbers as a table (screen readers, copying). Colours: the Okabe-Ito palette (distinguishable with colour
blindness), and each series also has its own marker.
"""

from __future__ import annotations

import io
import json
import re
import statistics
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from imagebuild.report.bench import BenchDocument, SkinnyRow
from imagebuild.report.escape import checked_svg, element_id, markup, plain_text
from imagebuild.report.model import HistoryPoint, Plot

PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
FAMILIES = ("qkv", "o", "gate_up", "down", "lm_head")


def _svg(fig: Any, plot_id: str, title: str) -> str:
    """The figure as an inline <svg> (role img, titled), checked before it reaches the page (escape.checked_svg).
    `plot_id` is an escape.element_id; the title is escaped by escape.markup, jinja2's rule."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": plot_id, "text.usetex": False}):
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    head_end = text.index(">") + 1
    title_id = markup(f"{plot_id}-title")
    head = text[: head_end - 1] + f' role="img" aria-labelledby="{title_id}" class="plot">'
    return checked_svg(head + f'<title id="{title_id}">{markup(title)}</title>' + text[head_end:])


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=96)
    fig.set_facecolor("white")
    return fig


def _style(ax: Any) -> None:
    ax.grid(True, color="#cccccc", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def runtime_plot(points: list[HistoryPoint]) -> Plot | None:
    """tokens/s and server start per image (series) over time, from the smoke history."""
    measured = [p for p in points if p.tokens_per_s is not None or p.server_start_s is not None]
    if not measured:
        return None
    series: dict[str, list[HistoryPoint]] = defaultdict(list)
    for p in measured:
        series[p.series].append(p)
    fig = _figure(9.5, 3.4)
    left, right = fig.subplots(1, 2)
    for i, (name, pts) in enumerate(sorted(series.items())):
        when = [datetime.fromisoformat(p.when) for p in pts]
        style = {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)], "label": name}
        left.plot(when, [p.tokens_per_s for p in pts], **style)
        right.plot(when, [p.server_start_s for p in pts], **style)
    left.set_title("Generation speed (higher is better)", fontsize=10)
    left.set_ylabel("tokens/s")
    right.set_title("Server start to healthy (lower is better)", fontsize=10)
    right.set_ylabel("seconds")
    import matplotlib.dates as mdates

    times = [datetime.fromisoformat(p.when) for p in measured]
    pad = max((max(times) - min(times)) * 0.05, timedelta(hours=12))
    for ax in (left, right):
        _style(ax)
        ax.set_ylim(bottom=0)
        ax.set_xlim(min(times) - pad, max(times) + pad)
        locator = mdates.AutoDateLocator(maxticks=6)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.tick_params(axis="x", labelsize=8)
    plain_text(left.legend(fontsize=8, loc="lower left").get_texts())  # a series name is drawn, never mathtext
    title = "Smoke runtime check over time: tokens/s and server start per image"
    table = [["image (target, OCI platform, arch)", "when (UTC)", "passed", "tokens/s", "server start s", "TTFT ms"]]
    for p in measured:
        table.append(
            [
                p.series,
                p.when,
                "yes" if p.passed else "no",
                _fmt(p.tokens_per_s, "{:.1f}"),
                _fmt(p.server_start_s, "{:.2f}"),
                _fmt(p.ttft_s * 1000 if p.ttft_s is not None else None, "{:.0f}"),
            ]
        )
    return Plot(
        id="plot-runtime",
        title=title,
        svg=_svg(fig, "plot-runtime", title),
        caption=f"{len(measured)} smoke report(s) with a runtime measurement, kept in build/report/smoke-history.json",
        table=table,
        source="build/report/smoke-history.json",
    )


def _fmt(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def _family(row: SkinnyRow) -> str | None:
    family = row.sources[0].rsplit(".", 1)[-1]
    return family if family in FAMILIES else None


def kernel_plot(path: Path, doc: BenchDocument, rel: str) -> Plot | None:
    """skinny_linear against the library call (cuBLAS via F.linear) per shape family and M: median speed-up.
    `doc` is bench.parse's: every entry checked."""
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in doc.rows:
        family = _family(row)
        if family:
            cells[(family, row.M)].append(row.speedup_vs_cublas)
    if not cells:
        return None
    ms = sorted({m for _, m in cells})
    families = [f for f in FAMILIES if any((f, m) in cells for m in ms)]
    fig = _figure(9.5, 3.4)
    ax = fig.subplots()
    width = 0.8 / len(ms)
    for j, m in enumerate(ms):
        xs = [i + (j - (len(ms) - 1) / 2) * width for i in range(len(families))]
        ys = [statistics.median(cells[(f, m)]) if (f, m) in cells else 0 for f in families]
        ax.bar(xs, ys, width=width * 0.95, color=PALETTE[j % len(PALETTE)], label=f"M={m}")
    ax.axhline(1.0, color="#000000", linewidth=1, linestyle="--")
    ax.set_xticks(range(len(families)), families)
    ax.set_xlabel("shape family (decode-layer projection, bench/shapes.yaml)")
    ax.set_ylabel("speed-up vs cuBLAS (x)")
    lows = [min(v) for v in cells.values()]
    highs = [max(v) for v in cells.values()]
    ax.set_ylim(max(0.0, min(lows) - 0.1), max(highs) * 1.05)
    _style(ax)
    ax.legend(fontsize=8, ncol=len(ms), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    gpu = doc.gpu or "GPU"
    title = f"skinny_linear against the library call (F.linear, cuBLAS) on {gpu}: median speed-up per shape family"
    table = [["shape family", "M", "rows", "median speed-up", "min", "max"]]
    for f in families:
        for m in ms:
            if (f, m) in cells:
                v = cells[(f, m)]
                table.append([f, str(m), str(len(v)), f"{statistics.median(v):.2f}", f"{min(v):.2f}", f"{max(v):.2f}"])
    command = doc.command
    plot_id = element_id("plot-kernels", path.stem)  # a file name is never markup
    return Plot(
        id=plot_id,
        title=title,
        svg=_svg(fig, plot_id, title),
        caption=(
            f"{sum(len(v) for v in cells.values())} rows of {rel} (fp16 and bf16, every model shape of the family); "
            f"dashed line: as fast as cuBLAS. Measured with: {json.dumps(command) if command else 'see the file'}"
        ),
        table=table,
        source=rel,
    )
