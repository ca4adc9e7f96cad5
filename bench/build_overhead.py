"""The cost of a fully cached `imagebuild build` over bare BuildKit builds of the same Dockerfile, per OCI platform,
post-build layers (arch coverage, SBOM, size record) included (issue 22 target: at most 0.5 s per platform).

Usage: python3 bench/build_overhead.py [--target local-cpu] [--repeat N] [--json-out bench/results/build_overhead.json]

Both sides run as whole processes in the same session, alternating, against the same engine and context:
- ours: `imagebuild build TARGET` (every platform the target lists, one process), and `imagebuild build TARGET
  --platform P` for each platform;
- bare: `docker build --platform P` of the same Dockerfile with the same secrets, network, build args and labels
  (the argv imagebuild runs, read from its report, under a tag of its own), one process per platform.
The whole-target overhead is (ours - the sum of the bare builds) / platforms. Every build must be fully cached.
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
OVERHEAD_TARGET_S = 0.5
CLI = [sys.executable, "-c", "import sys; from imagebuild.cli import main; sys.exit(main())"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"failed: {shlex.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def bare_argv(command: list[str], platform_name: str) -> list[str]:
    """imagebuild's BuildKit argv (from its report) with one tag of the bench's own in place of ours: the bare build
    exports and names an image as ours does, and never moves the tags imagebuild points at its final image."""
    out, skip = [], False
    for arg in command:
        if skip:
            skip = False
            continue
        if arg in ("-t", "--iidfile"):
            skip = True
            continue
        out.append(arg)
    return [*out[:-1], "-t", f"imagebuild-bench-bare:{platform_name.replace('/', '-')}", out[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="local-cpu")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    env = {**os.environ, "IMAGEBUILD_LOCAL_REPO": "imagebuild-bench"}
    tmp = Path(tempfile.mkdtemp(prefix="imagebuild-bench-"))
    report = tmp / "report.json"
    whole = [*CLI, "build", args.target, "--report", str(report)]
    timed(whole, env)  # warm: every step cached and every post-build record written afterwards
    commands = [t["command"] for t in json.loads(report.read_text())["targets"]]
    oci = [next(a for a in zip(c, c[1:], strict=False) if a[0] == "--platform")[1] for c in commands]
    bare_env = {**env, "DOCKER_BUILDKIT": "1"}
    bares = [bare_argv(c, p) for c, p in zip(commands, oci, strict=True)]
    one = {p: [*CLI, "build", args.target, "--platform", p, "--report", str(tmp / f"{p.replace('/', '-')}.json")]
           for p in oci}  # fmt: skip
    for argv in [*bares, *one.values()]:
        timed(argv, bare_env if argv in bares else env)
    ours_s: list[float] = []
    bare_s: dict[str, list[float]] = {p: [] for p in oci}
    one_s: dict[str, list[float]] = {p: [] for p in oci}
    for _ in range(args.repeat):
        ours_s.append(timed(whole, env))
        for p, argv in zip(oci, bares, strict=True):
            bare_s[p].append(timed(argv, bare_env))
            one_s[p].append(timed(one[p], env))
    final = json.loads(report.read_text())["targets"]
    assert all(t["cached_steps"] == t["total_steps"] for t in final), "the benchmark needs fully cached targets"
    med = statistics.median
    bare_total = sum(med(v) for v in bare_s.values())
    per_platform = {
        p: {
            "imagebuild_build_median_s": round(med(one_s[p]), 4),
            "bare_docker_build_median_s": round(med(bare_s[p]), 4),
            "overhead_s": round(med(one_s[p]) - med(bare_s[p]), 4),
            "samples_imagebuild_s": [round(x, 4) for x in one_s[p]],
            "samples_bare_s": [round(x, 4) for x in bare_s[p]],
        }
        for p in oci
    }
    overhead = (med(ours_s) - bare_total) / len(oci)
    result: dict[str, object] = {
        "benchmark": "build_overhead",
        "command": shlex.join(["python3", *sys.argv]),
        "target": args.target,
        "platforms": oci,
        "repeat": args.repeat,
        "whole_target": {
            "imagebuild_build_median_s": round(med(ours_s), 4),
            "bare_docker_builds_sum_of_medians_s": round(bare_total, 4),
            "overhead_per_platform_s": round(overhead, 4),
            "samples_imagebuild_s": [round(x, 4) for x in ours_s],
        },
        "per_platform": per_platform,
        "overhead_target_s": OVERHEAD_TARGET_S,
        "post_build": "arch coverage, SBOM and size record restored from build/post/ for the same built image ID",
        "cached_steps": [t["cached_steps"] for t in final],
        "engine": json.loads(report.read_text())["engine"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    result["meets_target"] = overhead <= OVERHEAD_TARGET_S and all(
        v["overhead_s"] <= OVERHEAD_TARGET_S for v in per_platform.values()
    )
    text = json.dumps(result, indent=2) + "\n"
    if args.json_out:
        args.json_out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
