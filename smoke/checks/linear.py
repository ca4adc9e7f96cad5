"""``F.linear`` and the image's ``skinny_linear`` at decode sizes (M = 1..8) and one prefill size.

Correctness is checked against a float64 matmul; speed is weight bytes read per second (decode is bound by
reading the weight once) and TFLOP/s at prefill.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from smoke import torch_names
from smoke.context import Context
from smoke.measure import DTYPES, time_fn
from smoke.ops import op_for_check
from smoke.result import CheckResult
from smoke.tolerance import check_close, describe

DECODE_M = list(range(1, 9))
CPU_NK = [(257, 512)]
GPU_NK = [(257, 512), (1027, 4096)]
PREFILL_M = {torch_names.CPU: 64, torch_names.GPU: 300}
GPU_PERF_NK = [(8192, 8192), (8192, 28672)]
GPU_PERF_M = [1, 4, 8]
# The decode kernel's contract (kernels/): half types only, as serving runs them.
SKINNY_DTYPES = (torch.float16, torch.bfloat16)


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    out = x.to(torch.float64) @ w.to(torch.float64).t()
    return out + b.to(torch.float64) if b is not None else out


def run(ctx: Context) -> CheckResult:
    res = CheckResult("linear")
    dev = ctx.device
    op = op_for_check(ctx, res, "skinny_linear")
    seed = secrets.randbelow(2**31)
    res.numbers["seed"] = seed
    gen = torch.Generator(device=torch_names.CPU).manual_seed(seed)
    impls: list[tuple[str, Callable[..., Any]]] = [("F.linear", lambda x, w, b: F.linear(x, w, b))]
    if op is not None:
        impls.append(("skinny_linear", op))
    sizes = GPU_NK if ctx.on_gpu else CPU_NK
    ms = [*DECODE_M, PREFILL_M[ctx.info.device]]
    for fname, fn in impls:
        per_dtype: dict[str, dict[str, float | bool]] = {}
        for dname, dtype in DTYPES.items():
            if fname == "skinny_linear" and dtype not in SKINNY_DTYPES:
                continue
            worst: dict[str, float | bool] = {"ok": True, "max_abs_err": 0.0, "err_ratio": 0.0}
            for n, k in sizes:
                w = (torch.randn(n, k, generator=gen) / k**0.5).to(dev, dtype)
                bias = (torch.randn(n, generator=gen) * 0.5).to(dev, dtype)
                for m in ms:
                    x = torch.randn(m, k, generator=gen).to(dev, dtype)
                    for b in (bias, None):
                        label = f"{fname} {dname} M={m} N={n} K={k} bias={b is not None}"
                        try:
                            out = fn(x, w, b)
                        except Exception as exc:  # noqa: BLE001 - a crash is this case's failure
                            res.fail(f"{label}: raised {type(exc).__name__}: {exc}")
                            worst["ok"] = False
                            continue
                        err = check_close(out, reference(x, w, b), dtype, depth=k)
                        if not err["ok"]:
                            res.fail(f"{label}: {describe(err)}")
                            worst["ok"] = False
                        for key in ("max_abs_err", "err_ratio"):
                            worst[key] = max(float(worst[key]), float(err.get(key, float("inf"))))
            per_dtype[dname] = worst
        res.numbers[fname] = per_dtype
    _throughput(ctx, res, op)
    return res.finish()


def _throughput(ctx: Context, res: CheckResult, op: Callable[..., Any] | None) -> None:
    dev = ctx.device
    if ctx.on_gpu:
        dtype, perf_nk, perf_m, prefill, iters = (
            torch.float16,
            GPU_PERF_NK,
            GPU_PERF_M,
            (4096, 8192, 8192),
            20,
        )
    else:
        dtype, perf_nk, perf_m, prefill, iters = torch.bfloat16, [(1024, 1024)], [1, 8], (256, 512, 512), 5
    copy = ctx.copy_bandwidth()
    res.numbers["copy_TBps"] = copy / 1e12
    floors: dict[str, float] = {}
    for n, k in perf_nk:
        w = torch.randn(n, k, device=dev, dtype=dtype) / k**0.5
        wbytes = w.numel() * w.element_size()
        for m in perf_m:
            x = torch.randn(m, k, device=dev, dtype=dtype)
            t = time_fn(functools.partial(F.linear, x, w), dev, iters=iters)
            key = f"M{m}_{n}x{k}"
            res.throughput[f"F.linear_{key}_TBps"] = wbytes / t / 1e12
            floors[f"F.linear_{key}"] = (wbytes / copy) / t
            if op is not None:
                t_op = time_fn(functools.partial(op, x, w, None), dev, iters=iters)
                res.throughput[f"skinny_linear_{key}_TBps"] = wbytes / t_op / 1e12
                floors[f"skinny_linear_{key}"] = (wbytes / copy) / t_op
                res.numbers.setdefault("skinny_vs_F.linear", {})[key] = t / t_op
    res.numbers["fraction_of_copy_floor"] = floors
    m, n, k = prefill
    x = torch.randn(m, k, device=dev, dtype=dtype)
    w = torch.randn(n, k, device=dev, dtype=dtype) / k**0.5
    t = time_fn(lambda: F.linear(x, w), dev, iters=iters)
    res.throughput[f"F.linear_prefill_M{m}_{n}x{k}_TFLOPs"] = 2 * m * n * k / t / 1e12
