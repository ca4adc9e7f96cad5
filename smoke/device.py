"""What this process runs on: device, GPU arch and the versions of torch and its GPU runtime.

Each probe is its own function so a test can stand in for a GPU that this machine lacks.
"""

from __future__ import annotations

import glob
import os
import platform
import re
from dataclasses import dataclass, field

import torch

from imagecontract import kinds
from imagecontract.gpu import gpu_arch as contract_gpu_arch
from smoke import torch_names

KFD_NODES = "/sys/class/kfd/kfd/topology/nodes/*/properties"


def cuda_available() -> bool:
    """ROCm and CUDA builds of torch both expose their GPUs as the ``cuda`` device."""
    return bool(torch.cuda.is_available())


def gpu_arch(index: int = 0) -> str:
    """The contract's gpu_arch (imagecontract.gpu) with this module's torch."""
    return contract_gpu_arch(torch, index)


def gpu_name(index: int = 0) -> str:
    return str(torch.cuda.get_device_name(index))


def torch_arch_list() -> list[str]:
    """Arches torch itself was compiled for (its own kernels, not the image's)."""
    try:
        return list(torch.cuda.get_arch_list())
    except (RuntimeError, AssertionError):
        return []


def native_amd_arch() -> str | None:
    """The GPU's own arch from the KFD topology, which ``HSA_OVERRIDE_GFX_VERSION`` does not change."""
    for path in sorted(glob.glob(KFD_NODES)):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        match = re.search(r"^gfx_target_version\s+(\d+)", text, re.MULTILINE)
        if match and int(match.group(1)) != 0:
            return gfx_from_target_version(int(match.group(1)))
    return None


def gfx_from_target_version(value: int) -> str:
    """90010 -> gfx90a, 90402 -> gfx942, 110000 -> gfx1100 (major, minor, stepping; the last two in hex)."""
    major, minor, stepping = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def gfx_from_override(value: str) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION=9.4.2`` -> gfx942."""
    parts = value.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return f"gfx{int(parts[0])}{int(parts[1]):x}{int(parts[2]):x}"


# torch.version's attribute per GPU platform kind (torch.version.cuda, torch.version.hip), in a fixed order
TOOLKIT_VERSIONS = tuple(sorted(str(kind.TORCH_VERSION) for kind in kinds.GPU_KINDS))


def runtime_versions() -> dict[str, str | None]:
    return {
        "torch": torch.__version__,
        **{name: getattr(torch.version, name, None) for name in TOOLKIT_VERSIONS},
        "python": platform.python_version(),
    }


@dataclass
class DeviceInfo:
    """The device the suite runs on, probed once."""

    requested: str
    device: str
    gpu_visible: bool
    arch: str
    name: str | None = None
    vendor: str = torch_names.CPU
    native_arch: str | None = None
    torch_arches: list[str] = field(default_factory=list)
    versions: dict[str, str | None] = field(default_factory=dict)
    hsa_override: str | None = None
    probe_error: str | None = None

    @property
    def torch_device(self) -> torch.device:
        return torch.device(f"{torch_names.GPU}:0" if self.device == torch_names.GPU else torch_names.CPU)


def probe(requested: str) -> DeviceInfo:
    """Pick the device: ``auto`` takes the GPU when one is visible; ``cuda`` insists on one."""
    visible = cuda_available()
    use_gpu = visible and requested in ("auto", torch_names.GPU)
    info = DeviceInfo(
        requested=requested,
        device=torch_names.GPU if use_gpu else torch_names.CPU,
        gpu_visible=visible,
        arch=torch_names.CPU,
        versions=runtime_versions(),
        hsa_override=os.environ.get("HSA_OVERRIDE_GFX_VERSION"),
    )
    if use_gpu:
        info.vendor = kinds.from_torch_versions(info.versions).VENDOR or torch_names.CPU
        try:
            info.arch = gpu_arch()
            info.name = gpu_name()
        except Exception as exc:  # noqa: BLE001 - a GPU that cannot be queried is the environment's failure
            info.arch = "unknown"
            info.probe_error = f"{type(exc).__name__}: {exc}"
        info.torch_arches = torch_arch_list()
        if info.vendor == "amd":
            info.native_arch = native_amd_arch()
    return info
