"""`DockerEngine`: the ContainerEngine (engine/interface.py) of a Docker engine, through the Docker SDK on DOCKER_HOST.

One implementation for Docker 20.10 (graph-driver store) and 26.1/28.5 (containerd store): where the two answer
differently (a push's digest: pushed_digest), the difference is settled here and the caller gets one answer.
"""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
from collections.abc import Iterator
from typing import Any

from imagebuild.engine.docker import device_options, docker_client
from imagebuild.engine.interface import (
    BuildError,
    ContainerStartFailed,
    ContainerTimeout,
    EngineError,
    ImageNotFound,
    Layer,
    LocalImage,
    PushError,
    RunResult,
    RunSpec,
)

READ_FILE_LIMIT = 256 << 20  # a file copied out of an image (an SBOM of thousands of components): at most this


def _error(exc: BaseException, kind: type[EngineError] = EngineError) -> EngineError:
    """The SDK's (or requests') exception as an EngineError with the same message."""
    from docker.errors import APIError, DockerException, NotFound

    status = getattr(exc, "status_code", None) if isinstance(exc, APIError) else None
    explanation = getattr(exc, "explanation", None) if isinstance(exc, APIError) else None
    # no answer, a 5xx or a broken connection is worth another attempt; the SDK's own refusal (a bad argument) not
    transient = status is None or status >= 500 if isinstance(exc, APIError) else not isinstance(exc, DockerException)
    if kind is EngineError and isinstance(exc, NotFound):
        kind = ImageNotFound
    return kind(str(exc), explanation=explanation, status_code=status, transient=transient)


def _sdk_errors() -> tuple[type[BaseException], ...]:
    from docker.errors import DockerException
    from requests import RequestException

    return (DockerException, RequestException)


# The containerd image store's push ends with this status line and sends no `aux` PushResult
# (moby/moby@411e817ddf71 (v26.1.5):daemon/containerd/image_push.go:124); the graph-driver store sends both
# (distribution/push_v2.go:256 there).
_PUSHED = re.compile(r"(?P<tag>[\w][\w.-]{0,127}): digest: (?P<digest>sha256:[0-9a-f]{64}) size: [0-9]{1,12}")


def pushed_digest(item: dict[str, Any], tag: str) -> str | None:
    """The digest one push-stream message reports for tag: the aux PushResult (graph-driver store, Docker 20.10)
    or the final status line (containerd image store, Docker 26.1); None for any other message."""
    aux = item.get("aux")
    if isinstance(aux, dict) and aux.get("Tag") == tag and isinstance(aux.get("Digest"), str):
        return str(aux["Digest"])
    status = item.get("status")
    if isinstance(status, str) and len(status) <= 256 and (match := _PUSHED.fullmatch(status.strip())):
        return match["digest"] if match["tag"] == tag else None
    return None


def remove_container(container: Any) -> None:
    """Remove a container with its anonymous volumes (an image's `VOLUME /data` makes one per container; the
    SDK's `remove=True` and a plain remove leave it), whatever state it is in; a container already gone is no
    error."""
    from docker.errors import APIError, NotFound

    with contextlib.suppress(NotFound, APIError):
        container.remove(force=True, v=True)


def _local(image: Any) -> LocalImage:
    attrs = getattr(image, "attrs", None) or {}
    size = attrs.get("Size")
    return LocalImage(
        id=str(image.id),
        tags=tuple(getattr(image, "tags", ()) or ()),
        labels=dict(getattr(image, "labels", None) or {}),
        size=size if isinstance(size, int) else None,
        os=str(attrs.get("Os") or ""),
        architecture=str(attrs.get("Architecture") or ""),
    )


class DockerEngine:
    """A Docker engine through its SDK client (`docker_engine()` connects; a test may hand in a stand-in client)."""

    name = "docker"

    def __init__(self, client: Any) -> None:
        self.client = client

    def image(self, reference: str) -> LocalImage:
        try:
            return _local(self.client.images.get(reference))
        except _sdk_errors() as exc:
            raise _error(exc) from exc

    def run(self, spec: RunSpec) -> RunResult:
        from docker.types import Ulimit

        create: dict[str, Any] = {
            "command": list(spec.command),
            **({"entrypoint": list(spec.entrypoint)} if spec.entrypoint is not None else {}),
            **({"name": spec.name} if spec.name else {}),
            **({"network_mode": spec.network} if spec.network else {}),
            **({"working_dir": spec.working_dir} if spec.working_dir else {}),
            **({"environment": dict(spec.environment)} if spec.environment else {}),
            **(
                {"volumes": {m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in spec.mounts}}
                if spec.mounts
                else {}
            ),
            **device_options(spec.gpu),
            # no core files: a crash of a 10 GB process under emulation wrote one into the container's layer and
            # filled the host's disk (issue 31, torch's aarch64 build under qemu-user)
            "ulimits": [Ulimit(name="core", soft=0, hard=0)],
        }
        from docker.errors import APIError
        from requests import RequestException

        container = None
        try:
            try:  # created, then started: a start that fails (no such device) removes what it created
                container = self.client.containers.create(spec.image, **create)
                container.start()
            except APIError as exc:
                raise _error(exc, ContainerStartFailed) from exc
            try:
                status = container.wait(timeout=spec.timeout)
            except RequestException as exc:
                if spec.timeout is None:
                    raise _error(exc) from exc
                raise ContainerTimeout(f"did not finish within {spec.timeout:g} s") from exc
            return RunResult(
                int(status.get("StatusCode", -1)),
                b"" if spec.combined_output else container.logs(stdout=True, stderr=False),
                b"" if spec.combined_output else container.logs(stdout=False, stderr=True),
                container.logs(stdout=True, stderr=True) if spec.combined_output else b"",
                str(container.attrs.get("Image") or ""),
            )
        except APIError as exc:
            raise _error(exc) from exc
        finally:  # every path: a failed start, a timeout, SIGINT and SIGTERM (imagebuild/signals.py) alike
            container = container if container is not None else self._named(spec.name)
            if container is not None:
                remove_container(container)  # with its anonymous volume (the image's VOLUME /data)

    def _named(self, name: str | None) -> Any:
        """The container called `name`, or None: an interrupt between the engine's create and the SDK's return
        leaves one that only its name finds."""
        from docker.errors import APIError, NotFound

        if not name:
            return None
        try:
            return self.client.containers.get(name)
        except (NotFound, APIError):
            return None

    def read_file(self, image: str, path: str, limit: int = READ_FILE_LIMIT) -> bytes | None:
        from docker.errors import APIError, NotFound

        try:
            container = self.client.containers.create(image, entrypoint=["/nonexistent"], network_disabled=True)
        except APIError as exc:
            raise _error(exc) from exc
        try:
            stream, _ = container.get_archive(path)
            archive = bytearray()
            for chunk in stream:  # the image's file: bounded before it is read whole
                archive += chunk
                if len(archive) > limit:
                    raise ValueError(f"the archive of {path} is larger than {limit >> 20} MiB")
        except NotFound:
            return None
        except APIError as exc:
            raise _error(exc) from exc
        finally:
            remove_container(container)  # with the anonymous volume its create made (the image's VOLUME /data)
        with tarfile.open(fileobj=io.BytesIO(bytes(archive))) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None and member.isfile() else None
            return handle.read(limit) if handle else None

    def history(self, image: str) -> list[Layer]:
        try:
            rows = self.client.api.history(image)
        except _sdk_errors() as exc:
            raise _error(exc) from exc
        return [Layer(int(row.get("Size") or 0), str(row.get("CreatedBy") or "")) for row in rows]

    def save(self, image: str) -> Iterator[bytes]:
        try:
            yield from self.client.images.get(image).save(chunk_size=1 << 20)
        except _sdk_errors() as exc:
            raise _error(exc) from exc

    def tag(self, image: str, repository: str, tag: str) -> None:
        try:
            self.client.images.get(image).tag(repository, tag=tag)
        except _sdk_errors() as exc:
            raise _error(exc) from exc

    def untag(self, reference: str) -> None:
        try:
            self.client.images.remove(reference, noprune=True)
        except _sdk_errors() as exc:
            raise _error(exc) from exc

    def push(self, repository: str, tag: str) -> str:
        digest = ""
        try:
            for item in self.client.images.push(repository, tag=tag, stream=True, decode=True):
                if "error" in item:
                    raise PushError(item.get("errorDetail", {}).get("message") or item["error"])
                digest = pushed_digest(item, tag) or digest
        except _sdk_errors() as exc:
            raise _error(exc) from exc
        if not digest:
            raise PushError(f"the engine reported no digest for {repository}:{tag}")
        return digest

    def build_context(self, context: str, tag: str) -> str:
        from docker.errors import APIError
        from docker.errors import BuildError as SdkBuildError

        try:
            built, _ = self.client.images.build(
                path=context, tag=tag, rm=True, forcerm=True, network_mode="host", pull=False
            )
        except (SdkBuildError, APIError) as exc:
            raise _error(exc, BuildError) from exc
        return str(built.id)


def docker_engine() -> DockerEngine:
    """The engine on DOCKER_HOST; ConfigError (exit 2) when none answers in time (engine.docker.docker_client)."""
    return DockerEngine(docker_client())
