"""`/opt/imagebuild/kernels.json`: the code objects the kernel builder stage verified (docs/contracts.md)."""

from __future__ import annotations

from dataclasses import dataclass

from imagecontract.models._base import Model, doc


@dataclass
class KernelsReport(Model):
    """The code objects a built kernel library holds, as verified against the requested arches at build time."""

    library: str = doc("Path of the verified library inside the image")
    requested: list[str] = doc("Requested code-object target IDs (features kept, LLVM order; CUDA as sm_XX)")
    code_objects: list[str] = doc("Device code objects the library holds (gfx IDs with features, sm_XX)")
    ptx: list[str] = doc(
        "PTX entries of a CUDA fat binary (compute_XX), listed apart from the code objects (none: a ROCm library)",
        default_factory=list,
    )
