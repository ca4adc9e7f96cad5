"""Strict dataclass models for documents that cross the host/image seam, and their JSON Schemas.

Stdlib only (the image side has no pydantic). A model is a dataclass whose field types are str, int, float,
bool, None, Any, Literal[...], X | None, list[X], dict[str, X] or another model; `from_dict` checks every key
and type and names the path of the first bad one, `to_dict` gives the JSON document back, and `json_schema`
describes the same fields (descriptions come from `field(metadata={"doc": ...})`).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, TypeGuard, TypeVar, Union

M = TypeVar("M", bound="Model")


class ModelError(ValueError):
    """A document that does not fit its model; the message names the key path (`runtime.serve[2]`)."""


def _is_model(tp: object) -> TypeGuard[type[Model]]:
    return isinstance(tp, type) and issubclass(tp, Model)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=False)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _short(value: Any, limit: int = 60) -> str:
    """A value as an error quotes it: repr cut to `limit` characters (a document may hold megabytes)."""
    try:
        text = repr(value)
    except ValueError:  # an int of 4,300+ digits has no repr
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _convert(tp: Any, value: Any, path: str) -> Any:
    """value checked against tp (models built from their dicts); ModelError naming path otherwise."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, path)
            except ModelError as exc:
                errors.append(str(exc))
        raise ModelError(errors[0] if len(errors) == 1 else f"{path}: {_short(value)} fits none of {_type_name(tp)}")
    if origin is typing.Literal:
        if value not in args or isinstance(value, bool) != any(isinstance(a, bool) for a in args):
            raise ModelError(f"{path}: expected one of {', '.join(map(repr, args))}, got {_short(value)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ModelError(f"{path}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ModelError(f"{path}: expected an object, got {type(value).__name__}")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ModelError(f"{path}: key {_short(key)} is not a string")
            out[key] = _convert(args[1], item, f"{path}.{key}")
        return out
    if _is_model(tp):
        return tp.from_dict(value, path)
    if tp is type(None):
        if value is not None:
            raise ModelError(f"{path}: expected null, got {_short(value)}")
        return None
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > sys.float_info.max:  # float() would raise OverflowError
            raise ModelError(f"{path}: {_short(value)} is out of range for a number")
        return float(value)
    if tp in (str, int, float, bool) and (isinstance(value, bool) if tp is not bool else False):
        raise ModelError(f"{path}: expected {tp.__name__}, got a boolean")
    if not isinstance(value, tp):
        raise ModelError(f"{path}: expected {_type_name(tp)}, got {type(value).__name__} {_short(value)}")
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _schema(tp: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return {}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(args[1])}
    if _is_model(tp):
        return tp.json_schema(top=False)
    return {"type": _JSON_TYPES[tp]}


class Model:
    """Mixin for the contract's dataclasses: strict from_dict, to_dict, json_schema."""

    @classmethod
    def from_dict(cls: type[M], data: Any, path: str = "") -> M:
        where = path or cls.__name__
        if not isinstance(data, dict):
            raise ModelError(f"{where}: expected an object, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ModelError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(fields)})")
        hints = _hints(cls)
        values = {}
        for name, f in fields.items():
            sub = f"{path}.{name}" if path else name
            if name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ModelError(f"{sub}: missing")
                continue
            values[name] = _convert(hints[name], data[name], sub)
        return cls(**values)

    # Fields left out of to_dict when None (keys the document only has in some variants).
    OMIT_NONE: typing.ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return {k: v for k, v in out.items() if not (v is None and k in self.OMIT_NONE)}

    @classmethod
    def json_schema(cls, top: bool = True) -> dict[str, Any]:
        hints = _hints(cls)
        props: dict[str, Any] = {}
        required = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            props[f.name] = _schema(hints[f.name])
            if f.metadata.get("doc"):
                props[f.name] = {"description": f.metadata["doc"], **props[f.name]}
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        schema: dict[str, Any] = {
            "type": "object",
            "description": (cls.__doc__ or "").strip().splitlines()[0],
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }
        if top:
            schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": cls.__name__, **schema}
        return schema


def doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field carrying its schema description."""
    return dataclasses.field(metadata={"doc": text}, **kwargs)
