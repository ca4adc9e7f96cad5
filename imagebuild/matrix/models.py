"""The pydantic models of matrix.yaml: what each section holds, with the description editors show on hover.

Checks that need one model only live here; checks across sections (references, arches per vendor, sources of
the kind their template renders) are in `targets.py`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from imagebuild.matrix.builders import BuilderConfig
from imagebuild.matrix.fields import (
    AbsPath,
    AptPackage,
    ArchForm,
    ArchName,
    ArchVariable,
    AttentionKey,
    Backend,
    Digest,
    EnvName,
    FileName,
    HostPath,
    ImageName,
    LocalVersion,
    Name,
    PinnedRequirement,
    PipRequirement,
    PlatformKind,
    Program,
    TargetName,
    Text,
    TorchKey,
    Url,
    Version,
)
from imagebuild.matrix.oci_rules import BASELINE, OciPlatformName, OciRules
from imagebuild.matrix.runtimes import Runtime
from imagebuild.matrix.sources import Patch, Source, Strict


class Settings(Strict):
    require_pins: bool = Field(
        default=False,
        description="Make every unpinned source, patch and base image an error instead of a warning.",
    )
    allow_experimental: bool = Field(
        default=False,
        description="Accept arches components mark experimental in every target (else pass --allow-experimental).",
    )
    builder: Name | None = Field(
        default=None,
        description="The buildx builder every build goes to (build --builder overrides; unset: the engine's own).",
    )
    builders: dict[Name, BuilderConfig] = Field(
        default={}, description="Builders imagebuild creates in buildx: nodes, their platforms, staging (issue 33)."
    )


class Platform(Strict):
    kind: PlatformKind = Field(description="GPU vendor stack: rocm, cuda or cpu.")
    version: Version | None = Field(
        default=None,
        description="ROCm or CUDA version of the base image (e.g. 6.1, 12.1).",
    )
    base_image: ImageName = Field(description="Image the base stage starts FROM.")
    base_digest: Digest | None = Field(
        default=None,
        description="sha256 digest pinning base_image (unpinned: render warns).",
    )
    runtime_image: ImageName | None = Field(
        default=None,
        description="Image the final stage starts FROM (the torch stage's venv copied in): a runtime base without "
        "the compilers' toolkit; unset: the final stage is the torch stage.",
    )
    runtime_digest: Digest | None = Field(default=None, description="sha256 digest pinning runtime_image.")
    min_driver: Version | None = Field(
        default=None,
        description="Lowest GPU kernel driver the image runs on: the NVIDIA kernel module's version (CUDA) or the "
        "amdgpu module's (ROCm); recorded in the manifest, the smoke environment check fails on an older driver. "
        "Unset: not checked.",
    )
    python: Program = Field(default="python3", description="Python interpreter the stages run.")
    python_version: Version = Field(description="Python version of that interpreter (recorded in the manifest).")
    glibc: Annotated[str, Field(pattern=r"^2\.[0-9]{1,3}$")] | None = Field(
        default=None,
        description="The base image's glibc (2.36 on Debian bookworm): the lock resolves wheels for "
        "manylinux_2_<minor> and older (PEP 600), the tags the build's pip accepts there (image/cross/cross.py reads "
        "the same glibc), so both pick the same file. Unset: manylinux_2_28.",
    )
    arches: list[ArchName] = Field(
        default=[],
        description="GPU targets this platform can build for (e.g. gfx90a, sm_90).",
    )
    default_arches: list[ArchName] = Field(
        default=[],
        description="Arches built when neither --arch nor PYTORCH_ROCM_ARCH / TORCH_CUDA_ARCH_LIST is given.",
    )
    apt_packages: list[AptPackage] = Field(default=[], description="Debian packages the base stage installs.")
    pip_packages: list[PipRequirement] = Field(default=[], description="Python packages the base stage installs.")
    env: dict[EnvName, Text] = Field(default={}, description="Environment variables set in the base and final stages.")
    cuda_compiler: list[PinnedRequirement] = Field(
        default=[],
        description="A CUDA platform of wheels: the CUDA compiler of torch's CUDA release as pinned wheels (nvcc, "
        "its crt headers, NVVM, CCCL). A component compiles with them in a CUDA home assembled from them and the "
        "venv's CUDA library wheels (image/cross/cuda_home.py); none of them ships.",
    )


class Companion(Strict):
    """A package that must ship with this torch build (Triton for a ROCm source build), pinned, from an index."""

    name: Name = Field(description="Package that must ship with this torch build (Triton for a ROCm source build).")
    version: Version = Field(description="Its pinned version.")
    index_url: Url = Field(description="Package index it comes from.")
    why: Text = Field(default="", description="Why it is needed, for readers.")


class TorchBuild(Strict):
    obtain: Literal["wheel", "source"] = Field(
        description="wheel: install a built torch; source: build torch in the image.",
    )
    index_url: Url | None = Field(default=None, description="Package index of the torch wheel (obtain: wheel).")
    find_links: HostPath | None = Field(
        default=None,
        description="Local folder of torch wheels (obtain: wheel; PIP_FIND_LINKS overrides it).",
    )
    source: Source | None = Field(default=None, description="Where the torch source comes from (obtain: source).")
    patches: list[Patch] = Field(
        default=[],
        description="Patches applied to the source before the build; each must apply or the build fails.",
    )
    # `+local` part of torch.__version__: the wheel index's label (cu121), or what a source build is stamped with
    # through PYTORCH_BUILD_VERSION; manifest, labels and the pip constraint all use the same string.
    local_version: LocalVersion | None = Field(
        default=None,
        description="The `+local` part of torch.__version__ (cu121); manifest, labels and pip constraint use it.",
    )
    build_requires: list[PinnedRequirement] = Field(
        default=[],
        description="Pinned packages installed before torch is built.",
    )
    companions: list[Companion] = Field(
        default=[],
        description="Packages that must ship with this torch build, pinned.",
    )
    arch_vars: dict[ArchVariable, ArchForm] = Field(
        default={},
        description="Arch variables the torch build reads, each with the form it accepts.",
    )
    supported: list[ArchName] = Field(default=[], description="Arches this torch build supports.")
    experimental: list[ArchName] = Field(default=[], description="Arches it builds only with --allow-experimental.")
    build_env: dict[EnvName, Text] = Field(
        default={},
        description="Build switches (USE_*, BUILD_*) set in the torch build stage.",
    )
    max_jobs: int | None = Field(
        default=None,
        ge=1,
        le=512,
        description="Parallel compile jobs (MAX_JOBS) of the torch build.",
    )
    attention: dict[AttentionKey, list[Backend]] = Field(
        default={},
        description="Per arch (or cpu), the SDPA backends the image promises; the smoke suite forces each.",
    )

    @model_validator(mode="after")
    def _how(self) -> TorchBuild:
        if self.obtain == "source" and self.source is None:
            raise ValueError("obtain: source needs a source")
        if self.obtain == "wheel" and (self.source is not None or self.patches):
            raise ValueError("obtain: wheel takes no source or patches (use obtain: source)")
        if self.obtain == "wheel" and not (self.index_url or self.find_links):
            raise ValueError("obtain: wheel needs index_url or find_links")
        return self


class Torch(Strict):
    version: Version = Field(description="PyTorch version (without the local part).")
    builds: dict[PlatformKind, TorchBuild] = Field(description="How torch is obtained on each platform kind.")

    def reported_version(self, kind: PlatformKind) -> str:
        """What `torch.__version__` says in an image of this platform kind."""
        build = self.builds.get(kind)
        local = build.local_version if build else None
        return f"{self.version}+{local}" if local else self.version


class Component(Strict):
    description: Text = Field(default="", description="What the component is, written into the Dockerfile.")
    kind: Literal["kernels", "python-ext"] = Field(
        description="kernels: imagebuild's own ops; python-ext: a Python extension built from source.",
    )
    platforms: list[PlatformKind] = Field(description="Platform kinds it is built for.")
    source: Source = Field(description="Where its source comes from.")
    # The variables this component's build reads (env var, as its setup.py / CMake reads them), each with the
    # form it accepts; a variable of another vendor is ignored on that platform.
    arch_vars: dict[ArchVariable, ArchForm] = Field(
        default={},
        description="Arch variables its build reads (as its setup.py / CMake reads them), each with its form.",
    )
    fixed_arches: list[ArchName] = Field(
        default=[],
        description="Arches its build hard-codes whatever the variables say (e.g. -gencode flags in setup.py).",
    )
    supported: list[ArchName] = Field(default=[], description="Arches it supports.")
    experimental: list[ArchName] = Field(default=[], description="Arches it builds only with --allow-experimental.")
    distribution: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=128)] | None = Field(
        default=None,
        description="The Python distribution its wheel installs: arch coverage (issue 13) knows its libraries by it.",
    )
    optional: bool = Field(
        default=False,
        description="Leave it out (and say so) when an arch is unsupported, instead of failing.",
    )
    max_jobs: int | None = Field(
        default=None,
        ge=1,
        le=512,
        description="Parallel compile jobs (MAX_JOBS) of its build.",
    )
    build_requires: list[PinnedRequirement] = Field(
        default=[],
        description="Pinned packages its setup.py imports, installed before the build.",
    )
    build_env: dict[EnvName, Text] = Field(
        default={},
        description="Switches its build reads (e.g. forcing a local build).",
    )


class TunableOp(Strict):
    enabled: bool = Field(default=True, description="PYTORCH_TUNABLEOP_ENABLED in the image.")
    tuning: bool = Field(default=False, description="PYTORCH_TUNABLEOP_TUNING in the image (tune at run time).")
    results_dir: AbsPath = Field(
        default="/data/tunableop",
        description="Folder of the results files in the image (mount /data to keep them).",
    )
    filename: FileName = Field(
        default="tunableop_results%d.csv",
        description="Results file name; %d is the GPU ordinal.",
    )
    max_tuning_duration_ms: int | None = Field(
        default=None,
        ge=1,
        description="PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS in the image.",
    )


# A library the coverage rule requires: a distribution, optionally `:` and an fnmatch pattern of its file names.
RequiredLibrary = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(:[A-Za-z0-9._*?-]+)?$", max_length=200)]


class Axes(Strict):
    platform: list[Name] = Field(description="Platforms to cross with torch versions.")
    torch: list[TorchKey] = Field(description="Torch versions (keys of `torch`) to cross with platforms.")


class Combo(Strict):
    platform: Name | None = Field(default=None, description="A platform of the axes.")
    torch: TorchKey | None = Field(default=None, description="A torch key of the axes.")


class TargetGroup(Strict):
    name: TargetName = Field(description="Target name template; {platform} and {torch} are filled in.")
    axes: Axes = Field(description="Platforms and torch versions crossed into targets.")
    components: list[Name] = Field(
        default=[],
        description="Components built into these targets (those for other platform kinds are skipped).",
    )
    runtime: Name | None = Field(default=None, description="Serving runtime of these targets (a key of `runtimes`).")
    include: list[Combo] = Field(default=[], description="Combinations added to the cross product.")
    exclude: list[Combo] = Field(default=[], description="Combinations removed from the cross product.")
    allow_experimental: bool = Field(default=False, description="Accept experimental arches for these targets.")
    oci_platforms: list[OciPlatformName] = Field(
        default=[BASELINE],
        min_length=1,
        description="OCI (CPU) platforms each target is built for; one tag is an index of them all.",
    )
    coverage_required: list[RequiredLibrary] = Field(
        default=[],
        description="Libraries that must run on every requested arch (arch coverage, imagebuild/prove/coverage.py): "
        "a distribution (nvidia-nccl-cu13) or distribution:file-pattern (vllm:_C_stable_libtorch*); a gap fails "
        "the build (exit 3), a library not listed is recorded.",
    )

    @field_validator("oci_platforms")
    @classmethod
    def _platforms_once(cls, value: list[str]) -> list[str]:
        twice = sorted({p for p in value if value.count(p) > 1})
        if twice:  # it was built twice, and the index would hold two children for one platform
            raise ValueError(f"{', '.join(twice)} listed more than once")
        return value


class SizeBudget(Strict):
    """What one target's image may weigh; a build over it fails (exit 3) naming its largest layers and their steps."""

    unpacked_mb: int = Field(ge=1, description="Unpacked size (the engine's image size), in MB (10^6 bytes).")
    compressed_mb: int | None = Field(
        default=None,
        ge=1,
        description="gzip of its layers (what a registry push stores), in MB; measured only when set (a full save).",
    )


class MatrixModel(Strict):
    schema_version: Literal[1] = Field(description="Version of this file's format (1).")
    settings: Settings = Field(default=Settings(), description="Matrix-wide switches.")
    platforms: dict[Name, Platform] = Field(description="Base images with their GPU stack and arches, by name.")
    torch: dict[TorchKey, Torch] = Field(description="PyTorch versions and how each platform kind obtains them.")
    components: dict[Name, Component] = Field(
        default={},
        description="Kernel packages and extensions built per arch, by name.",
    )
    runtimes: dict[Name, Runtime] = Field(default={}, description="Serving runtimes, by name.")
    tunableop: TunableOp = Field(default=TunableOp(), description="TunableOp defaults of every image.")
    targets: list[TargetGroup] = Field(description="Target groups: axes crossed into the images to build.")
    oci_platforms: dict[OciPlatformName, OciRules] = Field(
        default={},
        description="Per OCI platform other than linux/amd64: what exists there and what differs.",
    )
    size_budgets: dict[TargetName, SizeBudget] = Field(
        default={},
        description="Per target name: the size its image may have on every OCI platform (the build fails over it).",
    )
