#!/usr/bin/env python3
"""local-cpu on one BuildKit node and on two (issue 33), side by side in one run, then what a registry cache and the
input key save. Run as root from the checkout, with the venv's python:

    .venv/bin/python bench/multinode.py --out bench/results/multinode.json

Every node is a fresh `buildkitd` v0.32.2 from ../shared/tools/buildkit/ (tests/e2e/buildkit_nodes.py: own --root
under /var/tmp, own unix socket, host network), reached through one buildx builder of the remote driver made by
imagebuild from `settings.builders`; legs are pushed by digest to a staging repository of the loopback registry
and pulled into the Docker 26.1 engine of scripts/setup.sh (its own image store).

Phases, each written to --out as soon as it is measured:

1. two nodes, one per platform, build both legs (`build -j 2`), cold (fresh roots);
2. node 1 exports its amd64 leg's cache to the registry (`--cache-to type=registry,mode=max`, all steps local);
   node 2, its local cache pruned, builds the amd64 leg it never built with `--cache-from` that cache: the cache
   hit rate (BuildKit's own count of cached steps, from its build record, beside imagebuild's Dockerfile steps);
3. both legs staged the CI way (`publish --allow-unsmoked`), smoked for real, the smoke recorded under each leg's
   input key; then `build` again with nothing changed: the seconds until every leg is decided (reused);
4. node 1 alone, its cache pruned, pinning linux/amd64 and linux/arm64, builds both legs (`build -j 2`), cold, into
   a staging repository with no records (so nothing is reused).

Both nodes here share the machine's cores (2, with other work): phase 1 against phase 4 shows what the routing
costs and that the legs run apart, not the speed-up of nodes with cores of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from buildkit_nodes import TOOLS, add_builder, buildctl, copy_checkout, start_node, stop_node  # noqa: E402

REGISTRY = "127.0.0.1:5000"
ENGINE = "unix:///var/run/imagebuild-docker26.sock"
PLATFORMS = ("linux/amd64", "linux/arm64")


def run(workspace: Path, env: dict[str, str], *args: str) -> tuple[int, float, str]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "imagebuild.cli", "--matrix", str(workspace / "matrix.yaml"), *args],
        cwd=workspace,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=7200,
        check=False,
    )
    return proc.returncode, round(time.monotonic() - started, 1), proc.stdout + proc.stderr


def must(result: tuple[int, float, str], what: str) -> float:
    code, seconds, output = result
    if code != 0:
        sys.exit(f"error: {what} exited {code}:\n{output[-4000:]}")
    return seconds


def legs(report: Path) -> list[dict[str, Any]]:
    keep = ("target", "ok", "duration_s", "cached_steps", "total_steps", "node", "pushed", "input_key", "reused")
    return [{k: t.get(k) for k in keep} for t in json.loads(report.read_text())["targets"]]


def set_builder(matrix: Path, original: str, name: str, staging: str, nodes: dict[str, Any]) -> None:
    matrix.write_text(original)
    add_builder(matrix, name, staging, nodes)


def main() -> None:  # noqa: PLR0915 - one phase after the other, each timed where it runs
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phases", default="two,other,again,one", help="in this order (two, other, again, one)")
    given = parser.parse_args()
    out, phases = given.out, given.phases.split(",")
    tag = uuid.uuid4().hex[:8]
    workspace = copy_checkout(Path(f"/var/tmp/h8-bench-{tag}-checkout"))
    matrix = workspace / "matrix.yaml"
    original = matrix.read_text()
    env = {"DOCKER_HOST": ENGINE}
    base = f"{REGISTRY}/h8-{tag}-base/debian:bookworm-amd64"
    sub = ("--base-substitute", f"local/debian:bookworm={base}")
    staging, cache = f"{REGISTRY}/h8-{tag}-staging", f"{REGISTRY}/h8-{tag}-cache:local-cpu-linux-amd64"
    docker = ["docker", "--host", ENGINE]
    subprocess.run([*docker, "tag", "local/debian:bookworm", base], check=True)
    subprocess.run([*docker, "push", "-q", base], check=True, capture_output=True)
    result: dict[str, Any] = {
        "command": f"bench/multinode.py --out {out} --phases {given.phases}",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores shared with other work, load {os.getloadavg()[0]:.1f} at start",
        "buildkit": buildctl_version(),
        "engine": "Docker 26.1 (scripts/setup.sh), legs pulled by digest from " + staging,
    }
    nodes: dict[str, Any] = {}

    def save() -> None:  # after every phase: a run stopped early still leaves what it measured
        out.write_text(json.dumps(result, indent=2) + "\n")

    keys: dict[str, str] = {}

    def node(name: str) -> Any:
        if name not in nodes:
            nodes[name] = start_node(name, f"bench-{tag}")
        return nodes[name]

    def cold(label: str, builder: str, where: str, placed: dict[str, Any]) -> None:
        for name in placed:  # every node starts without cache: what it builds, it builds
            buildctl(nodes[name], "prune", "--all")
        set_builder(matrix, original, builder, where, placed)
        report = workspace / "build" / f"{label}.json"
        seconds = must(run(workspace, env, "build", "local-cpu", "-j", "2", *sub, "--report", str(report)), label)
        result[label] = {"wall_s": seconds, "legs": legs(report)}
        keys.update({leg["target"]: leg["input_key"] for leg in result[label]["legs"]})
        save()

    try:
        for phase in phases:
            if phase == "two":  # two nodes, one platform each, cold
                pair = {"n1": (node("n1"), ["linux/amd64"]), "n2": (node("n2"), ["linux/arm64"])}
                cold("two_nodes", f"h8b-{tag}-two", staging, pair)
            elif phase == "one":  # node 1 alone, pinning both platforms, cold, into a staging repo with no records
                cold("one_node", f"h8b-{tag}-one", f"{staging}-one", {"n1": (node("n1"), list(PLATFORMS))})
            elif phase == "other":  # the amd64 leg's cache exported by node 1, then built from it on node 2
                result["other_node"] = other_node(workspace, env, sub, cache, node("n2"), keys, original)
                save()
            elif phase == "again":  # stage, smoke, record; then build again with nothing changed
                result["nothing_changed"] = nothing_changed(workspace, env, staging, keys, sub)
                save()
    finally:
        for node in nodes.values():
            stop_node(node)
        for name in ("one", "two", "swap"):  # buildx's records of the builders
            subprocess.run(["docker", "buildx", "rm", "--keep-state", f"h8b-{tag}-{name}"], capture_output=True)
        subprocess.run([*docker, "rmi", base], capture_output=True)
        subprocess.run(["rm", "-rf", str(workspace)], check=False)
    print(json.dumps({k: v.get("wall_s") for k, v in result.items() if isinstance(v, dict)}))


def other_node(workspace: Path, env: dict[str, str], sub: tuple[str, ...], cache: str, n2: Any, keys: Any,
               pristine: str) -> Any:  # fmt: skip
    """The builder as it is (its amd64 node has built the leg) exports the amd64 leg's cache to the registry; node 2,
    its own cache pruned, alone in a builder, builds that leg with --cache-from it: BuildKit's cached steps."""
    to = f"type=registry,ref={cache},mode=max,oci-mediatypes=true"
    report = workspace / "build" / "cache-export.json"
    args = ("build", "local-cpu", "--platform", "linux/amd64", *sub, "--cache-to", to, "--report", str(report))
    export_s = must(run(workspace, env, *args), "export")
    buildctl(n2, "prune", "--all")
    matrix = workspace / "matrix.yaml"
    original, builder = matrix.read_text(), f"h8b-{n2.root.name}-swap"
    set_builder(matrix, pristine, builder, f"{REGISTRY}/{n2.root.name}-other", {"n2": (n2, ["linux/amd64"])})
    report = workspace / "build" / "other-node.json"
    args = ("build", "local-cpu", "--platform", "linux/amd64", *sub, "--cache-from", f"type=registry,ref={cache}")
    try:
        seconds = must(run(workspace, env, *args, "--report", str(report)), "other node")
        leg = legs(report)[0]
        record = next(h for h in n2.histories() if h["digest"] and h["digest"] in (leg["pushed"] or ""))
        # the same leg once more on node 2, its own cache now warm: how many steps any build can take from a cache
        warm_report, before = workspace / "build" / "other-node-warm.json", {h["ref"] for h in n2.histories()}
        must(run(workspace, env, *args, "--report", str(warm_report)), "other node, warm")
        warm_record = next(h for h in n2.histories() if h["ref"] not in before and h["digest"])
    finally:
        matrix.write_text(original)
        subprocess.run(["docker", "buildx", "rm", "--keep-state", builder], capture_output=True, check=False)
    return {
        "export_wall_s": export_s,
        "wall_s": seconds,
        "leg": leg,
        "dockerfile_steps_cached": f"{leg['cached_steps']}/{leg['total_steps']}",
        "buildkit_steps_cached": f"{record['cached']}/{record['steps']}",
        "buildkit_record": record,
        "buildkit_steps_not_cached": n2.uncached_steps(record["ref"]),
        "warm_same_node": {
            "what": "node 2 builds the leg again, its own cache warm: the most steps any build takes from a cache",
            "buildkit_steps_cached": f"{warm_record['cached']}/{warm_record['steps']}",
            "buildkit_steps_not_cached": n2.uncached_steps(warm_record["ref"]),
        },
        "every_cacheable_step_hit": record["cached"] >= warm_record["cached"],
        "input_key_same_as_built_before": leg["input_key"] == keys.get("local-cpu"),
    }


def nothing_changed(
    workspace: Path, env: dict[str, str], staging: str, keys: dict[str, str], sub: tuple[str, ...]
) -> Any:
    """Both legs staged the CI way and smoked for real, each smoke recorded under its leg's input key; then `build`
    with nothing changed: the seconds until every leg is decided."""
    from imagebuild.building.input_key import record_smoked
    from imagebuild.engine.registry import Registry, RepoRef

    repo = RepoRef.parse(staging)
    smoke_s = {}
    for oci, target in zip(PLATFORMS, ("local-cpu", "local-cpu-linux-arm64"), strict=True):
        staged, smoked = workspace / "build" / f"staged-{target}.json", workspace / "build" / f"smoke-{target}.json"
        must(run(workspace, env, "publish", "local-cpu", "--platform", oci, "--registry", staging,
                 "--allow-unsmoked", "--out", str(staged)), f"staging {oci}")  # fmt: skip
        smoke_s[oci] = must(run(workspace, env, "smoke", "local-cpu", "--platform", oci, "--gpu", "none",
                                "--report", str(smoked)), f"smoke {oci}")  # fmt: skip
        report_doc = json.loads(smoked.read_text())
        record_smoked(Registry(repo), repo.repo, keys[target], json.loads(staged.read_text())["digest"], report_doc)
    report = workspace / "build" / "again.json"
    seconds = must(run(workspace, env, "build", "local-cpu", *sub, "--report", str(report)), "again")
    again = legs(report)
    return {
        "wall_s": seconds,
        "decide_s": round(sum(leg["duration_s"] for leg in again), 2),
        "every_leg_reused": all(leg["reused"] for leg in again),
        "legs": again,
        "smoke_s": smoke_s,
        "goal": "under 5 s for the whole matrix; wall_s is the whole command (loading the matrix, probing the engine "
        "and the builder, hashing every leg's inputs, one registry read per leg, pulling what is not local)",
    }


def buildctl_version() -> str:
    proc = subprocess.run([str(TOOLS / "buildkitd"), "--version"], capture_output=True, text=True, check=False)
    return f"{proc.stdout.strip()} on {platform.machine()}"


if __name__ == "__main__":
    main()
