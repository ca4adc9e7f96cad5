"""Kinds are modules, not strings (issue 30 item 2): no module of imagebuild/, imagecontract/ or smoke/ spells a
platform kind (rocm, cuda, cpu: imagecontract/kinds/) or a runtime kind (tgi, pip, vllm, ...: the matrix's runtime
models) outside that kind's own modules, the schema and the registrations. Everything else asks the kind module
(imagecontract.kinds.platform(name).DEVICE, .VENDOR, ...), so adding a kind is its module and its registration.

What counts is a string constant of the AST equal to a kind's name (a comparison, a dict key, a default, an
argument), not a comment and not a word inside a longer text. A few modules spell the same letters with another
meaning; each is listed in OTHER_MEANINGS with that meaning, and the list is held to what is still there.
"""

from __future__ import annotations

import ast
import sys
import typing
from pathlib import Path

from imagebuild.matrix.runtime_kind import RuntimeKind
from imagebuild.matrix.runtimes import Runtime
from imagecontract import kinds

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("imagebuild", "imagecontract", "smoke")


def _rel(path: str | None) -> str:
    return Path(str(path)).resolve().relative_to(REPO).as_posix()


def runtime_models() -> tuple[type, ...]:
    """The matrix model of every runtime kind, read off the registration (the `Runtime` union)."""
    return typing.get_args(typing.get_args(Runtime)[0])


def runtime_kinds() -> dict[str, str]:
    """Runtime kind name -> the module of its matrix model."""
    out = {}
    for model in runtime_models():
        (name,) = typing.get_args(model.model_fields["kind"].annotation)  # type: ignore[attr-defined]
        out[name] = _rel(sys.modules[model.__module__].__file__)
    return out


PLATFORM_HOMES = {name: {_rel(module.__file__)} for name, module in kinds.PLATFORMS.items()}  # type: ignore[attr-defined]
# A runtime kind's own modules: its matrix model (host) and the smoke suite's modules named after it (image side).
RUNTIME_HOMES = {
    name: {model, *(p.relative_to(REPO).as_posix() for p in (REPO / "smoke").glob(f"{name}_*.py"))}
    for name, model in runtime_kinds().items()
}
HOMES = {**PLATFORM_HOMES, **RUNTIME_HOMES}

# The schema (the Literal types of matrix.yaml and of the image's manifest; the runtime models are matrix schema)
# and the registrations (imagecontract/kinds/__init__.py names modules, not strings; runtimes.py the union).
SCHEMA = {
    "imagebuild/matrix/fields.py",
    "imagecontract/models/manifest.py",
    "imagebuild/matrix/runtimes.py",
    *runtime_kinds().values(),
}

# Path (a folder when it ends in /) -> (the strings it may spell, what they mean there).
OTHER_MEANINGS: dict[str, tuple[set[str], str]] = {
    "smoke/torch_names.py": ({"cuda", "cpu"}, "torch's device types: torch calls every GPU cuda, ROCm's included"),
    "smoke/serve.py": ({"tgi"}, "the request flavour `api: tgi` (TGI's generate API; a pip runtime may speak it)"),
    "smoke/hostile.py": ({"tgi"}, "the request flavour `api: tgi`, as in smoke/serve.py"),
    "imagebuild/lock/": ({"pip"}, "the installer (`uv pip compile`, `python -m pip`) and the lock's input kind pip"),
}


def _allowed(path: str, name: str) -> bool:
    if path in SCHEMA or path in HOMES[name]:
        return True
    return any(
        name in strings and (path == where or (where.endswith("/") and path.startswith(where)))
        for where, (strings, _why) in OTHER_MEANINGS.items()
    )


def spelled(source: str) -> set[str]:
    """The kind names a module's code spells as whole string constants (comments and longer texts do not count)."""
    tree = ast.parse(source)
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in HOMES}


def naming_modules(root: Path) -> dict[str, set[str]]:
    """Module (relative path) -> the kind names it spells outside its kind's own modules, the schema and the
    registrations, for the tree under `root` (this checkout, or an older one exported for comparison)."""
    out: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            names = {name for name in spelled(path.read_text(encoding="utf-8")) if not _allowed(rel, name)}
            if names:
                out[rel] = names
    return out


def test_no_module_names_a_kind_outside_its_own() -> None:
    offenders = naming_modules(REPO)
    assert offenders == {}, "ask the kind module (imagecontract.kinds, the runtime's model) instead:\n" + "\n".join(
        f"  {path}: {', '.join(sorted(names))}" for path, names in offenders.items()
    )


def test_the_count_sees_a_switch_and_not_a_comment(tmp_path: Path) -> None:
    module = tmp_path / "imagebuild" / "planted.py"
    module.parent.mkdir()
    module.write_text(
        '"""A docstring that says rocm and cuda."""\n'
        "# if kind == 'cpu': a comment\n"
        'def f(kind: str, runtime: str) -> bool:\n    return kind == "rocm" or runtime in ("vllm",)\n'
    )
    assert naming_modules(tmp_path) == {"imagebuild/planted.py": {"rocm", "vllm"}}


def test_every_kind_has_a_home_and_every_other_meaning_is_still_there() -> None:
    assert set(PLATFORM_HOMES) == {"rocm", "cuda", "cpu"}
    assert {"tgi", "pip", "vllm"} <= set(RUNTIME_HOMES)
    assert all((REPO / path).is_file() for homes in HOMES.values() for path in homes)
    for where, (strings, why) in OTHER_MEANINGS.items():
        files = sorted((REPO / where).rglob("*.py")) if where.endswith("/") else [REPO / where]
        found = set().union(*(spelled(f.read_text(encoding="utf-8")) for f in files))
        assert strings <= found, f"{where} no longer spells {sorted(strings - found)} ({why}): drop it from the list"


def test_every_runtime_kind_answers_the_runtime_questions() -> None:
    """How to serve, health, the API flavour, limits (imagebuild/matrix/runtime_kind.py), for each registered kind."""
    questions = [name for name in dir(RuntimeKind) if not name.startswith("_")]
    assert set(questions) == {"kind", "entrypoint", "serve", "serve_env", "health", "api", "startup_timeout_s",
                              "serve_limits"}  # fmt: skip
    for model in runtime_models():
        fields = model.model_fields  # type: ignore[attr-defined]
        assert [q for q in questions if q not in fields and not callable(getattr(model, q, None))] == [], model
