"""The GPU's target ID as the image sees it: one function for the smoke suite, tuning and the entrypoint.

ROCm torch reports `gcnArchName` with its feature suffixes (`gfx942:sramecc+:xnack-`, what TunableOp's
GCN_ARCH_NAME validator holds); CUDA torch reports a compute capability, written as `sm_XY` like the manifest.
torch is passed in, so this module stays importable where torch is not (the host).
"""

from __future__ import annotations

from typing import Any


def gpu_arch(torch: Any, index: int = 0) -> str:
    """`gfx942:sramecc+:xnack-` on ROCm, `sm_90` on CUDA, for device `index`."""
    props = torch.cuda.get_device_properties(index)
    gcn = getattr(props, "gcnArchName", None)
    if torch.version.hip and gcn:
        return str(gcn)
    return f"sm_{props.major}{props.minor}"
