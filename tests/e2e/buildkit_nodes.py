"""Real BuildKit nodes for the multi-node tests and bench (issue 33): `buildkitd` v0.32.2 from
../shared/tools/buildkit/, rootful, each with its own --root under /var/tmp and its own unix socket, host network,
the OCI worker; a copy of the checkout to build from (its own build/ records and logs); the matrix's
`settings.builders` entry naming them.

Used by tests/e2e/test_multinode_e2e.py and bench/multinode.py; stop each node with stop_node (its process group,
then its root folder).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("IMAGEBUILD_BUILDKIT_TOOLS", REPO.parent / "shared" / "tools" / "buildkit"))
WHY_MISSING = (
    f"no buildkitd/buildctl in {TOOLS}: on a machine with Docker Hub the same two-node builder runs with buildx's "
    "docker-container driver and the moby/buildkit:v0.32.2 image (docs/builders.md)"
)


def tools_present() -> bool:
    return (TOOLS / "buildkitd").is_file() and (TOOLS / "buildctl").is_file()


@dataclass
class Node:
    name: str
    socket: str
    root: Path
    process: subprocess.Popen[bytes]

    def histories(self) -> list[dict[str, Any]]:
        """The builds this node recorded, as it keeps them (buildctl, not buildx): ref, the platform asked for, the
        manifest digest it exported (completed builds), and its step counts."""
        found = []
        for line in buildctl(self, "debug", "histories", "--format", "{{json .}}").splitlines():
            record = json.loads(line).get("record", {})
            result = record.get("Result") or {}  # the exported manifest (ResultDeprecated; Results per platform)
            exported = result.get("ResultDeprecated") or next(iter((result.get("Results") or {}).values()), {})
            found.append(
                {
                    "ref": record.get("Ref"),
                    "platform": (record.get("FrontendAttrs") or {}).get("platform"),
                    "digest": exported.get("digest"),
                    "steps": record.get("numTotalSteps"),
                    "cached": record.get("numCachedSteps") or 0,
                }
            )
        return found

    def uncached_steps(self, ref: str) -> list[str]:
        """The names of the steps of build record REF that BuildKit ran rather than took from a cache (its own
        progress stream of the record, rawjson: each vertex's last state)."""
        out = buildctl(self, "debug", "logs", "--progress", "rawjson", ref)
        vertexes: dict[str, dict[str, Any]] = {}
        for line in out.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            for vertex in event.get("vertexes") or []:
                vertexes.setdefault(vertex["digest"], {}).update({k: v for k, v in vertex.items() if v is not None})
        return [str(v.get("name")) for v in vertexes.values() if not v.get("cached")]


def start_node(name: str, tag: str) -> Node:
    root = Path(f"/var/tmp/h8-{tag}-{name}")
    socket = f"unix:///run/h8-bk-{tag}-{name}.sock"
    with open(f"/var/tmp/h8-{tag}-{name}.log", "wb") as log:  # the daemon keeps its own copy of the descriptor
        process = subprocess.Popen(
            [str(TOOLS / "buildkitd"), "--root", str(root), "--addr", socket, "--oci-worker=true"]
            + ["--containerd-worker=false", "--oci-worker-net", "host"]
            + ["--allow-insecure-entitlement", "network.host"],  # imagebuild builds with --network host
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    node = Node(name, socket, root, process)
    for _ in range(60):
        probe = subprocess.run(
            [str(TOOLS / "buildctl"), "--addr", socket, "debug", "workers"], capture_output=True, timeout=30
        )
        if probe.returncode == 0:
            return node
        time.sleep(0.5)
    stop_node(node)
    raise AssertionError(f"buildkitd {name} did not answer on {socket}")


def stop_node(node: Node) -> None:
    if node.process.poll() is None:
        os.killpg(node.process.pid, signal.SIGTERM)
        try:
            node.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(timeout=30)
    subprocess.run(["umount", "-R", str(node.root)], capture_output=True, check=False)
    shutil.rmtree(node.root, ignore_errors=True)
    Path(node.socket.removeprefix("unix://")).unlink(missing_ok=True)


def buildctl(node: Node, *args: str) -> str:
    return subprocess.run(
        [str(TOOLS / "buildctl"), "--addr", node.socket, *args], capture_output=True, text=True, timeout=600, check=True
    ).stdout


def copy_checkout(dest: Path) -> Path:
    """The checkout's tracked files as they are in the working tree, copied to dest."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    # one commit of it, at the checkout's commit time: builds read their revision and SOURCE_DATE_EPOCH from git
    when = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True).stdout
    who = {"GIT_AUTHOR_NAME": "h8", "GIT_AUTHOR_EMAIL": "h8@localhost", "GIT_COMMITTER_NAME": "h8"}
    who |= {"GIT_COMMITTER_EMAIL": "h8@localhost", "GIT_AUTHOR_DATE": f"@{when.strip()}"}
    who |= {"GIT_COMMITTER_DATE": f"@{when.strip()}", "PATH": os.environ["PATH"], "HOME": str(dest)}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy of the checkout"]):
        subprocess.run(["git", *args], cwd=dest, env=who, capture_output=True, check=True)
    return dest


def add_builder(matrix: Path, builder: str, staging: str, nodes: dict[str, tuple[Node, list[str]]]) -> None:
    """settings.builder and settings.builders.<builder> in the copy's matrix.yaml: node name -> (node, platforms)."""
    settings: dict[str, Any] = {
        "builder": builder,
        "builders": {
            builder: {
                "driver": "remote",
                "staging": staging,
                "nodes": [
                    {"name": name, "endpoint": node.socket, "platforms": platforms}
                    for name, (node, platforms) in nodes.items()
                ],
            }
        },
    }
    text = matrix.read_text()
    head = "settings:\n"
    assert text.count(head) == 1, "matrix.yaml has one settings: block"
    added = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in settings.items())  # YAML flow style
    matrix.write_text(text.replace(head, head + added))
