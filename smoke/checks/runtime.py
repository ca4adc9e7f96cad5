"""The serving runtime's entrypoint is on PATH and answers ``--help``: images once shipped without it."""

from __future__ import annotations

import shutil
import subprocess

from smoke.context import Context
from smoke.result import CheckResult

TIMEOUT_S = 120


def run(ctx: Context) -> CheckResult:
    res = CheckResult("runtime")
    runtime = ctx.manifest.runtime if ctx.manifest.present else None
    if not runtime or not runtime.get("entrypoint"):
        why = "no manifest" if not ctx.manifest.present else "the image has no serving runtime"
        return res.skip(why)
    entry = str(runtime["entrypoint"])
    res.numbers["runtime"] = runtime.get("name")
    path = shutil.which(entry)
    res.numbers["entrypoint"] = path
    if path is None:
        res.fail(f"runtime entrypoint {entry!r} is not on PATH")
        return res.finish()
    try:
        proc = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        res.fail(f"{entry} --help did not answer within {TIMEOUT_S} s")
        return res.finish()
    res.numbers["help_exit_code"] = proc.returncode
    res.numbers["help_first_line"] = (proc.stdout.strip().splitlines() or [""])[0][:200]
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        res.fail(f"{entry} --help exited {proc.returncode}: {last}")
    return res.finish()
