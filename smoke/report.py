"""The JSON report and JUnit XML (docs/contracts.md), written whole or not at all."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from smoke import REPORT_SCHEMA_VERSION, __version__
from smoke.result import FAILED, PASSED, SKIPPED, CheckResult

if TYPE_CHECKING:
    from smoke.context import Context


def verdict(results: list[CheckResult]) -> tuple[bool, str]:
    """Passed only when no check failed and at least one ran and passed: a report of nothing is not a pass."""
    failed = [r.name for r in results if r.status == FAILED]
    if failed:
        return False, ", ".join(failed)
    if not any(r.status == PASSED for r in results):
        return False, "no check ran" + (" (all skipped)" if results else "")
    return True, ""


def build(ctx: Context, results: list[CheckResult], extra: dict[str, Any]) -> dict[str, Any]:
    man = ctx.manifest
    manifest: dict[str, Any] = {"present": man.present, "path": man.path, "target": man.target}
    if not man.present:
        manifest["note"] = "no manifest: ran with defaults"
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "passed": verdict(results)[0],
        "image_id": None,
        "device": ctx.info.device,
        "arch": ctx.info.arch,
        "gpu_name": ctx.info.name,
        "versions": {k: ctx.info.versions.get(k) for k in ("torch", "cuda", "hip", "python")},
        "manifest": manifest,
        "kernels": man.kernels,
        "smoke_version": __version__,
        **extra,
        "checks": [r.to_json() for r in results],
    }


def without_torch(manifest: dict[str, Any], results: list[CheckResult], extra: dict[str, Any]) -> dict[str, Any]:
    """The report of an image whose torch does not import: nothing could run."""
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "passed": False,
        "image_id": None,
        "device": None,
        "arch": None,
        "gpu_name": None,
        "versions": {"torch": None, "cuda": None, "hip": None, "python": platform.python_version()},
        "manifest": manifest,
        "kernels": None,
        "smoke_version": __version__,
        **extra,
        "checks": [r.to_json() for r in results],
    }


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, default=str) + "\n"


def to_junit(report: dict[str, Any]) -> str:
    """One testsuite, one testcase per check; failures and skips carry the check's reason."""
    checks = report["checks"]
    suite = ET.Element(
        "testsuite",
        {
            "name": "smoke",
            "tests": str(len(checks)),
            "failures": str(sum(c["status"] == FAILED for c in checks)),
            "skipped": str(sum(c["status"] == SKIPPED for c in checks)),
            "errors": "0",
            "time": f"{sum(c['duration_s'] for c in checks):.3f}",
        },
    )
    props = ET.SubElement(suite, "properties")
    for key in ("device", "arch", "gpu_name"):
        ET.SubElement(props, "property", {"name": key, "value": str(report.get(key))})
    for key, value in report["versions"].items():
        ET.SubElement(props, "property", {"name": f"version.{key}", "value": str(value)})
    for check in checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": "smoke", "name": check["name"], "time": f"{check['duration_s']:.3f}"},
        )
        if check["status"] == FAILED:
            ET.SubElement(case, "failure", {"message": check["reason"] or "failed"}).text = check["reason"]
        elif check["status"] == SKIPPED:
            ET.SubElement(case, "skipped", {"message": check["reason"] or "skipped"})
        out = {
            "numbers": check["numbers"],
            "throughput": check["throughput"],
            "latency": check.get("latency", {}),
            "warnings": check["warnings"],
        }
        ET.SubElement(case, "system-out").text = json.dumps(out, default=str)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
