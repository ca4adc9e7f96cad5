"""TunableOp results files: parse, decode, check validators, merge.

Pure logic (no engine, no torch), because users lose tuned GEMMs to validator mismatches and per-device
files, and both can be found and fixed from the file alone. The format is what torch reads
(aten/src/ATen/cuda/tunable/Tunable.cpp): `Validator,KEY,VALUE` lines, then
`OpName,Params,Solution[,avg_ms]`. torch rejects the whole file unless its validator keys equal the ones it
registers and every value is equal, so `check_validators` compares exactly that.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.matrix.fields import excerpt
from imagecontract import tunableop_csv
from imagecontract.text import printable

# Validators torch has written. ROCm: PT_VERSION, ROCM_VERSION (older) or HIP_VERSION (newer),
# HIPBLASLT_VERSION, ROCBLAS_VERSION, GCN_ARCH_NAME. CUDA: PT_VERSION only.
KNOWN_VALIDATORS = (
    "PT_VERSION",
    "ROCM_VERSION",
    "HIP_VERSION",
    "HIPBLASLT_VERSION",
    "ROCBLAS_VERSION",
    "GCN_ARCH_NAME",
)
MANDATORY_VALIDATOR = "PT_VERSION"

# GemmTunableOp_Half_TN, GemmStridedBatchedTunableOp_float_NT, ScaledGemmTunableOp_Float8_e4m3fn_..._TN
_OP_RE = re.compile(r"^(?P<family>[A-Za-z]+TunableOp)_(?P<dtype>.+)_(?P<layout>[NT]{2})$")
# (ASCII digits, at most 19: torch's sizes are int64, and int() of 4,300+ digits raises)
# tn_M_N_K[_B_batch][_ld_lda_ldb_ldc][_rw_0|1][_bias_DTYPE]  (BLAS column-major m, n, k)
_PARAMS_RE = re.compile(
    r"^(?P<ta>[nNtT])(?P<tb>[nNtT])_(?P<m>[0-9]{1,19})_(?P<n>[0-9]{1,19})_(?P<k>[0-9]{1,19})"
    r"(?:_B_(?P<batch>[0-9]{1,19}))?"
    r"(?:_ld_(?P<lda>[0-9]{1,19})_(?P<ldb>[0-9]{1,19})_(?P<ldc>[0-9]{1,19}))?"
    r"(?:_rw_(?P<rowwise>[01]))?"
    r"(?:_bias_(?P<bias>[A-Za-z0-9_:<>]+))?$"
)
_TORCH_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


class MalformedFile(ConfigError):
    """A results file torch would misread; exit 2 naming the file and line."""


@dataclass(frozen=True)
class Shape:
    """A GEMM in linear-layer terms: `F.linear(x[tokens, in], W[out, in])` is BLAS m=out, n=tokens, k=in."""

    layout: str
    tokens: int
    in_features: int
    out_features: int
    batch: int | None = None
    ld: tuple[int, int, int] | None = None
    rowwise: bool | None = None
    bias: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "layout": self.layout,
            "tokens": self.tokens,
            "in_features": self.in_features,
            "out_features": self.out_features,
            "batch": self.batch,
            "ld": list(self.ld) if self.ld else None,
            "rowwise": self.rowwise,
            "bias": self.bias,
        }


@dataclass(frozen=True)
class Row:
    """One tuned result: op and params identify it, solution and time are what tuning chose."""

    op: str
    params: str
    solution: str
    time_text: str | None
    line: int
    family: str
    dtype: str
    shape: Shape

    @property
    def time_ms(self) -> float | None:
        return float(self.time_text) if self.time_text is not None else None

    @property
    def key(self) -> tuple[str, str]:
        return (self.op, self.params)

    def as_dict(self) -> dict[str, object]:
        return {
            "line": self.line,
            "op": self.op,
            "family": self.family,
            "dtype": self.dtype,
            "params": self.params,
            "shape": self.shape.as_dict(),
            "solution": self.solution,
            "time_ms": self.time_ms,
        }


@dataclass
class ResultsFile:
    """A parsed file: validators in file order, rows in file order."""

    source: str
    validators: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.source,
            "validators": dict(self.validators),
            "rows": [r.as_dict() for r in self.rows],
        }


def decode_params(params: str) -> Shape | None:
    """Decode params (`tn_8192_7_28672`, or newer with `_ld_...`); None when not a GEMM signature."""
    m = _PARAMS_RE.match(params)
    if not m:
        return None
    ld = (int(m["lda"]), int(m["ldb"]), int(m["ldc"])) if m["lda"] else None
    return Shape(
        layout=(m["ta"] + m["tb"]).lower(),
        tokens=int(m["n"]),
        in_features=int(m["k"]),
        out_features=int(m["m"]),
        batch=int(m["batch"]) if m["batch"] else None,
        ld=ld,
        rowwise=(m["rowwise"] == "1") if m["rowwise"] is not None else None,
        bias=m["bias"],
    )


def _fail(source: str, line: int, why: str) -> MalformedFile:
    return MalformedFile(f"{source}:{line}: {why}")


def parse_text(text: str, source: str = "<text>") -> ResultsFile:
    """Parse a results file strictly; raise MalformedFile naming the first bad line."""
    out = ResultsFile(source=source)
    seen_rows: set[tuple[str, str]] = set()
    for lineno, line, parts in tunableop_csv.records(text):  # split exactly where torch's reader splits
        if not line.strip():
            continue  # torch logs "could not parse line" and goes on
        if "\r" in line:
            raise _fail(source, lineno, "carriage return in the line (CRLF file?): torch keeps it in the field")
        if parts[0] == "Validator":
            if len(parts) != 3 or not parts[1] or not parts[2]:
                raise _fail(source, lineno, f"expected 'Validator,KEY,VALUE', got {excerpt(line, 60)}")
            key, value = parts[1], parts[2]
            if key in out.validators and out.validators[key] != value:
                raise _fail(source, lineno, f"validator {excerpt(key)} given twice with different values")
            out.validators[key] = value
            continue
        if len(parts) not in (3, 4):
            why = f"expected 'OpName,Params,Solution[,avg_ms]' (3 or 4 fields), got {excerpt(line, 60)}"
            raise _fail(source, lineno, why)
        op, params, solution = parts[0], parts[1], parts[2]
        op_m = _OP_RE.match(op)
        if not op_m:
            raise _fail(source, lineno, f"unknown op name {excerpt(op, 60)} (expected e.g. GemmTunableOp_Half_TN)")
        shape = decode_params(params)
        if shape is None:
            raise _fail(source, lineno, f"cannot decode params {excerpt(params, 60)} (expected e.g. tn_8192_7_28672)")
        if shape.layout != op_m["layout"].lower():
            raise _fail(source, lineno, f"params layout {shape.layout!r} differs from op layout {op_m['layout']!r}")
        if not solution:
            raise _fail(source, lineno, "empty solution")
        time_text: str | None = None
        if len(parts) == 4:
            time_text = parts[3].strip()
            try:
                t = float(time_text)
            except ValueError:
                raise _fail(source, lineno, f"time {excerpt(parts[3])} is not a number") from None
            if not math.isfinite(t) or t < 0:
                raise _fail(source, lineno, f"time {excerpt(parts[3])} is not a finite non-negative number")
        if (op, params) in seen_rows:
            raise _fail(source, lineno, f"{excerpt(op)},{excerpt(params)} appears twice (torch keeps only the first)")
        seen_rows.add((op, params))
        out.rows.append(
            Row(
                op=op,
                params=params,
                solution=solution,
                time_text=time_text,
                line=lineno,
                family=op_m["family"],
                dtype=op_m["dtype"],
                shape=shape,
            )
        )
    if MANDATORY_VALIDATOR not in out.validators:
        raise MalformedFile(f"{source}: no 'Validator,{MANDATORY_VALIDATOR},...' line (torch rejects such a file)")
    return out


def load(path: Path | str) -> ResultsFile:
    """Read and parse one file; a missing or unreadable file is a usage error (exit 2)."""
    p = Path(path)
    try:
        text = tunableop_csv.read_text(p)  # no newline translation: torch sees the bytes
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from None
    return parse_text(text, source=str(p))


def render(results: ResultsFile) -> str:
    """The file as torch writes it: validators first, then one line per result."""
    rows = [[r.op, r.params, r.solution] + ([r.time_text] if r.time_text is not None else []) for r in results.rows]
    return tunableop_csv.render(results.validators, rows)


# ----------------------------------------------------------------------------------------------------
# check


def pt_version_of(torch_version: str) -> str | None:
    """PT_VERSION as torch writes it: TORCH_VERSION is MAJOR.MINOR.PATCH, without `+cu130` or `.dev...`."""
    m = _TORCH_VERSION_RE.match(torch_version.strip())
    return ".".join(m.groups()) if m else None


def parse_expectations(items: Sequence[str]) -> dict[str, str]:
    """`KEY=VALUE` strings into a dict; unknown keys are a usage error with the closest known key."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value:
            raise ConfigError(f"--expect {item!r}: expected KEY=VALUE")
        if key not in KNOWN_VALIDATORS:
            close = difflib.get_close_matches(key.upper(), KNOWN_VALIDATORS, n=1)
            hint = f"Perhaps you meant {close[0]}?" if close else f"known: {', '.join(KNOWN_VALIDATORS)}"
            raise ConfigError(f"--expect {item!r}: unknown validator {key!r}", hint=hint)
        if key in out and out[key] != value:
            raise ConfigError(f"--expect {key} given twice with different values")
        if key == "PT_VERSION":
            # torch compares against TORCH_VERSION, which never carries a local suffix.
            value = pt_version_of(value) or value
        out[key] = value
    return out


@dataclass
class Expected:
    """What the consumer (an image's torch, or the user) says the validators must be.

    complete: the whole key set is known, so keys in the file but not here would be rejected too.
    undetermined: keys whose value could not be found out (no GPU); reported, never passed silently.
    With complete False, file keys neither in values nor undetermined are not judged (--expect names a few).
    """

    values: dict[str, str]
    complete: bool
    source: str
    undetermined: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    file: str
    source: str
    mismatched: list[tuple[str, str, str]] = field(default_factory=list)  # key, in file, expected
    missing: list[tuple[str, str]] = field(default_factory=list)  # key expected (with its value), not in file
    extra: list[str] = field(default_factory=list)  # in file, the consumer registers no such key
    undetermined: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra or self.undetermined)

    def problems(self) -> list[str]:
        """One line per key that makes torch reject (or may make it reject) the file."""
        out = []
        for key, have, want in self.mismatched:
            line = f"{key}: file has {have!r}, expected {want!r}"
            if key == "GCN_ARCH_NAME" and have.split(":")[0] == want.split(":")[0]:
                line += " (same gfx arch, different features: torch compares the full target ID)"
            out.append(line)
        out += [f"{key}: missing from the file (expected {want!r})" for key, want in self.missing]
        out += [f"{key}: in the file but not registered by the consumer's torch" for key in self.extra]
        out += [f"{key}: could not be determined from {self.source}" for key in self.undetermined]
        return [printable(line, 600) for line in out]  # keys are the file's own text: printed, never acted on

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "against": self.source,
            "ok": self.ok,
            "matched": self.matched,
            "mismatched": [{"key": k, "file": a, "expected": b} for k, a, b in self.mismatched],
            "missing": [{"key": k, "expected": v} for k, v in self.missing],
            "extra": self.extra,
            "undetermined": self.undetermined,
            "notes": self.notes,
        }


def check_validators(results: ResultsFile, expected: Expected) -> CheckReport:
    """Compare like torch's ValidateAll: same key set (when known) and equal values; every problem listed."""
    rep = CheckReport(file=results.source, source=expected.source, notes=list(expected.notes))
    have = results.validators
    for key, want in expected.values.items():
        if key not in have:
            rep.missing.append((key, want))
        elif have[key] != want:
            rep.mismatched.append((key, have[key], want))
        else:
            rep.matched.append(key)
    for key in have:
        if key in expected.values:
            continue
        if key in expected.undetermined:
            rep.undetermined.append(key)
        elif expected.complete:
            rep.extra.append(key)
        # else: the consumer's key set is not known and nobody named this key, so it is not judged
    for key in expected.undetermined:
        if key not in have and key not in rep.undetermined:
            rep.undetermined.append(key)
    return rep


# ----------------------------------------------------------------------------------------------------
# merge


def _faster(a: Row, b: Row) -> Row:
    """The faster of two results for one op and params; a row without a measured time (none, or 0) loses."""
    ta, tb = a.time_ms, b.time_ms
    if not tb:
        return a
    if not ta:
        return b
    return b if tb < ta else a


def merge(files: Sequence[ResultsFile]) -> ResultsFile:
    """Per-device files into one; differing validators are a CheckFailed naming the files and keys."""
    if not files:
        raise ConfigError("merge needs at least one file")
    first = files[0]
    for other in files[1:]:
        if other.validators != first.validators:
            keys = sorted(
                k
                for k in set(first.validators) | set(other.validators)
                if first.validators.get(k) != other.validators.get(k)
            )
            detail = "; ".join(
                f"{k}: {first.validators.get(k, '<absent>')!r} vs {other.validators.get(k, '<absent>')!r}" for k in keys
            )
            detail = printable(detail, 600)
            raise CheckFailed(f"validators differ between {first.source} and {other.source}: {detail}")
    best: dict[tuple[str, str], Row] = {}
    for f in files:
        for row in f.rows:
            best[row.key] = _faster(best[row.key], row) if row.key in best else row
    return ResultsFile(source="<merged>", validators=dict(first.validators), rows=list(best.values()))
