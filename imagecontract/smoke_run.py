"""What the host tells the in-image smoke suite through the container's environment, read on both sides.

A linux/arm64 leg smoked under QEMU on an amd64 host runs its Python 3-10 times slower, and a shared CI machine
slower again: the stock-Debian rehearsal (issue 29) failed its arm64 smoke only because making the tiny model took
over the suite's 300 s. The host scales the suite's deadlines for such a run instead of every deadline being
raised for every run.
"""

from __future__ import annotations

from imagecontract.numbers import ascii_int

TIME_SCALE_ENV = "IMAGEBUILD_SMOKE_TIME_SCALE"
MAX_TIME_SCALE = 20


def time_scale(raw: str | None) -> int:
    """The factor every deadline of the suite is multiplied by: `raw` when it is 1..MAX_TIME_SCALE, else 1 (the
    host checks the value before it sends it; inside the image a bad one falls back to the plain deadlines)."""
    value = ascii_int(raw, 2)
    return value if value is not None and 1 <= value <= MAX_TIME_SCALE else 1
