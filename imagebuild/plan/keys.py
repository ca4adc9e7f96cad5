"""The images a name given to `smoke` or `publish` means, as the plan keys them (plan/image_key.py).

A target name means its matrix-default images, one per OCI platform chosen (--platform, each one it lists; none:
every one); an image name built by a non-default plan (`rocm6.1-torch2.3-gfx942`) or any other reference means
that one image (no key: the engine resolves it). The matrix is read here, once per command, so that no command
works out a name, a folder or a platform list of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.plan.image_key import ImageKey


@dataclass(frozen=True)
class Named:
    """What a command's IMAGE|TARGET argument means."""

    given: str
    targets: tuple[str, ...]  # every target name of the matrix (() when it does not load)
    keys: tuple[ImageKey, ...]  # the chosen platforms' images of the target (() for an image reference)

    @property
    def listed(self) -> tuple[str, ...]:
        """Every OCI platform the target lists (() for an image reference)."""
        return self.keys[0].platforms if self.keys else ()


def target_names(matrix_path: Path) -> list[str]:
    """Target names when the matrix loads; an image reference works without one."""
    return list(named(matrix_path, "").targets)


def named(matrix_path: Path, given: str, wanted: Sequence[str] = ()) -> Named:
    """IMAGE|TARGET with the --platform values: the keys of the chosen platforms' images."""
    from imagebuild.matrix import load_matrix
    from imagebuild.plan.target_plan import plan_for

    try:
        matrix = load_matrix(matrix_path)
    except ConfigError:
        matrix = None
    targets = {t.name: t for t in matrix.targets} if matrix is not None else {}
    if given not in targets or matrix is None:
        if wanted:
            raise ConfigError(f"--platform needs a TARGET, not the image '{given}'")
        return Named(given, tuple(targets), ())
    target = targets[given]
    listed = tuple(target.oci_platforms)
    unknown = [p for p in wanted if p not in listed]
    if unknown:
        raise ConfigError(f"target {given} is not built for {', '.join(unknown)}", hint=f"it lists {', '.join(listed)}")
    keys = tuple(plan_for(matrix, target, oci=p).image for p in listed if not wanted or p in wanted)
    return Named(given, tuple(targets), keys)
