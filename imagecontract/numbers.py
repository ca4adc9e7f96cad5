"""The one reader of a number written as text by someone else (an environment variable, a sysfs or driver file,
a header field): ASCII digits only, a bounded count of them, nothing else.

Python's int() takes what no C runtime does: other scripts' digits (`٣`, fullwidth `３`), `1_000`, surrounding
Unicode whitespace, a sign, and `int(text, 0)` also `0x`/`0o` prefixes; beyond 4,300 digits it raises a plain
ValueError. `str.isdigit()` is true for `²`, which int() then refuses. A value the C consumer (the HSA runtime,
the driver, torch) would read differently must be refused, not guessed: these functions say None instead.
"""

from __future__ import annotations

import re

MAX_DIGITS = 19  # int64, the widest integer any consumer of ours reads
_DIGITS = re.compile(r"[0-9]+", re.ASCII)


def ascii_int(text: str | None, max_digits: int = MAX_DIGITS) -> int | None:
    """`text` as a non-negative integer when it is 1..max_digits ASCII digits (leading ASCII spaces and tabs
    and a trailing newline stripped), else None."""
    if text is None:
        return None
    core = text.strip(" \t\r\n")
    if not 0 < len(core) <= max_digits or not _DIGITS.fullmatch(core):
        return None
    return int(core)


def is_ascii_int(text: str, max_digits: int = MAX_DIGITS) -> bool:
    return ascii_int(text, max_digits) is not None


def shown(text: str, limit: int = 40) -> str:
    """At most `limit` characters of a value, for an error line (a 5,000-digit value is not echoed whole)."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 3]) + f"... ({len(text)} characters)"
