"""The model of `matrix.lock.json`: every key and value the lock may hold, each with the grammar it must have.

The lock is a committed file anyone can edit, and what it pins reaches Dockerfile lines (a digest after FROM),
pip's requirement files (`name==version --hash=sha256:...` lines) and the arguments of git, so nothing in it is
trusted: `validate` checks the whole document against these models (unknown keys refused, strict types: no
string taken for a number, digests `sha256:` and 64 hex, commits 40 hex, URLs of the matrix's own URL grammar,
requirement lines exactly those `imagebuild lock` writes for the entry's packages) and says the first problem as
one line naming the key path: `matrix.lock.json: inputs["git:..."].spec.url: ...`.

The string types are the matrix's (imagebuild/matrix/fields.py: one grammar per kind of value); the lock adds
the few the matrix has no need of (a requirement line, a wheel file name, a pip file URL, a note).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from imagebuild.errors import ConfigError
from imagebuild.matrix.fields import Commit, Digest, GitRef, HostPath, ImageName, RepoPath, Sha256, Url, excerpt

SCHEMA_VERSION = 1
STATUSES = ("locked", "local", "unresolved")
KINDS = ("image", "git", "pip", "file", "apt")
MAX_NOTE = 4096  # characters of one free-text value (a `why` quotes at most 600 characters of uv's answer)
MAX_ITEMS = 100_000  # entries of one list or object (the real lock has a few hundred)
# C0 and C1 controls, DEL and the Unicode line and paragraph separators: what could end or hide a line.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _note(value: str) -> str:
    if len(value) > MAX_NOTE:
        raise ValueError(f"longer than {MAX_NOTE} characters")
    found = CONTROL.search(value)
    if found:
        raise ValueError(f"holds the control character {found.group()!r} at {found.start()}: one line of text only")
    return value


def one_line(value: object, limit: int) -> str:
    """What a server or a tool said, as a Note may hold it: whitespace runs as one space, other controls as `?`."""
    return CONTROL.sub("?", " ".join(str(value).split()))[:limit]


# Free text of one line (where, why, made_by, verified_at, about, a Debian Release field).
Note = Annotated[str, AfterValidator(_note)]
Key = Annotated[str, Field(pattern=rf"^({'|'.join(KINDS)}):[^\x00-\x1f\x7f-\x9f\u2028\u2029]+$", max_length=512)]
Platform = Annotated[str, Field(pattern=r"^[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?$", max_length=64)]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", max_length=200)]
Version = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+!_-]*$", max_length=200)]
# A pip requirement of the matrix (name[extras] and specifiers): the matrix's PipRequirement grammar.
SpecRequirement = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?"
        r"((===|==|~=|!=|>=|<=|>|<)[A-Za-z0-9.*+!_-]+(,(===|==|~=|!=|>=|<=|>|<)[A-Za-z0-9.*+!_-]+)*)?$",
        max_length=400,
    ),
]
# What pip reads from requirements/<stage>.txt: `name==version --hash=sha256:<64 hex>` and more hashes, no option.
RequirementLine = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*( --hash=sha256:[0-9a-f]{64})+$",
        max_length=100_000,
    ),
]
WheelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._+!%~-]*$", max_length=255)]
# A file a pip set installs: on an index (http(s)://) or in a local wheelhouse (file:///absolute/path).
PipUrl = Annotated[
    str,
    Field(pattern=r"^(https?://[A-Za-z0-9][A-Za-z0-9._~%+,=:@/!-]*|file:///[A-Za-z0-9._~%+,=@/!-]+)$", max_length=4096),
]
Host = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?$", max_length=255)]
Repository = Annotated[str, Field(pattern=r"^[a-z0-9]+((\.|_|__|-+|/)[a-z0-9]+)*$", max_length=255)]
MediaType = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$", max_length=255)]
Size = Annotated[int, Field(ge=0, le=1 << 50)]
Python = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+$", max_length=16)]
PyPlatform = Annotated[str, Field(pattern=r"^[a-z0-9_]+-[a-z0-9_]+$", max_length=64)]
Arch = Annotated[str, Field(pattern=r"^[a-z0-9]+$", max_length=32)]
Suite = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]*$", max_length=64)]
SubPath = Annotated[str, Field(max_length=1024), AfterValidator(_note)]  # only ever JSON


def _items(n: int) -> Any:
    return Field(max_length=n)


class Strict(BaseModel):
    """Unknown keys are refused; no value is converted (a string is never taken for a number or a bool)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# ---- specs: the matrix values each input was resolved from (`render --check` compares them with the matrix) ----


class ImageSpec(Strict):
    ref: ImageName
    platforms: Annotated[list[Platform], _items(16)]
    local: bool


class GitSpec(Strict):
    url: Url
    commit: Commit | None
    ref: GitRef | None


class AptSpec(Strict):
    mirror: Url
    suite: Suite
    architectures: Annotated[list[Arch], _items(16)]


class FileSpec(Strict):
    path: RepoPath
    sha256: Sha256


class FromSource(Strict):
    git: Url
    commit: Commit | None
    file: RepoPath
    make_target: Name | None = None
    package: RepoPath | None = None
    extras: Annotated[list[Name], _items(64)] | None = None
    # which part of the file names the requirements (absent: the whole file is a requirements file)
    part: Literal["build-system.requires", "setup.install_requires"] | None = None


class PipSpec(Strict):
    requirements: Annotated[list[SpecRequirement], _items(1000)]
    python: Python
    platform: PyPlatform
    index_url: Url
    extra_index_url: Url | None = None  # a vllm runtime's AMD index besides PyPI (issue 32)
    find_links: HostPath | None
    no_deps: bool
    after: Annotated[list[Key], _items(64)]
    torch: Version | None
    from_source: FromSource | None
    # the later set's packages this one was resolved beside (torch's set of a vllm/sglang target), when any
    resolved_with: Annotated[list[SpecRequirement], _items(1000)] | None = None


# ---- entries: a spec, a status and the pin ----


class Entry(Strict):
    status: Literal["locked", "local", "unresolved"]
    where: Note
    why: Note | None = None

    @model_validator(mode="after")
    def _says_why(self) -> Entry:
        if self.status == "unresolved" and not self.why:
            raise ValueError("an unresolved entry says why (the key `why`)")
        return self

    def _require(self, status: str, *names: str) -> None:
        missing = [n for n in names if getattr(self, n) is None]
        if self.status == status and missing:
            raise ValueError(f"a {status} entry needs {', '.join(missing)}")


class ImageEntry(Entry):
    spec: ImageSpec
    registry: Host | None = None
    repository: Repository | None = None
    digest: Digest | None = None
    media_type: MediaType | None = None
    platforms: Annotated[dict[Platform, Digest], _items(64)] | None = None
    missing_platforms: Annotated[list[Platform], _items(16)] | None = None
    image_id: Digest | None = None
    made_by: Note | None = None

    @model_validator(mode="after")
    def _pinned(self) -> ImageEntry:
        self._require("locked", "digest")
        self._require("local", "made_by")
        if self.status == "local" and self.digest is None and self.image_id is None:
            raise ValueError("a local entry needs digest or image_id")
        return self


class Submodule(Strict):
    commit: Commit
    url: Note | None = None  # as .gitmodules says it (relative URLs included); never given to a command


class GitEntry(Entry):
    spec: GitSpec
    commit: Commit | None = None
    tree: Commit | None = None
    archive: Literal["git archive --format=tar"] | None = None
    archive_sha256: Sha256 | None = None
    archive_bytes: Size | None = None
    submodules: Annotated[dict[SubPath, Submodule], _items(4096)] | None = None
    verified_at: Note | None = None

    @model_validator(mode="after")
    def _pinned(self) -> GitEntry:
        self._require("locked", "commit", "tree")
        if self.commit is not None and self.commit != self.spec.commit:
            raise ValueError(f"commit {self.commit} is not the spec's commit {self.spec.commit}")
        return self


class AptEntry(Entry):
    spec: AptSpec
    url: Url | None = None
    inrelease_sha256: Sha256 | None = None
    date: Note | None = None
    version: Note | None = None
    codename: Note | None = None

    @model_validator(mode="after")
    def _pinned(self) -> AptEntry:
        self._require("locked", "inrelease_sha256")
        return self


class FileEntry(Entry):
    spec: FileSpec


class PipFile(Strict):
    file: WheelName
    sha256: Sha256
    url: PipUrl
    size: Size | None = None


class Package(Strict):
    name: Name
    version: Version
    files: Annotated[list[PipFile], Field(min_length=1, max_length=1000)]


class PipEntry(Entry):
    spec: PipSpec
    packages: Annotated[list[Package], _items(10_000)] | None = None
    requirements: Annotated[list[RequirementLine], _items(10_000)] | None = None
    vcs: Annotated[list[Note], _items(64)] | None = None
    stand_ins: Annotated[dict[Note, SpecRequirement], _items(64)] | None = None

    @model_validator(mode="after")
    def _pinned(self) -> PipEntry:
        self._require("locked", "packages", "requirements")
        local = [f.url for p in self.packages or [] for f in p.files if f.url.startswith("file:")]
        if local and not self.spec.find_links:
            raise ValueError(f"{excerpt(local[0], 90)} is a local file, but the spec names no wheelhouse (find_links)")
        if self.packages is not None and self.requirements is not None:
            from imagebuild.lock.pipsets import requirements_text

            expected = requirements_text([p.model_dump(exclude_none=True) for p in self.packages])
            if self.requirements != expected:
                at = next(
                    (i for i, (a, b) in enumerate(zip(self.requirements, expected, strict=False)) if a != b), None
                )
                where = f"line {at}" if at is not None else f"{len(self.requirements)} lines for {len(expected)}"
                raise ValueError(f"requirements are not the lines of its packages ({where})")
        return self


ENTRY_MODELS: dict[str, type[Entry]] = {
    "image": ImageEntry,
    "git": GitEntry,
    "pip": PipEntry,
    "file": FileEntry,
    "apt": AptEntry,
}


class Document(Strict):
    schema_version: Annotated[int, Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION)]  # strict: not True, not 1.0
    about: Note
    resolver: Annotated[dict[Name, Note], _items(64)]
    inputs: Annotated[dict[Key, dict[str, Any]], _items(MAX_ITEMS)]
    targets: Annotated[dict[Name, dict[Platform, Annotated[list[Key], _items(MAX_ITEMS)]]], _items(10_000)]


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[a-z_]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(excerpt(part, 90) if len(part) > 90 else part)}]"
    return out or "(top)"


def _said(exc: ValidationError, prefix: tuple[int | str, ...]) -> tuple[str, int]:
    """(the first error as `key path: message`, how many there are)."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = errors[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    message = first["msg"].removeprefix("Value error, ")
    if loc and loc[-1] == "[key]":  # a bad key of an object: pydantic places it under the key itself
        loc, message = loc[:-1], f"the key: {message}"
    if first["type"] == "missing":
        message = "missing"
    elif first["type"] == "extra_forbidden":
        message = "not a key of the lock (unknown keys are refused)"
    return f"{_path(prefix + loc)}: {message}", len(errors)


def validate(data: Any, name: str = "matrix.lock.json") -> dict[str, Any]:
    """The parsed JSON document, checked against the models; ConfigError naming the first bad key path.

    Returns the document itself: strict validation converts nothing, so it is exactly what the models accept."""
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: the lock is not a JSON object")
    problems: list[tuple[str, int]] = []
    try:
        Document.model_validate(data)
    except ValidationError as exc:
        problems.append(_said(exc, ()))
    else:
        for key, entry in data["inputs"].items():
            model = ENTRY_MODELS[key.split(":", 1)[0]]
            try:
                model.model_validate(entry)
            except ValidationError as exc:
                problems.append(_said(exc, ("inputs", key)))
                break
        unknown = sorted(
            {k for keys in data["targets"].values() for ks in keys.values() for k in ks} - set(data["inputs"])
        )
        if not problems and unknown:
            problems.append((f"targets: {excerpt(unknown[0], 90)} is not a key of inputs", len(unknown)))
    if problems:
        line, count = problems[0]
        more = f" (and {count - 1} more problem(s) there)" if count > 1 else ""
        raise ConfigError(
            f"{name}: {line}{more}", hint="`imagebuild lock` writes it: remove it and run that to make it anew"
        )
    return data
