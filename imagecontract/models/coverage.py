"""`/opt/imagebuild/arch-coverage.json`: which requested GPU arches every library in the image holds code for.

Scanned in the image by imagecontract/coverage.py, judged on the host against the matrix
(imagebuild/prove/coverage.py), then added to the image as a last layer with the `io.imagebuild.arch-coverage`
label (docs/contracts.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from imagecontract.models._base import Model, doc

COVERAGE_SCHEMA_VERSION: Final = 1  # Final: the Literal[1] that schema_version holds
Status = Literal["present", "partial", "compatible", "ptx", "absent"]


@dataclass
class LibraryCoverage(Model):
    """One library (a shared object, or a folder of bare code-object files) and its status per requested arch."""

    path: str = doc("Path in the image: the shared object, or the folder holding the code-object files")
    kind: Literal["library", "kernel-files"] = doc("library: an ELF shared object; kernel-files: a folder")
    files: int = doc("Files with device code counted in this row")
    owner: str | None = doc("Who installed it: python:<distribution> (RECORD) or dpkg:<package>; null if unknown")
    component: str | None = doc("The matrix component (or torch) it belongs to; null when the matrix owns none")
    code_objects: list[str] = doc("Device code object IDs found (gfx IDs with features, sm_XX)")
    ptx: list[str] = doc("PTX entries (compute_XX)")
    arches: dict[str, Status] = doc(
        "Requested arch -> present | partial (AMD: some feature settings) | compatible (CUDA: older minor of the "
        "same major) | ptx (CUDA: PTX only, compiled by the driver) | absent"
    )
    via: dict[str, str] = doc(
        "Requested arch -> how it is covered: CUDA `cubin exact (sm_90a)`, `cubin compatible from sm_80`, "
        "`family from sm_100f`, `ptx-jit from compute_80` (the driver compiles PTX: weaker) or `none`; AMD its status",
        default_factory=dict,
    )


@dataclass
class Gap(Model):
    """A requested arch a library holds no code for, and whether the matrix allows that."""

    library: str
    arch: str
    allowed: bool
    why: str
    component: str | None = None


@dataclass
class ScanInfo(Model):
    """What the scan read and how long it took."""

    files_seen: int
    files_read: int
    seconds: float | None = doc("Scan time; null in the image's copy, so an unchanged image gets the same layer")
    errors: list[str] = field(default_factory=list)


@dataclass
class ArchCoverage(Model):
    """Library x requested arch of one image: what holds code for which GPU, and the gaps the matrix allows."""

    schema_version: Literal[1]
    requested: list[str] = doc("The arches tabulated: the manifest's gpu_arches + experimental_arches, or --arch")
    libraries: list[LibraryCoverage] = doc("Every library with device code, by path")
    gaps: list[Gap] = doc("Every absent cell, judged against the matrix")
    ok: bool = doc("No gap the matrix does not allow")
    scan: ScanInfo = doc("Scan numbers")
    target: str | None = None

    def summary(self) -> str:
        """The `io.imagebuild.arch-coverage` label: per arch, libraries covering it / libraries; then gaps."""
        total = len(self.libraries)
        parts = [
            f"{arch}={sum(1 for lib in self.libraries if lib.arches.get(arch) != 'absent')}/{total}"
            for arch in self.requested
        ]
        bad = sum(1 for gap in self.gaps if not gap.allowed)
        return " ".join([*parts, f"gaps={len(self.gaps)}", f"disallowed={bad}"])
