"""buildx builders of several BuildKit nodes (issue 33): create one from configuration, read its nodes (endpoint,
BuildKit version, platforms, which are pinned), route a leg to the node buildx will give it, push a leg by digest
and pull it back into the local engine.

How buildx routes (docker/buildx v0.29.1 `build/driver.go` `resolveDrivers` / `splitToDriverPairs`): a node
created with `--platform` pins those platforms and gets every build of them first; only when no node pins a
platform does the first node whose workers list it build it. `route` says the same from what `buildx ls` and
`buildx inspect` report, so `doctor` can say which leg goes where before anything is built.

A builder that is not the engine's own (`docker` driver) keeps its results in its daemons: a leg leaves the node
pushed by digest (`type=image,push-by-digest=true`) to a staging repository and is pulled back by that digest
into the local engine, where the rest of the pipeline (coverage, SBOM layer, sizes, smoke, publish) runs
unchanged: the same path the CI fan-out takes from `publish --allow-unsmoked` on (docs/builders.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from imagebuild.errors import BuildFailed, ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from imagebuild.engine.docker import Engine


class NodeTlsConfig(Protocol):
    @property
    def ca(self) -> str: ...
    @property
    def cert(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def server_name(self) -> str | None: ...


class NodeConfig(Protocol):
    """One node as configured (imagebuild.matrix.builders.BuilderNode: engine/ does not import matrix/)."""

    @property
    def name(self) -> str: ...
    @property
    def endpoint(self) -> str | None: ...
    @property
    def platforms(self) -> Sequence[str]: ...
    @property
    def tls(self) -> NodeTlsConfig | None: ...
    @property
    def node_selector(self) -> str | None: ...


class BuilderConfig(Protocol):
    @property
    def driver(self) -> str: ...
    @property
    def nodes(self) -> Sequence[NodeConfig]: ...
    @property
    def namespace(self) -> str: ...


ENGINE_DRIVERS = ("docker",)  # the engine's own builder: results load into its image store
KUBERNETES_IMAGE = "moby/buildkit:v0.32.2"  # the BuildKit the nodes here run (../shared/tools/buildkit)
METADATA_LIMIT = 1 << 20  # a buildx metadata file is a few KiB; more is not read
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_PLATFORMS_LINE = re.compile(r"^Platforms:\s*(.*)$")
_NAME_LINE = re.compile(r"^Name:\s*(\S+)$")


@dataclass(frozen=True)
class Node:
    """One node of a builder as buildx reports it."""

    name: str
    endpoint: str
    status: str
    buildkit: str
    platforms: tuple[str, ...]
    pinned: tuple[str, ...]  # the platforms given at create (`linux/arm64*` in `buildx inspect`)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "endpoint": self.endpoint,
            "status": self.status,
            "buildkit": self.buildkit,
            "platforms": list(self.platforms),
            "pinned": list(self.pinned),
        }


@dataclass(frozen=True)
class Builder:
    name: str
    driver: str
    nodes: tuple[Node, ...]

    @property
    def loads(self) -> bool:
        """Whether a result can load into the local engine (the engine's own builder) or must be pushed."""
        return self.driver in ENGINE_DRIVERS

    def route(self, platform: str) -> Node | None:
        """The node buildx gives a leg of `platform`: the first that pins it, else the first whose workers list it."""
        pinned = [node for node in self.nodes if platform in node.pinned]
        listed = [node for node in self.nodes if platform in node.platforms]
        return next(iter(pinned or listed), None)


def _buildx(engine: Engine, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [engine.client, "buildx", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **engine.env},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"no answer within {timeout:g} s")


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    return ((proc.stderr or proc.stdout).strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]


def _pinned(inspect_text: str) -> dict[str, tuple[str, ...]]:
    """`buildx inspect` text -> node name -> its pinned platforms (the ones marked `*`)."""
    pinned: dict[str, tuple[str, ...]] = {}
    node = None
    for line in inspect_text.splitlines():
        if match := _NAME_LINE.match(line.strip()):
            node = match.group(1)
        elif (match := _PLATFORMS_LINE.match(line.strip())) and node is not None:
            items = [item.strip() for item in match.group(1).split(",")]
            pinned[node] = tuple(item[:-1] for item in items if item.endswith("*"))
    return pinned


def parse_builder(ls_json: dict[str, object], inspect_text: str) -> Builder:
    """One builder from its `buildx ls --format json` line and its `buildx inspect` text."""
    pinned = _pinned(inspect_text)
    nodes = []
    for raw in ls_json.get("Nodes") or []:  # type: ignore[attr-defined]
        name = str(raw.get("Name", ""))
        nodes.append(
            Node(
                name=name,
                endpoint=str(raw.get("Endpoint", "")),
                status=str(raw.get("Status", "")),
                buildkit=str(raw.get("Version", "") or "unknown"),
                platforms=tuple(str(p) for p in raw.get("Platforms") or []),
                pinned=pinned.get(name, ()),
            )
        )
    return Builder(str(ls_json.get("Name", "")), str(ls_json.get("Driver", "")), tuple(nodes))


def inspect(engine: Engine, name: str) -> Builder:
    """The builder `name` with every node bootstrapped; ConfigError (exit 2) when buildx does not know it."""
    if engine.mode != "buildx":
        raise ConfigError(f"builder {name} needs docker buildx", hint=f"{engine.client} runs BuildKit without buildx")
    shown = _buildx(engine, "inspect", "--bootstrap", name, timeout=120)
    if shown.returncode != 0:
        raise ConfigError(f"no buildx builder {name}: {_last_line(shown)}", hint="docker buildx ls; docs/builders.md")
    listed = _buildx(engine, "ls", "--format", "json")
    for line in listed.stdout.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("Name") == name:
            return parse_builder(entry, shown.stdout)
    raise ConfigError(f"buildx ls does not list builder {name}: {_last_line(listed)}")


def create_commands(name: str, config: BuilderConfig) -> list[list[str]]:
    """The `docker buildx create` argv (after `docker`) of each node, the first creating, the rest appending.

    TLS files go as driver options (cacert, cert, key: docker/buildx `driver/remote/factory.go`); their contents are
    read by buildx, never by us."""
    commands = []
    for index, node in enumerate(config.nodes):
        argv = ["buildx", "create", "--name", name, "--node", node.name, "--driver", config.driver]
        argv += ["--append"] if index else []
        argv += ["--platform", ",".join(node.platforms)]
        if config.driver == "kubernetes":
            opts = [f"namespace={config.namespace}", f"image={KUBERNETES_IMAGE}", "replicas=1", "rootless=false"]
            opts += [f"nodeselector={node.node_selector}"] if node.node_selector else []
            argv += ["--driver-opt", ",".join(opts)]
        elif node.tls is not None:
            opts = [f"cacert={node.tls.ca}", f"cert={node.tls.cert}", f"key={node.tls.key}"]
            opts += [f"servername={node.tls.server_name}"] if node.tls.server_name else []
            argv += ["--driver-opt", ",".join(opts)]
        commands.append(argv + ([node.endpoint] if node.endpoint else []))
    return commands


def _matches(builder: Builder, config: BuilderConfig) -> bool:
    want = [(n.name, n.endpoint or "", tuple(n.platforms)) for n in config.nodes]
    have = [(n.name, n.endpoint, n.pinned) for n in builder.nodes]
    return builder.driver == config.driver and want == have


def ensure(engine: Engine, name: str, config: BuilderConfig) -> Builder:
    """The builder `name` as configured: created (or made again, when its nodes differ) through buildx; inspected."""
    if config.driver != "remote":
        raise ConfigError(
            f"builder {name}: the {config.driver} driver is not created by imagebuild",
            hint="apply the commands `imagebuild doctor --builder NAME` prints (docs/builders.md)",
        )
    try:
        current = inspect(engine, name)
        if _matches(current, config):
            return current
        _buildx(engine, "rm", "--keep-state", name)
    except ConfigError:
        pass
    for argv in create_commands(name, config):
        made = _buildx(engine, *argv[1:])
        if made.returncode != 0:
            raise ConfigError(f"builder {name}: buildx create failed: {_last_line(made)}")
    return inspect(engine, name)


def remove(engine: Engine, name: str) -> None:
    """Forget the builder in buildx (its daemons keep running: they are not ours)."""
    _buildx(engine, "rm", "--keep-state", name)


def push_output(staging: str) -> list[str]:
    """The build flags that send a leg to `staging` by digest, as OCI, with no BuildKit provenance (LOADED's rule)."""
    return [
        "--provenance=false",
        "--output",
        f"type=image,name={staging},push-by-digest=true,push=true,oci-mediatypes=true",
    ]


@dataclass(frozen=True)
class Pushed:
    """What a leg's push left: the manifest digest in staging, and the node buildx says built it."""

    ref: str  # HOST/REPO@sha256:...
    digest: str
    node: str | None


def read_pushed(metadata: Path, staging: str) -> Pushed:
    """The buildx metadata file of a pushed leg; BuildFailed (exit 3) when it names no manifest digest."""
    try:
        with open(metadata, "rb") as handle:
            raw = handle.read(METADATA_LIMIT + 1)
        loaded = json.loads(raw) if len(raw) <= METADATA_LIMIT else None
    except (OSError, ValueError) as exc:
        raise BuildFailed(f"the build's metadata {metadata} could not be read: {exc}") from None
    doc: dict[str, object] = loaded if isinstance(loaded, dict) else {}
    digest = doc.get("containerimage.digest")
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise BuildFailed(f"the build's metadata {metadata} names no pushed manifest digest")
    ref = str(doc.get("buildx.build.ref", ""))  # BUILDER/NODE/REF
    parts = ref.split("/")
    return Pushed(f"{staging}@{digest}", digest, parts[1] if len(parts) == 3 else None)


def pull(engine: Engine, pushed: Pushed, tags: list[str]) -> None:
    """Pull a pushed leg by digest into the local engine and give it the build's tags; BuildFailed when not."""
    from imagebuild.engine.cli import CliError, docker

    try:
        docker(engine, "pull", "--quiet", pushed.ref, timeout=1800)
        for tag in tags:
            docker(engine, "tag", pushed.ref, tag)
    except CliError as exc:
        raise BuildFailed(f"pulling the pushed leg {pushed.ref} into the engine failed: {exc}") from None


def kubernetes_commands(name: str, config: BuilderConfig) -> list[str]:
    """The shell lines a user runs to create a kubernetes builder (generated here, not run here)."""
    import shlex

    return ["docker " + shlex.join(argv) for argv in create_commands(name, config)]
