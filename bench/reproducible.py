"""Two builds of one commit from scratch give one manifest digest per platform (issue 22): the double-build benchmark.

Usage: python3 bench/reproducible.py --host unix:///PATH/docker.sock [--target local-cpu] [--platform P ...]
       [--buildx /usr/local/lib/imagebuild/docker-buildx] [--json-out bench/results/reproducible.json]

The engine named by --host must be a current one (BuildKit 0.13: SOURCE_DATE_EPOCH and `rewrite-timestamp`, the
containerd image store for one build of every platform); it should be one of your own: its build cache is pruned
before each build (`buildx prune -af`), so both builds run every step, download included (the base images stay).
Each build is one `buildx build` of every platform of the target's one Dockerfile, with SOURCE_DATE_EPOCH the commit
time and the target's build labels, exported as an OCI layout (`type=oci,rewrite-timestamp=true`), never loaded or
pushed. The two layouts are compared per platform: manifest digest, config digest and each layer's digest, a layer
that differs named by the Dockerfile step that made it (the config's history).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MAX_JSON = 4 * 1024 * 1024  # an index, manifest or config read from the layout


def _run(argv: list[str], env: dict[str, str], log: Path | None = None) -> float:
    started = time.perf_counter()
    with open(log or os.devnull, "w", encoding="utf-8") as out:
        proc = subprocess.run(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        sys.exit(f"failed ({proc.returncode}): {shlex.join(argv)}\n{tail}")
    return round(time.perf_counter() - started, 1)


def _blob(layout: tarfile.TarFile, digest: str) -> dict[str, Any]:
    member = layout.getmember("blobs/" + digest.replace(":", "/", 1))
    if member.size > MAX_JSON:
        raise SystemExit(f"error: {digest} is {member.size} bytes, more than a manifest or config holds")
    handle = layout.extractfile(member)
    assert handle is not None
    return json.loads(handle.read())


def manifests(path: Path) -> dict[str, dict[str, Any]]:
    """platform -> {manifest, config, layers, steps} of the OCI layout at path (attestation manifests skipped)."""
    out: dict[str, dict[str, Any]] = {}
    with tarfile.open(path) as layout:
        index_member = layout.extractfile("index.json")
        assert index_member is not None
        todo = list(json.loads(index_member.read())["manifests"])
        while todo:
            desc = todo.pop(0)
            doc = _blob(layout, desc["digest"])
            if "manifests" in doc:  # an index inside the layout's index
                todo.extend(doc["manifests"])
                continue
            platform = desc.get("platform") or {}
            if platform.get("os") == "unknown" or "vnd.docker.reference.type" in desc.get("annotations", {}):
                continue  # BuildKit's attestation manifest
            config = _blob(layout, doc["config"]["digest"])
            steps = [h.get("created_by", "") for h in config.get("history", []) if not h.get("empty_layer")]
            key = f"{platform.get('os')}/{platform.get('architecture')}"
            out[key] = {
                "manifest": desc["digest"],
                "config": doc["config"]["digest"],
                "layers": [layer["digest"] for layer in doc["layers"]],
                "steps": steps,
            }
    return out


def compare(first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for platform in sorted(set(first) | set(second)):
        a, b = first.get(platform), second.get(platform)
        if a is None or b is None:
            result[platform] = {"same": False, "why": "built by one of the two builds only"}
            continue
        differing = [
            {"layer": i, "step": (a["steps"][i] if i < len(a["steps"]) else "")[:300], "digests": [x, y]}
            for i, (x, y) in enumerate(zip(a["layers"], b["layers"], strict=False))
            if x != y
        ]
        result[platform] = {
            "same": a["manifest"] == b["manifest"],
            "manifest": [a["manifest"], b["manifest"]],
            "config_same": a["config"] == b["config"],
            "layers": len(a["layers"]),
            "differing_layers": differing,
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="DOCKER_HOST of a current engine of your own")
    parser.add_argument("--target", default="local-cpu")
    parser.add_argument("--platform", action="append", default=[])
    parser.add_argument("--buildx", default="/usr/local/lib/imagebuild/docker-buildx")
    parser.add_argument("--out-dir", type=Path, default=REPO / "build" / "bench-reproducible")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    from imagebuild.building.specs import PlanOptions, plan
    from imagebuild.matrix import load_matrix

    matrix = load_matrix(REPO / "matrix.yaml")
    specs = plan(matrix, [args.target], PlanOptions(platforms=tuple(args.platform)))
    platforms = [str(s.platform) for s in specs]
    epoch = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {**os.environ, "DOCKER_HOST": args.host}
    version = subprocess.run(
        ["/usr/bin/docker", "version", "--format", "{{.Server.Version}}"], env=env, capture_output=True, text=True
    ).stdout.strip()
    for spec in specs:
        if spec.wheels:
            from imagebuild.building.buildkit import stage_wheels

            stage_wheels(spec.wheels, REPO / "build" / "wheelhouse")
    labels = {k: v for k, v in specs[0].labels.items() if k != "io.imagebuild.image-key"}  # per platform: not shared
    cert = os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    builds, times = [], []
    for round_ in (1, 2):
        layout = args.out_dir / f"build-{round_}.tar"
        _run([args.buildx, "prune", "-af"], env)
        argv = [
            args.buildx, "build", "--progress", "plain", "--network", "host", "--platform", ",".join(platforms),
            "-f", str(specs[0].dockerfile), "--secret", f"id=pipcert,src={cert}",
            "--build-arg", f"SOURCE_DATE_EPOCH={epoch}",
            *[x for k, v in sorted(labels.items()) for x in ("--label", f"{k}={v}")],
            "--output", f"type=oci,dest={layout},rewrite-timestamp=true", str(REPO),
        ]  # fmt: skip
        times.append(_run(argv, env, args.out_dir / f"build-{round_}.log"))
        builds.append(manifests(layout))
    compared = compare(*builds)
    result = {
        "benchmark": "reproducible",
        "command": shlex.join(["python3", *sys.argv]),
        "target": args.target,
        "platforms": platforms,
        "engine": version,
        "source_date_epoch": int(epoch),
        "build_s": times,
        "reproducible": all(entry["same"] for entry in compared.values()),
        "per_platform": compared,
        "machine": {"cpus": os.cpu_count()},
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.json_out:
        args.json_out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
