"""The page's data: rows of (target, OCI platform, GPU arch) and what the evidence says about each.

Every fact that was not measured is NOT_RUN (or None where a number would stand), so the writer cannot show a
missing run as a pass. `Page.to_dict()` is the JSON written beside the HTML page (`compat.json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

NOT_RUN: Final = "not run"  # Final: the Literal a Verdict holds
Verdict = Literal["passed", "failed", "not run"]


@dataclass
class SmokeFacts:
    """What the smoke report for this row's image and arch says (status "not run" when there is none)."""

    status: Verdict = NOT_RUN
    when: str | None = None  # the report file's modification time (the report itself has no timestamp), UTC
    report: str | None = None  # path of the report read
    device: str | None = None
    device_arch: str | None = None  # the arch the GPU reported (features included)
    gpu_name: str | None = None
    checks: dict[str, str] = field(default_factory=dict)  # check -> passed / failed / skipped
    failed: list[str] = field(default_factory=list)  # "check: reason" of each failed check
    backends: list[str] = field(default_factory=list)  # attention backends the attention check ran
    backends_expected: list[str] = field(default_factory=list)
    server_start_s: float | None = None
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    tunableop: str = NOT_RUN  # the smoke `tunableop` check: passed / failed / skipped / not run
    note: str | None = None  # why a report found was not taken (another image, unreadable)


@dataclass
class ReleaseFacts:
    """Published or not, and the signature / SBOM / provenance / smoke attestation status of that digest."""

    published: bool = False
    repository: str | None = None
    digest: str | None = None
    refs: list[str] = field(default_factory=list)
    when: str | None = None
    signature: str = NOT_RUN  # signed (key / keyless ...) | not signed | verified | failed: ... | not run
    sbom: str = NOT_RUN  # in image (build/sbom/...) | attested | missing | not run
    provenance: str = NOT_RUN
    smoke_attestation: str = NOT_RUN
    source: str | None = None  # local files or the registry
    note: str | None = None


@dataclass
class LibraryCell:
    """One library's status for this row's arch (present / partial / compatible / ptx / absent)."""

    library: str  # short name: owner or the file name
    path: str
    component: str | None
    status: str


@dataclass
class CoverageFacts:
    status: str = NOT_RUN  # ok | N disallowed gap(s) | not run | not scanned: ...
    requested: str | None = None  # the coverage column this row's arch matched
    libraries: list[LibraryCell] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # status -> libraries
    document: str | None = None


@dataclass
class Row:
    """One (target, OCI platform, GPU arch): the image that is built for it and what was proven there."""

    id: str
    target: str
    oci: str
    arch: str  # the GPU target ID of this row (`cpu` for a CPU image)
    vendor: str  # the platform kind's ROW_VENDOR (imagecontract.kinds): amd, nvidia, cpu
    image_arches: list[str]  # every arch this image has code for (the manifest's, or the matrix default)
    platform: str  # matrix platform name
    torch: str
    runtime: str | None
    build: str = NOT_RUN  # built | failed at <step> | not run
    built_at: str | None = None
    tag: str | None = None
    tags: list[str] = field(default_factory=list)
    image_id: str | None = None
    size_bytes: int | None = None
    tunableop_baked: list[str] | None = None  # file names in io.imagebuild.tunableop.baked; None: unknown
    smoke: SmokeFacts = field(default_factory=SmokeFacts)
    coverage: CoverageFacts = field(default_factory=CoverageFacts)
    release: ReleaseFacts = field(default_factory=ReleaseFacts)
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        """failed when the build or the smoke failed; passed only when a smoke report for this image passed."""
        if self.build.startswith("failed") or self.smoke.status == "failed":
            return "failed"
        return "passed" if self.smoke.status == "passed" else NOT_RUN


@dataclass
class HistoryPoint:
    """One smoke report's runtime numbers, kept across runs (build/report/smoke-history.json)."""

    series: str  # target / oci / arch
    image_id: str | None
    when: str
    passed: bool
    tokens_per_s: float | None
    server_start_s: float | None
    ttft_s: float | None
    report_sha256: str


@dataclass
class Plot:
    id: str
    title: str
    svg: str  # inline <svg> element (role=img, aria-labelledby its <title>)
    caption: str
    table: list[list[str]]  # the same numbers as a table, first row the header (for screen readers and copying)
    source: str


@dataclass
class Page:
    generated: str
    matrix: str
    matrix_sha256: str
    revision: str | None
    rows: list[Row]
    lookup: dict[str, Any]  # lookup.table(rows): names -> devices, device -> row verdicts
    plots: list[Plot] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # files read
    warnings: list[str] = field(default_factory=list)
    registry: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema_version"] = 1
        for row, out in zip(self.rows, data["rows"], strict=True):
            out["verdict"] = row.verdict
        for plot in data["plots"]:
            plot.pop("svg")  # the JSON keeps the numbers (table), not the drawing
        return data
