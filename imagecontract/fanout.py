"""The fan-out: one resolved target list -> every arch variable a build stage reads, each in its tool's form.

Features are kept where a tool passes IDs to the compiler verbatim; CK flash-attention, vLLM's filter and
AOTriton compare bare processor names and would drop or reject an ID with features.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from imagecontract.kinds import PLATFORMS
from imagecontract.targets import GpuTarget, Vendor, format_list

# How a component's build wants the list: `full` keeps AMD target features (gfx942:sramecc+:xnack-) and NVIDIA
# +PTX; `bare` gives processor names / capabilities only.
ArchForm = Literal["bare", "full"]
PLATFORM_VENDOR: dict[str, Vendor | None] = {name: kind.VENDOR for name, kind in PLATFORMS.items()}  # kinds/


def _amd_processors(targets: list[GpuTarget]) -> str:
    return ";".join(t.processor for t in targets)


def _torch_cuda_list(targets: list[GpuTarget]) -> str:
    return ";".join(t.capability + ("+PTX" if t.ptx else "") for t in targets)


def _cmake_cuda(targets: list[GpuTarget]) -> str:
    # CMake: "90-real" is SASS only; plain "90" adds PTX too.
    return ";".join(t.capability.replace(".", "") + ("" if t.ptx else "-real") for t in targets)


# variable -> (vendor, formatter, why).
ARCH_VARIABLES: dict[str, tuple[Vendor, Callable[[list[GpuTarget]], str], str]] = {
    "PYTORCH_ROCM_ARCH": ("amd", format_list, "torch and torch extensions (cpp_extension) on ROCm"),
    "GPU_TARGETS": ("amd", format_list, "CMake HIP projects"),
    "AMDGPU_TARGETS": ("amd", format_list, "CMake HIP projects (older name)"),
    "GPU_ARCHS": ("amd", _amd_processors, "ROCm flash-attention (CK); bare processor names"),
    "FA_GFX_ARCHS": ("amd", _amd_processors, "vLLM's flash-attention build; bare processor names"),
    "AOTRITON_TARGET_ARCH": ("amd", _amd_processors, "AOTriton (SDPA on ROCm); bare processor names"),
    "TORCH_CUDA_ARCH_LIST": ("nvidia", _torch_cuda_list, "torch and torch extensions on CUDA"),
    "CMAKE_CUDA_ARCHITECTURES": ("nvidia", _cmake_cuda, "CMake CUDA projects"),
}
_BARE_BY_DEFAULT = ("GPU_ARCHS", "FA_GFX_ARCHS", "AOTRITON_TARGET_ARCH")


def format_variable(name: str, form: ArchForm, targets: list[GpuTarget]) -> str:
    """One variable's value in the form one component reads it."""
    if form == "bare":
        targets = [t.bare for t in targets]
    if name in _BARE_BY_DEFAULT and form == "full":
        return format_list(targets)
    return ARCH_VARIABLES[name][1](targets)


def fan_out(vendor: Vendor | None, targets: list[GpuTarget]) -> dict[str, str]:
    """Every arch variable of this vendor, all from the same list."""
    if vendor is None or not targets:
        return {}
    return {name: fmt(targets) for name, (var_vendor, fmt, _why) in ARCH_VARIABLES.items() if var_vendor == vendor}
