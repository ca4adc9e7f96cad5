"""The page writer: compat.html (jinja2, autoescaped; styles, script and plots inline: it works offline from a file)
and compat.json (the same data)."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from imagebuild.report.escape import script_json
from imagebuild.report.model import Page
from imagecontract.atomic import write_atomic

TEMPLATES = Path(__file__).with_name("templates")
COVERAGE_WORDS = {
    "present": "present",
    "partial": "partial (some feature settings)",
    "compatible": "compatible (older SASS of the same major)",
    "ptx": "PTX only",
    "absent": "absent",
}


def _size(value: int | None) -> str:
    if value is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value} B"


def _check_counts(checks: dict[str, str]) -> str:
    """{"silu": "passed", ...} -> "4 passed, 1 failed, 1 skipped" (failed first when any)."""
    order = ("failed", "passed", "skipped")
    counts = {s: sum(1 for v in checks.values() if v == s) for s in order}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n)


def render(page: Page) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["size"] = _size
    env.filters["coverage_word"] = lambda s: COVERAGE_WORDS.get(s, s)
    env.filters["check_counts"] = _check_counts
    counts = {"passed": 0, "failed": 0, "not run": 0}
    for row in page.rows:
        counts[row.verdict] += 1
    lookup_json = script_json(page.lookup)  # inside <script>: no markup at all
    return env.get_template("page.html.j2").render(
        page=page,
        counts=counts,
        lookup_json=lookup_json,
        runtime_plot=any(p.id == "plot-runtime" for p in page.plots),
    )


def write(page: Page, out_dir: Path) -> tuple[Path, Path]:
    """out_dir/compat.html and out_dir/compat.json."""
    html_path, json_path = out_dir / "compat.html", out_dir / "compat.json"
    write_atomic(html_path, render(page))
    write_atomic(json_path, json.dumps(page.to_dict(), indent=1, sort_keys=True) + "\n")
    return html_path, json_path
