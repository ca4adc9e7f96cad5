"""The tool's own numeric environment variables, read when used: a bad value is one usage error naming it.

A value is ASCII digits only, at most MAX_DIGITS of them (imagecontract.numbers.ascii_int): `1_000`, `+5`,
fullwidth or other scripts' digits, `0x10`, a float, a sign and a 5,000-digit string are refused, never read as
something else (`-5` used to become 0.1 s, `abc` the default).
"""

from __future__ import annotations

import os
import re

from imagebuild.errors import ConfigError
from imagecontract.numbers import ascii_int, shown

MAX_DIGITS = 12


def env_int(name: str, default: int, minimum: int = 0, maximum: int = 10**MAX_DIGITS - 1) -> int:
    """`$name` as an integer in [minimum, maximum] (unset or empty: `default`); anything else is exit 2."""
    raw = os.environ.get(name, "")
    if not raw.strip(" \t"):
        return default
    value = ascii_int(raw, MAX_DIGITS)
    if value is None or not minimum <= value <= maximum:
        raise ConfigError(
            f"environment variable {name}={shown(raw, 12)}: not a whole number "
            + (f"from {minimum} to {maximum}" if maximum < 10**MAX_DIGITS - 1 else f">= {minimum}")
        )
    return value


_SECONDS = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,3})?", re.ASCII)


def env_seconds(name: str, default: float, minimum: float = 0.1, maximum: float = 86_400) -> float:
    """`$name` as seconds: ASCII digits with at most three decimals (`1.5`), in [minimum, maximum]; unset or
    empty: `default`; anything else (`abc`, `-5`, `1e3`, `inf`, other scripts' digits) is exit 2."""
    raw = os.environ.get(name, "")
    core = raw.strip(" \t")
    if not core:
        return default
    if not _SECONDS.fullmatch(core) or not minimum <= float(core) <= maximum:
        raise ConfigError(
            f"environment variable {name}={shown(raw, 12)}: not seconds from {minimum:g} to {maximum:g} (ASCII digits)"
        )
    return float(core)
