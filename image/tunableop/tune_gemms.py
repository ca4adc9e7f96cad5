#!/usr/bin/env python3
"""Tune the listed linear-layer GEMMs with TunableOp inside an image, on its GPU (image side: stdlib + torch).

`imagebuild tunableop tune` runs this in the image so the results carry that image's validators (torch,
HIP/ROCm, hipBLASLt, rocBLAS versions and the device's arch): tuning anywhere else gives a file torch rejects.
Input: the shapes JSON `imagebuild` writes ({"gemms": [{"tokens", "in_features", "out_features", "dtype"}]}).
Output: the results file torch writes, and a JSON report with the validators torch registered and the time
of every GEMM with TunableOp on and off (measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def _contract_on_path() -> None:
    """Scripts run as files (in the repo, or mounted with the contract beside them): put imagecontract/ on the path."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "imagecontract" / "__init__.py").is_file():
            sys.path.insert(0, str(folder))
            return


_contract_on_path()
from imagecontract.gpu import gpu_arch  # noqa: E402
from imagecontract.tunableop_csv import resolve_filename  # noqa: E402

TUNABLEOP_ENV = (
    "PYTORCH_TUNABLEOP_ENABLED",
    "PYTORCH_TUNABLEOP_TUNING",
    "PYTORCH_TUNABLEOP_FILENAME",
    "PYTORCH_TUNABLEOP_RECORD_UNTUNED",
)


def _time_ms(fn, iters: int, warmup: int = 5) -> float:  # type: ignore[no-untyped-def]
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True, type=Path, help="shapes JSON written by imagebuild")
    ap.add_argument("--out", required=True, help="results filename; %%d becomes the device ordinal")
    ap.add_argument("--report", type=Path, help="write a JSON report here")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--max-tuning-duration-ms", type=int, default=30)
    ap.add_argument("--max-tuning-iterations", type=int, default=100)
    ap.add_argument("--timing-iters", type=int, default=20, help="0: skip the tuned/untuned timing")
    args = ap.parse_args(argv)

    gemms = json.loads(args.shapes.read_text())["gemms"]
    target = resolve_filename(args.out, args.device)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    # The image's ENV may say TUNING=0 or point FILENAME elsewhere; torch reads these once, at first use, and
    # they win over the Python API, so clear them before torch is imported. ENABLED stays unset so that
    # enable(False) can time the untuned path; FILENAME is set because older releases read only the env.
    for key in TUNABLEOP_ENV:
        os.environ.pop(key, None)
    os.environ.update(
        {
            "PYTORCH_TUNABLEOP_FILENAME": args.out,
            "PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS": str(args.max_tuning_duration_ms),
            "PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS": str(args.max_tuning_iterations),
        }
    )

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("error: no GPU visible to torch; tuning needs the GPU the results are for", file=sys.stderr)
        return 2
    tunable = torch.cuda.tunable
    torch.cuda.set_device(args.device)
    tunable.enable(True)
    tunable.tuning_enable(True)
    tunable.set_filename(args.out, True)
    tunable.set_max_tuning_duration(args.max_tuning_duration_ms)
    tunable.set_max_tuning_iterations(args.max_tuning_iterations)

    dev = torch.device("cuda", args.device)
    t0 = time.monotonic()
    tensors = []
    for g in gemms:
        dtype = getattr(torch, g["dtype"])
        x = torch.randn(g["tokens"], g["in_features"], dtype=dtype, device=dev)
        w = torch.randn(g["out_features"], g["in_features"], dtype=dtype, device=dev)
        F.linear(x, w)  # the first call with TunableOp on tunes this shape
        tensors.append((g, x, w))
    torch.cuda.synchronize()
    tune_s = time.monotonic() - t0
    if hasattr(tunable, "write_file"):  # 2.3 .. 2.x; later releases write results as they are found
        tunable.write_file()

    timings = []
    if args.timing_iters > 0:
        for g, x, w in tensors:
            tunable.enable(True)
            tuned = _time_ms(lambda x=x, w=w: F.linear(x, w), args.timing_iters)
            tunable.enable(False)
            plain = _time_ms(lambda x=x, w=w: F.linear(x, w), args.timing_iters)
            timings.append({**g, "tuned_ms": tuned, "untuned_ms": plain, "tuned_over_untuned": tuned / plain})
        tunable.enable(True)

    report = {
        "schema_version": 1,
        "torch": torch.__version__,
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(args.device),
        "arch": gpu_arch(torch, args.device),
        "validators": dict(tunable.get_validators()),
        "results": [list(r) for r in tunable.get_results()],
        "filename": tunable.get_filename() or target,
        "expected_filename": target,
        "gemms": len(gemms),
        "tune_seconds": round(tune_s, 3),
        "timings": timings,
    }
    text = json.dumps(report, indent=1) + "\n"
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
