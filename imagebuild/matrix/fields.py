"""Field types of matrix.yaml: each string that can reach a Dockerfile or shell line has a type of its own.

A value is refused with what it should be (a URL, a git ref, a repository path, ...), so no matrix value can end
a line, open a quote or become an option of the command it is given to.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import Annotated, Literal

from annotated_types import GroupedMetadata
from pydantic import AfterValidator, Field, WithJsonSchema

from imagebuild.errors import ConfigError
from imagebuild.matrix import arches

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


@dataclasses.dataclass(frozen=True)
class _Typed(GroupedMetadata):
    """A string type's validator and JSON schema as one `Annotated` item (pydantic expands grouped metadata), so
    each type below is `Annotated[str, _typed(...)]`: an alias a type checker reads as the `str` it is."""

    validator: AfterValidator
    schema: WithJsonSchema

    def __iter__(self) -> Iterator[object]:
        yield self.validator
        yield self.schema


def _typed(what: str, pattern: str, check: Callable[[str], str | None] | None = None) -> _Typed:
    """The validator and schema of a string type that holds only what its field can legally hold: refused with
    `what` it should be."""
    compiled = re.compile(pattern)

    def validate(value: str) -> str:
        _safe_text(value)  # newline, quote, `$`, `;`: said as such
        if not compiled.fullmatch(value):
            raise ValueError(f"{excerpt(value)} is not {what}")
        problem = check(value) if check else None
        if problem:
            raise ValueError(f"{excerpt(value)} is not {what}: {problem}")
        return value

    return _Typed(AfterValidator(validate), WithJsonSchema({"type": "string", "pattern": pattern}))


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
Url = Annotated[
    str,
    _typed(
        "a URL (https://host/path: letters, digits and ._~%+,=:@/-)",
        r"(https|http|ssh|git)://[A-Za-z0-9][A-Za-z0-9._~%+,=:@/-]*",
    ),
]
GitRef = Annotated[
    str,
    _typed("a git ref (branch or tag: letters, digits and ._/+-)", r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", _git_ref_problem),
]
# A path inside this repository (resolved and confined to it at load) or inside a checkout.
RepoPath = Annotated[str, _typed(f"a relative path (segments {_SEGMENT}, no `..`)", rf"{_SEGMENT}(/{_SEGMENT})*")]
AbsPath = Annotated[str, _typed(f"an absolute path (/ then segments {_SEGMENT})", rf"(/{_SEGMENT})+")]
HostPath = Annotated[
    str, _typed("a folder (an absolute or relative path, or file:///path)", rf"(file://)?/?{_SEGMENT}(/{_SEGMENT})*")
]
FileName = Annotated[str, _typed("a file name (letters, digits and ._%-)", r"[A-Za-z0-9_][A-Za-z0-9._%-]*")]
Version = Annotated[str, _typed("a version (letters, digits and .+!_-)", r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")]
TorchKey = Annotated[str, _typed("a torch key (letters, digits and ._-)", r"[A-Za-z0-9][A-Za-z0-9._-]*")]
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
ImageName = Annotated[
    str,
    _typed(
        "an image reference without digest ([registry/]path[:tag], lower case path)",
        rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?",
    ),
]
AptPackage = Annotated[
    str,
    _typed("a Debian package (name[:arch][=version])", r"[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?"),
]
_PIP_SPEC = r"(?:===|==|~=|!=|>=|<=|>|<)[A-Za-z0-9.*+!_-]+"
PipRequirement = Annotated[
    str,
    _typed(
        "a pip requirement (name[extras] and version specifiers, no URL or option)",
        rf"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?(?:{_PIP_SPEC}(?:,{_PIP_SPEC})*)?",
    ),
]
Program = Annotated[str, _typed("a program (a name on PATH or an absolute path)", rf"/?{_SEGMENT}(/{_SEGMENT})*")]
HttpPath = Annotated[str, _typed("an HTTP path (/ then letters, digits and ._~/-)", r"/[A-Za-z0-9._~/-]*")]
AttentionKey = Annotated[
    str, _typed("an arch or `cpu` (letters, digits, _ and :feature+/-)", r"[a-z0-9_]+(?::[a-z0-9]+[+-])*")
]
TargetName = Annotated[
    str, _typed("a target name template (letters, digits, ._- and {platform} / {torch})", r"[A-Za-z0-9{}._-]+")
]
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
