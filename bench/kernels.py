"""Time imagebuild's kernels against their references and ceilings, in one process, on one GPU.

Bench (default): the device copy bandwidth (the ceiling); silu_and_mul against torch eager and torch.compile,
per launch and under CUDA-graph replay; skinny_linear on every decode shape of bench/shapes.yaml and M there,
against F.linear (cuBLAS), torch.compile(F.linear) and the weight-read floor, per launch and under graph replay
over weights rotated past L2. Writes one JSON document with every time, the ratios, the targets of issue 14, the
GPU, the torch version and the command.

Sweep (--sweep TABLE): times every launch configuration of skinny_linear on the same shapes, checks each against
a float32 reference, and writes the dispatch table that imagebuild_kernels installs (skinny_table.json): per
(dtype, N, K, M) the fastest configuration, or F.linear where ours does not beat it by --margin.

Unseen (--unseen OUT): skinny_linear's default dispatch against F.linear on the decode shapes of the model families
the table was not built on (bench/shapes.yaml `unseen_models`, never swept), four alternating rounds under graph
replay over rotated weights; per row ours / F.linear and what the table chose; reported apart from the bench.

Plan (--plan OUT, no GPU: the CPU mode of bench/gpu_kernels.sh): every row of both shape lists with the choice
the installed table's rule makes for it on the GPU the table was measured on.

Run on the GPU machine through bench/gpu_kernels.sh (which builds the extension first):
    python3 bench/kernels.py --sweep kernels/imagebuild_kernels/skinny_table.json
    python3 bench/kernels.py --out bench/results/kernels_h200.json
    python3 bench/kernels.py --unseen bench/results/kernels_unseen_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml

SHAPES_FILE = Path(__file__).resolve().with_name("shapes.yaml")
SILU_SHAPES = [(1024, 28672), (2048, 18944), (8192, 14336), (4096, 28672), (16384, 14336)]  # (tokens, d)
ROTATE_BYTES = 1 << 30  # weights rotated so that one pass over them is many times the 60 MB L2
SPLIT_VARIANTS = (3, 12, 14, 15, 16, 20, 21)  # variants also swept with a K split over a cluster of 2, 4 or 8 blocks
SILU_VARIANTS = (9, 10, 11, 12, 13)  # launch variants also timed under graph replay (9: the old flat default)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
START = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - START:6.1f}s] {msg}", flush=True)


def parse_only(text: str | None) -> list[tuple[int, int]] | None:
    """'4096x14336,8192x8192' -> [(4096, 14336), (8192, 8192)]; None keeps every shape."""
    if not text:
        return None
    return [(int(a), int(b)) for a, b in (item.lower().split("x") for item in text.split(","))]


def past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() - START > deadline


def load_shapes(
    path: Path = SHAPES_FILE, only: list[tuple[int, int]] | None = None, key: str = "models"
) -> tuple[list[int], list[dict[str, Any]]]:
    """(M values, distinct shapes with bias flag and the model layers they come from), smallest weight first.
    key: "models" (the families the table is swept on) or "unseen_models" (kept out of the sweep)."""
    doc = yaml.safe_load(path.read_text())
    shapes: dict[tuple[int, int], dict[str, Any]] = {}
    for model in doc.get(key) or []:
        for layer, (n, k) in model["shapes"].items():
            s = shapes.setdefault((n, k), {"N": n, "K": k, "bias": False, "sources": [], "families": []})
            s["sources"].append(f"{model['name']}.{layer}")
            if model["family"] not in s["families"]:
                s["families"].append(model["family"])
            biased = (layer == "qkv" and bool(model.get("qkv_bias"))) or (
                layer != "lm_head" and bool(model.get("all_bias"))
            )
            s["bias"] = s["bias"] or biased
    if only is None:
        return list(doc["ms"]), sorted(shapes.values(), key=lambda s: (s["N"] * s["K"], s["N"]))
    if set(only) - set(shapes):
        raise SystemExit(f"error: --only names shapes not in {path}: {sorted(set(only) - set(shapes))}")
    return list(doc["ms"]), [shapes[key] for key in only]  # in the order given: the most wanted first


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


def time_launches(calls: list[Callable[[], object]], reps: int = 30) -> float:
    """Median milliseconds of one eager launch (between two events), cycling through `calls` (rotated weights)."""
    for fn in calls[:3]:
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        s.record()
        calls[i % len(calls)]()
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
    del graph
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


def warm_up(seconds: float = 1.0) -> None:
    """Keep the GPU busy for a while before the first timed row: the first rows of a process timed low (0.78-0.87
    of copy for a kernel that gave 0.95 a second later), as clocks and the memory system settle."""
    n = 1 << 28
    src = torch.empty(n, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(50):
            dst.copy_(src)
        torch.cuda.synchronize()


def bench_silu(copy_gbps: float) -> list[dict[str, object]]:
    import imagebuild_kernels as k

    compiled = torch.compile(silu_eager)
    rows = []
    warm_up()
    for tokens, d in SILU_SHAPES:
        for dtype in DTYPES.values():
            x = torch.randn(tokens, 2 * d, device="cuda", dtype=dtype)
            out = torch.empty(tokens, d, device="cuda", dtype=dtype)
            nbytes = 3 * tokens * d * x.element_size()
            fns: dict[str, Callable[[], object]] = {
                "imagebuild": lambda x=x, out=out: k.silu_and_mul(x, out=out),
                "torch_eager": lambda x=x: silu_eager(x),
                "torch_compile": lambda x=x: compiled(x),
            }
            per_launch = {n: time_events(f, reps=30) for n, f in fns.items()}
            op = torch.ops.imagebuild._silu_and_mul_cfg
            for c in SILU_VARIANTS:
                fns[f"cfg {c}"] = lambda x=x, out=out, c=c, op=op: op(out, x, c)
            rounds: dict[str, list[float]] = {n: [] for n in fns}
            for _ in range(2):  # interleaved rounds, best of two, as for skinny_linear
                for n, f in fns.items():
                    rounds[n].append(time_graph([f] * 8, replays=10))
            graph = {n: min(rounds[n]) for n in ("imagebuild", "torch_eager", "torch_compile")}
            variants = {n.removeprefix("cfg "): min(rounds[n]) for n in fns if n.startswith("cfg ")}
            row: dict[str, object] = {
                "tokens": tokens,
                "d": d,
                "dtype": str(dtype).removeprefix("torch."),
                "bytes": nbytes,
                "ms": per_launch,
                "graph_ms": graph,
                "fraction_of_copy": {n: nbytes / t / 1e6 / copy_gbps for n, t in per_launch.items()},
                "graph_fraction_of_copy": {n: nbytes / t / 1e6 / copy_gbps for n, t in graph.items()},
                "variants_graph_fraction_of_copy": {c: nbytes / t / 1e6 / copy_gbps for c, t in variants.items()},
            }
            rows.append(row)
            gf = row["graph_fraction_of_copy"]
            log(
                f"silu {tokens}x{d} {row['dtype']}: graph ours {graph['imagebuild'] * 1e3:.0f} us "
                f"({gf['imagebuild']:.2f} of copy), eager {gf['torch_eager']:.2f}, compile {gf['torch_compile']:.2f}; "
                + ", ".join(f"cfg {c} {v:.2f}" for c, v in row["variants_graph_fraction_of_copy"].items())
            )
            del x, out
    return rows


def rotated(n: int, kk: int, dtype: torch.dtype) -> list[torch.Tensor]:
    copies = max(2, -(-ROTATE_BYTES // (n * kk * 2)))
    return [torch.randn(n, kk, device="cuda", dtype=dtype) * kk**-0.5 for _ in range(copies)]


def candidates(n: int, sms: int) -> list[int]:
    """Every mma variant unsplit, and the split variants where the grid does not already fill the GPU."""
    from imagebuild_kernels import _table

    out = [v for v, spec in _table.VARIANTS.items() if spec is not None]
    for v in SPLIT_VARIANTS:
        spec = _table.VARIANTS[v]
        assert spec is not None
        blocks = -(-n // (16 * spec[1]))
        out += [100 * s + v for s in (2, 4, 8) if blocks * s <= 8 * sms]
    return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def sweep(args: argparse.Namespace, copy_gbps: float, sms: int) -> dict[str, Any]:
    """Times each configuration per shape; the fastest per M half (stage A at M 1, 8, 16), then per M the best
    three of its half against cuBLAS, twice, interleaved (stage B); writes the table."""
    ms, shapes = load_shapes(args.shapes, parse_only(args.only))
    entries: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    for shape in shapes:
        n, kk = shape["N"], shape["K"]
        if past(args.deadline):
            log(f"sweep: deadline passed, {n}x{kk} and later shapes not swept")
            break
        for dname, dtype in DTYPES.items():
            ws = rotated(n, kk, dtype)
            b = torch.randn(n, device="cuda", dtype=dtype) if shape["bias"] else None
            floor_ms = n * kk * 2 / copy_gbps / 1e6
            cands = candidates(n, sms)
            stage_a: dict[int, dict[int, float]] = {}
            bad: dict[int, list[int]] = {}
            for m in (1, 8, 16):
                x = torch.randn(m, kk, device="cuda", dtype=dtype)
                ref = F.linear(x.float(), ws[0].float(), None if b is None else b.float())
                tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
                times: dict[int, float] = {}
                for cfg in cands:
                    out = torch.ops.imagebuild._skinny_linear_cfg(x, ws[0], b, cfg)
                    if rel_err(out, ref) > tol:
                        bad.setdefault(m, []).append(cfg)
                        continue
                    op = torch.ops.imagebuild._skinny_linear_cfg
                    calls = [lambda w=w, c=cfg, x=x, b=b, op=op: op(x, w, b, c) for w in ws]
                    times[cfg] = time_graph(calls, replays=8)
                stage_a[m] = times
            low = sorted(stage_a[1], key=stage_a[1].get)[:2] + sorted(stage_a[8], key=stage_a[8].get)[:2]
            top = {False: sorted(set(low)), True: sorted(stage_a[16], key=stage_a[16].get)[:3]}
            for m in ms:
                x = torch.randn(m, kk, device="cuda", dtype=dtype)
                fns: dict[int, list[Callable[[], object]]] = {
                    -1: [lambda w=w, x=x, b=b: F.linear(x, w, b) for w in ws],
                    **{
                        c: [lambda w=w, c=c, x=x, b=b: torch.ops.imagebuild._skinny_linear_cfg(x, w, b, c) for w in ws]
                        for c in top[m > 8]
                    },
                }
                t: dict[int, list[float]] = {c: [] for c in fns}
                for _ in range(2):
                    for c, calls in fns.items():
                        t[c].append(time_graph(calls, replays=8))
                best_t = {c: min(v) for c, v in t.items()}
                ours = min((c for c in best_t if c != -1), key=best_t.__getitem__)
                speedup = best_t[-1] / best_t[ours]
                entry = {
                    "dtype": dname,
                    "N": n,
                    "K": kk,
                    "M": m,
                    "cfg": ours if speedup >= args.margin else -1,
                    "best_cfg": ours,
                    "ours_us": best_t[ours] * 1e3,
                    "cublas_us": best_t[-1] * 1e3,
                    "floor_us": floor_ms * 1e3,
                    "speedup": speedup,
                }
                entries.append(entry)
                log(
                    f"sweep {dname} N={n} K={kk} M={m}: best cfg {ours} {entry['ours_us']:.1f} us "
                    f"({floor_ms / best_t[ours]:.2f} of floor), cuBLAS {entry['cublas_us']:.1f} us "
                    f"({floor_ms / best_t[-1]:.2f}) -> {'ours' if entry['cfg'] != -1 else 'F.linear'} x{speedup:.2f}"
                )
            raw.append(
                {
                    "dtype": dname,
                    "N": n,
                    "K": kk,
                    "floor_us": floor_ms * 1e3,
                    "stage_a_us": {str(m): {str(c): v * 1e3 for c, v in d.items()} for m, d in stage_a.items()},
                    "rejected_cfgs": {str(m): v for m, v in bad.items()},
                }
            )
            del ws
            torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    return {
        "schema": 1,
        "gpu": props.name,
        "cc": 10 * props.major + props.minor,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "command": command_line(),
        "run_via": os.environ.get("IB_BENCH_VIA", ""),
        "margin": args.margin,
        "timing": "CUDA-graph replay over weights rotated past L2 (>= 1 GiB), median of 8 replays, best of 2 rounds",
        "rule": (
            "per (dtype, N, K, M): the fastest configuration of stage B; cfg -1 (F.linear) unless it beat cuBLAS "
            f"by {args.margin}x. Unmeasured shapes: nearest measured (N, K) within 2**0.5, nearest M of the same half"
        ),
        "entries": entries,
        "_raw": raw,
    }


def bench_linear(args: argparse.Namespace, copy_gbps: float) -> list[dict[str, object]]:
    import imagebuild_kernels as k

    ms, shapes = load_shapes(args.shapes, parse_only(args.only))
    compiled = torch.compile(F.linear, dynamic=True)
    rows = []
    for shape in shapes[: args.limit]:
        n, kk = shape["N"], shape["K"]
        if past(args.deadline):
            log(f"bench: deadline passed, {n}x{kk} and later shapes not timed")
            break
        for dname, dtype in DTYPES.items():
            ws = rotated(n, kk, dtype)
            b = torch.randn(n, device="cuda", dtype=dtype) if shape["bias"] else None
            wbytes = n * kk * 2
            floor_ms = wbytes / copy_gbps / 1e6
            for m in ms:
                x = torch.randn(m, kk, device="cuda", dtype=dtype)
                fns: dict[str, list[Callable[[], object]]] = {
                    "imagebuild": [lambda w=w, x=x, b=b: k.skinny_linear(x, w, b) for w in ws],
                    "cublas": [lambda w=w, x=x, b=b: F.linear(x, w, b) for w in ws],
                    "torch_compile": [lambda w=w, x=x, b=b: compiled(x, w, b) for w in ws],
                }
                t: dict[str, list[float]] = {name: [] for name in fns}
                for _ in range(2):  # interleaved rounds, best of two: drift hits every column alike
                    for name, calls in fns.items():
                        t[name].append(time_graph(calls, replays=10))
                times = {name: min(v) for name, v in t.items()}
                launch = {name: time_launches(fns[name]) for name in ("imagebuild", "cublas")}
                cfg = int(torch.ops.imagebuild._skinny_choice(x, ws[0]))
                row = {
                    "N": n,
                    "K": kk,
                    "M": m,
                    "dtype": dname,
                    "bias": b is not None,
                    "sources": shape["sources"],
                    "weight_bytes": wbytes,
                    "floor_ms": floor_ms,
                    "cfg": cfg,
                    "ms": times,
                    "floor_over_time": {name: floor_ms / v for name, v in times.items()},
                    "speedup_vs_cublas": times["cublas"] / times["imagebuild"],
                    "speedup_vs_compile": times["torch_compile"] / times["imagebuild"],
                    "per_launch_ms": launch,
                    "per_launch_speedup_vs_cublas": launch["cublas"] / launch["imagebuild"],
                }
                rows.append(row)
                log(
                    f"linear {dname} N={n} K={kk} M={m} cfg {cfg}: ours {times['imagebuild'] * 1e3:.1f} us "
                    f"({floor_ms / times['imagebuild']:.2f} of floor), cuBLAS {times['cublas'] * 1e3:.1f} us "
                    f"({floor_ms / times['cublas']:.2f}), compile {floor_ms / times['torch_compile']:.2f}; "
                    f"x{row['speedup_vs_cublas']:.2f} graph, x{row['per_launch_speedup_vs_cublas']:.2f} per launch"
                )
            del ws
            torch.cuda.empty_cache()
    return rows


def bench_unseen(args: argparse.Namespace, copy_gbps: float) -> dict[str, Any]:
    """skinny_linear (default dispatch) against F.linear on the unseen families' shapes: four alternating rounds
    of graph replay over rotated weights, the best round of each; ratio = F.linear time / ours (>= 1: ours no
    slower)."""
    import imagebuild_kernels as k
    from imagebuild_kernels import _table

    table = _table.load_table()
    measured = {(e["N"], e["K"]) for e in (table or {}).get("entries", [])}
    ms, shapes = load_shapes(args.shapes, parse_only(args.only), key="unseen_models")
    rows: list[dict[str, Any]] = []
    warm_up()
    for shape in shapes:
        n, kk = shape["N"], shape["K"]
        if past(args.deadline):
            log(f"unseen: deadline passed, {n}x{kk} and later shapes not timed")
            break
        for dname, dtype in DTYPES.items():
            ws = rotated(n, kk, dtype)
            b = torch.randn(n, device="cuda", dtype=dtype) if shape["bias"] else None
            for m in ms:
                x = torch.randn(m, kk, device="cuda", dtype=dtype)
                fns: dict[str, list[Callable[[], object]]] = {
                    "imagebuild": [lambda w=w, x=x, b=b: k.skinny_linear(x, w, b) for w in ws],
                    "F.linear": [lambda w=w, x=x, b=b: F.linear(x, w, b) for w in ws],
                }
                t: dict[str, list[float]] = {name: [] for name in fns}
                for _ in range(4):
                    for name, calls in fns.items():
                        t[name].append(time_graph(calls, replays=10))
                best = {name: min(v) for name, v in t.items()}
                cfg = int(torch.ops.imagebuild._skinny_choice(x, ws[0]))
                ratio = best["F.linear"] / best["imagebuild"]
                row = {
                    "N": n,
                    "K": kk,
                    "M": m,
                    "dtype": dname,
                    "bias": b is not None,
                    "families": shape["families"],
                    "sources": shape["sources"],
                    "measured_shape": (n, kk) in measured,
                    "cfg": cfg,
                    "chosen": "F.linear" if cfg == -1 else f"imagebuild cfg {cfg}",
                    "ms": best,
                    "rounds_ms": t,
                    "ours_over_F.linear_speed": ratio,
                    "floor_over_time": {name: n * kk * 2 / copy_gbps / 1e6 / v for name, v in best.items()},
                }
                rows.append(row)
                log(
                    f"unseen {dname} N={n} K={kk} M={m} ({'measured' if row['measured_shape'] else 'unmeasured'}): "
                    f"{row['chosen']}, ours {best['imagebuild'] * 1e3:.1f} us, F.linear {best['F.linear'] * 1e3:.1f} us"
                    f" -> {ratio:.3f}x"
                )
            del ws
            torch.cuda.empty_cache()
    un = [r for r in rows if not r["measured_shape"]]
    ratios = [r["ours_over_F.linear_speed"] for r in un]
    summary = {
        "rows": len(rows),
        "rows_unmeasured_shape": len(un),
        "rows_unmeasured_ours_chosen": sum(r["cfg"] != -1 for r in un),
        "unmeasured_min_ratio": min(ratios, default=float("nan")),
        "unmeasured_median_ratio": statistics.median(ratios) if ratios else float("nan"),
        "unmeasured_rows_below_0.98": sum(x < 0.98 for x in ratios),
        "target_never_more_than_2pct_slower_met": bool(ratios) and min(ratios) >= 0.98,
        "measured_shape_rows": len(rows) - len(un),
        "measured_min_ratio": min((r["ours_over_F.linear_speed"] for r in rows if r["measured_shape"]), default=None),
        "families": sorted({f for r in rows for f in r["families"]}),
    }
    return {"summary": summary, "rows": rows}


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """No GPU: every row of both shape lists with the choice of the installed table's rule (on its GPU)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
    from imagebuild_kernels import _table

    table = _table.load_table()
    measured = {(e["N"], e["K"]) for e in (table or {}).get("entries", [])}
    out: dict[str, Any] = {"command": command_line(), "table": None if table is None else table.get("command")}
    doc = yaml.safe_load(args.shapes.read_text())
    for key, name in (("models", "seen"), ("unseen_models", "unseen")):
        ms, shapes = load_shapes(args.shapes, parse_only(args.only) if key == "models" else None, key=key)
        rows = []
        for shape in shapes:
            for dname in DTYPES:
                for m in ms:
                    ch = _table.choose(table, dname, shape["N"], shape["K"], m)
                    rows.append(
                        {
                            "N": shape["N"],
                            "K": shape["K"],
                            "M": m,
                            "dtype": dname,
                            "bias": shape["bias"],
                            "families": shape["families"],
                            "measured": (shape["N"], shape["K"]) in measured,
                            "cfg": ch.cfg,
                            "reason": ch.reason,
                        }
                    )
        out[name] = {"models": [mm["name"] for mm in doc.get(key) or []], "rows": rows}
        log(f"plan {name}: {len(rows)} rows, ours chosen on {sum(r['cfg'] != -1 for r in rows)}")
    return out


def summarize(doc: dict[str, Any]) -> dict[str, object]:
    """The targets of issue 14, met or not, with the worst figures."""
    silu = doc["silu_and_mul"]
    lin = doc["skinny_linear"]
    worst_silu = min(r["graph_fraction_of_copy"]["imagebuild"] for r in silu)
    big = [r for r in lin if r["weight_bytes"] >= 64e6]
    worst_big = min((r["floor_over_time"]["imagebuild"] for r in big), default=float("nan"))
    ours = [r for r in lin if r["cfg"] != -1]
    lib = [r for r in lin if r["cfg"] == -1]
    ratios = [r["speedup_vs_cublas"] for r in lin]
    ours_ratios = [r["speedup_vs_cublas"] for r in ours]
    return {
        "silu_min_graph_fraction_of_copy": worst_silu,
        "silu_target_0.90_met": worst_silu >= 0.90,
        "linear_rows": len(lin),
        "linear_rows_weight_ge_64MB": len(big),
        "linear_min_floor_over_time_weight_ge_64MB": worst_big,
        "linear_floor_target_0.90_met": worst_big >= 0.90,
        "linear_rows_below_0.90_floor_weight_ge_64MB": sum(r["floor_over_time"]["imagebuild"] < 0.90 for r in big),
        "linear_min_speedup_vs_cublas": min(ratios),
        "linear_median_speedup_vs_cublas": statistics.median(ratios),
        "linear_rows_slower_than_cublas": sum(x < 1.0 for x in ratios),
        "linear_rows_ours_chosen": len(ours),
        "linear_median_speedup_ours_chosen": statistics.median(ours_ratios) if ours_ratios else float("nan"),
        "linear_min_speedup_ours_chosen": min(ours_ratios, default=float("nan")),
        "linear_min_speedup_library_chosen": min((r["speedup_vs_cublas"] for r in lib), default=float("nan")),
        "linear_median_target_1.1_met": bool(ours_ratios) and statistics.median(ours_ratios) >= 1.1,
    }


def merge_table(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The base table with every (dtype, N, K) that `new` measured replaced by the new entries; each entry keeps
    the command (and copy bandwidth) of the run that measured it."""
    for key in ("cc", "sm_count", "margin"):
        if base.get(key) != new.get(key):
            raise SystemExit(f"error: --merge: the base table has {key} {base.get(key)}, this run {new.get(key)}")
    swept = {(e["dtype"], e["N"], e["K"]) for e in new["entries"]}
    for e in new["entries"]:
        e["run"] = new["command"]
    kept = [dict(e) for e in base["entries"] if (e["dtype"], e["N"], e["K"]) not in swept]
    for e in kept:
        e.setdefault("run", base["command"])
    out = dict(new)
    out["entries"] = sorted(kept + new["entries"], key=lambda e: (e["N"] * e["K"], e["N"], e["dtype"], e["M"]))
    out["runs"] = [
        *base.get("runs", [{"command": base["command"], "copy_bandwidth": base.get("copy_bandwidth")}]),
        {"command": new["command"], "copy_bandwidth": new.get("copy_bandwidth")},
    ]
    return out


def merge_bench(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The base bench document with the rows this run timed replaced (silu rows when it timed silu, linear rows
    per (dtype, N, K)); every row names its run; the summary is recomputed over the merged rows."""
    run = {k: new[k] for k in ("command", "run_via", "copy_bandwidth", "torch", "cuda", "table")}
    old_run = {k: base.get(k) for k in run}
    for row in new["skinny_linear"] + new["silu_and_mul"]:
        row["run"] = len(base.get("runs", [old_run]))
    timed = {(r["dtype"], r["N"], r["K"]) for r in new["skinny_linear"]}
    lin = [r for r in base["skinny_linear"] if (r["dtype"], r["N"], r["K"]) not in timed]
    for r in lin + base["silu_and_mul"]:
        r.setdefault("run", 0)
    out = dict(new)
    out["runs"] = [*base.get("runs", [old_run]), run]
    out["silu_and_mul"] = new["silu_and_mul"] or base["silu_and_mul"]
    out["skinny_linear"] = sorted(
        lin + new["skinny_linear"], key=lambda r: (r["weight_bytes"], r["N"], r["dtype"], r["M"])
    )
    return out


def command_line() -> str:
    return " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0]), *sys.argv[1:]])


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="bench: JSON results file")
    parser.add_argument("--sweep", type=Path, help="sweep: write the dispatch table here (and TABLE.raw.json)")
    parser.add_argument("--shapes", type=Path, default=SHAPES_FILE, help="shapes file (default bench/shapes.yaml)")
    parser.add_argument("--margin", type=float, default=1.05, help="sweep: ours must beat cuBLAS by this factor")
    parser.add_argument("--limit", type=int, help="bench: only the first N shapes (smallest weights)")
    parser.add_argument("--only", help="only these shapes, NxK[,NxK...] (both modes)")
    parser.add_argument("--merge", type=Path, help="keep the other shapes' entries/rows of this table/bench file")
    parser.add_argument("--deadline", type=float, help="seconds: start no new shape after this (both modes)")
    parser.add_argument("--skip-silu", action="store_true", help="bench: skip silu_and_mul")
    parser.add_argument("--unseen", type=Path, help="unseen families: ours vs F.linear, written here")
    parser.add_argument("--plan", type=Path, help="no GPU: each row's dispatch choice, written here")
    args = parser.parse_args()
    if sum(x is not None for x in (args.out, args.sweep, args.unseen, args.plan)) != 1:
        parser.error("give exactly one of --out (bench), --sweep (table), --unseen and --plan")
    if args.plan is not None:
        write_json(args.plan, plan(args))
        return 0
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
    log(f"copy bandwidth {copy['gbps']:.0f} GB/s")
    if args.sweep is not None:
        table = sweep(args, copy["gbps"], props.multi_processor_count)
        raw = table.pop("_raw")
        table["copy_bandwidth"] = copy
        if args.merge is not None:
            table = merge_table(json.loads(args.merge.read_text()), table)
        write_json(args.sweep, table)
        write_json(args.sweep.with_suffix(".raw.json"), {"command": table["command"], "shapes": raw})
        return 0
    if args.unseen is not None:
        installed = k.use_skinny_table()
        result = bench_unseen(args, copy["gbps"])
        doc_u = {
            "command": command_line(),
            "run_via": os.environ.get("IB_BENCH_VIA", ""),
            "gpu": props.name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "copy_bandwidth": copy,
            "table": None if installed is None else {"command": installed.get("command")},
            "rule": "kernels/imagebuild_kernels/_table.py choose: measured (dtype, N, K) only, no extrapolation",
            "timing": "CUDA-graph replay over weights rotated past L2 (>= 1 GiB), median of 10 replays, best of 4 "
            "alternating rounds (ours, F.linear, ours, ...)",
            **result,
        }
        print(json.dumps(result["summary"], indent=1), flush=True)
        write_json(args.unseen, doc_u)
        return 0
    table = k.use_skinny_table()
    doc: dict[str, Any] = {
        "command": command_line(),
        "run_via": os.environ.get("IB_BENCH_VIA", ""),
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "table": None if table is None else {"command": table.get("command"), "margin": table.get("margin")},
        "timing": (
            "CUDA events, median. Graph: CUDA-graph replay of back-to-back calls (skinny_linear over weights "
            "rotated past L2, >= 1 GiB; silu_and_mul 8 calls on the same buffers, after 1 s of warm-up copies), "
            "median of 10 replays, best of 2 interleaved rounds; per launch: one eager call between two events, "
            "rotating weights, median of 30"
        ),
        "copy_bandwidth": copy,
        "silu_and_mul": [] if args.skip_silu else bench_silu(copy["gbps"]),
        "skinny_linear": bench_linear(args, copy["gbps"]),
    }
    if args.merge is not None:
        doc = merge_bench(json.loads(args.merge.read_text()), doc)
    if doc["silu_and_mul"] and doc["skinny_linear"]:
        doc["summary"] = summarize(doc)
        print(json.dumps(doc["summary"], indent=1), flush=True)
    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
