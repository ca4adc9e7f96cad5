"""matrix.yaml: pydantic models, loading with file:line:column errors, and target expansion.

Every error names the place in the file, the key path and what was expected, so a typo never turns into a
silently different image. Strings are restricted to characters that cannot become Dockerfile syntax.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, model_validator

from imagebuild import arches
from imagebuild.errors import ConfigError

# Characters allowed in free text (descriptions, why, server argv, ENV values): no newline, quote, backslash,
# `$`, backtick, `;`, `|`, `&`, `<` or `>`, so no value can end a Dockerfile line or a quoted string. Free text
# lands only in `#` comment lines, JSON arrays, double-quoted ENV/LABEL values and the manifest, never as a bare
# word of a shell command: every field that does has a type of its own below, and templates quote it (`| q`).
_SAFE_TEXT = re.compile(r"[A-Za-z0-9 ._:/@+=,%~#()\[\]{}*?!^-]*")  # fullmatch: `$` would let a final newline by
MAX_TEXT = 1024  # characters in one matrix string


def excerpt(value: object, limit: int = 40) -> str:
    """A value as an error quotes it: repr, cut to `limit` characters (never megabytes of input)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _safe_text(value: str) -> str:
    if len(value) > MAX_TEXT:
        raise ValueError(f"longer than {MAX_TEXT} characters")
    bad = sorted({ch for ch in value if not _SAFE_TEXT.fullmatch(ch)})
    if bad:
        shown = ", ".join(repr(ch) for ch in bad[:8]) + (", ..." if len(bad) > 8 else "")
        raise ValueError(f"contains {shown}, which could become Dockerfile syntax (newline, quote, `$`, `;`, ...)")
    return value


def _typed(what: str, pattern: str, check: Callable[[str], str | None] | None = None) -> Any:
    """A string type that holds only what its field can legally hold: refused with `what` it should be."""
    compiled = re.compile(pattern)

    def validate(value: str) -> str:
        _safe_text(value)  # newline, quote, `$`, `;`: said as such
        if not compiled.fullmatch(value):
            raise ValueError(f"{excerpt(value)} is not {what}")
        problem = check(value) if check else None
        if problem:
            raise ValueError(f"{excerpt(value)} is not {what}: {problem}")
        return value

    return Annotated[str, AfterValidator(validate), WithJsonSchema({"type": "string", "pattern": pattern})]


def _git_ref_problem(value: str) -> str | None:
    """git check-ref-format's rules that a charset cannot say."""
    if ".." in value or "//" in value or value.endswith(("/", ".", ".lock")) or "/." in value:
        return "no `..`, `//`, `/.`, and no trailing `/`, `.` or `.lock`"
    return None


_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9._-]*"  # a path segment: never `.`, `..`, a hidden name or a `-flag`
Text = Annotated[str, AfterValidator(_safe_text)]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=128)]
Commit = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
# The field types below are what reaches a Dockerfile or shell line: none can hold a space, `#`, a shell
# operator or quote, and none can start with `-` (so no value becomes an option of the command it is given to).
Url = _typed(
    "a URL (https://host/path: letters, digits and ._~%+,=:@/-)",
    r"(https|http|ssh|git)://[A-Za-z0-9][A-Za-z0-9._~%+,=:@/-]*",
)
GitRef = _typed(
    "a git ref (branch or tag: letters, digits and ._/+-)", r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", _git_ref_problem
)
# A path inside this repository (resolved and confined to it at load) or inside a checkout.
RepoPath = _typed(f"a relative path (segments {_SEGMENT}, no `..`)", rf"{_SEGMENT}(/{_SEGMENT})*")
AbsPath = _typed(f"an absolute path (/ then segments {_SEGMENT})", rf"(/{_SEGMENT})+")
HostPath = _typed("a folder (an absolute or relative path, or file:///path)", rf"(file://)?/?{_SEGMENT}(/{_SEGMENT})*")
FileName = _typed("a file name (letters, digits and ._%-)", r"[A-Za-z0-9_][A-Za-z0-9._%-]*")
Version = _typed("a version (letters, digits and .+!_-)", r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
TorchKey = _typed("a torch key (letters, digits and ._-)", r"[A-Za-z0-9][A-Za-z0-9._-]*")
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
ImageName = _typed(
    "an image reference without digest ([registry/]path[:tag], lower case path)",
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?",
)
AptPackage = _typed(
    "a Debian package (name[:arch][=version])", r"[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?"
)
_PIP_SPEC = r"(?:===|==|~=|!=|>=|<=|>|<)[A-Za-z0-9.*+!_-]+"
PipRequirement = _typed(
    "a pip requirement (name[extras] and version specifiers, no URL or option)",
    rf"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?(?:{_PIP_SPEC}(?:,{_PIP_SPEC})*)?",
)
Program = _typed("a program (a name on PATH or an absolute path)", rf"/?{_SEGMENT}(/{_SEGMENT})*")
HttpPath = _typed("an HTTP path (/ then letters, digits and ._~/-)", r"/[A-Za-z0-9._~/-]*")
AttentionKey = _typed("an arch or `cpu` (letters, digits, _ and :feature+/-)", r"[a-z0-9_]+(?::[a-z0-9]+[+-])*")
TargetName = _typed("a target name template (letters, digits, ._- and {platform} / {torch})", r"[A-Za-z0-9{}._-]+")
PlatformKind = Literal["rocm", "cuda", "cpu"]
ArchVariable = Literal[
    "PYTORCH_ROCM_ARCH",
    "GPU_TARGETS",
    "AMDGPU_TARGETS",
    "GPU_ARCHS",
    "FA_GFX_ARCHS",
    "AOTRITON_TARGET_ARCH",
    "TORCH_CUDA_ARCH_LIST",
    "CMAKE_CUDA_ARCHITECTURES",
]
ArchForm = arches.ArchForm
Backend = Literal["flash", "efficient", "cudnn", "math"]
# A pip requirement pinned to one version (`name==1.2.3`): what a build installs before it compiles.
PinnedRequirement = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$")]
LocalVersion = Annotated[str, Field(pattern=r"^[a-z0-9]+(\.[a-z0-9]+)*$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")]


def _known_arch(value: str) -> str:
    target = arches.parse_target(value)  # raises ConfigError -> wrapped below as a ValueError
    return target.id


def _arch_name(value: str) -> str:
    _safe_text(value)  # the arch parser quotes what it refuses: never a newline or a control character
    try:
        return _known_arch(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


ArchName = Annotated[str, AfterValidator(_arch_name)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Settings(Strict):
    require_pins: bool = Field(
        default=False,
        description="Make every unpinned source, patch and base image an error instead of a warning.",
    )
    allow_experimental: bool = Field(
        default=False,
        description="Accept arches components mark experimental in every target (else pass --allow-experimental).",
    )


class Source(Strict):
    """Where a source comes from: a git commit, a URL with a checksum, or a path in this repository."""

    git: Url | None = Field(default=None, description="Git repository URL to check out (give commit to pin it).")
    ref: GitRef | None = Field(
        default=None,
        description="Branch or tag to fetch when no commit is given (unpinned: render warns).",
    )
    commit: Commit | None = Field(default=None, description="Full 40-hex commit to check out: the pin of a git source.")
    url: Url | None = Field(default=None, description="URL of an archive or file to download (give sha256 to pin it).")
    sha256: Sha256 | None = Field(default=None, description="Checksum of the file at url: the pin of a url source.")
    path: RepoPath | None = Field(
        default=None,
        description="A file or folder of this repository (confined to it at load).",
    )
    # The directory of the checkout that holds the setup.py to build (flash-attention's csrc/rotary): relative,
    # segments that cannot start with `.` (so no `..`, no absolute path), so the build stays inside the checkout.
    subdir: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")] | None = (
        Field(
            default=None,
            description="Folder of the checkout holding the setup.py to build (relative; no `..`).",
        )
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        given = [k for k in ("git", "url", "path") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"expected exactly one of git, url, path (got {', '.join(given) or 'none'})")
        if self.git is None and (self.ref or self.commit or self.subdir):
            raise ValueError("ref, commit and subdir belong to a git source")
        if self.url is None and self.sha256:
            raise ValueError("sha256 belongs to a url source")
        return self

    @property
    def pinned(self) -> bool:
        return self.path is not None or self.commit is not None or self.sha256 is not None

    def describe(self) -> str:
        if self.git:
            where = f" ({self.subdir})" if self.subdir else ""
            return f"{self.git}@{self.commit or self.ref or 'HEAD'}{where}"
        return self.url or f"./{self.path}"


class Patch(Source):
    name: Name = Field(description="Name of the patch (listed in the io.imagebuild.patches label).")
    description: Text = Field(default="", description="What the patch fixes, for readers.")


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
    python: Program = Field(default="python3", description="Python interpreter the stages run.")
    python_version: Version = Field(description="Python version of that interpreter (recorded in the manifest).")
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


class TgiServer(Strict):
    """How TGI's Python server is installed on one platform kind: its pinned requirements file and extras."""

    requirements: RepoPath = Field(
        description="Requirements file in TGI's server/ directory (e.g. requirements_rocm.txt).",
    )
    extras: list[Name] = Field(
        default=[],
        description="Extras whose packages the server's modules import at top level.",
    )


class TgiAttention(Strict):
    """Per platform kind, the components TGI's flash / paged attention import: all included for an arch -> promised."""

    flash: dict[PlatformKind, list[Name]] = Field(
        default={},
        description="Per platform kind, what TGI's flash attention imports (all built for an arch: a promise).",
    )
    paged: dict[PlatformKind, list[Name]] = Field(
        default={},
        description="Per platform kind, what TGI's paged attention imports (all built for an arch: a promise).",
    )


class TgiRuntime(Strict):
    """text-generation-inference: Rust launcher and router built from source, Python server built against torch."""

    kind: Literal["tgi"] = Field(
        description="tgi: text-generation-inference (Rust launcher and router, Python server).",
    )
    description: Text = Field(default="", description="What the runtime is, written into the Dockerfile.")
    source: Source = Field(description="TGI source, pinned by commit.")
    builder_image: ImageName = Field(description="Rust image the launcher and router are built in.")
    builder_digest: Digest | None = Field(default=None, description="sha256 digest pinning builder_image.")
    rust_toolchain: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")] = Field(
        description="Channel of TGI's rust-toolchain.toml; builder_image must carry it.",
    )
    entrypoint: Program = Field(description="The runtime's main program (one of binaries).")
    binaries: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]] = Field(
        description="Cargo outputs the image ships.",
    )
    server: dict[PlatformKind, TgiServer] = Field(
        description="How the Python server is installed on each platform kind.",
    )
    apt_packages: list[AptPackage] = Field(
        default=[],
        description="Debian packages the binaries need at run time (the router links OpenSSL).",
    )
    env: dict[EnvName, Text] = Field(default={}, description="Environment variables of the final stage.")
    default_args: list[Text] = Field(
        default=[],
        description="CMD: the entrypoint's arguments when `docker run IMAGE` gives none.",
    )
    serve: list[Text] = Field(
        description="argv after the entrypoint that serves a model; `{model}` and `{port}` are filled in.",
    )
    serve_env: dict[EnvName, Text] = Field(default={}, description="Environment added when the smoke suite serves.")
    health: HttpPath = Field(default="/health", description="HTTP path that answers 200 once the server can generate.")
    api: Literal["tgi"] = Field(default="tgi", description="Request flavour of the generate API.")
    startup_timeout_s: int = Field(default=900, ge=1, description="Seconds the smoke suite waits for health.")
    attention: TgiAttention = Field(
        default=TgiAttention(),
        description="Which components TGI's flash / paged attention need.",
    )

    @model_validator(mode="after")
    def _builder_has_toolchain(self) -> TgiRuntime:
        tag = self.builder_image.rpartition(":")[2]
        if not tag.startswith(self.rust_toolchain):
            raise ValueError(
                f"builder_image {self.builder_image} does not carry Rust {self.rust_toolchain} "
                "(rust_toolchain, the channel of TGI's rust-toolchain.toml); rustup would fetch another toolchain"
            )
        if self.entrypoint not in self.binaries:
            raise ValueError(f"entrypoint {self.entrypoint} is not one of binaries {self.binaries}")
        return self


class PipRuntime(Strict):
    """A serving runtime installed from the package index, every package pinned by a requirements file."""

    kind: Literal["pip"] = Field(description="pip: a runtime installed from the package index.")
    description: Text = Field(default="", description="What the runtime is, written into the Dockerfile.")
    # A file in this repository holding every package as `name==version --hash=sha256:...`, torch excluded.
    requirements: RepoPath = Field(
        description="File of this repository pinning every package (`name==version --hash=sha256:...`), not torch.",
    )
    entrypoint: Program = Field(description="The runtime's main program (on PATH in the image).")
    serve: list[Text] = Field(
        description="argv after the entrypoint that serves a model; `{model}` and `{port}` are filled in.",
    )
    serve_env: dict[EnvName, Text] = Field(default={}, description="Environment added when the smoke suite serves.")
    health: HttpPath = Field(default="/health", description="HTTP path that answers 200 once the server can generate.")
    api: Literal["openai", "tgi"] = Field(
        default="openai",
        description="Request flavour: openai (/v1/completions) or tgi (/generate).",
    )
    startup_timeout_s: int = Field(default=300, ge=1, description="Seconds the smoke suite waits for health.")


Runtime = Annotated[TgiRuntime | PipRuntime, Field(discriminator="kind")]
RUNTIME_KINDS = ("tgi", "pip")


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


# --- loading with positions ---------------------------------------------------------------------------

KeyPath = tuple[str | int, ...]


class _Positions:
    """Line/column of every key and value in the YAML file, by key path."""

    def __init__(self) -> None:
        self.keys: dict[KeyPath, yaml.Mark] = {}
        self.values: dict[KeyPath, yaml.Mark] = {}

    def find(self, path: KeyPath, prefer_key: bool = False) -> yaml.Mark | None:
        for end in range(len(path), -1, -1):
            sub = path[:end]
            first, second = (self.keys, self.values) if prefer_key or end < len(path) else (self.values, self.keys)
            mark = first.get(sub) or second.get(sub)
            if mark is not None:
                return mark
        return None


# Limits that keep a hostile matrix cheap to refuse; the real matrix is about 10 KB, under 1,000 nodes, 7 deep.
MAX_MATRIX_BYTES = 1 << 20
MAX_NODES = 100_000  # nodes of the tree once aliases are expanded
MAX_DEPTH = 64  # nesting, also once aliases are expanded
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _where(file: Path, mark: yaml.Mark | None) -> str:
    return f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses nesting beyond MAX_DEPTH before recursing into it (PyYAML composes
    recursively: ~500 levels would overflow Python's stack)."""

    def __init__(self, stream: str, file: Path) -> None:
        super().__init__(stream)
        self.file = file
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"{_where(self.file, mark)}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _check_expansion(root: yaml.Node, file: Path) -> None:
    """Refuse alias bombs and alias cycles before anything is built: the expanded tree is measured on the
    node graph, each node once, so a 1 KB file that expands to billions of nodes costs microseconds."""
    measured: dict[int, tuple[int, int]] = {}  # node -> (nodes, height) of its expansion
    active: set[int] = set()

    def measure(node: yaml.Node, level: int) -> int:
        key = id(node)
        nodes, height = measured.get(key, (0, 0))
        if level + height > MAX_DEPTH:
            raise ConfigError(f"{_where(file, node.start_mark)}: nested deeper than {MAX_DEPTH} levels through aliases")
        if nodes:
            return nodes
        if key in active:
            raise ConfigError(f"{_where(file, node.start_mark)}: an alias refers to a node that contains it")
        active.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        total = 1
        for child in children:
            total += measure(child, level + 1)
            height = max(height, measured[id(child)][1] + 1)
            if total > MAX_NODES:
                raise ConfigError(
                    f"{_where(file, node.start_mark)}: expands to more than {MAX_NODES} nodes through aliases",
                    hint="an alias bomb? write the values out or use fewer nested aliases",
                )
        active.discard(key)
        measured[key] = (total, height)
        return total

    measure(root, 0)


def _construct(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, file: Path) -> Any:
    try:
        return loader.construct_object(node)
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp with month 13
        raise _located_error(file, node.start_mark, path, f"cannot read this value: {exc}") from None


def _pairs(loader: yaml.SafeLoader, node: yaml.MappingNode, path: KeyPath, file: Path) -> list[Any]:
    """(key, key node, value node) of a mapping, merge keys (`<<`) applied as YAML defines them: a key
    written in the mapping overrides a merged one, and an earlier merged mapping wins over a later one.
    Only keys written twice in the same mapping are duplicates."""
    own: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    merged: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise _located_error(
                        file, source.start_mark, path, "a merge key (<<) takes a mapping or a list of mappings"
                    )
                for key, k_node, v_node in _pairs(loader, source, path, file):
                    merged.setdefault(key, (k_node, v_node))
            continue
        key = _construct(loader, key_node, path, file)
        if not isinstance(key, str | int | float | bool) or key is None:
            raise _located_error(file, key_node.start_mark, path, "mapping keys must be plain scalars")
        key = str(key)
        if key in own:
            raise _located_error(file, key_node.start_mark, (*path, key), f"duplicate key '{key}'")
        own[key] = (key_node, value_node)
    combined = {**merged, **own}
    return [(key, *nodes) for key, nodes in combined.items()]


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, pos: _Positions, file: Path) -> Any:
    pos.values[path] = node.start_mark
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key, key_node, value_node in _pairs(loader, node, path, file):
            pos.keys[(*path, key)] = key_node.start_mark
            result[key] = _build(loader, value_node, (*path, key), pos, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), pos, file) for i, item in enumerate(node.value)]
    return _construct(loader, node, path, file)


def format_path(path: KeyPath) -> str:
    """`torch.2.3.builds.rocm.patches[0]`; a key that is not a plain name is quoted (and cut short), so a hostile
    key cannot spread an error over lines or screens."""
    text = ""
    for part in path:
        if isinstance(part, str) and not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", part):
            part = excerpt(part)
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _located_error(file: Path, mark: yaml.Mark | None, path: KeyPath, message: str) -> ConfigError:
    where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
    return ConfigError(f"{where}: {format_path(path)}: {message}")


def _walk(loc: KeyPath) -> tuple[KeyPath, Any]:
    """A pydantic error location -> the key path in the file (union tags dropped) and the annotation there."""
    current: Any = MatrixModel
    path: list[str | int] = []
    for part in loc:
        members = _union_models(current)
        if members:
            tagged = {_tag(m): m for m in members}
            if part in tagged:  # a discriminated union puts the tag in the location; the file has no such key
                current = tagged[str(part)]
                continue
            current = members[0]
        path.append(part)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            current = info.annotation if info is not None else None
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]
        else:
            current = None
    return tuple(path), current


def _fields_at(loc: KeyPath) -> list[str]:
    """The valid key names of the model at a location, for "did you mean" suggestions."""
    current = _walk(loc)[1]
    members = _union_models(current)
    if len(members) == 1:
        current = members[0]
    return list(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []


def _union_models(annotation: Any) -> list[type[BaseModel]]:
    """The models of `X | None`, `A | B` or `Annotated[A | B, discriminator]`; [] for anything else."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return []


def _tag(model: type[BaseModel]) -> str:
    kind = model.model_fields.get("kind")
    args = typing.get_args(kind.annotation) if kind is not None else ()
    return str(args[0]) if args else ""


def _describe_validation(exc: ValidationError, pos: _Positions, file: Path) -> ConfigError:
    messages: list[str] = []
    for error in exc.errors(include_url=False):
        loc: KeyPath = tuple(p for p in error["loc"] if isinstance(p, str | int))
        path = _walk(loc)[0]
        kind = error["type"]
        if kind == "extra_forbidden":
            key = str(path[-1])
            valid = _fields_at(loc[:-1])
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hint = (
                f"; did you mean '{close[0]}'?"
                if close
                else (f"; expected one of: {', '.join(valid)}" if valid else "")
            )
            message = f"unknown key '{key}'{hint}"
            mark = pos.find(path, prefer_key=True)
        elif kind == "missing":
            message = f"missing required key '{path[-1]}'"
            mark = pos.find(path[:-1])
        elif kind in ("union_tag_not_found", "union_tag_invalid"):
            tags = re.findall(r"'([^']+)'", str(error.get("ctx", {}).get("expected_tags", ""))) or list(RUNTIME_KINDS)
            got = error.get("ctx", {}).get("tag")
            close = difflib.get_close_matches(str(got), tags, n=1, cutoff=0.6) if got else []
            hint = f"; did you mean '{close[0]}'?" if close else ""
            what = f"got {got!r}" if got else "missing"
            message = f"expected one of {', '.join(repr(t) for t in tags)}, {what}{hint}"
            path = (*path, "kind")
            mark = pos.find(path) if got else pos.find(path[:-1], prefer_key=True)
        elif kind == "literal_error":
            expected = error.get("ctx", {}).get("expected", "")
            got = error.get("input")
            close = difflib.get_close_matches(str(got), re.findall(r"'([^']+)'", expected), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            message = f"expected {expected}, got {excerpt(got)}{hint}"
            mark = pos.find(path)
        else:
            reason = error["msg"].removeprefix("Value error, ")
            message = f"{reason} (got {excerpt(error.get('input'))})" if kind != "value_error" else reason
            mark = pos.find(path)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}: " if mark else ""
        messages.append(f"{where}{format_path(path)}: {message}")
    extra = f" (and {len(messages) - 1} more: {'; '.join(messages[1:3])})" if len(messages) > 1 else ""
    return ConfigError(messages[0] + extra)


# --- expansion ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One expanded target: a platform, a torch build, components and a runtime, ready to resolve and render."""

    name: str
    platform_name: str
    platform: Platform
    torch_key: str
    torch: Torch
    torch_build: TorchBuild
    components: tuple[tuple[str, Component], ...]
    skipped_components: tuple[str, ...]
    runtime_name: str | None
    runtime: TgiRuntime | PipRuntime | None
    tunableop: TunableOp
    allow_experimental: bool

    def arch_supports(self) -> list[arches.ArchSupport]:
        """The torch build and every component, as the arch resolver sees them."""
        vendor = arches.PLATFORM_VENDOR[self.platform.kind]
        build = self.torch_build
        supports = [
            arches.ArchSupport(
                "pytorch",
                tuple(build.supported),
                tuple(build.experimental),
                arch_vars=_vars_for(vendor, build.arch_vars),
            )
        ]
        for name, component in self.components:
            supports.append(
                arches.ArchSupport(
                    name,
                    tuple(component.supported),
                    tuple(component.experimental),
                    component.optional,
                    _vars_for(vendor, component.arch_vars),
                    tuple(a for a in component.fixed_arches if arches.parse_target(a).vendor == vendor),
                )
            )
        return supports

    def resolve(
        self, arch_arg: str | None = None, env: dict[str, str] | None = None, allow_experimental: bool = False
    ) -> arches.Resolution:
        return arches.resolve(
            target=self.name,
            platform_kind=self.platform.kind,
            platform_arches=[arches.parse_target(a).processor for a in self.platform.arches],
            default_arches=self.platform.default_arches,
            components=self.arch_supports(),
            arch_arg=arch_arg,
            env=env,
            allow_experimental=allow_experimental or self.allow_experimental,
        )


def _vars_for(vendor: str | None, wanted: dict[str, ArchForm]) -> tuple[tuple[str, ArchForm], ...]:
    """The arch variables of this vendor only: a ROCm stage never gets TORCH_CUDA_ARCH_LIST."""
    return tuple((name, form) for name, form in wanted.items() if arches.ARCH_VARIABLES[name][0] == vendor)


@dataclass(frozen=True)
class Unpinned:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class Matrix:
    """A loaded, cross-checked matrix and its expanded targets."""

    def __init__(self, model: MatrixModel, path: Path, sha256: str, targets: list[Target]) -> None:
        self.model = model
        self.path = path
        self.sha256 = sha256
        self.targets = targets

    def target(self, name: str) -> Target:
        for target in self.targets:
            if target.name == name:
                return target
        names = [t.name for t in self.targets]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"targets: {', '.join(names)}"
        raise ConfigError(f"unknown target '{name}'", hint=hint)

    def select(self, names: tuple[str, ...] | list[str]) -> list[Target]:
        return [self.target(n) for n in names] if names else list(self.targets)

    def unpinned(self) -> list[Unpinned]:
        """Every source, patch and base image that is not pinned by digest, commit or checksum."""
        found: list[Unpinned] = []
        m = self.model
        for name, platform in m.platforms.items():
            if platform.base_digest is None and not platform.base_image.startswith("local/"):
                found.append(Unpinned(f"platforms.{name}", f"base image {platform.base_image} has no digest"))
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


def _check_references(model: MatrixModel, pos: _Positions, file: Path) -> list[Target]:
    """Cross-checks pydantic cannot do alone; returns the expanded targets."""

    def fail(path: KeyPath, message: str, valid: list[str] | None = None, value: str | None = None) -> ConfigError:
        if valid is not None and value is not None:
            close = difflib.get_close_matches(value, valid, n=1, cutoff=0.5)
            message += f"; did you mean '{close[0]}'?" if close else f"; expected one of: {', '.join(valid)}"
        return _located_error(file, pos.find(path), path, message)

    for name, platform in model.platforms.items():
        processors = [arches.parse_target(a) for a in platform.arches]
        vendor = arches.PLATFORM_VENDOR[platform.kind]
        for i, target in enumerate(processors):
            if target.vendor != vendor:
                raise fail(("platforms", name, "arches", i), f"{target.id} is not a {platform.kind} arch")
        for i, arch in enumerate(platform.default_arches):
            if arches.parse_target(arch).processor not in {t.processor for t in processors}:
                raise fail(("platforms", name, "default_arches", i), f"{arch} is not in this platform's arches")
    for key, torch in model.torch.items():
        for kind, build in torch.builds.items():
            for field_name in ("supported", "experimental"):
                for i, arch in enumerate(getattr(build, field_name)):
                    if arches.PLATFORM_VENDOR[kind] != arches.parse_target(arch).vendor:
                        raise fail(("torch", key, "builds", kind, field_name, i), f"{arch} is not a {kind} arch")
            if kind != "cpu":
                covered = set()
                for arch in build.attention:
                    try:
                        covered.add(arches.parse_target(arch).processor)
                    except ConfigError as exc:
                        raise fail(("torch", key, "builds", kind, "attention", arch), str(exc)) from None
                missing = sorted(set(build.supported + build.experimental) - covered)
                if missing:
                    raise fail(
                        ("torch", key, "builds", kind, "attention"),
                        f"no attention backends listed for {', '.join(missing)}",
                    )
            for var in build.arch_vars:
                if arches.ARCH_VARIABLES[var][0] != arches.PLATFORM_VENDOR[kind]:
                    raise fail(("torch", key, "builds", kind, "arch_vars", var), f"{var} is not read on {kind}")
    for name, component in model.components.items():
        vendors = {arches.PLATFORM_VENDOR[kind] for kind in component.platforms}
        for var in component.arch_vars:
            if arches.ARCH_VARIABLES[var][0] not in vendors:
                raise fail(
                    ("components", name, "arch_vars", var),
                    f"{var} is not read on {', '.join(component.platforms)}",
                )
        gpu = [kind for kind in component.platforms if kind != "cpu"]
        if component.kind == "python-ext" and gpu and not (component.arch_vars or component.fixed_arches):
            raise fail(
                ("components", name),
                "a GPU component needs arch_vars (what its build reads) or fixed_arches (what it hard-codes)",
            )
        both = set(component.supported) & set(component.experimental)
        if both:
            raise fail(
                ("components", name, "experimental"), f"{', '.join(sorted(both))} listed as supported and experimental"
            )

    _check_sources(model, file, fail)
    targets: list[Target] = []
    seen: dict[str, KeyPath] = {}
    for g, group in enumerate(model.targets):
        gpath: KeyPath = ("targets", g)
        for i, platform_name in enumerate(group.axes.platform):
            if platform_name not in model.platforms:
                raise fail(
                    (*gpath, "axes", "platform", i),
                    f"unknown platform '{platform_name}'",
                    list(model.platforms),
                    platform_name,
                )
        for i, torch_key in enumerate(group.axes.torch):
            if torch_key not in model.torch:
                raise fail((*gpath, "axes", "torch", i), f"unknown torch '{torch_key}'", list(model.torch), torch_key)
        for i, component_name in enumerate(group.components):
            if component_name not in model.components:
                raise fail(
                    (*gpath, "components", i),
                    f"unknown component '{component_name}'",
                    list(model.components),
                    component_name,
                )
        if group.runtime is not None and group.runtime not in model.runtimes:
            raise fail((*gpath, "runtime"), f"unknown runtime '{group.runtime}'", list(model.runtimes), group.runtime)
        _check_runtime_refs(model, group.runtime, fail)
        combos = [Combo(platform=p, torch=t) for p, t in itertools.product(group.axes.platform, group.axes.torch)]
        for i, extra in enumerate(group.include):
            if extra.platform is None or extra.torch is None:
                raise fail((*gpath, "include", i), "an include entry needs both platform and torch")
            if extra.platform not in model.platforms or extra.torch not in model.torch:
                raise fail(
                    (*gpath, "include", i), f"unknown platform or torch in include ({extra.platform}, {extra.torch})"
                )
            combos.append(extra)
        for i, rule in enumerate(group.exclude):
            if not any(_matches(rule, c) for c in combos):
                raise fail((*gpath, "exclude", i), "this exclude entry matches no target (a typo would hide it)")
        combos = [c for c in combos if not any(_matches(rule, c) for rule in group.exclude)]
        for combo in combos:
            assert combo.platform is not None and combo.torch is not None
            platform = model.platforms[combo.platform]
            torch = model.torch[combo.torch]
            if platform.kind not in torch.builds:
                raise fail(
                    (*gpath, "axes"),
                    f"torch '{combo.torch}' has no {platform.kind} build for platform {combo.platform}; "
                    f"add one or exclude the pair",
                )
            try:
                name = group.name.format(platform=combo.platform, torch=combo.torch)
            except (KeyError, IndexError, ValueError) as exc:
                raise fail((*gpath, "name"), f"bad name template ({exc}); use {{platform}} and {{torch}}") from None
            if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name) or len(name) > MAX_TAG:
                raise fail(
                    (*gpath, "name"),
                    f"target name {excerpt(name)} is not a valid image tag "
                    f"(at most {MAX_TAG} characters: a-z, 0-9, '.', '_', '-', starting with a letter or digit)",
                )
            if name in seen:
                raise fail((*gpath, "name"), f"target name '{name}' repeats the one of {format_path(seen[name])}")
            seen[name] = gpath
            chosen = [
                (c, model.components[c]) for c in group.components if platform.kind in model.components[c].platforms
            ]
            skipped = tuple(c for c in group.components if platform.kind not in model.components[c].platforms)
            runtime = model.runtimes[group.runtime] if group.runtime else None
            targets.append(
                Target(
                    name=name,
                    platform_name=combo.platform,
                    platform=platform,
                    torch_key=combo.torch,
                    torch=torch,
                    torch_build=torch.builds[platform.kind],
                    components=tuple(chosen),
                    skipped_components=skipped,
                    runtime_name=group.runtime,
                    runtime=runtime,
                    tunableop=model.tunableop,
                    allow_experimental=group.allow_experimental or model.settings.allow_experimental,
                )
            )
    for target in targets:
        try:
            target.resolve(env={})
        except ConfigError as exc:
            raise fail(seen[target.name], f"default arches do not resolve: {exc}") from None
    return targets


MAX_TAG = 128  # an image tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}, and target names are tags


def _check_sources(model: MatrixModel, file: Path, fail: Callable[..., ConfigError]) -> None:
    """Each source is of the kind its template renders (a git checkout, a URL, a repository path), and every
    repository path stays inside the repository once symlinks are resolved: nothing renders `None` into a
    command, and no COPY reaches outside the build context."""
    root = file.resolve().parent

    def confined(where: KeyPath, relative: str) -> None:
        resolved = (root / relative).resolve()
        if not resolved.is_relative_to(root):
            raise fail(
                where, f"{excerpt(relative)} leaves the repository {root} (resolves to {excerpt(str(resolved))})"
            )

    def need(where: KeyPath, source: Source, kind: str, why: str) -> None:
        if getattr(source, kind) is None:
            raise fail(where, f"needs a {kind} source: {why}")

    for key, torch in model.torch.items():
        for kind, build in torch.builds.items():
            where: KeyPath = ("torch", key, "builds", kind)
            if build.source is not None:
                need((*where, "source"), build.source, "git", "a torch source build is a git checkout")
            for i, patch in enumerate(build.patches):
                if patch.url is None and (patch.git is None or patch.commit is None):
                    raise fail(
                        (*where, "patches", i),
                        "a patch is a url (with sha256) or a git commit (git and commit); "
                        "the torch template applies nothing else",
                    )
    for name, component in model.components.items():
        where = ("components", name, "source")
        if component.kind == "kernels":
            need(where, component.source, "path", "a kernels component is copied from this repository")
        else:
            need(where, component.source, "git", "a python-ext component is built from a git checkout")
        if component.source.path is not None:
            confined((*where, "path"), component.source.path)
    for name, runtime in model.runtimes.items():
        if isinstance(runtime, TgiRuntime):
            need(("runtimes", name, "source"), runtime.source, "git", "TGI is built from a git checkout")
        else:
            confined(("runtimes", name, "requirements"), runtime.requirements)


def _check_runtime_refs(model: MatrixModel, name: str | None, fail: Callable[..., ConfigError]) -> None:
    """Components named by a TGI runtime's attention needs exist (a typo would silently drop a promise)."""
    runtime = model.runtimes.get(name) if name else None
    if not isinstance(runtime, TgiRuntime):
        return
    for which, needs in (("flash", runtime.attention.flash), ("paged", runtime.attention.paged)):
        for kind, names in needs.items():
            for i, component in enumerate(names):
                if component not in model.components:
                    where = ("runtimes", name, "attention", which, kind, i)
                    raise fail(where, f"unknown component '{component}'", list(model.components), component)


def _matches(rule: Combo, combo: Combo) -> bool:
    return (rule.platform is None or rule.platform == combo.platform) and (
        rule.torch is None or rule.torch == combo.torch
    )


def load_text(text: str, path: Path) -> Matrix:
    """Parse and validate matrix text; every problem is a ConfigError naming file:line:column."""
    data, pos = parse_text(text, path)
    return validate(data, pos, path, hashlib.sha256(text.encode()).hexdigest())


def parse_text(text: str, path: Path) -> tuple[Any, _Positions]:
    """The data of matrix text and the line/column of each key and value, bounded (size, depth, aliases)."""
    if len(text) > MAX_MATRIX_BYTES:
        raise ConfigError(f"{path}: the matrix is larger than {MAX_MATRIX_BYTES} bytes")
    loader: _BoundedLoader | None = None
    pos = _Positions()
    try:
        loader = _BoundedLoader(text, path)  # its reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(f"{path}: the matrix file is empty")
        _check_expansion(node, path)
        data = _build(loader, node, (), pos, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:  # the reader's errors (control characters, bad encoding) carry an offset
        offset = getattr(exc, "position", 0) or 0
        line, column = text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1
        reason = getattr(exc, "reason", None) or type(exc).__name__
        character = getattr(exc, "character", None)
        shown = f" (character {character:#x})" if isinstance(character, int) else ""
        raise ConfigError(f"{path}:{line}:{column}: invalid YAML: {reason}{shown}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, pos


def validate(data: Any, pos: _Positions, path: Path, sha256: str) -> Matrix:
    """Validate parsed matrix data (values and where each stands in `path`): the models, then the cross-checks."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1:1: the matrix must be a mapping of sections (platforms, torch, ...)")
    try:
        model = MatrixModel.model_validate(data)
    except ValidationError as exc:
        raise _describe_validation(exc, pos, path) from None
    targets = _check_references(model, pos, path)
    return Matrix(model, path, sha256, targets)


def load_matrix(path: Path) -> Matrix:
    """Load matrix.yaml (or another path); a missing or unreadable file is a ConfigError."""
    try:
        with path.open("rb") as fh:  # bounded: /dev/zero or a huge file is refused, not read whole
            raw = fh.read(MAX_MATRIX_BYTES + 1)
        if len(raw) > MAX_MATRIX_BYTES:
            raise ConfigError(f"{path}: the matrix is larger than {MAX_MATRIX_BYTES} bytes")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such matrix file", hint="pass --matrix PATH or run from the repository root"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the matrix: {exc}") from None
    return load_text(text, path)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of matrix.yaml (the committed copy is schema/matrix.schema.json)."""
    return MatrixModel.model_json_schema()
