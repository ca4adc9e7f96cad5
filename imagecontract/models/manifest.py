"""`/opt/imagebuild/manifest.json`: what an image claims about itself (docs/contracts.md).

The host writes it (render), the image reads it (smoke suite), and the host reads it back from built images
(tunableop); all three go through this model instead of `.get()` on a plain dict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Final, Literal

from imagecontract.cuda_fatbin import CELL_KINDS, parse_name
from imagecontract.models._base import Model, doc
from imagecontract.targets import canonical, covers, runs_on, split_id

MANIFEST_SCHEMA_VERSION: Final = 1  # Final: the Literal[1] that schema_version holds


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
    """What the image's server refuses (smoke/serve_guard.py in front of a runtime without the options)."""

    max_new_tokens: int = doc("most tokens one request may generate; max_tokens above it is a 400")
    max_request_bytes: int = doc("largest request body; a larger one is a 413")
    max_concurrency: int = doc("generations at once; one more is a 429")


@dataclass
class Runtime(Model):
    """How the smoke `runtime` check starts the image's server and queries it."""

    # tgi has a source, pip a requirements file; limits only where the image enforces them
    OMIT_NONE: ClassVar[tuple[str, ...]] = ("source", "requirements", "limits")

    name: str
    kind: Literal["tgi", "pip", "vllm", "sglang"]
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
        """The device runs code of one of the image's arches: the one rule the preflight applies
        (imagecontract.targets.covers: LLVM's target ID rule; CUDA's cubin, `a`/`f` and PTX JIT rules)."""
        return covers(self.image_arches(), device_arch)

    def coverage(self, device_arch: str) -> tuple[str, str] | None:
        """The image arch whose code runs on the device and how (`("sm_80", "cubin compatible")`), or None."""
        return covering(self.image_arches(), device_arch)

    def included(self, name: str) -> bool:
        entry = self.components.get(name)
        return bool(entry and entry.included)

    def components_like(self, fragment: str) -> list[str]:
        """Included components whose name contains `fragment` (e.g. the flash-attention builds)."""
        return sorted(n for n, c in self.components.items() if fragment in n and c.included)


def _nearness(key: str, device: str, how: str) -> tuple[int, int, int]:
    """How near `key`'s code is to `device` among keys whose code runs there (smaller is nearer): the kind of
    coverage (exact before compatible cubin, family, PTX JIT), then CUDA's highest compute capability (every
    covering key is at or below the device's), AMD's own processor before a generic target, then more features."""
    rank = 0 if how == "loads" else CELL_KINDS.index(how)
    entry = parse_name(key)
    if entry is not None:
        return (rank, -(entry.major * 10 + entry.minor), 0)
    code, dev = split_id(canonical(key)), split_id(canonical(device))
    own = bool(code and dev and code[0] == dev[0])
    return (rank, 0 if own else 1, -len(code[1]) if code else 0)


def covering(keys: Iterable[str], device: str) -> tuple[str, str] | None:
    """The key of a per-arch table (an image's arches, `attention_backends`, `runtime.attention`) whose promise
    holds on `device`, and how that key's code runs there (imagecontract.targets.runs_on); None when no key's code
    runs there. The device's own ID first; else the nearest key whose code runs on it (_nearness): an sm_86 GPU
    gets an sm_80 image's promises, its cubins run there; an sm_100 GPU none of sm_90a's."""
    keys = list(keys)
    if device in keys:
        how = runs_on(device, device)
        return (device, how) if how else None
    found = [(key, how) for key in keys if (how := runs_on(key, device))]
    if not found:
        return None
    return min(found, key=lambda pair: _nearness(pair[0], device, pair[1]))
