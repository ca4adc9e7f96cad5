"""No matrix value can change the meaning of a Dockerfile or shell line (issue 12).

Every field of the matrix model is enumerated from the model itself (the fields of `matrix.yaml` plus patches,
refs and digests it does not use today), and each gets every hostile value of `HOSTILE`: a `#` (which used to
turn the rest of a RUN line into a comment), `;`, `&&`, `$()`, backticks, a newline, a backslash, quotes,
`--flag`, globs and `..`. Each case must either be refused at load with a located one-line error (exit 2), or
render Dockerfiles whose instructions and shell words are those of the benign render, with the value inside
one word, and whose RUN lines bash still parses. Mapping keys get the same treatment.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import BaseModel

from imagebuild.errors import ConfigError
from imagebuild.matrix import Matrix, MatrixModel, Patch, _Positions, load_text, parse_text, validate
from imagebuild.render import dockerfile as render

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "matrix.yaml"

# Appended to the benign value (or replacing it, for the ones that start with `=`).
HOSTILE: dict[str, str] = {
    "comment": " #",
    "comment-glued": "#x",
    "semicolon": ";id",
    "and": " && id",
    "or-pipe": "|id",
    "subst": "$(id)",
    "backtick": "`id`",
    "newline": "\nRUN id",
    "carriage-return": "\r",
    "backslash": "\\",
    "single-quote": "'",
    "double-quote": '"',
    "redirect": ">x",
    "glob": "*",
    "space-flag": " --flag",
    "escape": "\x1b[2J",
    "flag": "=--flag",
    "dotdot": "=../../etc",
    "absolute": "=/etc",
}
# What a value may hold at all once accepted: inside a double-quoted ENV / LABEL word or a shell string, these are
# the characters that still mean something.
QUOTE_SPECIAL = set("$`\"'\\\n\r")


def hostile(benign: str, kind: str) -> str:
    extra = HOSTILE[kind]
    return extra[1:] if extra.startswith("=") else benign + extra


def full_data() -> dict[str, Any]:
    """matrix.yaml plus every optional field it leaves out, so every model field reaches the templates."""
    data = yaml.safe_load(MATRIX.read_text())
    rocm = data["torch"]["2.3"]["builds"]["rocm"]
    rocm["patches"] = [
        {
            "name": "fix-url",
            "description": "a patch by URL",
            "url": "https://example.org/fix.patch",
            "sha256": "0" * 64,
        },
        {
            "name": "fix-git",
            "description": "a patch by commit",
            "git": "https://github.com/x/y",
            "ref": "main",
            "commit": "1" * 40,
            "subdir": "unused",
        },
    ]
    data["platforms"]["rocm6.1"]["base_digest"] = "sha256:" + "2" * 64
    data["runtimes"]["text-generation-inference"]["builder_digest"] = "sha256:" + "3" * 64
    data["components"]["vllm-rocm"]["source"]["ref"] = "main"
    data["targets"][1]["allow_experimental"] = False
    return data


def annotation_models(annotation: Any) -> list[Any]:
    """The annotations inside Optional / Union / Annotated."""
    if typing.get_origin(annotation) is Annotated:
        return annotation_models(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in annotation_models(a)]
    return [annotation]


def pick(annotation: Any, value: Any) -> Any:
    """The member of a union that describes `value` (a runtime by its kind)."""
    members = [m for m in annotation_models(annotation) if m is not type(None)]
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    if models and isinstance(value, dict):
        for model in models:
            kind = model.model_fields.get("kind")
            if kind is None or value.get("kind") in typing.get_args(kind.annotation):
                return model
    return members[0] if members else annotation


Path_ = tuple[str | int, ...]


def walk(value: Any, annotation: Any, path: Path_, owner: str) -> Iterator[tuple[Path_, str, bool]]:
    """(path, model.field, is_key) of every scalar and of every user-chosen mapping key, one per list / mapping."""
    annotation = pick(annotation, value)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for key, item in value.items():
            info = annotation.model_fields[key]
            yield from walk(item, info.annotation, (*path, key), f"{annotation.__name__}.{key}")
    elif typing.get_origin(annotation) is dict and value:
        item_type = typing.get_args(annotation)[1]
        yield (*path, next(iter(value))), f"{owner}[key]", True
        for key in value if isinstance(next(iter(value.values())), dict) else list(value)[:1]:
            yield from walk(value[key], item_type, (*path, key), owner)
    elif typing.get_origin(annotation) is list and value:
        for i in range(len(value)) if isinstance(value[0], dict) else [0]:
            yield from walk(value[i], typing.get_args(annotation)[0], (*path, i), owner)
    elif not isinstance(value, dict | list):
        yield path, owner, False


def all_fields(model: type[BaseModel], seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    found: set[str] = set()
    for name, info in model.model_fields.items():
        found.add(f"{model.__name__}.{name}")
        stack = [info.annotation]
        while stack:
            for member in annotation_models(stack.pop()):
                if isinstance(member, type) and issubclass(member, BaseModel) and member.__name__ not in seen:
                    seen.add(member.__name__)
                    found |= all_fields(member, seen)
                stack.extend(typing.get_args(member) if typing.get_origin(member) in (list, dict) else ())
    return found


def get(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def with_value(data: dict[str, Any], path: Path_, value: str, is_key: bool) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    parent = get(changed, path[:-1])
    if is_key:  # the key renamed in place, order kept
        items = [(value if k == path[-1] else k, v) for k, v in parent.items()]
        parent.clear()
        parent.update(items)
    else:
        parent[path[-1]] = value
    return changed


def instructions(dockerfile: str) -> list[str]:
    """Dockerfile instructions with continuations joined; comment lines dropped, as the Dockerfile parser does."""
    found, current = [], ""
    for line in dockerfile.splitlines():
        if line.lstrip().startswith("#") or (not line.strip() and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        found.append(current + line)
        current = ""
    assert not current, "a continuation runs past the end of the file"
    return found


def words(instruction: str, commenters: str = "#") -> list[str]:
    """Shell words and operators of an instruction (posix quoting; `#` starts a comment even inside a word,
    stricter than bash)."""
    lexer = shlex.shlex(instruction, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = commenters
    return list(lexer)


def can_split(instruction: str) -> bool:
    try:
        words(instruction)
    except ValueError:
        return False
    return True


def run_body(instruction: str) -> str:
    """The shell command of a RUN instruction, its --mount / --network options dropped."""
    body = instruction.split(None, 1)[1]
    while body.startswith("--"):
        body = body.split(None, 1)[1]
    return body


def bash_parses(dockerfile: str) -> str | None:
    script = "".join(
        f"f{i}() {{\n{run_body(instr)}\n}}\n"
        for i, instr in enumerate(instructions(dockerfile))
        if instr.split(None, 1)[0] == "RUN"
    )
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=10)
    return proc.stderr if proc.returncode else None


FILE = Path("/repo/matrix.yaml")  # positions refer to the dumped text; never read


@pytest.fixture(scope="module")
def base() -> tuple[dict[str, Any], _Positions, dict[str, str]]:
    data = full_data()
    text = yaml.safe_dump(data, sort_keys=False, width=1000)
    parsed, pos = parse_text(text, FILE)
    matrix = validate(parsed, pos, MATRIX, "0" * 64)  # the real repository root: path sources resolve there
    return parsed, pos, dockerfiles(matrix)


def dockerfiles(matrix: Matrix) -> dict[str, str]:
    return {item.target: item.files["Dockerfile"] for item in render.render_all(matrix, matrix.targets)}


def cases() -> list[tuple[Path_, str, bool]]:
    return list(walk(full_data(), MatrixModel, (), "MatrixModel"))


def scalar(field: str) -> bool:
    model, name = field.split(".")
    cls = next(m for m in models(MatrixModel) if m.__name__ == model)
    stack, found = [cls.model_fields[name].annotation], False
    while stack:
        for member in annotation_models(stack.pop()):
            if isinstance(member, type) and issubclass(member, BaseModel):
                return False
            stack.extend(typing.get_args(member) if typing.get_origin(member) in (list, dict) else ())
            found = True
    return found


def models(root: type[BaseModel]) -> list[type[BaseModel]]:
    found, stack = [], [root]
    while stack:
        model = stack.pop()
        if model in found:
            continue
        found.append(model)
        for info in model.model_fields.values():
            todo = [info.annotation]
            while todo:
                for member in annotation_models(todo.pop()):
                    if isinstance(member, type) and issubclass(member, BaseModel):
                        stack.append(member)
                    todo.extend(typing.get_args(member) if typing.get_origin(member) in (list, dict) else ())
    return found


# Scalar fields the table leaves out, and why.
NOT_INJECTED = {
    "Combo.platform": "a reference: only names of platforms exist (checked against them)",
    "Combo.torch": "a reference: only torch keys exist",
    "Source.url": "renderable only as a patch, where Patch.url is injected; elsewhere refused (test below)",
    "Source.sha256": "a url source's, as Source.url; Patch.sha256 is injected",
    "Patch.path": "refused: the torch template applies only url and git patches (test below)",
    "ComponentOnOci.unavailable": "unset in matrix.yaml; a reason (Text: no newline) for errors and the manifest",
    "RuntimeOnOci.unavailable": "unset in matrix.yaml; a reason (Text: no newline) for errors and the manifest",
    "PlatformOnOci.base_digest": "unset in matrix.yaml; a Digest (sha256: and 64 hex digits) holds no shell character",
    "SizeBudget.compressed_mb": "unset in matrix.yaml; an int (ge=1), never rendered into a Dockerfile or shell line",
    "PipRuntime.packages": "unset for transformers-serve (a requirements file); the same field of vllm is injected",
    "VllmRuntime.requirements": "refused for a vllm runtime (runtime_vllm.py): the lock resolves its packages",
    "SglangRuntime.requirements": "refused for an sglang runtime (runtime_sglang.py): the lock resolves its packages",
}
# settings.builder / settings.builders (issue 33) are absent from the committed matrix.yaml, so nothing above injects
# into them; none of their values reaches a Dockerfile: they go to buildx as whole argv elements
# (engine/builders.py), every string has a pattern or a closed set (matrix/builders.py), and the refusals are
# tests/test_builders_config.py's
BUILDER_FIELDS = {
    "Settings.builder": "a name (Name pattern), looked up in settings.builders",
    "BuilderConfig.driver": "Literal remote | kubernetes",
    "BuilderConfig.namespace": "Name pattern",
    "BuilderConfig.staging": "STAGING_PATTERN (a registry repository)",
    "BuilderNode.name": "Name pattern",
    "BuilderNode.endpoint": "ENDPOINT_PATTERN (unix:// or tcp:// only; ';rm -rf /' refused in test_builders_config)",
    "BuilderNode.node_selector": "SELECTOR_PATTERN",
    "BuilderNode.platforms": "OciPlatformName: a known OCI platform",
    "NodeTls.ca": "AbsPath: an absolute path (a file buildx reads; never a build arg or a log line)",
    "NodeTls.cert": "AbsPath",
    "NodeTls.key": "AbsPath",
    "NodeTls.server_name": "Name pattern",
}
NOT_INJECTED.update(BUILDER_FIELDS)


def test_every_model_field_is_enumerated() -> None:
    """The table covers the model: a field added later is injected too, or this fails."""
    covered = {owner for _, owner, is_key in cases() if not is_key}
    missing = sorted(f for f in all_fields(MatrixModel) if scalar(f) and f not in covered)
    assert missing == sorted(NOT_INJECTED), missing
    assert len(cases()) > 150


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_no_value_changes_a_shell_command(base, kind: str) -> None:
    """Each (field, hostile value): refused with a located line, or the same instructions and shell words."""
    data, pos, benign = base
    tokenizable = {i for d in benign.values() for i in instructions(d) if can_split(i)}
    accepted = []
    for path, owner, is_key in cases():
        original = get(data, path[:-1])
        benign_value = str(path[-1]) if is_key else str(original[path[-1]])
        value = hostile(benign_value, kind)
        changed = with_value(data, path, value, is_key)
        try:
            matrix = validate(changed, pos, MATRIX, "0" * 64)
        except ConfigError as exc:
            message = str(exc)
            assert exc.exit_code == 2
            assert "\n" not in message and len(message) < 600, (owner, message)
            assert re.match(rf"{re.escape(str(MATRIX))}:\d+:\d+: ", message), (owner, message)
            continue
        accepted.append(owner)
        try:
            rendered = dockerfiles(matrix)
        except ConfigError as exc:  # refused at render (e.g. a value a template cannot use): one line, no traceback
            assert "\n" not in str(exc), (owner, str(exc))
            continue
        for target, dockerfile in rendered.items():
            # Quoting cannot be judged by shlex inside `"..."`: a value that holds what means something there
            # (accepted only where a validator normalises it, `gfx908\r` -> `gfx908`) never reaches a Dockerfile.
            assert not (set(value) & QUOTE_SPECIAL and value in dockerfile), (owner, value)
            mine, theirs = instructions(dockerfile), instructions(benign[target])
            assert [i.split(None, 1)[0] for i in mine] == [i.split(None, 1)[0] for i in theirs], (owner, target)
            for new, old in zip(mine, theirs, strict=True):
                if new == old:
                    continue
                if old not in tokenizable:  # shlex cannot nest quotes in `"$(... "...")"`: no value may go there
                    assert new == old, (owner, value, new)
                    continue
                new_words, old_words = words(new), words(old)
                assert len(new_words) == len(old_words), (owner, value, new, old)
                for a, b in zip(new_words, old_words, strict=True):
                    assert a == b or a.replace(value, benign_value) == b, (owner, value, a, b)
            if dockerfile != benign[target]:
                assert bash_parses(dockerfile) is None, (owner, value)
    # Free text (descriptions, server argv, ENV values) may hold a `#` or a space: those cases ran the render checks.
    if kind in ("comment", "glob", "space-flag"):
        assert accepted, "no field accepted even free-text hostile values: the render comparison never ran"


def test_benign_instructions_hold_no_comment(base) -> None:
    """The comparison relies on shlex's `#` rule; the benign render never has a `#` outside quotes in a line."""
    for dockerfile in base[2].values():
        for instruction in filter(can_split, instructions(dockerfile)):
            assert words(instruction) == words(instruction, commenters=""), instruction
        assert bash_parses(dockerfile) is None


def test_the_issue_example_is_refused_with_a_located_line(tmp_path: Path, cli) -> None:
    """A patch URL ending in ` #` with a wrong sha256 used to comment out the checksum and the `git apply`."""
    data = full_data()
    data["torch"]["2.3"]["builds"]["rocm"]["patches"][0]["url"] = "https://example.org/fix.patch #"
    bad = tmp_path / "matrix.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "kernels").mkdir()
    result = cli("--matrix", str(bad), "render", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and result.exception is None
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and re.match(rf"error: {re.escape(str(bad))}:\d+:\d+: torch\.2\.3\.builds\.rocm", lines[0])
    assert "patches[0].url" in lines[0] and "is not a URL" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_quoting_holds_even_for_a_value_that_skipped_validation() -> None:
    """Defence in depth: a patch URL with ` # ` forced past the model still renders as one curl argument, and the
    checksum and `git apply` stay commands."""
    data = full_data()
    text = yaml.safe_dump(data, sort_keys=False)
    matrix = load_text(text, MATRIX)
    target = matrix.target("rocm6.1-torch2.3")
    build = target.torch_build
    evil = build.patches[0].model_copy(update={"url": "https://example.org/x.patch # ; rm -rf /"})
    forced = build.model_copy(update={"patches": [evil, *build.patches[1:]]})
    dockerfile = render.render_target(matrix, type(target)(**{**target.__dict__, "torch_build": forced})).files[
        "Dockerfile"
    ]
    run = next(i for i in instructions(dockerfile) if "curl -fsSL" in i)
    tokens = words(run)
    assert tokens[tokens.index("/tmp/fix-url.patch") + 1] == "https://example.org/x.patch # ; rm -rf /"
    assert "sha256sum" in tokens and tokens.count("apply") == 2
    assert isinstance(evil, Patch)
