"""The CPU platform kind: no GPU, no driver, no device flags; torch's CPU build."""

from __future__ import annotations

import re
from pathlib import Path

from imagecontract.driver import Gpu, Query
from imagecontract.kinds.base import DeviceFlags

NAME = "cpu"
ARCH = "cpu"  # what a CPU image's rows, smoke jobs, reports and attention tables carry where a GPU's arch would be
VENDOR = None
ROW_VENDOR = "cpu"
LABEL = "CPU"
TOOLKIT = "CPU"
ARCH_VARIABLE = None
TORCH_VERSION = None
SMOKE_GPU = "none"
DEVICE = DeviceFlags()
RUN_HINT = ""
REQUIRED_NODE = None
ARCH_ALWAYS_KNOWN = False
OVERRIDE_VARIABLE = None
VISIBLE_VARIABLES: tuple[str, ...] = ()
DRIVER_FILE = None
DRIVER_VERSION: re.Pattern[str] | None = None
K8S_RESOURCE = None
TUNABLEOP_NEEDS_GPU = False  # a CPU build of torch runs no TunableOp


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
