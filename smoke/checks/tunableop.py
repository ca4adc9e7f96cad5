"""TunableOp round trip: tune into a fresh file, reload it without tuning, reject a tampered copy.

Every step runs in its own process (tunableop_worker) because the file is read at start and written as
tuning happens or at exit, and TunableOp state cannot be reset inside one process. Works with the API of
torch 2.3 through 2.11: optional calls are looked up with ``hasattr``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from imagecontract import tunableop_csv
from smoke.checks.tunableop_worker import SHAPES
from smoke.context import Context
from smoke.result import CheckResult

WORKER = "smoke.checks.tunableop_worker"
TIMEOUT_S = 300
TAMPER_KEY = "PT_VERSION"


def parse_results_file(text: str) -> tuple[dict[str, str], list[list[str]]]:
    """(validators, result rows) of a TunableOp CSV as torch reads them (imagecontract.tunableop_csv)."""
    return tunableop_csv.validators(text), tunableop_csv.results(text)


def row_for(rows: list[list[str]], m: int, n: int, k: int) -> bool:
    """A GEMM row for F.linear(x[M,K], W[N,K]): BLAS params ``tn_N_M_K`` (newer torch appends ``_ld_...``)."""
    pattern = re.compile(rf"^[nt]{{2}}_{n}_{m}_{k}(_|$)")
    return any(len(r) >= 3 and r[0].startswith("Gemm") and pattern.match(r[1]) for r in rows)


def tamper(text: str, key: str = TAMPER_KEY) -> str:
    """Change one validator's value: a file tuned under another torch must not be trusted."""
    lines = text.split("\n")  # torch's line breaks only
    for i, line in enumerate(lines):
        if line.startswith(f"Validator,{key},"):
            lines[i] = f"Validator,{key},0.0.0-smoke-tampered"
            return "\n".join(lines)
    raise ValueError(f"no Validator,{key} line in the results file")


def _worker(mode: str, path: Path) -> tuple[dict[str, Any] | None, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_TUNABLEOP_")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-m", WORKER, mode, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"worker {mode} exited {proc.returncode}: {tail}"
    return json.loads(lines[-1]), proc.stderr


def run(ctx: Context) -> CheckResult:
    res = CheckResult("tunableop")
    if not ctx.on_gpu:
        return res.skip("needs a GPU (TunableOp tunes GPU GEMMs)")
    if not hasattr(torch.cuda, "tunable"):
        return res.skip(f"torch {torch.__version__} has no torch.cuda.tunable")
    with tempfile.TemporaryDirectory(prefix="smoke-tunableop-") as tmp:
        _round_trip(res, Path(tmp))
    return res.finish()


def _round_trip(res: CheckResult, tmp: Path) -> None:
    results = tmp / "tunableop_results0.csv"
    tuned, err = _worker("tune", results)
    if tuned is None:
        res.fail(err)
        return
    res.numbers["tune"] = {k: tuned.get(k) for k in ("max_abs_diff_vs_untuned", "write_file", "filename")}
    if not results.exists():
        res.fail(f"tuning wrote no results file at {results}")
        return
    text = tunableop_csv.read_text(results)
    validators, rows = parse_results_file(text)
    res.numbers["validators"] = validators
    res.numbers["rows"] = [",".join(r) for r in rows]
    expected = {str(k): str(v) for k, v in tuned["validators"]}
    if validators != expected:
        res.fail(f"file validators {validators} != torch.cuda.tunable.get_validators() {expected}")
    missing = [s for s in SHAPES if not row_for(rows, *s)]
    if missing:
        res.fail(f"no rows for tuned shapes (M,N,K) {missing}")
    diff = tuned.get("max_abs_diff_vs_untuned")
    if diff is None or diff > 2e-2:
        res.fail(f"tuned GEMM results differ from untuned by {diff}")
    digest = hashlib.sha256(text.encode()).hexdigest()

    reread, err = _worker("read", results)
    if reread is None:
        res.fail(err)
    else:
        loaded = [r for r in reread["results"] if len(r) >= 2]
        res.numbers["read"] = {"results_loaded": len(loaded), "read_file": reread.get("read_file")}
        missing = [s for s in SHAPES if not row_for(loaded, *s)]
        if missing:
            res.fail(f"with tuning off the file was not used: no loaded results for {missing}")
        if hashlib.sha256(results.read_bytes()).hexdigest() != digest:
            res.fail("with tuning off the results file changed (tuned again)")
        if reread.get("read_file") is False:
            res.fail("torch.cuda.tunable.read_file rejected the file it wrote")

    bad = tmp / "tampered0.csv"
    bad.write_text(tamper(text), encoding="utf-8")
    rejected, err = _worker("tampered", bad)
    if rejected is None:
        res.fail(err)
        return
    loaded = [r for r in rejected["results"] if len(r) >= 2]
    accepted = [s for s in SHAPES if row_for(loaded, *s)]
    res.numbers["tampered"] = {
        "changed": TAMPER_KEY,
        "results_loaded": len(loaded),
        "read_file": rejected.get("read_file"),
        "warned": "alidator" in err,
    }
    if accepted or rejected.get("read_file") is True:
        res.fail(f"a results file with {TAMPER_KEY} changed was accepted")
