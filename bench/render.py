"""Time rendering the whole matrix (load + resolve + render every target, in memory). Target: under 0.5 s.

Usage: python bench/render.py [--repeat N] [--json-out bench/results/render.json]
Reported: cold (first render in a fresh process, imports excluded) and warm medians, against the target,
and the whole `imagebuild render --check` process (interpreter start and imports included).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagebuild import render  # noqa: E402
from imagebuild.matrix import load_matrix  # noqa: E402

TARGET_S = 0.5


def render_everything() -> int:
    matrix = load_matrix(REPO / "matrix.yaml")
    rendered = render.render_all(matrix, matrix.targets)
    return sum(len(text) for item in rendered for text in item.files.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    start = time.perf_counter()
    size = render_everything()
    cold = time.perf_counter() - start
    warm = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        render_everything()
        warm.append(time.perf_counter() - start)
    cli = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "imagebuild.cli", "render", "--check"], cwd=REPO, check=True, capture_output=True
        )
        cli.append(time.perf_counter() - start)
    result = {
        "command": "python bench/render.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()} python {platform.python_version()}",
        "targets": len(load_matrix(REPO / "matrix.yaml").targets),
        "bytes_rendered": size,
        "cold_s": round(cold, 4),
        "warm_median_s": round(statistics.median(warm), 4),
        "warm_max_s": round(max(warm), 4),
        "cli_render_check_median_s": round(statistics.median(cli), 4),
        "target_s": TARGET_S,
        "cold_over_target": round(cold / TARGET_S, 3),
        "met": cold < TARGET_S and max(warm) < TARGET_S,
    }
    print(json.dumps(result, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
