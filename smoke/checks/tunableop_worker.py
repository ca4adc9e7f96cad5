"""One TunableOp run in a fresh process (``python -m smoke.checks.tunableop_worker MODE FILE``).

A fresh process is how a server meets the results file: it reads it at start and writes it as it tunes or at
exit. Modes: ``tune`` (tuning on, compares tuned and untuned results), ``read`` (tuning off, must load the
file), ``tampered`` (tuning off, the file has a changed validator and must be rejected). Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from smoke import torch_names

# (M, N, K) of F.linear(x[M, K], W[N, K]): decode-like GEMMs, fp16.
SHAPES = [(1, 4096, 4096), (4, 4096, 4096), (8, 1024, 4096)]


def _gemms() -> list[torch.Tensor]:
    gen = torch.Generator(device=torch_names.CPU).manual_seed(1234)
    outs = []
    for m, n, k in SHAPES:
        x = torch.randn(m, k, generator=gen).to(torch_names.GPU, torch.float16)
        w = (torch.randn(n, k, generator=gen) / k**0.5).to(torch_names.GPU, torch.float16)
        outs.append(torch.mm(x, w.t()).float())
    torch.cuda.synchronize()
    return outs


def _rows(rows: object) -> list[list[str]]:
    """get_results()/get_validators() as text rows. At run time they are lists of tuples; torch 2.13 annotates them
    as one tuple (torch/cuda/tunable.py lines 297 and 302), so the rows are taken as whatever iterables they are."""
    if not isinstance(rows, list | tuple):
        raise TypeError(f"TunableOp rows are a {type(rows).__name__}, not a list")
    return [[str(f) for f in row] for row in rows]


def main(argv: list[str]) -> dict[str, Any]:
    mode, path = argv[0], argv[1]
    tun = torch.cuda.tunable
    out: dict[str, Any] = {"mode": mode, "torch": torch.__version__}
    untuned = _gemms() if mode == "tune" else None
    tun.set_filename(path)
    if hasattr(tun, "set_max_tuning_duration"):
        tun.set_max_tuning_duration(10)
    if hasattr(tun, "set_max_tuning_iterations"):
        tun.set_max_tuning_iterations(20)
    tun.tuning_enable(mode == "tune")
    tun.enable(True)
    results = _gemms()
    if untuned is not None:
        out["max_abs_diff_vs_untuned"] = max(
            float((a - b).abs().max().item()) for a, b in zip(untuned, results, strict=True)
        )
    if mode == "tune" and hasattr(tun, "write_file"):
        out["write_file"] = bool(tun.write_file())
    out["results"] = _rows(tun.get_results())
    out["validators"] = _rows(tun.get_validators())
    if mode != "tune" and hasattr(tun, "read_file"):
        out["read_file"] = bool(tun.read_file(path))
    out["filename"] = tun.get_filename()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
