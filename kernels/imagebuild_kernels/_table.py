"""skinny_linear's dispatch rule over a measured table; torch-free, so `imagebuild kernels explain` can load it.

The table (skinny_table.json beside this file) is written by `bench/kernels.py --sweep`: for every decode shape
of bench/shapes.yaml, dtype and M, the fastest launch configuration and cuBLAS, timed under CUDA-graph replay
over weights rotated past L2. An entry's cfg is -1 (the library GEMM, F.linear) unless the fastest of ours beat
cuBLAS by the table's margin. csrc/ops.cu applies the same rule (`skinny_lookup`; a GPU test compares them).

The rule never extrapolates (issue 24): on 228 decode rows of models the table was not built on, the earlier
nearest-neighbour rule (a measured shape within 2**0.5 in N and K) picked ours where it was up to 0.695x of
F.linear. Ours runs only on a measured (dtype, N, K) and at an M that was measured there, or lies between two
measured M of the same half that both chose ours; everything else is F.linear (the call it replaces, so no
slower than it).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("skinny_table.json")
TABLE_ENV = "IMAGEBUILD_SKINNY_TABLE"  # another table file (a fresh sweep) instead of the packaged one
LIBRARY = -1
MAX_M = 16
DTYPE_CODES = {"float16": 0, "bfloat16": 1}

# Launch variants of csrc/skinny_linear.cuh `launch_skinny_linear`: id -> (warps per block, 16-row tiles per
# block, unroll, L2 256-byte prefetch hint, cp.async ring stages; 0: loads into registers); 6 is the portable FMA
# kernel (None). cfg = 100 * split + id.
Spec = tuple[int, int, int, int, int]
VARIANTS: dict[int, Spec | None] = {
    1: (8, 1, 4, 0, 0),
    2: (8, 2, 2, 0, 0),
    3: (4, 1, 4, 0, 0),
    4: (8, 1, 2, 0, 0),
    5: (4, 2, 4, 0, 0),
    6: None,
    7: (16, 1, 2, 0, 0),
    8: (8, 1, 8, 0, 0),
    9: (16, 1, 4, 0, 0),
    10: (32, 1, 2, 0, 0),
    11: (4, 1, 8, 0, 0),
    12: (8, 1, 4, 1, 0),
    13: (4, 2, 4, 1, 0),
    14: (16, 1, 4, 1, 0),
    15: (4, 1, 8, 1, 0),
    16: (16, 1, 2, 1, 0),
    17: (32, 1, 2, 1, 0),
    18: (8, 2, 2, 1, 0),
    19: (8, 1, 8, 1, 0),
    20: (4, 1, 2, 1, 4),
    21: (8, 1, 1, 1, 4),
    22: (4, 2, 1, 1, 4),
    23: (4, 1, 1, 1, 8),
}
SPLITS = (1, 2, 4, 8)


class TableError(ValueError):
    """The table file is missing fields or holds values the kernels cannot run."""


@dataclass(frozen=True)
class Choice:
    cfg: int  # >= 1: launch configuration; -1: F.linear
    reason: str
    entry: dict[str, Any] | None = None


def split_of(cfg: int) -> int:
    return 1 if cfg < 100 else cfg // 100


def cfg_valid(cfg: int) -> bool:
    v, s = cfg % 100, split_of(cfg)
    return cfg >= 1 and v in VARIANTS and s in SPLITS and not (VARIANTS[v] is None and s != 1)


def describe_cfg(cfg: int) -> str:
    """'8 warps x 16 rows, unroll 4, K split over 2 blocks (cluster)' for a cfg; 'F.linear (cuBLAS)' for -1."""
    if cfg == LIBRARY:
        return "F.linear (cuBLAS / hipBLAS)"
    v = VARIANTS[cfg % 100]
    if v is None:
        return "portable FMA kernel (4 rows per block)"
    warps, rt, unroll, hint, stages = v
    text = f"cfg {cfg}: {warps} warps x {16 * rt} rows per block, unroll {unroll}"
    if stages:
        text += f", cp.async ring of {stages} passes in shared memory"
    if hint:
        text += ", L2 256B prefetch"
    s = split_of(cfg)
    return text + (f", K split over a cluster of {s} blocks" if s > 1 else "")


def rows_of(table: dict[str, Any]) -> list[tuple[int, int, int, int, int]]:
    """(dtype code, N, K, M, cfg), sorted: the order both implementations of the rule scan in."""
    rows = []
    for e in table.get("entries", []):
        try:
            row = (DTYPE_CODES[e["dtype"]], int(e["N"]), int(e["K"]), int(e["M"]), int(e["cfg"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TableError(f"skinny table entry {e!r}: {exc}") from None
        if min(row[1:4]) < 1 or row[3] > MAX_M or not (row[4] == LIBRARY or cfg_valid(row[4])):
            raise TableError(f"skinny table entry {e!r}: out of range")
        rows.append(row)
    return sorted(rows)


def load_table(path: Path | None = None) -> dict[str, Any] | None:
    """The table (path, else $IMAGEBUILD_SKINNY_TABLE, else the packaged one); None when there is none."""
    if path is None:
        path = Path(os.environ[TABLE_ENV]) if os.environ.get(TABLE_ENV) else TABLE_PATH
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("cc"), int) or not isinstance(doc.get("sm_count"), int):
        raise TableError(f"{path}: expected an object with integer 'cc' and 'sm_count'")
    rows_of(doc)
    return doc


def _entry(table: dict[str, Any], code: int, n: int, k: int, m: int) -> dict[str, Any] | None:
    names = {v: key for key, v in DTYPE_CODES.items()}
    for e in table.get("entries", []):
        if e["dtype"] == names[code] and (e["N"], e["K"], e["M"]) == (n, k, m):
            return dict(e)
    return None


def choose(
    table: dict[str, Any] | None, dtype: str, n: int, k: int, m: int, *, cc: int | None = None, sms: int | None = None
) -> Choice:
    """What skinny_linear runs for x [m, k], weight [n, k] (aligned, contiguous) on a GPU of (cc, sms)."""
    if dtype not in DTYPE_CODES:
        return Choice(LIBRARY, f"dtype {dtype}: only float16 and bfloat16 have kernels")
    if not (1 <= m <= MAX_M):
        return Choice(LIBRARY, f"M = {m}: the kernels take 1 <= M <= {MAX_M}")
    if k < 8 or k % 8:
        return Choice(LIBRARY, f"K = {k}: the kernels need K a multiple of 8 (16-byte loads)")
    if table is None:
        return Choice(LIBRARY, "no measured table installed")
    if (cc is not None and cc != table["cc"]) or (sms is not None and sms != table["sm_count"]):
        return Choice(LIBRARY, f"the table was measured on cc {table['cc']} with {table['sm_count']} SMs")
    code = DTYPE_CODES[dtype]
    same = [r for r in rows_of(table) if r[0] == code and (r[1], r[2]) == (n, k)]
    if not same:
        return Choice(LIBRARY, f"{dtype} {n} x {k} was not measured: F.linear off the measured region")
    high = m > 8
    half = [r for r in same if (r[3] > 8) == high]
    exact = [r for r in half if r[3] == m]
    if exact:
        return Choice(exact[0][4], "measured", _entry(table, code, n, k, m))
    above = min((r for r in half if r[3] > m), key=lambda r: r[3], default=None)
    below = max((r for r in half if r[3] < m), key=lambda r: r[3], default=None)
    if above is None or below is None:
        return Choice(LIBRARY, f"M = {m} is outside the measured M of its half (M {'> 8' if high else '<= 8'})")
    if above[4] == LIBRARY or below[4] == LIBRARY:
        return Choice(LIBRARY, f"M = {m} lies between M {below[3]} and {above[3]}, not both ours")
    where = f"between measured M {below[3]} and {above[3]}, both ours: the cfg of M {above[3]}"
    return Choice(above[4], where, _entry(table, code, n, k, above[3]))


def explain(table: dict[str, Any] | None, dtype: str, n: int, k: int, m: int) -> list[str]:
    """Human-readable lines: the decision for one shape and the measurements it rests on."""
    ch = choose(table, dtype, n, k, m)
    lines = [f"skinny_linear x [{m}, {k}] @ w [{n}, {k}]^T, {dtype}: {describe_cfg(ch.cfg)}", f"  why: {ch.reason}"]
    if table is not None:
        lines.append(
            f"  table: {table.get('gpu', '?')} (cc {table['cc']}, {table['sm_count']} SMs), margin "
            f"{table.get('margin', '?')}; made by: {table.get('command', '?')}"
        )
    e = ch.entry
    if e is not None and ch.cfg == LIBRARY:
        lines.append(f"  verdict: ours was not {table.get('margin', '?') if table else '?'}x faster than cuBLAS there")
    if e is not None:
        lines.append(
            f"  measured: ours best {describe_cfg(int(e['best_cfg']))} {e['ours_us']:.1f} us, "
            f"cuBLAS {e['cublas_us']:.1f} us (ours {e['cublas_us'] / e['ours_us']:.2f}x), floor {e['floor_us']:.1f} us"
        )
    return lines


def variants_in_source(text: str) -> dict[int, Spec | None]:
    """The variant list as csrc/skinny_linear.cuh's switch spells it (for the consistency test)."""
    found: dict[int, Spec | None] = {}
    for num, args in re.findall(r"case (\d+): return launch_skinny_mma<T, (\d+, \d+, \d+, \d+)>", text):
        w, r, u, h = (int(a) for a in args.split(","))
        found[int(num)] = (w, r, u, h, 0)
    for num, args in re.findall(r"case (\d+): return launch_skinny_async<T, (\d+, \d+, \d+, \d+)>", text):
        w, r, u, st = (int(a) for a in args.split(","))
        found[int(num)] = (w, r, u, 1, st)  # cp.async always with the 256-byte L2 prefetch
    for num in re.findall(r"case (\d+): return launch_skinny_fma<T>", text):
        found[int(num)] = None
    return found
