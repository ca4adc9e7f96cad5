"""Time imagebuild's kernels against their references and ceilings, in one process, on one GPU.

Measures, with CUDA events and medians: the device copy bandwidth (the ceiling), silu_and_mul against torch
eager and torch.compile, skinny_linear against F.linear (cuBLAS) and the weight-read floor. Writes one JSON
document with every time, the ratios, the GPU, the torch version and the command that produced it.

Run: python3 bench/kernels.py --out bench/results/kernels_h200.json   (imagebuild_kernels importable, with _C)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

SILU_SHAPES = [(4096, 28672), (16384, 14336)]  # (tokens, d): x is [tokens, 2d]
LINEAR_SHAPES = [(8192, 28672), (10240, 8192), (32000, 8192), (57344, 8192), (8192, 8192)]  # (N, K)
LINEAR_MS = [1, 2, 4, 7, 8]
SILU_CFGS = range(1, 10)
LINEAR_CFGS = range(1, 9)
ROTATE_BYTES = 1 << 30  # weights rotated so that one pass over them is many times the L2


def time_events(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Median milliseconds of fn, each call between two CUDA events (for calls far above launch cost)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def time_graph(calls: list[Callable[[], object]], replays: int) -> float:
    """Median milliseconds per call of a CUDA graph replaying `calls` back to back (no launch gaps)."""
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:  # warm-up on the capture stream (cuBLAS workspaces, caches)
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / len(calls))
    return statistics.median(times)


def copy_bandwidth() -> dict[str, float]:
    """Device-to-device copy of 2 GiB: bytes read plus bytes written per second."""
    n = 1 << 30
    src = torch.randn(n // 2, device="cuda", dtype=torch.float32).view(torch.uint8)[:n]
    dst = torch.empty_like(src)
    ms = time_events(lambda: dst.copy_(src), reps=30)
    return {"bytes": 2 * n, "ms": ms, "gbps": 2 * n / ms / 1e6}


def silu_eager(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def bench_silu(copy_gbps: float, dtypes: list[torch.dtype]) -> list[dict[str, object]]:
    import imagebuild_kernels as k

    compiled = torch.compile(silu_eager)
    rows = []
    for tokens, d in SILU_SHAPES:
        for dtype in dtypes:
            x = torch.randn(tokens, 2 * d, device="cuda", dtype=dtype)
            out = torch.empty(tokens, d, device="cuda", dtype=dtype)
            nbytes = 3 * tokens * d * x.element_size()
            times = {
                "imagebuild": time_events(lambda x=x, out=out: k.silu_and_mul(x, out=out), reps=50),
                "torch_eager": time_events(lambda x=x: silu_eager(x), reps=30),
                "torch_compile": time_events(lambda x=x: compiled(x), reps=30),
            }
            variants = {
                str(cfg): time_events(
                    lambda c=cfg, x=x, out=out: torch.ops.imagebuild._silu_and_mul_cfg(out, x, c), reps=30
                )
                for cfg in SILU_CFGS
            }
            row: dict[str, object] = {
                "tokens": tokens,
                "d": d,
                "dtype": str(dtype).removeprefix("torch."),
                "bytes": nbytes,
                "ms": times,
                "fraction_of_copy": {n: nbytes / t / 1e6 / copy_gbps for n, t in times.items()},
                "variants_ms": variants,
                "variants_fraction_of_copy": {c: nbytes / t / 1e6 / copy_gbps for c, t in variants.items()},
            }
            rows.append(row)
            frac = row["fraction_of_copy"]
            print(
                f"silu {tokens}x{d} {row['dtype']}: ours {times['imagebuild']:.3f} ms ({frac['imagebuild']:.2f}), "
                f"eager {frac['torch_eager']:.2f}, compile {frac['torch_compile']:.2f}",
                flush=True,
            )
            del x, out
    return rows


def bench_linear(copy_gbps: float, dtypes: list[torch.dtype], variants: bool) -> list[dict[str, object]]:
    import imagebuild_kernels as k

    rows = []
    for n, kk in LINEAR_SHAPES:
        for dtype in dtypes:
            wbytes = n * kk * 2
            copies = max(2, -(-ROTATE_BYTES // wbytes))
            ws = [torch.randn(n, kk, device="cuda", dtype=dtype) * kk**-0.5 for _ in range(copies)]
            floor_ms = wbytes / copy_gbps / 1e6
            for m in LINEAR_MS:
                x = torch.randn(m, kk, device="cuda", dtype=dtype)
                times = {
                    "imagebuild": time_graph([lambda w=w, x=x: k.skinny_linear(x, w) for w in ws], replays=20),
                    "cublas": time_graph([lambda w=w, x=x: F.linear(x, w) for w in ws], replays=20),
                }
                var = {}
                if variants:
                    for cfg in LINEAR_CFGS:
                        fns = [
                            lambda w=w, c=cfg, x=x: torch.ops.imagebuild._skinny_linear_cfg(x, w, None, c) for w in ws
                        ]
                        var[str(cfg)] = time_graph(fns, replays=10)
                row = {
                    "N": n,
                    "K": kk,
                    "M": m,
                    "dtype": str(dtype).removeprefix("torch."),
                    "weight_bytes": wbytes,
                    "floor_ms": floor_ms,
                    "ms": times,
                    "floor_over_time": {name: floor_ms / t for name, t in times.items()},
                    "speedup_vs_cublas": times["cublas"] / times["imagebuild"],
                    "variants_ms": var,
                    "variants_floor_over_time": {c: floor_ms / t for c, t in var.items()},
                }
                rows.append(row)
                print(
                    f"linear N={n} K={kk} M={m} {row['dtype']}: ours {times['imagebuild'] * 1e3:.1f} us "
                    f"({floor_ms / times['imagebuild']:.2f} of floor), cublas {times['cublas'] * 1e3:.1f} us "
                    f"({floor_ms / times['cublas']:.2f}), best variant "
                    + (min(var, key=var.__getitem__) if var else "-"),
                    flush=True,
                )
            del ws
    return rows


def summarize(doc: dict[str, object]) -> dict[str, object]:
    """The targets of the issue, met or not, with the worst figures."""
    silu = doc["silu_and_mul"]
    lin = doc["skinny_linear"]
    worst_silu = min(r["fraction_of_copy"]["imagebuild"] for r in silu)  # type: ignore[index]
    worst_floor = min(r["floor_over_time"]["imagebuild"] for r in lin)  # type: ignore[index]
    worst_speedup = min(r["speedup_vs_cublas"] for r in lin)  # type: ignore[index]
    return {
        "silu_min_fraction_of_copy": worst_silu,
        "silu_target_0.90_met": worst_silu >= 0.90,
        "linear_min_floor_over_time": worst_floor,
        "linear_target_0.90_met": worst_floor >= 0.90,
        "linear_min_speedup_vs_cublas": worst_speedup,
        "linear_never_slower_than_cublas": worst_speedup >= 1.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON results file")
    parser.add_argument("--no-variants", action="store_true", help="skip the launch-configuration sweep")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: bench/kernels.py needs a GPU", file=sys.stderr)
        return 2
    import imagebuild_kernels as k

    if not k.HAS_DEVICE_KERNELS:
        print("error: imagebuild_kernels was installed without its GPU extension", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy['gbps']:.0f} GB/s", flush=True)
    halfs = [torch.float16, torch.bfloat16]
    doc: dict[str, object] = {
        "command": " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0]), *sys.argv[1:]]),
        "run_via": os.environ.get("IB_BENCH_VIA", ""),
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "timing": "CUDA events, median; skinny_linear in CUDA graphs over rotated weights (>1 GiB)",
        "copy_bandwidth": copy,
        "silu_and_mul": bench_silu(copy["gbps"], halfs),
        "skinny_linear": bench_linear(copy["gbps"], halfs, variants=not args.no_variants),
    }
    doc["summary"] = summarize(doc)
    print(json.dumps(doc["summary"], indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=f".{args.out.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
