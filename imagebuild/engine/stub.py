"""`StubEngineForUnitTests`: a ContainerEngine with no engine behind it, for unit tests of the stages only.

It holds the images it is given and answers runs with what the test says a container would do (`on_run`); it never
builds, pushes or starts anything, and its name says so wherever it is printed. Tests that need a real engine's
behaviour use DockerEngine against the engine scripts/setup.sh starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from imagebuild.engine.interface import (
    EngineError,
    ImageNotFound,
    Layer,
    LocalImage,
    RunResult,
    RunSpec,
)


@dataclass
class StubEngineForUnitTests:
    images: dict[str, LocalImage] = field(default_factory=dict)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (image, path) -> the file's bytes
    on_run: Callable[[RunSpec], RunResult] | None = None
    runs: list[RunSpec] = field(default_factory=list)  # what was asked, for the test to assert on
    name: str = "stub engine (unit tests only; no engine behind it)"

    def image(self, reference: str) -> LocalImage:
        found = self.images.get(reference) or next((i for i in self.images.values() if i.id == reference), None)
        if found is None:
            raise ImageNotFound(f"No such image: {reference} ({self.name})")
        return found

    def run(self, spec: RunSpec) -> RunResult:
        self.runs.append(spec)
        if self.on_run is None:
            raise EngineError(f"{self.name} cannot run containers")
        return self.on_run(spec)

    def read_file(self, image: str, path: str, limit: int = 1 << 20) -> bytes | None:
        data = self.files.get((self.image(image).id, path))
        if data is not None and len(data) > limit:
            raise ValueError(f"the archive of {path} is larger than {limit >> 20} MiB")
        return data

    def history(self, image: str) -> list[Layer]:
        return []

    def save(self, image: str) -> Iterator[bytes]:
        raise EngineError(f"{self.name} cannot save images")

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.images[f"{repository}:{tag}"] = self.image(image)

    def untag(self, reference: str) -> None:
        self.images.pop(reference, None)

    def push(self, repository: str, tag: str) -> str:
        raise EngineError(f"{self.name} cannot push")

    def build_context(self, context: str, tag: str) -> str:
        raise EngineError(f"{self.name} cannot build")
