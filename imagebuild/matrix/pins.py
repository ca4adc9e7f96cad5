"""What is not pinned: every source, patch and base image without a digest, commit or checksum (render warns;
`settings.require_pins` makes it an error).
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.matrix.models import MatrixModel
from imagebuild.matrix.runtimes import TgiRuntime


@dataclass(frozen=True)
class Unpinned:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def unpinned(m: MatrixModel) -> list[Unpinned]:
    """Every source, patch and base image that is not pinned by digest, commit or checksum."""
    found: list[Unpinned] = []
    for name, platform in m.platforms.items():
        if platform.base_digest is None and not platform.base_image.startswith("local/"):
            found.append(Unpinned(f"platforms.{name}", f"base image {platform.base_image} has no digest"))
        if platform.runtime_image and platform.runtime_digest is None:
            found.append(Unpinned(f"platforms.{name}", f"runtime image {platform.runtime_image} has no digest"))
    for key, torch in m.torch.items():
        for kind, build in torch.builds.items():
            where = f"torch.{key}.builds.{kind}"
            if build.source is not None and not build.source.pinned:
                found.append(Unpinned(where, f"source {build.source.describe()} has no commit"))
            for i, patch in enumerate(build.patches):
                if not patch.pinned:
                    found.append(
                        Unpinned(
                            f"{where}.patches[{i}]",
                            f"patch {patch.name} ({patch.describe()}) has no commit or sha256",
                        )
                    )
    for name, component in m.components.items():
        if not component.source.pinned:
            found.append(
                Unpinned(f"components.{name}", f"source {component.source.describe()} has no commit or sha256")
            )
    for name, runtime in m.runtimes.items():
        if not isinstance(runtime, TgiRuntime):
            continue  # a pip runtime is pinned by its requirements file
        if not runtime.source.pinned:
            found.append(Unpinned(f"runtimes.{name}", f"source {runtime.source.describe()} has no commit"))
        if runtime.builder_digest is None:
            found.append(Unpinned(f"runtimes.{name}", f"builder image {runtime.builder_image} has no digest"))
    return found
