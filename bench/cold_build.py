"""Cold build time per OCI platform of one target, and the ratio of each to the first (issue 22: arm64 / amd64 <= 1.5).

Usage: python3 bench/cold_build.py [--target local-cpu] [--platform P ...] [--json-out bench/results/cold_build.json]

Each platform is built by `imagebuild build TARGET --platform P --no-cache` as a whole process, one after the other,
against the default engine: every Dockerfile step runs (BuildKit's cache mounts, pip's download cache among them,
and the base images stay warm, as bench/build_overhead.py --cold). The slowest steps of each build (from its
BuildKit log) are recorded, so a ratio that misses says where the time went.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "import sys; from imagebuild.cli import main; sys.exit(main())"]
RATIO_TARGET = 1.5
_STEP = re.compile(r"^#(\d+) \[([^\]]+)\] (.*)$")
_DONE = re.compile(r"^#(\d+) DONE ([0-9.]+)s$")


def slowest(log: Path, count: int = 6) -> list[dict[str, object]]:
    names: dict[str, str] = {}
    done: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if match := _STEP.match(line):
            names.setdefault(match.group(1), f"[{match.group(2)}] {match.group(3)}"[:110])
        elif match := _DONE.match(line):
            done[match.group(1)] = float(match.group(2))
    steps = sorted(((s, names.get(i, i)) for i, s in done.items()), reverse=True)[:count]
    return [{"s": s, "step": name} for s, name in steps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="local-cpu")
    parser.add_argument("--platform", action="append", default=[])
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    platforms = args.platform or ["linux/amd64", "linux/arm64"]
    env = {**os.environ, "IMAGEBUILD_LOCAL_REPO": "imagebuild-bench"}
    tmp = Path(tempfile.mkdtemp(prefix="imagebuild-cold-"))
    builds = []
    for platform in platforms:
        report = tmp / f"{platform.replace('/', '-')}.json"
        argv = [*CLI, "build", args.target, "--platform", platform, "--no-cache", "--report", str(report)]
        started = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        elapsed = round(time.perf_counter() - started, 1)
        if proc.returncode != 0:
            sys.exit(f"failed: {shlex.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        target = json.loads(report.read_text())["targets"][0]
        builds.append(
            {
                "platform": platform,
                "wall_s": elapsed,
                "build_s": target["duration_s"],
                "steps": target["total_steps"],
                "slowest_steps": slowest(Path(target["log"])),
            }
        )
    first = builds[0]["wall_s"]
    for build in builds:
        build["ratio_to_first"] = round(float(build["wall_s"]) / float(first), 2)  # type: ignore[arg-type]
    with open("/proc/loadavg", encoding="ascii") as handle:
        load = handle.read().split()[:3]
    result = {
        "benchmark": "cold_build",
        "command": shlex.join(["python3", *sys.argv]),
        "target": args.target,
        "builds": builds,
        "ratio_target": RATIO_TARGET,
        "meets_target": all(float(b["ratio_to_first"]) <= RATIO_TARGET for b in builds),  # type: ignore[arg-type]
        "note": "--no-cache per platform, one after the other; base images and BuildKit cache mounts warm",
        "machine": {"cpus": os.cpu_count(), "loadavg_after": load},
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.json_out:
        args.json_out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
