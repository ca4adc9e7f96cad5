"""The engine interface (issue 30 item 1): both implementations answer the ContainerEngine protocol, the unit-test
stub says what it is, and DockerEngine turns the SDK's answers into imagebuild's own types and errors (the real
engine where it can run here; the SDK's exception classes where a stand-in client must produce a 5xx)."""

from __future__ import annotations

import pytest

from imagebuild.engine.interface import (
    ContainerEngine,
    EngineError,
    ImageNotFound,
    LocalImage,
    PushError,
    RunResult,
    RunSpec,
)
from imagebuild.engine.stub import StubEngineForUnitTests

BASE = "local/debian:bookworm"  # scripts/setup.sh makes it


def test_both_engines_answer_the_protocol() -> None:
    pytest.importorskip("docker")
    from imagebuild.engine.sdk import DockerEngine

    assert isinstance(DockerEngine(client=None), ContainerEngine)
    assert isinstance(StubEngineForUnitTests(), ContainerEngine)


def test_the_stub_says_it_is_one_and_does_only_what_it_is_told() -> None:
    image = LocalImage("sha256:" + "1" * 64, ("x:1",), {"a": "b"})
    stub = StubEngineForUnitTests(images={"x:1": image})
    assert "unit tests only" in stub.name
    assert stub.image("x:1") is image and stub.image(image.id) is image
    with pytest.raises(ImageNotFound, match="unit tests only"):
        stub.image("y:1")
    with pytest.raises(EngineError, match="cannot run containers"):
        stub.run(RunSpec(image.id))
    for refused in (lambda: stub.push("r", "t"), lambda: stub.build_context(".", "t"), lambda: list(stub.save("x:1"))):
        with pytest.raises(EngineError, match="unit tests only"):
            refused()
    stub.on_run = lambda spec: RunResult(3, stdout=spec.image.encode())
    assert stub.run(RunSpec("x:1")).exit_code == 3 and [s.image for s in stub.runs] == [image.id, "x:1"]


class _Images:
    """The SDK client's `images`, standing in for an engine that answers a push with a 5xx or a stream error."""

    def __init__(self, error: Exception | None, stream: list[dict[str, object]]) -> None:
        self.error, self.stream = error, stream

    def push(self, *_: object, **__: object) -> list[dict[str, object]]:
        if self.error is not None:
            raise self.error
        return self.stream


def _engine(error: Exception | None = None, stream: list[dict[str, object]] | None = None) -> ContainerEngine:
    from imagebuild.engine.sdk import DockerEngine

    client = type("StandInClient", (), {})()
    client.images = _Images(error, stream or [])
    return DockerEngine(client)


def test_sdk_errors_become_engine_errors_with_the_same_message() -> None:
    docker = pytest.importorskip("docker")
    response = type("Response", (), {"status_code": 503, "reason": "Service Unavailable", "url": "u"})()
    busy = docker.errors.APIError("503 Server Error", response=response, explanation="busy")
    with pytest.raises(EngineError) as caught:
        _engine(busy).push("127.0.0.1:5000/x", "t")
    assert caught.value.transient and caught.value.status_code == 503 and str(caught.value) == str(busy)
    refused = docker.errors.APIError("400 Client Error", response=type(response)(), explanation="bad")
    refused.response.status_code = 400
    with pytest.raises(EngineError) as caught:
        _engine(refused).push("127.0.0.1:5000/x", "t")
    assert not caught.value.transient and caught.value.explanation == "bad"
    with pytest.raises(PushError, match="blob upload unknown"):
        _engine(stream=[{"error": "x", "errorDetail": {"message": "blob upload unknown"}}]).push("r", "t")
    with pytest.raises(PushError, match="reported no digest for r:t"):
        _engine(stream=[{"status": "Pushed"}]).push("r", "t")


@pytest.mark.docker
def test_docker_engine_reads_images_and_files_from_the_real_engine() -> None:
    pytest.importorskip("docker")
    from imagebuild.engine.sdk import docker_engine

    try:
        engine = docker_engine()
        image = engine.image(BASE)
    except Exception as exc:  # noqa: BLE001 - no engine or no base: nothing to test against
        pytest.skip(f"no engine or no {BASE} (scripts/setup.sh makes it): {exc}")
    assert image.id.startswith("sha256:") and BASE in image.tags and (image.size or 0) > 0
    assert image.os == "linux" and image.architecture
    with pytest.raises(ImageNotFound):
        engine.image("imagebuild-h1-test:does-not-exist")
    assert (engine.read_file(image.id, "/etc/debian_version", 1 << 20) or b"").startswith(b"12")
    assert engine.read_file(image.id, "/no/such/file", 1 << 20) is None
    assert engine.read_file(image.id, "/etc", 1 << 20) is None  # a folder: no regular file there
    with pytest.raises(ValueError, match="larger than"):
        engine.read_file(image.id, "/etc/debian_version", 16)
    layers = engine.history(image.id)
    assert layers and sum(layer.size for layer in layers) > 0
