"""``F.silu`` and the image's ``silu_and_mul`` against a float64 reference built from ``exp``.

Outputs land in NaN-poisoned memory so a kernel that skips elements (odd sizes, tails) fails.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import torch
import torch.nn.functional as F

from smoke import torch_names
from smoke.context import Context
from smoke.measure import DTYPES, poison, time_fn
from smoke.ops import op_for_check
from smoke.result import CheckResult
from smoke.tolerance import check_close, describe

# (tokens, d): odd and tail-heavy sizes; silu_and_mul reads [tokens, 2d] and writes [tokens, d].
CPU_SHAPES = [(1, 1), (3, 7), (17, 1000), (5, 4099)]
GPU_SHAPES = [*CPU_SHAPES, (33, 4099), (257, 14336)]
SPECIAL = [-80.0, -30.0, -10.0, -1.0, -0.0, 0.0, 1e-3, 1.0, 10.0, 30.0, 80.0]


def ref_silu(x: torch.Tensor) -> torch.Tensor:
    x64 = x.to(torch.float64)
    return x64 / (1.0 + torch.exp(-x64))


def ref_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    x64 = x.to(torch.float64)
    return ref_silu(x64[..., :d]) * x64[..., d:]


def make_input(tokens: int, width: int, dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator(device=torch_names.CPU).manual_seed(seed)
    x = torch.randn(tokens, width, generator=gen, dtype=torch.float32) * 4
    flat = x.view(-1)
    n = min(len(SPECIAL), flat.numel())
    flat[:n] = torch.tensor(SPECIAL[:n])
    return x.to(dtype=dtype, device=device)


def run(ctx: Context) -> CheckResult:
    res = CheckResult("silu")
    dev = ctx.device
    shapes = GPU_SHAPES if ctx.on_gpu else CPU_SHAPES
    op = op_for_check(ctx, res, "silu_and_mul")
    seed = secrets.randbelow(2**31)  # fresh inputs every run; the seed is recorded to replay a failure
    res.numbers["seed"] = seed
    cases: list[tuple[str, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor], int]]
    cases = [("F.silu", F.silu, ref_silu, 1)]
    if op is not None:
        cases.append(("silu_and_mul", op, ref_silu_and_mul, 2))
    for fname, fn, ref_fn, width_mult in cases:
        per_dtype: dict[str, dict[str, float | int | bool]] = {}
        for dname, dtype in DTYPES.items():
            worst: dict[str, float | int | bool] = {"ok": True, "max_abs_err": 0.0, "err_ratio": 0.0}
            for i, (tokens, d) in enumerate(shapes):
                x = make_input(tokens, d * width_mult, dtype, dev, seed + i)
                poison(dev, tokens * d, dtype)
                try:
                    out = fn(x)
                except Exception as exc:  # noqa: BLE001 - a crash is this case's failure
                    res.fail(f"{fname} {dname} {tokens}x{d}: raised {type(exc).__name__}: {exc}")
                    worst["ok"] = False
                    continue
                err = check_close(out, ref_fn(x), dtype)
                if not err["ok"]:
                    res.fail(f"{fname} {dname} {tokens}x{d}: {describe(err)}")
                    worst["ok"] = False
                for key in ("max_abs_err", "err_ratio"):
                    worst[key] = max(float(worst[key]), float(err.get(key, float("inf"))))
                if out.dtype != dtype:
                    res.fail(f"{fname} {dname}: output dtype {out.dtype}")
            per_dtype[dname] = worst
        res.numbers[fname] = per_dtype
    _throughput(ctx, res, op)
    return res.finish()


def _throughput(ctx: Context, res: CheckResult, op: object) -> None:
    """GB/s moved (read + write) by F.silu, silu_and_mul and the eager two-op version it replaces."""
    dev = ctx.device
    tokens, d = (4096, 14336) if ctx.on_gpu else (256, 2048)
    dtype = torch.float16 if ctx.on_gpu else torch.float32
    iters = 20 if ctx.on_gpu else 5
    x = torch.randn(tokens, 2 * d, dtype=dtype, device=dev)
    half = x[:, :d].contiguous()
    esize = x.element_size()
    t = time_fn(lambda: F.silu(half), dev, iters=iters)
    res.throughput["F.silu_GBps"] = 2 * tokens * d * esize / t / 1e9
    t_eager = time_fn(lambda: F.silu(x[:, :d]) * x[:, d:], dev, iters=iters)
    res.throughput["eager_silu_mul_GBps"] = 3 * tokens * d * esize / t_eager / 1e9
    res.numbers["throughput_shape"] = {"tokens": tokens, "d": d, "dtype": str(dtype).replace("torch.", "")}
    copy = ctx.copy_bandwidth()
    res.numbers["copy_GBps"] = copy / 1e9
    if callable(op):
        t_op = time_fn(lambda: op(x), dev, iters=iters)
        gbps = 3 * tokens * d * esize / t_op / 1e9
        res.throughput["silu_and_mul_GBps"] = gbps
        res.numbers["silu_and_mul_vs_eager"] = t_eager / t_op
        res.numbers["silu_and_mul_fraction_of_copy"] = gbps * 1e9 / copy
