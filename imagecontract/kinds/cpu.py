"""The CPU platform kind: no GPU, no driver, no device flags; torch's CPU build."""

from __future__ import annotations

import re
from pathlib import Path

from imagecontract.driver import Gpu, Query
from imagecontract.kinds.base import DeviceFlags
from imagecontract.targets import Vendor

NAME: str = "cpu"
ARCH = "cpu"  # what a CPU image's rows, smoke jobs, reports and attention tables carry where a GPU's arch would be
VENDOR: Vendor | None = None
ROW_VENDOR: str = "cpu"
LABEL: str = "CPU"
TOOLKIT: str = "CPU"
ARCH_VARIABLE: str | None = None
TORCH_VERSION: str | None = None
SMOKE_GPU: str = "none"
DEVICE: DeviceFlags = DeviceFlags()
RUN_HINT: str = ""
REQUIRED_NODE: str | None = None
ARCH_ALWAYS_KNOWN: bool = False
OVERRIDE_VARIABLE: str | None = None
VISIBLE_VARIABLES: tuple[str, ...] = ()
DRIVER_FILE: str | None = None
DRIVER_LIBRARIES: tuple[str, ...] = ()
DRIVER_VERSION: re.Pattern[str] | None = None
K8S_RESOURCE: str | None = None
TUNABLEOP_NEEDS_GPU: bool = False  # a CPU build of torch runs no TunableOp


def device_present(root: Path) -> bool:
    return False


def driver_present(root: Path) -> bool:
    return False


def gpus(root: Path, query: Query) -> list[Gpu]:
    return []


def own_gpus(root: Path, gpus: list[Gpu]) -> list[Gpu]:
    return []


def device_paths(gpus: list[Gpu]) -> list[str]:
    return []


def driver_line(root: Path) -> str | None:
    return None


def run_flags(nodes: list[str], groups: list[int]) -> list[str]:
    return []


def compose(nodes: list[str], groups: list[int]) -> list[str]:
    return []
