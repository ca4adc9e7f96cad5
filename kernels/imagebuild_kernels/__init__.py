"""imagebuild's own GPU ops: `torch.ops.imagebuild.silu_and_mul` and `torch.ops.imagebuild.skinny_linear`.

Importing this package defines the ops (with CPU and fake implementations, so they work under torch.compile
and on machines without a GPU) and loads the compiled CUDA/HIP implementations when they were built.
"""

from __future__ import annotations

import importlib.util

import torch

from imagebuild_kernels import _ops

__all__ = ["HAS_DEVICE_KERNELS", "library_path", "silu_and_mul", "skinny_linear"]

_C_SPEC = importlib.util.find_spec("imagebuild_kernels._C")
if _C_SPEC is not None:
    from imagebuild_kernels import _C  # noqa: F401  (registers the CUDA/HIP implementations)

    HAS_DEVICE_KERNELS = True
else:
    HAS_DEVICE_KERNELS = False
    _ops.register_missing_device_kernels("it was built without a GPU toolchain (IMAGEBUILD_KERNELS_CPU_ONLY)")


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x of shape [..., 2d]; writes into `out` when given."""
    if out is None:
        return torch.ops.imagebuild.silu_and_mul(x)
    torch.ops.imagebuild.silu_and_mul_out(out, x)
    return out


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for decode batches (x [M, K], M <= 8) reading the weight once; larger M uses F.linear."""
    return torch.ops.imagebuild.skinny_linear(x, weight, bias)


def library_path() -> str:
    """Path of the compiled extension (what `kernel_verify.py` lists the code objects of)."""
    if _C_SPEC is None or _C_SPEC.origin is None:
        raise RuntimeError("imagebuild_kernels has no compiled extension: it was installed CPU-only")
    return _C_SPEC.origin
