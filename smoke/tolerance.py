"""Tolerances derived from the output dtype and the reference, not tuned per check.

The float64 reference (at least as exact as an fp32 one) rounded to the output dtype is the best answer any
implementation can return: its normwise error, the *floor*, is about 0.43 units of roundoff (u = 2^-11 for
fp16, 2^-8 for bf16, 2^-24 for fp32). A correct op adds a few more roundings (intermediates kept in the input
dtype, fp32 accumulation over ``depth`` terms), so it stays within ``NORM_FACTOR`` floors; an op that is off by
2% everywhere is about 12 floors off in bf16 and 96 in fp16, and fails in both.

Two tests, both must hold:
- normwise: ``||out - ref|| / ||ref|| <= NORM_FACTOR * max(floor, u / 8) + ACC_FACTOR * u32 * sqrt(depth)``
  (catches small errors everywhere: a wrong scale, a lost rounding mode, a wrong accumulation type);
- elementwise: ``|out - ref| <= (ELEM_FACTOR * u + ACC_FACTOR * u32 * sqrt(depth)) * (|ref| + rms(ref))
  + 2 |round(ref) - ref|`` (catches large errors anywhere: an unwritten tail, a wrong element, a NaN; the last
  term allows what rounding to the dtype itself costs, e.g. silu(-80) underflowing to 0 in fp16). Where a check
  gives the terms' magnitude (attention: ``softmax(q k^T) |v|``), it replaces ``|ref|`` when larger.
``err_ratio`` is the worse of the two ratios: above 1 means the tolerance was exceeded.
"""

from __future__ import annotations

import math
from typing import Any

import torch

UNIT_ROUNDOFF: dict[torch.dtype, float] = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}
U_ACC = 2.0**-24  # every op checked here accumulates in fp32 (or better)
NORM_FACTOR = 8.0  # floors; 2% off is 12 floors in bf16, so it fails, and a correct op measures 1-3
ELEM_FACTOR = 16.0  # units of roundoff, relative to |ref| + rms(ref)
ACC_FACTOR = 4.0  # fp32 accumulation error grows like sqrt(depth) units of roundoff


def floor_error(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Normwise relative error of the reference rounded to ``dtype``: what a perfect op in that dtype returns."""
    r = ref.detach().to(torch.float64)
    norm = float(r.norm().item())
    if norm == 0.0 or not math.isfinite(norm):
        return 0.0
    return float((r.to(dtype).to(torch.float64) - r).norm().item()) / norm


def tolerance(ref: torch.Tensor, dtype: torch.dtype, depth: int = 1) -> dict[str, float]:
    """The normwise and elementwise bounds for an output of ``dtype`` against ``ref`` (see the module doc)."""
    u = UNIT_ROUNDOFF[dtype]
    acc = ACC_FACTOR * U_ACC * math.sqrt(max(depth, 1))
    floor = floor_error(ref, dtype)
    return {
        "unit_roundoff": u,
        "floor": floor,
        "norm_tol": NORM_FACTOR * max(floor, u / 8) + acc,
        "elem_rtol": ELEM_FACTOR * u + acc,
    }


def check_close(
    out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, depth: int = 1, magnitude: torch.Tensor | None = None
) -> dict[str, Any]:
    """``out`` against the float64 ``ref``; ``ok`` unless either bound is exceeded or an output is not finite.

    ``magnitude`` (same shape): the sum of the terms' absolute values behind each output, which the elementwise
    bound scales by instead of ``|ref|`` where the terms cancel (attention's weighted mean of values: its output is
    about a tenth of the sum its rounding errors come from, and a correct fp32 SDPA measured 1.03x the bound taken
    from ``|ref|`` on one draw of fresh inputs)."""
    if tuple(out.shape) != tuple(ref.shape):
        return {"ok": False, "error": f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}"}
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    tol = tolerance(r, dtype, depth)
    bad_finite = int((~torch.isfinite(o) & torch.isfinite(r)).sum().item())
    diff = (o - r).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf")))
    if not diff.numel():
        return {"ok": True, "max_abs_err": 0.0, "err_ratio": 0.0, "norm_err": 0.0, **tol, "non_finite": 0}
    finite_r = torch.where(torch.isfinite(r), r, torch.zeros_like(r))
    rms = float(finite_r.norm().item()) / math.sqrt(r.numel())
    rounding = (finite_r.to(dtype).to(torch.float64) - finite_r).abs()
    scale = finite_r.abs()
    if magnitude is not None and tuple(magnitude.shape) == tuple(ref.shape):
        m = magnitude.detach().to(torch.float64).abs()
        scale = torch.maximum(scale, torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        rms = max(rms, float(scale.norm().item()) / math.sqrt(r.numel()))
    bound = tol["elem_rtol"] * (scale + rms) + 2 * rounding + 1e-300
    elem_ratio = float((diff / bound).max().item())
    ref_norm = float(finite_r.norm().item())
    norm_err = float(diff.norm().item()) / ref_norm if ref_norm > 0 else float(diff.max().item())
    norm_ratio = norm_err / tol["norm_tol"]
    worst = max(elem_ratio, norm_ratio)
    return {
        "ok": bad_finite == 0 and worst <= 1.0,
        "max_abs_err": float(diff.max().item()),
        "err_ratio": worst,
        "norm_err": norm_err,
        "norm_ratio": norm_ratio,
        "elem_ratio": elem_ratio,
        **tol,
        "non_finite": bad_finite,
    }


def describe(err: dict[str, Any]) -> str:
    """One line for a failure: which bound, by how much."""
    if "error" in err:
        return str(err["error"])
    text = (
        f"normwise err {err['norm_err']:.3g} ({err['norm_ratio']:.3g}x its tolerance {err['norm_tol']:.3g}), "
        f"max abs err {err['max_abs_err']:.3g} ({err['elem_ratio']:.3g}x the elementwise tolerance)"
    )
    return text + (f", {err['non_finite']} non-finite outputs" if err.get("non_finite") else "")
