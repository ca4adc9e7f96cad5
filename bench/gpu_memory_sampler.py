"""Sample the GPU's processes (nvidia-smi) every half second until SIGINT; write what each one held.

    python3 bench/gpu_memory_sampler.py OUT.json &   ...   kill -INT $!

Used by bench/gpu_smoke.sh to show that the runtime check's server (``transformers serve ... --device cuda``)
held the model in GPU memory: each process is named by its command line (read from /proc while it runs).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

INTERVAL_S = 0.5
APPS = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
TOTAL = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]


def _query(argv: list[str]) -> list[list[str]]:
    try:
        text = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[f.strip() for f in line.split(",")] for line in text.splitlines() if line.strip()]


def _cmdline(pid: str) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:4096]
    except OSError:
        return None
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)


def main(out: str) -> int:
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    t0 = time.monotonic()
    procs: dict[str, dict[str, Any]] = {}
    peak_total, samples = 0, 0
    while not stop:
        now = round(time.monotonic() - t0, 1)
        for row in _query(APPS):
            if len(row) < 2 or not row[1].isdigit():
                continue
            pid, mib = row[0], int(row[1])
            entry = procs.setdefault(pid, {"pid": pid, "cmdline": None, "max_used_mib": 0, "first_s": now})
            entry["cmdline"] = entry["cmdline"] or _cmdline(pid)
            entry["max_used_mib"] = max(entry["max_used_mib"], mib)
            entry["last_s"] = now
        for row in _query(TOTAL):
            if row and row[0].isdigit():
                peak_total = max(peak_total, int(row[0]))
        samples += 1
        time.sleep(INTERVAL_S)
    servers = [p for p in procs.values() if p["cmdline"] and " serve " in f" {p['cmdline']} "]
    doc = {
        "interval_s": INTERVAL_S,
        "samples": samples,
        "peak_gpu_memory_used_mib": peak_total,
        "processes": sorted(procs.values(), key=lambda p: p["first_s"]),
        "serve_processes_on_gpu": servers,
    }
    Path(out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
