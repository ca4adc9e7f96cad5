"""The tool's own numeric environment variables, read when used: a bad value is one usage error naming it."""

from __future__ import annotations

import os

from imagebuild.errors import ConfigError


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """`$name` as an integer of at least `minimum` (unset or empty: `default`); anything else is exit 2."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        shown = raw if len(raw) <= 20 else raw[:17] + "..."
        raise ConfigError(f"environment variable {name}={shown!r} is not an integer >= {minimum}")
    return value
