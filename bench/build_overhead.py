"""The cost of `imagebuild build` over a bare `docker build` of the same rendered Dockerfile, fully cached
(target: under 0.5 s), and the cold build time of local-cpu.

Usage: python3 bench/build_overhead.py [--repeat N] [--cold] [--json-out bench/results/build_overhead.json]
Both sides run as processes in the same session, alternating, against the same engine and context; the
reference is `DOCKER_BUILDKIT=1 docker build` with the same secrets, network and Dockerfile. The cold build
uses --no-cache under its own tag (BuildKit cache mounts, such as pip's download cache, and the base image
stay warm: a fresh machine also downloads those).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = "local-cpu"
OVERHEAD_TARGET_S = 0.5
CLI = [sys.executable, "-c", "import sys; from imagebuild.cli import main; sys.exit(main())"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"failed: {shlex.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="also time a --no-cache build of local-cpu")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    env = {**os.environ, "IMAGEBUILD_LOCAL_REPO": "imagebuild-bench"}
    tmp = Path(tempfile.mkdtemp(prefix="imagebuild-bench-"))
    ours = [*CLI, "build", TARGET, "--report", str(tmp / "report.json")]
    timed(ours, env)  # warm: the cache holds every step afterwards
    bare = [
        "/usr/bin/docker", "build", "--progress", "plain", "--network", "host",
        "-f", str(REPO / "dockerfiles" / TARGET / "Dockerfile"),
        "--secret", f"id=pipcert,src={os.environ.get('PIP_CERT', '/etc/ssl/certs/ca-certificates.crt')}",
        "-t", "imagebuild-bench:bare", str(REPO),
    ]  # fmt: skip
    bare_env = {**env, "DOCKER_BUILDKIT": "1"}
    timed(bare, bare_env)
    ours_s, bare_s = [], []
    for _ in range(args.repeat):
        ours_s.append(timed(ours, env))
        bare_s.append(timed(bare, bare_env))
    report = json.loads((tmp / "report.json").read_text())["targets"][0]
    assert report["cached_steps"] == report["total_steps"], "the benchmark needs a fully cached target"
    result: dict[str, object] = {
        "benchmark": "build_overhead",
        "command": shlex.join(["python3", *sys.argv]),
        "target": TARGET,
        "repeat": args.repeat,
        "imagebuild_build_median_s": round(statistics.median(ours_s), 4),
        "bare_docker_build_median_s": round(statistics.median(bare_s), 4),
        "overhead_s": round(statistics.median(ours_s) - statistics.median(bare_s), 4),
        "ratio": round(statistics.median(ours_s) / statistics.median(bare_s), 2),
        "overhead_target_s": OVERHEAD_TARGET_S,
        "samples_imagebuild_s": [round(x, 4) for x in ours_s],
        "samples_bare_s": [round(x, 4) for x in bare_s],
        "cached_steps": report["cached_steps"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    result["meets_target"] = result["overhead_s"] < OVERHEAD_TARGET_S  # type: ignore[operator]
    if args.cold:
        cold_report = tmp / "cold.json"
        cold = timed([*CLI, "build", TARGET, "--no-cache", "--report", str(cold_report)], env)
        result["cold_build_s"] = round(cold, 1)
        result["cold_build_note"] = "--no-cache; base image and BuildKit cache mounts (pip downloads) warm"
    text = json.dumps(result, indent=2) + "\n"
    if args.json_out:
        args.json_out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
