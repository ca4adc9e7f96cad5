"""What imagebuild asks of a container engine, in its own words (issue 30): local images, runs, files read out of an
image, sizes, tags and pushes, and the one-off build of a derived image. Nothing outside `engine/` imports the docker
library or starts a docker process; the stages take a `ContainerEngine` and get these types back.

Implementations: `engine.docker.DockerEngine` (the Docker SDK on DOCKER_HOST; Docker 20.10's graph-driver store and
26.1/28.5's containerd store alike) and `engine.stub.StubEngine` (unit tests only, says so in its name). BuildKit
builds go through `engine.docker.Engine` (the probed client: `docker buildx build` or `DOCKER_BUILDKIT=1 docker
build`) and `engine.cli.start_build`.

The shape follows repo2docker's engine interface (jupyterhub/repo2docker@00df21069ee2, repo2docker/engine.py:109,
`ContainerEngine` with build/images/inspect_image/push/run, and its own exception classes at the file's end): the
caller sees the engine's answers as plain values and one exception family, never the SDK's objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class EngineError(Exception):
    """The engine refused or failed a request. str() is the engine's own message (what callers printed before);
    `explanation` the daemon's sentence when it gave one; `status_code` its HTTP status (None: no answer)."""

    def __init__(
        self, message: str, *, explanation: str | None = None, status_code: int | None = None, transient: bool = False
    ) -> None:
        super().__init__(message)
        self.explanation = explanation
        self.status_code = status_code
        self.transient = transient  # worth another attempt: no answer, a 5xx, a connection that broke


class ImageNotFound(EngineError):
    """No local image of that name or ID."""


class ContainerStartFailed(EngineError):
    """The container could not be created or started (a device the host lacks, no such entrypoint)."""


class ContainerTimeout(EngineError):
    """The container did not finish within the run's timeout."""


class PushError(EngineError):
    """The engine reported an error in the push stream (connection refused, blob upload failed, ...)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class BuildError(EngineError):
    """A build through the engine failed."""


@dataclass(frozen=True)
class LocalImage:
    """An image in the engine's store.

    `id` is the engine's own ID, what run, tag and a smoke report take on every store: the config digest on a
    graph-driver store (Docker 20.10), the manifest or index digest on the containerd store (Docker 26.1, 28.5).
    `size` is the size the engine reports (None when it reports none): unpacked on a graph-driver store, the stored
    content (compressed layers) on the containerd store; the sum of the history's layers is unpacked on both."""

    id: str
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    size: int | None = None
    os: str = ""
    architecture: str = ""


@dataclass(frozen=True)
class Mount:
    """A host folder bound into a container."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class RunSpec:
    """One container run to its end. `gpu` is a GPU kind (`rocm`, `cuda`, `none`): the engine adds its device flags.
    `name` lets an interrupted create still be found and removed; `timeout` (seconds) bounds the wait;
    `combined_output` asks for stdout and stderr interleaved as the container wrote them."""

    image: str
    command: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    network: str | None = None  # "host", or None: the engine's default
    working_dir: str | None = None
    gpu: str = "none"
    name: str | None = None
    timeout: float | None = None
    combined_output: bool = False


@dataclass(frozen=True)
class RunResult:
    """What a container that ran to its end left: its exit code, its output, and the ID of the image it ran."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    output: bytes = b""  # interleaved, when RunSpec.combined_output
    image_id: str = ""


@dataclass(frozen=True)
class Layer:
    """One entry of an image's history: its bytes and the step that made it (BuildKit's `CreatedBy`)."""

    size: int
    created_by: str


def smoke_ids(image_id: str, digest: str | None) -> list[str]:
    """The IDs a smoke report of a staged image may carry: an engine with the containerd image store names an
    image by its manifest (or index) digest, a graph-driver engine by its config digest (the image ID)."""
    return [image_id, *([digest] if digest and digest != image_id else [])]


@runtime_checkable
class ContainerEngine(Protocol):
    """The engine as the stages see it. Every method raises EngineError (or a subclass) for the engine's refusals."""

    name: str

    def image(self, reference: str) -> LocalImage:
        """The local image a name or ID means; ImageNotFound when there is none."""
        ...

    def run(self, spec: RunSpec) -> RunResult:
        """Create, start, wait, read the output, and remove the container with its anonymous volumes on every path
        (a start that fails, a timeout, an interrupt). ContainerStartFailed, ContainerTimeout."""
        ...

    def read_file(self, image: str, path: str, limit: int) -> bytes | None:
        """One regular file of an image, copied out of a created (never started) container; None when the image
        has no regular file there. ValueError when its archive is over `limit` bytes."""
        ...

    def history(self, image: str) -> list[Layer]:
        """The image's layers, newest first."""
        ...

    def save(self, image: str) -> Iterator[bytes]:
        """The image as `docker save` streams it."""
        ...

    def tag(self, image: str, repository: str, tag: str) -> None:
        """Point repository:tag at image."""
        ...

    def untag(self, reference: str) -> None:
        """Remove the name reference (never the image's layers)."""
        ...

    def push(self, repository: str, tag: str) -> str:
        """Push repository:tag; the digest the engine computed (PushError when it reported none, or an error)."""
        ...

    def build_context(self, context: str, tag: str) -> str:
        """Build the Dockerfile in folder `context` (host network, no pull) under tag; the new image's ID.
        BuildError when the build fails."""
        ...
