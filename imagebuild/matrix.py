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
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from imagebuild import arches
from imagebuild.errors import ConfigError

# Characters allowed in every string of the matrix: enough for names, versions, URLs, image refs and
# descriptions; no newline, quote, backslash, `$` or `;`, so no value can end or extend a Dockerfile line.
_SAFE_TEXT = re.compile(r"^[A-Za-z0-9 ._:/@+=,%~#()\[\]{}*?!^-]*$")


def _safe_text(value: str) -> str:
    bad = sorted({ch for ch in value if not _SAFE_TEXT.match(ch)})
    if bad:
        shown = ", ".join(repr(ch) for ch in bad)
        raise ValueError(f"contains {shown}, which could become Dockerfile syntax (newline, quote, `$`, `;`, ...)")
    return value


Text = Annotated[str, AfterValidator(_safe_text)]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
Commit = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
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
    try:
        return _known_arch(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


ArchName = Annotated[str, AfterValidator(_arch_name)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Settings(Strict):
    require_pins: bool = False
    allow_experimental: bool = False


class Source(Strict):
    """Where a source comes from: a git commit, a URL with a checksum, or a path in this repository."""

    git: Text | None = None
    ref: Text | None = None
    commit: Commit | None = None
    url: Text | None = None
    sha256: Sha256 | None = None
    path: Text | None = None
    # The directory of the checkout that holds the setup.py to build (flash-attention's csrc/rotary): relative,
    # segments that cannot start with `.` (so no `..`, no absolute path), so the build stays inside the checkout.
    subdir: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")] | None = None

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
    name: Name
    description: Text = ""


class Platform(Strict):
    kind: PlatformKind
    version: Text | None = None
    base_image: Text
    base_digest: Digest | None = None
    python: Text = "python3"
    python_version: Text
    arches: list[ArchName] = []
    default_arches: list[ArchName] = []
    apt_packages: list[Text] = []
    pip_packages: list[Text] = []
    env: dict[EnvName, Text] = {}


class Companion(Strict):
    """A package that must ship with this torch build (Triton for a ROCm source build), pinned, from an index."""

    name: Name
    version: Text
    index_url: Text
    why: Text = ""


class TorchBuild(Strict):
    obtain: Literal["wheel", "source"]
    index_url: Text | None = None
    find_links: Text | None = None
    source: Source | None = None
    patches: list[Patch] = []
    # `+local` part of torch.__version__: the wheel index's label (cu121), or what a source build is stamped with
    # through PYTORCH_BUILD_VERSION; manifest, labels and the pip constraint all use the same string.
    local_version: LocalVersion | None = None
    build_requires: list[PinnedRequirement] = []
    companions: list[Companion] = []
    arch_vars: dict[ArchVariable, ArchForm] = {}
    supported: list[ArchName] = []
    experimental: list[ArchName] = []
    build_env: dict[EnvName, Text] = {}
    max_jobs: int | None = Field(default=None, ge=1, le=512)
    attention: dict[Text, list[Backend]] = {}

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
    version: Text
    builds: dict[PlatformKind, TorchBuild]

    def reported_version(self, kind: PlatformKind) -> str:
        """What `torch.__version__` says in an image of this platform kind."""
        build = self.builds.get(kind)
        local = build.local_version if build else None
        return f"{self.version}+{local}" if local else self.version


class Component(Strict):
    description: Text = ""
    kind: Literal["kernels", "python-ext"]
    platforms: list[PlatformKind]
    source: Source
    # The variables this component's build reads (env var, as its setup.py / CMake reads them), each with the
    # form it accepts; a variable of another vendor is ignored on that platform.
    arch_vars: dict[ArchVariable, ArchForm] = {}
    fixed_arches: list[ArchName] = []  # arches its build hard-codes (e.g. -gencode flags in setup.py)
    supported: list[ArchName] = []
    experimental: list[ArchName] = []
    optional: bool = False
    max_jobs: int | None = Field(default=None, ge=1, le=512)
    build_requires: list[PinnedRequirement] = []  # what its setup.py imports, installed before the build
    build_env: dict[EnvName, Text] = {}  # switches its build reads (e.g. forcing a local build)


class TgiServer(Strict):
    """How TGI's Python server is installed on one platform kind: its pinned requirements file and extras."""

    requirements: Text  # a file in TGI's server/ directory, e.g. requirements_rocm.txt
    extras: list[Name] = []  # the extras whose packages the server's modules import at top level


class TgiAttention(Strict):
    """Per platform kind, the components TGI's flash / paged attention import: all included for an arch -> promised."""

    flash: dict[PlatformKind, list[Name]] = {}
    paged: dict[PlatformKind, list[Name]] = {}


class TgiRuntime(Strict):
    """text-generation-inference: Rust launcher and router built from source, Python server built against torch."""

    kind: Literal["tgi"]
    description: Text = ""
    source: Source
    builder_image: Text
    builder_digest: Digest | None = None
    rust_toolchain: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")]  # TGI's rust-toolchain.toml channel
    entrypoint: Text
    binaries: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]]  # cargo outputs the image ships
    server: dict[PlatformKind, TgiServer]
    apt_packages: list[Text] = []  # what the binaries need at run time (the router links OpenSSL)
    env: dict[EnvName, Text] = {}
    default_args: list[Text] = []  # CMD: the entrypoint's arguments when `docker run IMAGE` gives none
    serve: list[Text]  # argv after the entrypoint; `{model}` and `{port}` are filled in by whoever starts it
    serve_env: dict[EnvName, Text] = {}
    health: Text = "/health"
    api: Literal["tgi"] = "tgi"
    startup_timeout_s: int = Field(default=900, ge=1)
    attention: TgiAttention = TgiAttention()

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

    kind: Literal["pip"]
    description: Text = ""
    # A file in this repository holding every package as `name==version --hash=sha256:...`, torch excluded.
    requirements: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$")]
    entrypoint: Text
    serve: list[Text]  # argv after the entrypoint; `{model}` and `{port}` are filled in by whoever starts it
    serve_env: dict[EnvName, Text] = {}
    health: Text = "/health"
    api: Literal["openai", "tgi"] = "openai"
    startup_timeout_s: int = Field(default=300, ge=1)


Runtime = Annotated[TgiRuntime | PipRuntime, Field(discriminator="kind")]
RUNTIME_KINDS = ("tgi", "pip")


class TunableOp(Strict):
    enabled: bool = True
    tuning: bool = False
    results_dir: Text = "/data/tunableop"
    filename: Text = "tunableop_results%d.csv"
    max_tuning_duration_ms: int | None = Field(default=None, ge=1)


class Axes(Strict):
    platform: list[Name]
    torch: list[Text]


class Combo(Strict):
    platform: Name | None = None
    torch: Text | None = None


class TargetGroup(Strict):
    name: Text
    axes: Axes
    components: list[Name] = []
    runtime: Name | None = None
    include: list[Combo] = []
    exclude: list[Combo] = []
    allow_experimental: bool = False


class MatrixModel(Strict):
    schema_version: Literal[1]
    settings: Settings = Settings()
    platforms: dict[Name, Platform]
    torch: dict[Text, Torch]
    components: dict[Name, Component] = {}
    runtimes: dict[Name, Runtime] = {}
    tunableop: TunableOp = TunableOp()
    targets: list[TargetGroup]


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
    text = ""
    for part in path:
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
            message = f"expected {expected}, got {got!r}{hint}"
            mark = pos.find(path)
        else:
            reason = error["msg"].removeprefix("Value error, ")
            message = f"{reason} (got {error.get('input')!r})" if kind != "value_error" else reason
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
                covered = {arches.parse_target(a).processor for a in build.attention}
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
            if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
                raise fail((*gpath, "name"), f"target name '{name}' is not a valid image tag")
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
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1:1: the matrix must be a mapping of sections (platforms, torch, ...)")
    try:
        model = MatrixModel.model_validate(data)
    except ValidationError as exc:
        raise _describe_validation(exc, pos, path) from None
    targets = _check_references(model, pos, path)
    return Matrix(model, path, hashlib.sha256(text.encode()).hexdigest(), targets)


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
