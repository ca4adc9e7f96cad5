"""One check's outcome, in the shape the report contract gives it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagecontract.models.smoke_report import Check

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"


@dataclass
class CheckResult:
    """Outcome of one check; failures accumulate so a check reports every broken case, not only the first."""

    name: str
    status: str = PASSED
    reason: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    throughput: dict[str, float] = field(default_factory=dict)  # higher is better
    latency: dict[str, float] = field(default_factory=dict)  # seconds, lower is better
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def fail(self, message: str) -> None:
        self.failures.append(message)
        self.status = FAILED

    def skip(self, reason: str) -> CheckResult:
        self.status = SKIPPED
        self.reason = reason
        return self

    def finish(self) -> CheckResult:
        """Fold the recorded failures into the one-line reason the report carries."""
        if self.failures:
            self.status = FAILED
            self.reason = "; ".join(self.failures)
        return self

    def to_check(self) -> Check:
        """The report's entry for this check (the contract's `Check`)."""
        return Check(
            name=self.name,
            status=self.status,  # type: ignore[arg-type]  # one of PASSED, FAILED, SKIPPED
            reason=self.reason,
            numbers=self.numbers,
            throughput={k: round(v, 4) for k, v in self.throughput.items()},
            latency={k: round(v, 4) for k, v in self.latency.items()},
            warnings=self.warnings,
            duration_s=round(self.duration_s, 3),
        )

    def to_json(self) -> dict[str, Any]:
        return self.to_check().to_dict()
