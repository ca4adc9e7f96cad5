"""Find a client that can drive BuildKit against a live engine, because a build without one must stop early.

Order: `docker buildx` where it exists and works, else a docker client that still runs BuildKit natively
with `DOCKER_BUILDKIT=1` (clients before 23.0; Debian's 20.10 at /usr/bin/docker). Newer clients without
buildx (28.x) cannot, so they are skipped. No engine, or no BuildKit, is a ConfigError (exit 2).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.errors import ConfigError

if TYPE_CHECKING:
    import docker

# Clients from 23.0 on hand `docker build` to buildx; without the plugin they cannot run BuildKit.
_LAST_NATIVE_BUILDKIT_MAJOR = 22
_FALLBACK_CLIENTS = ("/usr/bin/docker", "/usr/local/bin/docker")
_PLUGIN_DIRS = (
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)


@dataclass(frozen=True)
class Engine:
    """A BuildKit-capable docker client and how to invoke a build with it."""

    client: str
    mode: str  # "buildx" or "buildkit"
    client_version: str
    server_version: str
    env: dict[str, str] = field(default_factory=dict)

    def build_prefix(self) -> list[str]:
        """The argv that starts a build, before the build flags."""
        return [self.client, "buildx", "build"] if self.mode == "buildx" else [self.client, "build"]

    def describe(self) -> str:
        how = "docker buildx build" if self.mode == "buildx" else "DOCKER_BUILDKIT=1 docker build"
        return f"{how} ({self.client}, client {self.client_version}, engine {self.server_version})"


def _candidates() -> list[str]:
    override = os.environ.get("IMAGEBUILD_DOCKER")
    if override:
        return [override]
    found: list[str] = []
    for path in os.environ.get("PATH", "").split(os.pathsep):
        exe = os.path.join(path, "docker")
        if os.access(exe, os.X_OK) and os.path.realpath(exe) not in {os.path.realpath(f) for f in found}:
            found.append(exe)
    for exe in _FALLBACK_CLIENTS:
        if os.access(exe, os.X_OK) and os.path.realpath(exe) not in {os.path.realpath(f) for f in found}:
            found.append(exe)
    if not found and shutil.which("docker"):
        found.append(shutil.which("docker") or "docker")
    return found


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})}, check=False
    )


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def _buildx_plugin_exists() -> bool:
    """Where the docker CLI looks for plugins; probing `docker buildx` costs a process, a stat does not."""
    config = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker"))
    dirs = [config / "cli-plugins", *map(Path, _PLUGIN_DIRS)]
    return any((folder / "docker-buildx").exists() for folder in dirs)


def _probe(client: str, buildx_possible: bool) -> Engine | str:
    """An Engine for this client, or the reason it cannot build with BuildKit."""
    version = _run([client, "version", "--format", "{{.Client.Version}}|{{.Server.Version}}"])
    client_version, _, server_version = version.stdout.strip().partition("|")
    if version.returncode != 0 or not server_version:
        detail = (version.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"{client}: no engine ({detail})"
    if buildx_possible and _run([client, "buildx", "version"]).returncode == 0:
        return Engine(client, "buildx", client_version, server_version)
    if _major(client_version) <= _LAST_NATIVE_BUILDKIT_MAJOR:
        return Engine(client, "buildkit", client_version, server_version, {"DOCKER_BUILDKIT": "1"})
    return f"{client}: client {client_version} has no buildx plugin and cannot run BuildKit"


@lru_cache(maxsize=1)
def find_engine() -> Engine:
    """The first client that has BuildKit and reaches an engine; ConfigError (exit 2) naming why not.

    Candidates are probed concurrently (each probe is a process or two), then taken in PATH order.
    """
    candidates = _candidates()
    buildx_possible = _buildx_plugin_exists()
    with ThreadPoolExecutor(max_workers=max(1, len(candidates))) as pool:
        outcomes = list(pool.map(lambda client: _probe(client, buildx_possible), candidates))
    for outcome in outcomes:
        if isinstance(outcome, Engine):
            return outcome
    reasons = [str(outcome) for outcome in outcomes] or ["no docker client on PATH"]
    raise ConfigError(
        "no BuildKit-capable container engine: " + "; ".join(reasons),
        hint="run scripts/setup.sh to install docker.io and start dockerd",
    )


def docker_client() -> docker.DockerClient:
    """The Docker SDK client (inspect, run, push, tag); ConfigError (exit 2) when no engine answers."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as exc:
        raise ConfigError(
            f"no container engine answers at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}: "
            f"{str(exc).splitlines()[0]}",
            hint="run scripts/setup.sh to start dockerd",
        ) from exc
    return client
