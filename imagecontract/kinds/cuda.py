"""The CUDA platform kind: NVIDIA GPUs through the NVIDIA driver and container toolkit, CUDA's torch."""

from __future__ import annotations

import re
from pathlib import Path

from imagecontract.driver import Gpu, Query, cuda_gpus, first_line
from imagecontract.kinds.base import DeviceFlags
from imagecontract.targets import Vendor

NAME: str = "cuda"
VENDOR: Vendor | None = "nvidia"
ROW_VENDOR: str = "nvidia"
LABEL: str = "NVIDIA"
TOOLKIT: str = "CUDA"
ARCH_VARIABLE: str | None = "TORCH_CUDA_ARCH_LIST"
TORCH_VERSION: str | None = "cuda"
SMOKE_GPU: str = NAME
# --gpus all: the NVIDIA container toolkit adds the device nodes
DEVICE: DeviceFlags = DeviceFlags(ipc_host=True, all_gpus=True)
RUN_HINT: str = "--gpus all"
REQUIRED_NODE: str | None = None
ARCH_ALWAYS_KNOWN: bool = False  # /proc/driver/nvidia names GPUs without their arch when nvidia-smi is absent
OVERRIDE_VARIABLE: str | None = None
VISIBLE_VARIABLES: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
_VERSION_FILE = "proc/driver/nvidia/version"
DRIVER_FILE: str | None = _VERSION_FILE
# the container toolkit mounts these from the host's driver (NVIDIA/libnvidia-container@1d44a936 src/nvc_info.c:69-80,
# utility_libs and compute_libs): an image never carries them, so an extension linked to one loads only on a GPU host
DRIVER_LIBRARIES: tuple[str, ...] = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ..." / "... Open Kernel Module for x86_64  550.54.14 ..."
DRIVER_VERSION: re.Pattern[str] | None = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)", re.ASCII)
K8S_RESOURCE: str | None = "nvidia.com/gpu"
TUNABLEOP_NEEDS_GPU: bool = False  # a CUDA build of torch registers PT_VERSION only


def device_present(root: Path) -> bool:
    return (root / "dev/nvidiactl").exists() or (root / "dev/nvidia0").exists()


def driver_present(root: Path) -> bool:
    return (root / "proc/driver/nvidia").is_dir() or (root / "dev/nvidiactl").exists()


def gpus(root: Path, query: Query) -> list[Gpu]:
    return cuda_gpus(root, query)


def own_gpus(root: Path, gpus: list[Gpu]) -> list[Gpu]:
    return gpus  # the container toolkit passes the nodes with the GPUs


def device_paths(gpus: list[Gpu]) -> list[str]:
    return ["/dev/nvidiactl", *(f"/dev/nvidia{g.index}" for g in gpus)]


def driver_line(root: Path) -> str | None:
    return first_line(root / _VERSION_FILE)


def run_flags(nodes: list[str], groups: list[int]) -> list[str]:
    return ["--gpus", "all", "--ipc=host"]


def compose(nodes: list[str], groups: list[int]) -> list[str]:
    return [
        "services:",
        "  server:",
        "    ipc: host",
        "    deploy:",
        "      resources:",
        "        reservations:",
        "          devices:",
        "            - driver: nvidia",
        "              count: all",
        "              capabilities: [gpu]",
    ]
