"""`report.json` of `python -m smoke` (docs/contracts.md): written in the image, read by the host's publish gate,
`--baseline` and CI. One model for both sides instead of `.get()` on a plain dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

from imagecontract.models._base import Model, doc

REPORT_SCHEMA_VERSION: Final = 1  # Final: the Literal[1] that schema_version holds
Status = Literal["passed", "failed", "skipped"]


@dataclass
class Check(Model):
    """One check's outcome."""

    name: str
    status: Status
    reason: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    throughput: dict[str, int | float] = doc("Higher is better; what --baseline compares", default_factory=dict)
    latency: dict[str, int | float] = doc("Seconds, lower is better; what --baseline compares", default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    duration_s: int | float = 0.0


@dataclass
class ManifestSeen(Model):
    """The manifest the suite ran with (or that it ran without one)."""

    OMIT_NONE: ClassVar[tuple[str, ...]] = ("note",)

    present: bool
    path: str | None = None
    target: str | None = None
    note: str | None = None


@dataclass
class SmokeReport(Model):
    """What one smoke run found: the device, the versions and each check's outcome."""

    OMIT_NONE: ClassVar[tuple[str, ...]] = ("image", "image_ref", "gpu", "command", "baseline", "exit_code")

    schema_version: Literal[1]
    passed: bool = doc("True only when no check failed and at least one passed")
    checks: list[Check] = doc("Every check that was asked for, in run order")
    image_id: str | None = doc("Filled by `imagebuild smoke` (host): the image the suite ran in", default=None)
    image: dict[str, Any] | None = doc("The host's image reference (build -> smoke -> publish)", default=None)
    image_ref: str | None = doc("The reference the host was asked to smoke (tag or ID)", default=None)
    gpu: str | None = doc("The --gpu mode the host ran the container with (rocm, cuda, none)", default=None)
    device: str | None = None
    arch: str | None = None
    gpu_name: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    manifest: ManifestSeen | None = None
    kernels: dict[str, Any] | None = doc("kernels.json of the image, as read there", default=None)
    smoke_version: str | None = None
    command: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None
    exit_code: int | None = doc("Exit code of the suite, recorded by the host", default=None)

    def refusal(self) -> str | None:
        """Why this report does not show a pass, or None: `passed` must agree with the checks it lists."""
        if not self.passed:
            return "did not pass"
        failed = [c.name[:40] for c in self.checks if c.status == "failed"]
        if failed:
            return f"says passed but lists failed check(s): {', '.join(failed[:5])}"
        if not any(c.status == "passed" for c in self.checks):
            return "ran no check"
        if self.exit_code not in (None, 0):
            return f"says passed but the suite exited {self.exit_code}"
        return None

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)
