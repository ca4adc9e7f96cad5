"""`imagebuild doctor`: this host's GPUs, driver and device nodes, whether an image's arches cover them, and the
exact container flags (docker run, compose, Kubernetes) that give a container these GPUs.

The facts come from imagecontract.driver, the same reader the in-image preflight uses, so the host and the
container judge a GPU by one rule (imagecontract.targets.covers). Group IDs are printed as numbers: the
`video`/`render` names inside an image rarely map to the host's IDs, and `--group-add NAME` resolves names in
the image. With the engine (commands/doctor.py asks it): Docker and BuildKit versions, the image store, and which
of multi-platform in one build, OCI media types on push and timestamp rewriting it gives (engine.features).
Stdlib only (the command layer adds click and the engine), so it also runs where imagebuild's dependencies are not
installed: `python3 -m imagebuild.prove.doctor [--json] [--arch LIST]`.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from imagecontract import kinds
from imagecontract.driver import DeviceNode, Gpu, Identity, Query, min_driver, nodes_for, nvidia_smi_query
from imagecontract.driver import driver_version as kernel_driver_version
from imagecontract.targets import TargetError, covers, parse_list
from imagecontract.text import printable


@dataclass
class HostFacts:
    kind: str  # rocm, cuda, none
    driver: str | None
    gpus: list[Gpu]
    nodes: list[DeviceNode]
    identity: Identity
    image: str | None = None
    image_arches: list[str] | None = None
    notes: list[str] = field(default_factory=list)
    engine: dict[str, object] | None = None  # the container engine (engine_facts), when one was asked
    version: str | None = None  # the loaded kernel driver's version (imagecontract.driver.driver_version)
    min_driver: str | None = None  # the image's platform.min_driver, when an image with one was given

    @property
    def platform(self) -> kinds.PlatformKind:
        return kinds.for_gpu(self.kind)

    @property
    def group_ids(self) -> list[int]:
        return sorted({n.gid for n in self.nodes if n.exists and n.gid is not None and n.gid != 0})

    def fit(self) -> dict[int, bool]:
        """GPU index -> the image holds code that runs on it (empty without an image)."""
        if self.image_arches is None:
            return {}
        return {g.index: bool(g.arch) and covers(self.image_arches, str(g.arch)) for g in self.gpus}

    @property
    def cpu_image(self) -> bool:
        """An image was given and declares no GPU arch: it runs on the CPU, so no GPU fact can stop it."""
        return self.image_arches is not None and not self.image_arches

    def problems(self) -> list[str]:
        """What stops this host running GPU containers (or IMAGE). A host without a GPU driver is a fact, not a
        problem, unless IMAGE has GPU code; for a CPU image (no GPU arch declared) the GPU facts are facts."""
        arches = ", ".join(self.image_arches or [])
        if self.cpu_image:
            return []
        if self.kind == "none":
            return [f"no GPU driver: {self.image} holds code for GPUs only ({arches})"] if self.image_arches else []
        out = [] if self.gpus else [f"no GPU found ({self.kind} driver)"]
        out += [f"cannot open {n.path}: {n.error}" for n in self.nodes if not n.openable]
        unread = [g for g in self.gpus if g.arch is None and self.platform.ARCH_ALWAYS_KNOWN]  # the KFD says it
        out += [f"{g.describe()}: its arch cannot be read, so no image can be checked against it" for g in unread]
        fit = self.fit()
        out += [
            f"GPU {g.index} ({g.arch}) is not covered by {self.image} ({arches})"
            for g in self.gpus
            if not fit.get(g.index, True) and g not in unread
        ]
        said = self.driver_check()
        return out + ([said[1]] if said and said[0] == "fail" else [])

    def driver_check(self) -> tuple[str, str] | None:
        """The image's min_driver against this host's driver: the check the preflight and the smoke suite run."""
        if self.min_driver and self.platform.VENDOR is None:
            return "skip", f"no GPU driver on this host: min_driver {self.min_driver} not checked"
        return min_driver(self.min_driver, self.version, self.platform.LABEL)

    def verdict(self) -> str:
        """The last line when nothing stops it: what this host runs."""
        if self.cpu_image:
            return f"{self.image} declares no GPU arches: it runs on the CPU, on this host as on any"
        if self.kind == "none":
            return "no GPU driver on this host: it runs CPU containers (no GPU flags to give)"
        return "this host can run " + (self.image or "GPU containers")


def driver_version(root: Path, kind: str) -> str | None:
    """The driver as doctor names it (the kind's `driver_line`: amdgpu's module version or how it is loaded,
    NVIDIA's /proc version line): each file read bounded, one line of at most 200 printable characters."""
    return kinds.for_gpu(kind).driver_line(root)


def gather(root: Path = Path("/"), who: Identity | None = None, query: Query = nvidia_smi_query) -> HostFacts:
    """This host's driver facts (`root`, `who` and the NVIDIA `query` are replaced by simulated ones in tests)."""
    kind = kinds.detect_driver(root)
    gpus = kind.gpus(root, query)
    facts = HostFacts(
        kind.SMOKE_GPU,
        kind.driver_line(root),
        gpus,
        nodes_for(root, kind.device_paths(gpus), who),
        who or Identity.current(),
    )
    facts.version = kernel_driver_version(root, kind.DRIVER_FILE, kind.DRIVER_VERSION)
    return facts


def run_flags(facts: HostFacts) -> list[str]:
    """The docker run flags that give a container this host's GPUs."""
    return facts.platform.run_flags([n.path for n in facts.nodes if n.exists], facts.group_ids)


def compose_snippet(facts: HostFacts) -> str:
    return "\n".join(facts.platform.compose([n.path for n in facts.nodes if n.exists], facts.group_ids))


def kubernetes_snippet(facts: HostFacts) -> str:
    """The container's resources (device plugins: amd.com/gpu, nvidia.com/gpu) and the nodes' numeric groups
    where the kind's flags add them (ROCm)."""
    resource = facts.platform.K8S_RESOURCE
    if resource is None:
        return ""
    lines = ["spec:"]
    if facts.platform.DEVICE.group_add and facts.group_ids:
        lines += ["  securityContext:", f"    supplementalGroups: [{', '.join(map(str, facts.group_ids))}]"]
    lines += ["  containers:", "    - name: server", "      resources:", "        limits:"]
    return "\n".join([*lines, f"          {resource}: {max(1, len(facts.gpus))}"])


SUPERVISE_DIR = "/run/imagebuild/supervise"  # scripts/supervise.sh's state, one folder per daemon (setup.sh)


def engine_since(docker_host: str | None, supervise_dir: Path | None = None) -> dict[str, object]:
    """Where the engine is asked (DOCKER_HOST, else /var/run/docker.sock), since when what answers there runs (the
    start its supervisor recorded, else the unix socket's change time: dockerd makes the socket when it starts), and
    whether scripts/supervise.sh keeps it running (issue 29: a daemon nobody restarts is said, not found by a build)."""
    import os
    from datetime import UTC, datetime

    address = docker_host or "unix:///var/run/docker.sock"
    out: dict[str, object] = {"address": address, "since": None, "supervised": None}
    if not address.startswith("unix://"):
        return out
    socket = address.removeprefix("unix://")
    with contextlib.suppress(OSError):
        out["since"] = datetime.fromtimestamp(os.stat(socket).st_ctime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    root = supervise_dir or Path(os.environ.get("IMAGEBUILD_SUPERVISE_DIR", SUPERVISE_DIR))
    for state in sorted(root.glob("*/socket")) if root.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if state.read_text().strip() != socket:
                continue
            pid = int((state.parent / "supervisor.pid").read_text().strip()[:20])
            alive = b"supervise.sh" in Path(f"/proc/{pid}/cmdline").read_bytes()[:4096]
            supervised: dict[str, object] = {"name": state.parent.name, "pid": pid, "running": alive}
            out["supervised"] = supervised
            if alive:
                out["since"] = (state.parent / "since").read_text().strip()[:40] or out["since"]
                supervised["restarts"] = int((state.parent / "restarts").read_text().strip()[:20] or 0)
    if out["supervised"] is None:
        out["supervised"] = {"running": False}
    return out


def supervision_line(engine: dict[str, object]) -> str:
    watch = engine.get("supervised")
    if not isinstance(watch, dict):
        return ""
    if watch.get("running"):
        restarts = watch.get("restarts", 0)
        return f"  kept running by scripts/supervise.sh (pid {watch['pid']}, started again {restarts} times)"
    return "  nothing restarts it if it stops (no live scripts/supervise.sh for it): bash scripts/setup.sh starts one"


def engine_lines(engine: dict[str, object]) -> list[str]:
    """The engine section: versions, image store, how builds run, and each feature (with why not and who has it)."""
    where = f" on {engine['address']}" if engine.get("address") else ""
    if engine.get("error"):
        return [f"engine: none{where} ({engine['error']})", *filter(None, [supervision_line(engine)])]
    since = f" since {engine['since']}" if engine.get("since") else ""
    lines = [
        f"engine: Docker {engine['version']} answers{where}{since}",
        f"  {engine['store']} image store, BuildKit {engine['buildkit']}",
        *filter(None, [supervision_line(engine)]),
        f"  builds with {engine['builds_with']}",
    ]
    features = engine.get("features")
    for feature in features if isinstance(features, list) else []:
        if not isinstance(feature, dict):
            continue
        state = "yes" if feature["available"] else f"no ({feature['missing']}; {feature['has_it']} has it)"
        lines.append(f"  {feature['title']}: {state}")
    return lines


def as_dict(facts: HostFacts) -> dict[str, object]:
    return {
        "engine": facts.engine,
        "kind": facts.kind,
        "driver": facts.driver,
        "driver_version": facts.version,
        "min_driver": facts.min_driver,
        "gpus": [{"index": g.index, "arch": g.arch, "name": g.name, "render": g.render} for g in facts.gpus],
        "device_nodes": [n.as_dict() for n in facts.nodes],
        "user": {"uid": facts.identity.uid, "gids": list(facts.identity.gids)},
        "image": facts.image,
        "image_arches": facts.image_arches,
        "fit": {str(k): v for k, v in facts.fit().items()},
        "problems": facts.problems(),
        "ok": not facts.problems(),
        "verdict": facts.problems()[0] if facts.problems() else facts.verdict(),
        "docker_run": run_flags(facts),
        "compose": compose_snippet(facts),
        "kubernetes": kubernetes_snippet(facts),
    }


def describe(facts: HostFacts) -> list[str]:
    lines = engine_lines(facts.engine) if facts.engine is not None else []
    lines.append(f"driver: {facts.driver or 'none'} ({facts.kind})")
    said = facts.driver_check()
    if facts.min_driver and said is None:
        lines.append(f"  driver {facts.version} is not older than {facts.min_driver} (the image's min_driver)")
    elif said is not None and said[0] == "skip":
        lines.append(f"  skipped: {said[1]}")
    lines += [
        f"  GPU {g.index}: {g.name}, {g.arch or 'arch unknown'}" + (f", {g.render}" if g.render else "")
        for g in facts.gpus
    ] or ["  no GPU"]
    lines.append(f"user: uid {facts.identity.uid}, groups {' '.join(map(str, facts.identity.gids))}")
    for n in facts.nodes:
        state = "opens" if n.openable else f"cannot open: {n.error}"
        lines.append(f"  {n.path}: group {n.gid}, {n.mode}, {state}" if n.exists else f"  {n.path}: not present")
    if facts.image is not None:
        lines.append(f"image {facts.image}: arches {', '.join(facts.image_arches or []) or 'none declared'}")
        lines += [f"  GPU {i}: {'covered' if ok else 'NOT covered'}" for i, ok in facts.fit().items()]
    for note in facts.notes:
        lines.append(f"note: {note}")
    if run_flags(facts):
        lines += ["docker run flags:", "  " + shlex.join(run_flags(facts))]
        lines += ["compose:", *("  " + line for line in compose_snippet(facts).splitlines())]
        lines += ["kubernetes (pod spec):", *("  " + line for line in kubernetes_snippet(facts).splitlines())]
    problems = facts.problems()
    lines += [f"problem: {p}" for p in problems] or [f"ok: {facts.verdict()}"]
    return [printable(line, None) for line in lines]  # names, arches and notes come from drivers and images


def main(argv: list[str] | None = None) -> int:
    """Stdlib entry point (no engine: give the image's arches with --arch, '' for a CPU image): 0 fits, 1 not."""
    import argparse

    parser = argparse.ArgumentParser(description="host GPUs, device nodes and container flags")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--arch", help="an image's arches to check the GPUs against, e.g. 'sm_80;sm_90'")
    parser.add_argument("--min-driver", help="the image's platform.min_driver, checked against this host's driver")
    parser.add_argument("--root", type=Path, default=Path("/"))
    args = parser.parse_args(argv)
    facts = gather(args.root)
    facts.min_driver = args.min_driver
    if args.arch is not None:  # any spelling the arch table takes (`gfx942:xnack-`, `9.0`, `MI300X`)
        try:
            facts.image, facts.image_arches = "--arch", [t.id for t in parse_list(args.arch, variants=True)]
        except TargetError as exc:
            parser.error(str(exc))
    print(json.dumps(as_dict(facts), indent=2) if args.json else "\n".join(describe(facts)))
    return 0 if not facts.problems() else 1


if __name__ == "__main__":
    sys.exit(main())
