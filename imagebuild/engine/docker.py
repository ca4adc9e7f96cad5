"""The container engine, in one place: the BuildKit-capable client, the SDK client, device flags per GPU kind,
and which image a name means.

How a build runs depends on the engine (issue 22). With the containerd image store (Docker 26.1 as
scripts/setup.sh starts it) builds go through `docker buildx build` (docker driver): one build can export every
platform as one local index with OCI media types. On a graph-driver engine (Docker 20.10) a client that still runs
BuildKit natively with `DOCKER_BUILDKIT=1` (clients before 23.0; Debian's 20.10 at /usr/bin/docker) is preferred:
buildx's docker driver there refuses registry cache export. A client that has neither (28.x without buildx) is
skipped. No engine, no BuildKit, or an engine that does not answer within IMAGEBUILD_ENGINE_TIMEOUT seconds (an
address that accepts and never replies) is a ConfigError (exit 2). What the engine can do: engine.features.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.engine.api import engine_timeout
from imagebuild.engine.features import CONTAINERD_STORE, EngineFacts, vendored_buildkit
from imagebuild.engine.interface import ImageNotFound
from imagebuild.errors import ConfigError
from imagebuild.plan.imageref import ImageRef, local_tag, read_record
from imagecontract import kinds

if TYPE_CHECKING:
    import docker

    from imagebuild.engine.interface import ContainerEngine, LocalImage

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
    store: str = ""  # "containerd" (the containerd image store) or the graph driver (overlay2); "" unknown
    buildkit: str = "unknown"  # the BuildKit version inside the engine

    def build_prefix(self) -> list[str]:
        """The argv that starts a build, before the build flags."""
        if self.mode == "buildx":
            return [self.client, "buildx", "build"]
        return [self.client, "build"]

    @property
    def facts(self) -> EngineFacts:
        return EngineFacts(self.server_version, self.store, self.buildkit, self.mode == "buildx")

    def has(self, feature: str) -> bool:
        """multi-platform, oci-media-types or timestamp-rewriting (engine.features)."""
        return self.facts.missing(feature) is None

    def require(self, feature: str, needed_by: str) -> None:
        """ConfigError (exit 2) naming the feature and the engine that has it, when this one lacks it."""
        self.facts.require(feature, needed_by)

    def describe(self) -> str:
        how = "docker buildx build" if self.mode == "buildx" else "DOCKER_BUILDKIT=1 docker build"
        store = f", {self.store} image store" if self.store else ""
        return f"{how} ({self.client}, client {self.client_version}, engine {self.server_version}{store})"


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
    """Run a short client command; past the deadline it is killed and reads as a failure that says so."""
    timeout = engine_timeout()
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")


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


def image_store(driver: str, driver_status: str) -> str:
    """`docker info`'s Driver and DriverStatus (JSON) -> "containerd" for the containerd image store, else the driver.

    With the containerd store the driver is a snapshotter (overlayfs) and DriverStatus says
    `driver-type io.containerd.snapshotter.v1`."""
    return CONTAINERD_STORE if "io.containerd.snapshotter" in driver_status else driver.strip()


@contextmanager
def _pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    """A thread pool that, when its block is left by an exception (SIGINT's KeyboardInterrupt), is not joined:
    a worker blocked on an engine that never answers would otherwise hold the interrupt for the deadline."""
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _probe(client: str, buildx_possible: bool) -> Engine | str:
    """An Engine for this client, or the reason it cannot build with BuildKit.

    The version and the image store are asked concurrently (two client processes); buildx is asked only when a
    plugin file exists."""
    with _pool(3) as pool:
        asked = pool.submit(_run, [client, "version", "--format", "{{.Client.Version}}|{{.Server.Version}}"])
        info = pool.submit(_run, [client, "info", "--format", "{{.Driver}}|{{json .DriverStatus}}"])
        buildx = pool.submit(_run, [client, "buildx", "version"]) if buildx_possible else None
        version = asked.result()
        client_version, _, server_version = version.stdout.strip().partition("|")
        if version.returncode != 0 or not server_version:
            detail = (version.stderr.strip().splitlines() or ["no answer"])[-1]
            return f"{client}: no engine ({detail})"
        driver, _, status = info.result().stdout.strip().partition("|")
        has_buildx = buildx is not None and buildx.result().returncode == 0
    store = image_store(driver, status)
    native = _major(client_version) <= _LAST_NATIVE_BUILDKIT_MAJOR
    buildkit = vendored_buildkit(server_version)
    if has_buildx and (store == CONTAINERD_STORE or not native):
        return Engine(client, "buildx", client_version, server_version, store=store, buildkit=buildkit)
    if native:
        env = {"DOCKER_BUILDKIT": "1"}
        return Engine(client, "buildkit", client_version, server_version, env, store=store, buildkit=buildkit)
    return f"{client}: client {client_version} has no buildx plugin and cannot run BuildKit"


def _preference(engine: Engine) -> int:
    """0 for the way this engine's builds should run (buildx on the containerd store, else native BuildKit)."""
    return int((engine.store == CONTAINERD_STORE) != (engine.mode == "buildx"))


@lru_cache(maxsize=1)
def find_engine() -> Engine:
    """The first client that has BuildKit and reaches an engine; ConfigError (exit 2) naming why not.

    Candidates are probed concurrently (each probe is a process or three), then taken in PATH order, a client
    that builds the way the engine's store wants (_preference) before one that does not.
    """
    candidates = _candidates()
    buildx_possible = _buildx_plugin_exists()
    with _pool(max(1, len(candidates))) as pool:
        outcomes = list(pool.map(lambda client: _probe(client, buildx_possible), candidates))
    engines = [outcome for outcome in outcomes if isinstance(outcome, Engine)]
    if engines:
        return min(engines, key=_preference)  # min keeps the first of equals: PATH order
    reasons = [str(outcome) for outcome in outcomes] or ["no docker client on PATH"]
    raise ConfigError(
        "no BuildKit-capable container engine: " + "; ".join(reasons),
        hint="run scripts/setup.sh to install docker.io and start dockerd",
    )


def docker_client() -> docker.DockerClient:
    """The Docker SDK client (inspect, run, push, tag); ConfigError (exit 2) when no engine answers in time.

    The first contact (API version, ping) gets the short engine deadline; later calls (pushes, container
    logs) the long one, as they move real data.
    """
    import docker
    from docker.errors import DockerException
    from requests import RequestException

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    timeout = engine_timeout()
    try:
        client = docker.from_env(timeout=max(1, round(timeout)))
        client.ping()
    except (DockerException, RequestException) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(
            f"no container engine answers at {where} within {timeout:g} s: {detail}",
            hint="run scripts/setup.sh to start dockerd, or check DOCKER_HOST",
        ) from exc
    client.api.timeout = 600
    return client


GPU_KINDS = ("auto", *kinds.GPU_CHOICES)  # `--gpu`: auto, one per GPU platform kind, none


def detect_gpu() -> str:
    """auto: the first GPU platform kind whose device nodes are here (ROCm: /dev/kfd; CUDA: an NVIDIA node),
    else none."""
    return kinds.detect_devices(Path("/"))


def device_options(gpu: str) -> dict[str, Any]:
    """The docker run options a `--gpu` value needs: its platform kind's DEVICE flags (imagecontract/kinds, the
    same flags docs/reference.md lists for CI runners) in the docker SDK's words."""
    from docker.types import DeviceRequest

    flags = kinds.for_gpu(gpu).DEVICE
    options: dict[str, Any] = {}
    if flags.devices:
        options["devices"] = list(flags.devices)
    if flags.group_add:
        options["group_add"] = list(flags.group_add)
    if flags.security_opt:
        options["security_opt"] = list(flags.security_opt)
    if flags.all_gpus:
        options["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if flags.ipc_host:
        options["ipc_mode"] = "host"
    return options


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def resolve_image(
    engine: ContainerEngine, given: str, targets: list[str], root: Path
) -> tuple[str, LocalImage, ImageRef]:
    """IMAGE or TARGET -> (a name for report paths, the engine's image, its reference).

    A target name means the image its last build recorded (imageref.record_path), by ID; only without a record
    (or when that image was removed) does the local tag `imagebuild:<target>` decide. Anything else is an engine
    reference.
    """
    bare = re.fullmatch(r"[a-z0-9][a-z0-9._-]*", given) is not None
    if given in targets or bare:
        record = read_record(root, given)
        if record is not None:
            try:
                return given, engine.image(record.image_id), record
            except ImageNotFound:  # removed since: what the tag names now is all there is
                pass
        try:
            image = engine.image(local_tag(given))
            return given, image, ImageRef(image.id, given, tuple(image.tags), recorded_by="engine")
        except ImageNotFound:
            if given in targets:
                raise ConfigError(
                    f"target {given} has no recorded build and no local image {local_tag(given)}",
                    hint=f"imagebuild build {given}",
                ) from None
    try:
        image = engine.image(given)
    except ImageNotFound:
        raise ConfigError(f"no local image '{given}'", hint="build it or pull it first") from None
    return _slug(given), image, ImageRef(image.id, None, tuple(image.tags), recorded_by="engine")
