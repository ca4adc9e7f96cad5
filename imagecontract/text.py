"""Untrusted text as a terminal line shows it: one rule for every line that prints what a file, an image, a
registry or a driver said (issue 34: raw ESC, OSC and NUL bytes from a TunableOp CSV or an image's manifest
reached the terminal through `tunableop` and `doctor`, where they can move the cursor, retitle the window or
hide the rest of a line). Stdlib only: the in-image code and the stdlib doctor use it too."""

from __future__ import annotations

MAX_SHOWN = 400  # characters of one untrusted value in a line


def printable(text: object, limit: int | None = MAX_SHOWN) -> str:
    """`text` with every character a terminal acts on or hides (C0 and C1 controls, ESC and NUL among them,
    DEL, tabs and line breaks, Unicode format characters such as the bidi overrides, line and paragraph
    separators: whatever `str.isprintable` refuses) as `?`, cut to `limit` characters (`...` marks a cut)."""
    value = str(text)
    if limit is not None and len(value) > limit:
        value = value[: max(limit - 3, 0)] + "..."
    return "".join(c if c.isprintable() else "?" for c in value)
