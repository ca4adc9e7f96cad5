"""imagebuild's own GPU ops: `torch.ops.imagebuild.silu_and_mul` and `torch.ops.imagebuild.skinny_linear`.

Importing this package defines the ops (with CPU and fake implementations, so they work under torch.compile
and on machines without a GPU) and loads the compiled CUDA/HIP implementations when they were built.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from imagebuild_kernels import _ops, _table

__all__ = ["HAS_DEVICE_KERNELS", "library_path", "silu_and_mul", "skinny_linear", "use_skinny_table"]

_C_SPEC = importlib.util.find_spec("imagebuild_kernels._C")
if _C_SPEC is not None:
    from imagebuild_kernels import _C  # noqa: F401  (registers the CUDA/HIP implementations)

    HAS_DEVICE_KERNELS = True
else:
    HAS_DEVICE_KERNELS = False
    _ops.register_missing_device_kernels("it was built without a GPU toolchain (IMAGEBUILD_KERNELS_CPU_ONLY)")


def use_skinny_table(path: Path | None = None) -> dict[str, Any] | None:
    """Install skinny_linear's measured dispatch table (default: $IMAGEBUILD_SKINNY_TABLE, else the packaged one).

    Without a table, or on a GPU other than the one it was measured on, skinny_linear is F.linear.
    """
    table = _table.load_table(path)
    rows = _table.rows_of(table) if table else []
    cc, sms = (table["cc"], table["sm_count"]) if table else (-1, -1)
    if HAS_DEVICE_KERNELS:
        t = torch.tensor(rows, dtype=torch.int64).reshape(len(rows), 5)
        torch.ops.imagebuild._skinny_set_table(t, cc, sms)
    return table


if HAS_DEVICE_KERNELS:
    use_skinny_table()


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x of shape [..., 2d]; writes into `out` when given."""
    if out is None:
        return torch.ops.imagebuild.silu_and_mul(x)
    torch.ops.imagebuild.silu_and_mul_out(out, x)
    return out


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for decode batches (x [M, K], M <= 16) reading the weight once, where the measured table says
    that is faster than cuBLAS; everywhere else (larger M, unmeasured GPU or shape) it is F.linear."""
    return torch.ops.imagebuild.skinny_linear(x, weight, bias)


def library_path() -> str:
    """Path of the compiled extension (what `imagecontract/verify.py` lists the code objects of)."""
    if _C_SPEC is None or _C_SPEC.origin is None:
        raise RuntimeError("imagebuild_kernels has no compiled extension: it was installed CPU-only")
    return _C_SPEC.origin
