"""Shapes for TunableOp tuning: the user's shapes file (linear layers in model terms) and the JSON the in-image
tuning script reads.

Linear terms (out, in, tokens), not BLAS m/n/k, because users know their model's layer sizes and batch sizes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from imagebuild.matrix.fields import excerpt
from imagebuild.tunableop.results import MalformedFile

_DTYPES = {
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
}


def parse_shapes(text: str, source: str = "<shapes>") -> list[dict[str, object]]:
    """A shapes file: a linear layer a line, `out=8192 in=28672 tokens=1,2,4,7 [dtype=half]`, `#` comments.

    Linear terms, not BLAS m/n/k, because users know their model's layer sizes and batch sizes.
    """
    gemms: list[dict[str, object]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields: dict[str, str] = {}
        for tok in line.split():
            k, sep, v = tok.partition("=")
            if not sep or k not in ("out", "in", "tokens", "dtype") or k in fields:
                raise MalformedFile(
                    f"{source}:{lineno}: bad field {excerpt(tok)} (expected out=N in=K tokens=M[,M...] [dtype=half])"
                )
            fields[k] = v
        for req in ("out", "in", "tokens"):
            if req not in fields:
                raise MalformedFile(f"{source}:{lineno}: missing {req}=")
        dtype = _DTYPES.get(fields.get("dtype", "half").lower())
        if dtype is None:
            known = ", ".join(sorted(_DTYPES))
            raise MalformedFile(f"{source}:{lineno}: unknown dtype {excerpt(fields['dtype'])} ({known})")
        try:
            out_f, in_f = int(fields["out"]), int(fields["in"])
            tokens = [int(t) for t in fields["tokens"].split(",") if t]
        except ValueError:
            raise MalformedFile(f"{source}:{lineno}: sizes must be integers") from None
        if out_f <= 0 or in_f <= 0 or not tokens or min(tokens) <= 0:
            raise MalformedFile(f"{source}:{lineno}: sizes must be positive")
        for m in tokens:
            gemms.append({"tokens": m, "in_features": in_f, "out_features": out_f, "dtype": dtype})
    if not gemms:
        raise MalformedFile(f"{source}: no shapes")
    return gemms


def shapes_json(gemms: Iterable[Mapping[str, object]]) -> str:
    """The JSON the in-image tuning script reads (stdlib json there, so no imagebuild import in the image)."""
    return json.dumps({"schema_version": 1, "gemms": list(gemms)}, indent=1) + "\n"
