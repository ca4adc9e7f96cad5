"""Input checks shared by the CPU and fake implementations; the same messages as the C++ checks in csrc/ops.cu."""

from __future__ import annotations

import torch

SILU_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LINEAR_DTYPES = (torch.float16, torch.bfloat16)
_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float"}


def _dt(dtype: torch.dtype) -> str:
    return _NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _fail(op: str, msg: str) -> None:
    raise ValueError(f"imagebuild::{op}: {msg}")


def silu_out_shape(x: torch.Tensor) -> list[int]:
    """Shape of silu_and_mul's result, after checking x itself."""
    op = "silu_and_mul"
    if x.dtype not in SILU_DTYPES:
        _fail(op, f"expected x of dtype float16, bfloat16 or float32, got {_dt(x.dtype)}")
    if x.dim() < 1 or x.shape[-1] % 2 != 0:
        _fail(op, f"expected x of shape [..., 2*d] (last dim even), got {list(x.shape)}")
    if not x.is_contiguous():
        _fail(op, f"expected a contiguous x, got strides {list(x.stride())}")
    return [*x.shape[:-1], x.shape[-1] // 2]


def check_silu_out(out: torch.Tensor, x: torch.Tensor) -> None:
    """Checks an `out=` tensor against x."""
    op = "silu_and_mul"
    want = silu_out_shape(x)
    if out.device != x.device:
        _fail(op, f"expected out on {x.device}, got {out.device}")
    if out.dtype != x.dtype:
        _fail(op, f"expected out of dtype {_dt(x.dtype)}, got {_dt(out.dtype)}")
    if list(out.shape) != want:
        _fail(op, f"expected out of shape {want}, got {list(out.shape)}")
    if not out.is_contiguous():
        _fail(op, f"expected a contiguous out, got strides {list(out.stride())}")


def linear_out_shape(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> list[int]:
    """Shape [M, N] of skinny_linear's result, after checking every argument."""
    op = "skinny_linear"
    if x.dtype not in LINEAR_DTYPES:
        _fail(op, f"expected x of dtype float16 or bfloat16, got {_dt(x.dtype)}")
    if weight.dtype != x.dtype:
        _fail(op, f"expected weight of dtype {_dt(x.dtype)}, got {_dt(weight.dtype)}")
    if weight.device != x.device:
        _fail(op, f"expected weight on {x.device}, got {weight.device}")
    if x.dim() != 2:
        _fail(op, f"expected x of shape [M, K], got {list(x.shape)}")
    if weight.dim() != 2 or weight.shape[1] != x.shape[1]:
        _fail(op, f"expected weight of shape [N, {x.shape[1]}], got {list(weight.shape)}")
    if not x.is_contiguous():
        _fail(op, f"expected a contiguous x, got strides {list(x.stride())}")
    if not weight.is_contiguous():
        _fail(op, f"expected a contiguous weight, got strides {list(weight.stride())}")
    if bias is not None:
        if bias.dtype != x.dtype:
            _fail(op, f"expected bias of dtype {_dt(x.dtype)}, got {_dt(bias.dtype)}")
        if bias.device != x.device:
            _fail(op, f"expected bias on {x.device}, got {bias.device}")
        if bias.dim() != 1 or bias.shape[0] != weight.shape[0]:
            _fail(op, f"expected bias of shape [{weight.shape[0]}], got {list(bias.shape)}")
        if not bias.is_contiguous():
            _fail(op, f"expected a contiguous bias, got strides {list(bias.stride())}")
    return [x.shape[0], weight.shape[0]]
