"""The JSON report and JUnit XML (docs/contracts.md), written whole or not at all.

The report is built as the contract's `SmokeReport` (imagecontract/models/smoke_report.py: its shape and schema
version live there alone) and written with `to_dict()`."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from imagecontract import kinds
from imagecontract.models.smoke_report import REPORT_SCHEMA_VERSION, ManifestSeen, SmokeReport
from smoke import __version__
from smoke.result import FAILED, PASSED, SKIPPED, CheckResult

# torch.version's attribute per GPU platform kind (cuda, hip), in the order the report has always listed them
TOOLKIT_VERSIONS = tuple(sorted(str(kind.TORCH_VERSION) for kind in kinds.GPU_KINDS))

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


def build(ctx: Context, results: list[CheckResult], extra: dict[str, Any]) -> SmokeReport:
    """The report of a run: the device, the versions, the manifest it ran with and every check."""
    man = ctx.manifest
    seen = ManifestSeen(man.present, man.path, man.target, None if man.present else "no manifest: ran with defaults")
    return SmokeReport(
        schema_version=REPORT_SCHEMA_VERSION,
        passed=verdict(results)[0],
        checks=[r.to_check() for r in results],
        device=ctx.info.device,
        arch=ctx.info.arch,
        gpu_name=ctx.info.name,
        versions={k: ctx.info.versions.get(k) for k in ("torch", *TOOLKIT_VERSIONS, "python")},
        manifest=seen,
        kernels=man.kernels,
        smoke_version=__version__,
        **extra,
    )


def without_torch(manifest: ManifestSeen, results: list[CheckResult], extra: dict[str, Any]) -> SmokeReport:
    """The report of an image whose torch does not import: nothing could run."""
    return SmokeReport(
        schema_version=REPORT_SCHEMA_VERSION,
        passed=False,
        checks=[r.to_check() for r in results],
        versions={"torch": None, **dict.fromkeys(TOOLKIT_VERSIONS), "python": platform.python_version()},
        manifest=manifest,
        smoke_version=__version__,
        **extra,
    )


def to_json(report: SmokeReport) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, default=str) + "\n"


def to_junit(report: SmokeReport) -> str:
    """One testsuite, one testcase per check; failures and skips carry the check's reason."""
    checks = report.checks
    suite = ET.Element(
        "testsuite",
        {
            "name": "smoke",
            "tests": str(len(checks)),
            "failures": str(sum(c.status == FAILED for c in checks)),
            "skipped": str(sum(c.status == SKIPPED for c in checks)),
            "errors": "0",
            "time": f"{sum(c.duration_s for c in checks):.3f}",
        },
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (("device", report.device), ("arch", report.arch), ("gpu_name", report.gpu_name)):
        ET.SubElement(props, "property", {"name": key, "value": str(value)})
    for key, value in report.versions.items():
        ET.SubElement(props, "property", {"name": f"version.{key}", "value": str(value)})
    for check in checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": "smoke", "name": check.name, "time": f"{check.duration_s:.3f}"},
        )
        if check.status == FAILED:
            ET.SubElement(case, "failure", {"message": check.reason or "failed"}).text = check.reason
        elif check.status == SKIPPED:
            ET.SubElement(case, "skipped", {"message": check.reason or "skipped"})
        out = {
            "numbers": check.numbers,
            "throughput": check.throughput,
            "latency": check.latency,
            "warnings": check.warnings,
        }
        ET.SubElement(case, "system-out").text = json.dumps(out, default=str)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
