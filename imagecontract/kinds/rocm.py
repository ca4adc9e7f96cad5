"""The ROCm platform kind: AMD GPUs through the amdgpu/KFD driver, HIP's torch."""

from __future__ import annotations

import re
from pathlib import Path

from imagecontract.driver import TOPOLOGY, Gpu, Query, first_line, rocm_gpus
from imagecontract.kinds.base import DeviceFlags
from imagecontract.targets import Vendor

NAME: str = "rocm"
VENDOR: Vendor | None = "amd"
ROW_VENDOR: str = "amd"
LABEL: str = "AMD"
TOOLKIT: str = "ROCm"
ARCH_VARIABLE: str | None = "PYTORCH_ROCM_ARCH"
TORCH_VERSION: str | None = "hip"
SMOKE_GPU: str = NAME
# The README's flags for CI runners: both nodes, the video group, no seccomp filter (HIP's IPC), host IPC.
DEVICE: DeviceFlags = DeviceFlags(
    devices=("/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"),
    group_add=("video",),
    security_opt=("seccomp=unconfined",),
    ipc_host=True,
)
RUN_HINT: str = "--device /dev/kfd --device /dev/dri"
REQUIRED_NODE: str | None = "/dev/kfd"
ARCH_ALWAYS_KNOWN: bool = True  # the KFD topology always says gfx_target_version
OVERRIDE_VARIABLE: str | None = "HSA_OVERRIDE_GFX_VERSION"
VISIBLE_VARIABLES: tuple[str, ...] = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_VERSION_FILE = "sys/module/amdgpu/version"
DRIVER_FILE: str | None = _VERSION_FILE  # DKMS builds of amdgpu; in-tree kernels have none
# the ROCm user space (HIP, the HSA runtime) ships in the image; the host gives only /dev/kfd and /dev/dri
DRIVER_LIBRARIES: tuple[str, ...] = ()
DRIVER_VERSION: re.Pattern[str] | None = re.compile(r"\A\s*([0-9]+(?:\.[0-9]+)+)", re.ASCII)
K8S_RESOURCE: str | None = "amd.com/gpu"
TUNABLEOP_NEEDS_GPU: bool = True  # the ROCm validators (HIPBLASLT_VERSION, ...) need the image's torch on a GPU


def device_present(root: Path) -> bool:
    return (root / "dev/kfd").exists()


def driver_present(root: Path) -> bool:
    return (root / TOPOLOGY).is_dir() or (root / "dev/kfd").exists()


def gpus(root: Path, query: Query) -> list[Gpu]:
    return rocm_gpus(root)


def own_gpus(root: Path, gpus: list[Gpu]) -> list[Gpu]:
    """A GPU whose render node was not passed in is not this container's."""
    return [g for g in gpus if g.render is None or (root / g.render.lstrip("/")).exists()]


def device_paths(gpus: list[Gpu]) -> list[str]:
    return ["/dev/kfd", *(g.render for g in gpus if g.render)]


def driver_line(root: Path) -> str | None:
    """amdgpu's module version (DKMS builds; in-tree kernels have none), else how the driver is there."""
    version = root / _VERSION_FILE
    if version.is_file():
        return "amdgpu " + (first_line(version) or "(version unreadable)")
    return "amdgpu (in-tree)" if (root / "sys/module/amdgpu").is_dir() else "amdkfd"


def run_flags(nodes: list[str], groups: list[int]) -> list[str]:
    flags = [arg for node in nodes for arg in ("--device", node)]
    flags += [arg for gid in groups for arg in ("--group-add", str(gid))]
    return [*flags, "--ipc=host", "--security-opt", "seccomp=unconfined"]


def compose(nodes: list[str], groups: list[int]) -> list[str]:
    lines = ["services:", "  server:", "    devices:"]
    lines += [f"      - {node}:{node}" for node in nodes]
    lines += ["    group_add:"] + [f'      - "{gid}"' for gid in groups]
    return [*lines, "    ipc: host", "    security_opt:", "      - seccomp=unconfined"]
