"""Regressions against a previous report: a throughput drop or a latency rise beyond the tolerance fails the check."""

from __future__ import annotations

import math
from typing import Any

from imagecontract.models import ModelError, SmokeReport
from smoke.manifest import ManifestError, load_json
from smoke.result import FAILED, PASSED, CheckResult


def load(path: str) -> SmokeReport:
    """A previous report, as the contract's model; a non-finite throughput in it is an error (a NaN compares
    false and would pass all)."""
    try:
        report = SmokeReport.from_dict(load_json(path, "baseline"))
    except ModelError as exc:
        raise ManifestError(f"baseline {path}: not a smoke report ({str(exc)[:200]})") from None
    for check in report.checks:
        for key, value in check.throughput.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ManifestError(f"baseline {path}: check {check.name[:40]!r} throughput {key[:60]!r} is {value}")
    return report


def apply(results: list[CheckResult], baseline: SmokeReport, arch: str, tolerance: float) -> dict[str, Any]:
    """Fail checks whose throughput fell (latency rose) more than ``tolerance`` past the baseline's; a summary."""
    summary: dict[str, Any] = {"tolerance": tolerance, "baseline_arch": baseline.arch, "compared": 0}
    if baseline.arch != arch:
        summary["note"] = f"baseline arch {baseline.arch} != {arch}: throughput not compared"
        return summary
    old = {c.name: c.throughput for c in baseline.checks}
    old_latency = {c.name: c.latency for c in baseline.checks}
    regressions: list[str] = []
    for res in results:
        if res.status not in (PASSED, FAILED):
            continue
        before = old.get(res.name) or {}
        for key, value in res.throughput.items():
            ref = before.get(key)
            if not isinstance(ref, (int, float)) or isinstance(ref, bool) or ref <= 0:
                continue
            if not math.isfinite(value):  # a NaN measurement would compare false: never a silent pass
                res.fail(f"throughput {key} measured {value}: not comparable with the baseline")
                regressions.append(f"{res.name}: throughput {key} measured {value}")
                continue
            summary["compared"] += 1
            ratio = value / ref
            res.numbers.setdefault("vs_baseline", {})[key] = round(ratio, 4)
            if ratio < 1 - tolerance:
                drop = (1 - ratio) * 100
                msg = f"throughput regression: {key} {value:.4g} is {drop:.1f}% below baseline {ref:.4g}"
                res.fail(msg)
                regressions.append(f"{res.name}: {msg}")
        before_latency = old_latency.get(res.name) or {}
        for key, value in res.latency.items():
            ref = before_latency.get(key)
            if not isinstance(ref, (int, float)) or ref <= 0:
                continue
            summary["compared"] += 1
            ratio = value / ref
            res.numbers.setdefault("vs_baseline", {})[key] = round(ratio, 4)
            if ratio > 1 + tolerance:
                rise = (ratio - 1) * 100
                msg = f"latency regression: {key} {value:.4g} s is {rise:.1f}% above baseline {ref:.4g} s"
                res.fail(msg)
                regressions.append(f"{res.name}: {msg}")
        if res.failures:
            res.finish()
            res.status = FAILED
    summary["regressions"] = regressions
    return summary
