"""The `oci_platforms:` section's models: what differs from the baseline (linux/amd64) on another CPU platform.

Only models and names here (no target, no matrix): `matrix/models.py` holds them in `MatrixModel`, `matrix/oci.py`
places a target on a platform with them, `matrix/checks.py` checks their references.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from imagebuild.matrix.fields import (
    ArchName,
    Digest,
    ImageName,
    Name,
    PlatformKind,
    RepoPath,
    Text,
    TorchKey,
    Url,
    Version,
)
from imagebuild.matrix.fields import _typed as typed
from imagebuild.matrix.oci_platform import BASELINE as _BASELINE
from imagebuild.matrix.oci_platform import KNOWN, schema_pattern
from imagebuild.matrix.sources import Strict

BASELINE = _BASELINE.oci
OciPlatformName = Annotated[str, typed(f"an OCI platform ({' or '.join(p.oci for p in KNOWN)})", schema_pattern())]


class PlatformOnOci(Strict):
    base_image: ImageName | None = Field(default=None, description="Base image for this CPU platform.")
    base_digest: Digest | None = Field(default=None, description="sha256 digest pinning that base image.")
    arches: list[ArchName] | None = Field(
        default=None, description="The GPU arches hosts of this CPU platform have (unset: all of the platform's)."
    )
    unavailable: Text | None = Field(default=None, description="Why this platform has no build for it.")
    why: Text = Field(default="", description="What differs, for readers (recorded in the manifest).")


class TorchOnOci(Strict):
    version: Version | None = Field(default=None, description="The torch version installed on this CPU platform.")
    index_url: Url | None = Field(
        default=None, description="Package index of that wheel (instead of the baseline's local wheelhouse)."
    )
    unavailable: Text | None = Field(default=None, description="Why this torch build does not exist for it.")
    why: Text = Field(default="", description="Why the version differs (recorded in the manifest).")


class ComponentOnOci(Strict):
    unavailable: Text = Field(description="Why the component does not exist for this CPU platform.")


class RuntimeOnOci(Strict):
    requirements: RepoPath | None = Field(default=None, description="The pip runtime's pins for this platform.")
    unavailable: Text | None = Field(default=None, description="Why the runtime does not exist for it.")


class OciRules(Strict):
    platforms: dict[Name, PlatformOnOci] = Field(
        default={}, description="Platforms that exist for this CPU platform (an unlisted one does not)."
    )
    torch: dict[TorchKey, dict[PlatformKind, TorchOnOci]] = Field(
        default={}, description="Torch builds that differ or are absent here (unlisted: the same version)."
    )
    components: dict[Name, ComponentOnOci] = Field(default={}, description="Components absent here.")
    runtimes: dict[Name, RuntimeOnOci] = Field(default={}, description="Runtimes that differ or are absent here.")


def slug(oci: str) -> str:
    """linux/arm64 -> linux-arm64 (directory, tag and file names)."""
    return oci.replace("/", "-")
