"""Every SDPA backend the image promises for this arch, each forced alone, against a float64 reference.

Forcing one backend makes an unavailable one raise instead of silently falling back to math, which is
the failure users meet (flash attention quietly 12x slower). The flash-attention package is checked when
the image has it.
"""

from __future__ import annotations

import functools
import importlib
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from smoke import torch_names
from smoke.context import Context
from smoke.measure import time_fn
from smoke.result import CheckResult
from smoke.tolerance import check_close, describe

TRITON_FLAG = "ROCM_USE_FLASH_ATTN_V2_TRITON"
# What each case records of its error (smoke/tolerance.py).
KEPT = ("max_abs_err", "err_ratio", "norm_err", "norm_tol")
BACKEND_ENUM = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
# (B, H, Sq, Skv, D, causal); causal only with Sq == Skv, where every convention agrees.
CASES = [(2, 4, 129, 129, 64, False), (2, 4, 129, 129, 64, True), (3, 8, 1, 300, 128, False)]
GPU_PERF = [(1, 32, 4096, 4096, 128, True), (1, 32, 4096, 4096, 128, False), (32, 32, 1, 4096, 128, False)]
CPU_PERF = [(1, 4, 256, 256, 64, True)]


def dtypes_for(on_gpu: bool) -> list[torch.dtype]:
    """The dtypes every backend is checked in: serving's half types (and fp32 on CPU, where math runs it)."""
    return [torch.float16, torch.bfloat16] if on_gpu else [torch.float32, torch.float16, torch.bfloat16]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v in float64, from matmul, exp and sum."""
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    scores = q64 @ k64.transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        sq, skv = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(sq, skv, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ v64


@contextmanager
def only_backend(name: str) -> Iterator[None]:
    """Allow exactly one SDPA backend (``torch.nn.attention.sdpa_kernel``, or the older context manager)."""
    attn = importlib.import_module("torch.nn.attention")
    enum = getattr(attn.SDPBackend, BACKEND_ENUM[name], None)
    if enum is None:
        raise RuntimeError(f"this torch has no SDPBackend.{BACKEND_ENUM[name]}")
    with attn.sdpa_kernel([enum]):
        yield


def run(ctx: Context) -> CheckResult:
    res = CheckResult("attention")
    dev = ctx.device
    backends, source = ctx.manifest.attention_backends(ctx.info.arch, ctx.info.vendor)
    res.numbers["backends_expected"] = backends
    res.numbers["backends_source"] = source
    if not ctx.manifest.present:
        res.warnings.append(f"no manifest: forcing the default backends {', '.join(backends)}")
    dtypes = dtypes_for(ctx.on_gpu)
    seed = secrets.randbelow(2**31)
    res.numbers["seed"] = seed
    gen = torch.Generator(device=torch_names.CPU).manual_seed(seed)
    unavailable: set[str] = set()
    for backend in backends:
        if backend not in BACKEND_ENUM:
            res.fail(f"manifest names unknown attention backend {backend!r}")
            continue
        per: dict[str, Any] = {}
        for dtype in dtypes:
            for b, h, sq, skv, d, causal in CASES:
                q, k, v = (torch.randn(b, h, s, d, generator=gen).to(dev, dtype) for s in (sq, skv, skv))
                label = f"{backend} {str(dtype)[6:]} B{b} H{h} Sq{sq} Skv{skv} D{d} causal={causal}"
                try:
                    with only_backend(backend):
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                except RuntimeError as exc:
                    unavailable.add(backend)
                    res.fail(f"{label}: expected backend unavailable: {_first_line(exc)}")
                    continue
                # the elementwise bound scales by sum_j p_ij |v_j| (the terms rounded), not the mean they cancel to
                magnitude = reference(q, k, v.abs(), causal)
                err = check_close(out, reference(q, k, v, causal), dtype, depth=skv, magnitude=magnitude)
                per[label.split(" ", 1)[1]] = {k2: err[k2] for k2 in KEPT if k2 in err}
                if not err["ok"]:
                    res.fail(f"{label}: {describe(err)}")
        res.numbers[f"sdpa_{backend}"] = per
    _flash_attn_package(ctx, res, gen)
    _triton_path(ctx, res, gen)
    _throughput(ctx, res, [b for b in backends if b in BACKEND_ENUM and b not in unavailable])
    return res.finish()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _flash_attn_package(ctx: Context, res: CheckResult, gen: torch.Generator) -> None:
    """The flash-attention package ([B, S, H, D] layout), required when the manifest includes it."""
    components = ctx.manifest.components_like("flash-attention")
    try:
        flash_attn = importlib.import_module("flash_attn")
    except Exception as exc:  # noqa: BLE001 - any import failure is reported
        if components and ctx.on_gpu:
            res.fail(f"manifest includes {', '.join(components)} but import flash_attn failed: {_first_line(exc)}")
        else:
            res.numbers["flash_attn_package"] = {
                "tested": False,
                "reason": f"not installed ({_first_line(exc)})",
            }
        return
    if not ctx.on_gpu:
        res.numbers["flash_attn_package"] = {"tested": False, "reason": "needs a GPU"}
        return
    fn: Callable[..., torch.Tensor] = flash_attn.flash_attn_func
    per: dict[str, Any] = {"version": getattr(flash_attn, "__version__", None)}
    for b, h, sq, skv, d, causal in CASES:
        q, k, v = (torch.randn(b, s, h, d, generator=gen).to(ctx.device, torch.float16) for s in (sq, skv, skv))
        label = f"B{b} H{h} Sq{sq} Skv{skv} D{d} causal={causal}"
        try:
            out = fn(q, k, v, causal=causal)
        except Exception as exc:  # noqa: BLE001 - a crash is this case's failure
            res.fail(f"flash_attn.flash_attn_func {label}: {_first_line(exc)}")
            continue
        ref = reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal).transpose(1, 2)
        err = check_close(out, ref, torch.float16, depth=skv)
        per[label] = {k2: err[k2] for k2 in KEPT if k2 in err}
        if not err["ok"]:
            res.fail(f"flash_attn.flash_attn_func {label}: {describe(err)}")
    res.numbers["flash_attn_package"] = per


# Where serving runtimes keep their Triton flash-attention (varlen: q [total, H, D], cu_seqlens).
TRITON_ATTENTION_MODULES = (
    "text_generation_server.utils.flash_attn_triton",
    "text_generation_server.layers.attention.flash_attn_triton",
)


def _triton_path(ctx: Context, res: CheckResult, gen: torch.Generator) -> None:
    """The runtime's Triton flash-attention path (``ROCM_USE_FLASH_ATTN_V2_TRITON``): Triton imports, and the
    runtime's ``triton_attention`` matches the reference when the image has it."""
    flag = os.environ.get(TRITON_FLAG, "")
    wanted = flag.lower() in ("1", "true")
    info: dict[str, Any] = {TRITON_FLAG: flag or None}
    try:
        triton = importlib.import_module("triton")
        info["version"] = getattr(triton, "__version__", None)
    except Exception as exc:  # noqa: BLE001 - any import failure is reported
        info["version"] = None
        if wanted and ctx.on_gpu:
            res.fail(f"{TRITON_FLAG}={flag} but import triton failed: {_first_line(exc)}")
    res.numbers["triton"] = info
    module, errors = None, []
    for name in TRITON_ATTENTION_MODULES:
        try:
            module = importlib.import_module(name)
            info["runtime_module"] = name
            break
        except Exception as exc:  # noqa: BLE001 - absent or broken: recorded below
            errors.append(f"{name}: {_first_line(exc)}")
    if module is None or not hasattr(module, "triton_attention"):
        info["runtime_path"] = {"tested": False, "reason": "the image has no runtime Triton attention module"}
        if wanted and ctx.manifest.runtime and ctx.on_gpu:
            res.fail(f"{TRITON_FLAG}={flag} but the runtime's Triton attention does not import: {'; '.join(errors)}")
        return
    if not ctx.on_gpu:
        info["runtime_path"] = {"tested": False, "reason": "needs a GPU"}
        return
    per: dict[str, Any] = {}
    for b, h, sq, skv, d, causal in CASES:
        if sq != skv:
            continue  # varlen with equal lengths per sequence keeps one convention for causal
        q, k, v = (torch.randn(b * sq, h, d, generator=gen).to(ctx.device, torch.float16) for _ in range(3))
        cu = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=ctx.device)
        label = f"B{b} H{h} S{sq} D{d} causal={causal}"
        try:
            out = torch.empty_like(q).fill_(float("nan"))
            module.triton_attention(q, k, v, out, cu, cu, sq, sq, causal, d**-0.5)
        except Exception as exc:  # noqa: BLE001 - a crash is this case's failure
            res.fail(f"runtime triton_attention {label}: {_first_line(exc)}")
            continue
        q4, k4, v4, out4 = (t.view(b, sq, h, d).transpose(1, 2) for t in (q, k, v, out))
        err = check_close(out4, reference(q4, k4, v4, causal), torch.float16, depth=sq)
        per[label] = {k2: err[k2] for k2 in KEPT if k2 in err}
        if not err["ok"]:
            res.fail(f"runtime triton_attention {label}: {describe(err)}")
    info["runtime_path"] = per


def _throughput(ctx: Context, res: CheckResult, backends: list[str]) -> None:
    """TFLOP/s per backend, counting 4*B*H*Sq*Skv*D, halved when causal."""
    dev = ctx.device
    dtype = torch.float16 if ctx.on_gpu else torch.float32
    shapes = GPU_PERF if ctx.on_gpu else CPU_PERF
    for backend in backends:
        for b, h, sq, skv, d, causal in shapes:
            q = torch.randn(b, h, sq, d, device=dev, dtype=dtype)
            k = torch.randn(b, h, skv, d, device=dev, dtype=dtype)
            v = torch.randn(b, h, skv, d, device=dev, dtype=dtype)
            flops = 4 * b * h * sq * skv * d / (2 if causal else 1)
            iters = 3 if backend == "math" else (10 if ctx.on_gpu else 3)
            try:
                with only_backend(backend):
                    t = time_fn(
                        functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
                        dev,
                        iters=iters,
                        warmup=1,
                    )
            except RuntimeError as exc:
                res.fail(f"{backend} B{b} H{h} Sq{sq} Skv{skv} D{d} causal={causal}: {_first_line(exc)}")
                continue
            kind = "decode" if sq == 1 else ("causal" if causal else "full")
            res.throughput[f"sdpa_{backend}_{kind}_B{b}H{h}S{skv}D{d}_TFLOPs"] = flops / t / 1e12
