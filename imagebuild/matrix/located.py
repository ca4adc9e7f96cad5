"""Pydantic's validation errors, said as matrix.yaml users read them: file:line:column, the key path in the file
(union tags dropped), and "did you mean" for a mistyped key or value.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from imagebuild.errors import ConfigError
from imagebuild.matrix.fields import excerpt
from imagebuild.matrix.loader import KeyPath, _Positions, format_path
from imagebuild.matrix.models import MatrixModel
from imagebuild.matrix.runtimes import RUNTIME_KINDS


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
        loc: KeyPath = tuple(error["loc"])
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
