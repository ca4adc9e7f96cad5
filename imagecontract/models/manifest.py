"""`/opt/imagebuild/manifest.json`: what an image claims about itself (docs/contracts.md).

The host writes it (render), the image reads it (smoke suite), and the host reads it back from built images
(tunableop); all three go through this model instead of `.get()` on a plain dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from imagecontract.models._base import Model, doc
from imagecontract.targets import loads_on

MANIFEST_SCHEMA_VERSION = 1


@dataclass
class Source(Model):
    """Where a source comes from: a git commit, a URL with a checksum, or a path in the repository."""

    git: str | None = None
    ref: str | None = None
    commit: str | None = None
    url: str | None = None
    sha256: str | None = None
    path: str | None = None
    subdir: str | None = None


@dataclass
class Patch(Source):
    """A patch applied to the torch source build."""

    name: str = ""
    description: str = ""


@dataclass
class Companion(Model):
    """A package that ships with this torch build, pinned, from an index."""

    name: str
    version: str
    index_url: str
    why: str = ""


@dataclass
class Platform(Model):
    """The platform the image is built on."""

    OMIT_NONE: ClassVar[tuple[str, ...]] = ("min_driver",)  # written only where the matrix sets it

    name: str
    kind: Literal["rocm", "cuda", "cpu"]
    base_image: str
    version: str | None = None
    base_digest: str | None = None
    oci: str = doc("The OCI platform of this image (linux/amd64, linux/arm64)", default="linux/amd64")
    oci_notes: list[str] = doc(
        "What differs on this OCI platform from the matrix's linux/amd64 values, and why", default_factory=list
    )
    min_driver: str | None = doc(
        "Lowest GPU kernel driver the image runs on (NVIDIA kernel module or amdgpu module version); the smoke "
        "environment check fails on an older one",
        default=None,
    )


@dataclass
class TorchInfo(Model):
    """The torch the image holds and how it was obtained."""

    version: str
    obtained: Literal["wheel", "source"]
    source: Source | None = None
    patches: list[Patch] = field(default_factory=list)
    companions: list[Companion] = field(default_factory=list)
    arch_vars: dict[str, str] = field(default_factory=dict)


@dataclass
class ComponentEntry(Model):
    """One component: built for these arches, or left out and why."""

    included: bool
    arches: list[str] = field(default_factory=list)
    experimental: list[str] = field(default_factory=list)
    reason: str | None = None
    arch_vars: dict[str, str] = field(default_factory=dict)
    fixed_arches: list[str] = field(default_factory=list)


@dataclass
class RuntimeLimits(Model):
    """What the image's server refuses (imagecontract/serve_guard.py in front of a runtime without the options)."""

    max_new_tokens: int = doc("most tokens one request may generate; max_tokens above it is a 400")
    max_request_bytes: int = doc("largest request body; a larger one is a 413")
    max_concurrency: int = doc("generations at once; one more is a 429")


@dataclass
class Runtime(Model):
    """How the smoke `runtime` check starts the image's server and queries it."""

    # tgi has a source, pip a requirements file; limits only where the image enforces them
    OMIT_NONE: ClassVar[tuple[str, ...]] = ("source", "requirements", "limits")

    name: str
    kind: Literal["tgi", "pip"]
    entrypoint: str
    serve: list[str] = doc("argv that serves a local model; {model} and {port} are replaced")
    health: str = doc("HTTP path that answers 200 once the server can generate")
    api: str = doc("request flavour: tgi (POST /generate) or openai (POST /v1/completions)")
    serve_env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: int | float = 900
    attention: dict[str, dict[str, bool]] = field(default_factory=dict)
    source: Source | None = None
    requirements: str | None = None
    limits: RuntimeLimits | None = None


@dataclass
class TunableOpSettings(Model):
    """TunableOp defaults baked into the image's environment."""

    enabled: bool
    tuning: bool
    filename: str


@dataclass
class Versions(Model):
    """Versions the smoke suite compares with the live ones."""

    torch: str
    python: str
    rocm: str | None = None
    cuda: str | None = None


@dataclass
class Manifest(Model):
    """What an imagebuild image claims about itself: target, arches, components, runtime, versions."""

    schema_version: Literal[1]
    target: str
    platform: Platform
    torch: TorchInfo
    versions: Versions
    gpu_arches: list[str] = doc("Resolved GPU target IDs, features kept (gfx942:sramecc+:xnack-, sm_90+PTX)")
    experimental_arches: list[str] = field(default_factory=list)
    arch_source: str | None = None
    arch_env: dict[str, str] = field(default_factory=dict)
    components: dict[str, ComponentEntry] = field(default_factory=dict)
    attention_backends: dict[str, list[str]] = field(default_factory=dict)
    runtime: Runtime | None = None
    tunableop: TunableOpSettings | None = None

    def image_arches(self) -> list[str]:
        return self.gpu_arches + self.experimental_arches

    def supports(self, device_arch: str) -> bool:
        """The device runs code of one of the image's arches (LLVM's target ID rule; CUDA by processor)."""
        return any(loads_on(a, device_arch) for a in self.image_arches())

    def included(self, name: str) -> bool:
        entry = self.components.get(name)
        return bool(entry and entry.included)

    def components_like(self, fragment: str) -> list[str]:
        """Included components whose name contains `fragment` (e.g. the flash-attention builds)."""
        return sorted(n for n, c in self.components.items() if fragment in n and c.included)
