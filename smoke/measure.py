"""Timing and error metrics shared by the checks.

Times are medians over repeated calls (CUDA events on a GPU). Errors and tolerances: smoke/tolerance.py.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from smoke import torch_names

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}


def poison(device: torch.device, numel: int, dtype: torch.dtype) -> None:
    """Fill a freed block with NaN so the allocator hands it to the next output: unwritten elements show."""
    block = torch.empty(numel, dtype=dtype, device=device)
    block.fill_(float("nan"))
    del block


def sync(device: torch.device) -> None:
    if device.type == torch_names.GPU:
        torch.cuda.synchronize(device)


def time_fn(fn: Callable[[], Any], device: torch.device, iters: int = 20, warmup: int = 3) -> float:
    """Median seconds per call of ``fn``.

    Each sample times a batch of calls long enough (about 2 ms) that launch jitter of short kernels (a 50 us
    decode GEMM) does not reach the number a baseline compares.
    """
    for _ in range(warmup):
        fn()
    single = _sample(fn, device, 1)
    inner = max(1, min(200, int(2e-3 / max(single, 1e-7))))
    return statistics.median(_sample(fn, device, inner) for _ in range(iters))


def _sample(fn: Callable[[], Any], device: torch.device, inner: int) -> float:
    if device.type == torch_names.GPU:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / inner  # milliseconds, unannotated in torch 2.13
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Device-to-device copy rate in bytes/s (read + write): the ceiling memory-bound kernels are held to."""
    src = torch.empty(nbytes // 2, dtype=torch.float16, device=device).normal_()
    dst = torch.empty_like(src)
    seconds = time_fn(lambda: dst.copy_(src), device, iters=10)
    return 2 * src.numel() * 2 / seconds
