"""What every platform kind answers: the questions of issue 30 item 2, asked by the host and by the image.

A platform kind is a module (`rocm.py`, `cuda.py`, `cpu.py`) that fits `PlatformKind`; `imagecontract.kinds`
registers them. The shape is cibuildwheel's: a module is the protocol's instance (PEP 544: `self` is ignored when
a protocol is applied to a module) and one dict names them all (pypa/cibuildwheel ac7dcd6,
cibuildwheel/platforms/__init__.py lines 14-31, `PlatformModule`, `ALL_PLATFORM_MODULES`). Stdlib only: the
preflight and the smoke suite ask these questions inside images, where imagebuild is not installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imagecontract.driver import Gpu, Query
from imagecontract.targets import Vendor


@dataclass(frozen=True)
class DeviceFlags:
    """What `docker run` needs to give a container this kind's GPUs, said without the docker library (engine/
    turns it into its client's options): device nodes (`host:container:permissions`), groups, security options,
    the host IPC namespace, and a request for every GPU (`--gpus all`)."""

    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc_host: bool = False
    all_gpus: bool = False


class PlatformKind(Protocol):
    """The questions; each kind module answers every one (a CPU kind with its "no GPU" answers)."""

    NAME: str  # matrix.yaml `platforms.<p>.kind`, the manifest's `platform.kind`
    VENDOR: Vendor | None  # whose GPU targets it builds and runs (imagecontract.targets); None: no GPU
    ROW_VENDOR: str  # the compatibility page's vendor column
    LABEL: str  # the GPU maker in messages ("AMD")
    TOOLKIT: str  # the GPU toolkit in messages ("ROCm")
    ARCH_VARIABLE: str | None  # the environment variable that overrides a build's arch list
    TORCH_VERSION: str | None  # the attribute of torch.version naming this kind's toolkit (torch.version.hip)
    SMOKE_GPU: str  # the `--gpu` value `imagebuild smoke` and `tunableop` run an image of this kind with
    DEVICE: DeviceFlags  # docker run's device flags (engine/docker.py device_options)
    RUN_HINT: str  # the same flags as the preflight says them to a person
    REQUIRED_NODE: str | None  # without this node no GPU of this kind is in the container (preflight, smoke)
    ARCH_ALWAYS_KNOWN: bool  # the driver always says a GPU's arch: one it cannot read is refused, not skipped
    OVERRIDE_VARIABLE: str | None  # the variable that makes the runtime report another arch (preflight's table)
    VISIBLE_VARIABLES: tuple[str, ...]  # the runtime's visible-devices filters, in the order it reads them
    DRIVER_FILE: str | None  # where the loaded kernel driver says its version (under a root)
    DRIVER_LIBRARIES: tuple[str, ...]  # libraries a container gets from the host's driver, absent from any image
    DRIVER_VERSION: re.Pattern[str] | None  # the version in that file (group 1)
    K8S_RESOURCE: str | None  # the device plugin's resource name
    TUNABLEOP_NEEDS_GPU: bool  # torch's TunableOp validators of this kind are known only on a GPU

    def device_present(self, root: Path) -> bool:
        """The device nodes a container of this kind needs are on this machine (`--gpu auto`)."""
        ...

    def driver_present(self, root: Path) -> bool:
        """This kind's kernel driver is loaded (doctor, which reads the driver)."""
        ...

    def gpus(self, root: Path, query: Query) -> list[Gpu]:
        """The GPUs the driver lists, in the runtime's order."""
        ...

    def own_gpus(self, root: Path, gpus: list[Gpu]) -> list[Gpu]:
        """Of those, the ones this container was given (the preflight, inside the container)."""
        ...

    def device_paths(self, gpus: list[Gpu]) -> list[str]:
        """The device nodes a container of this kind opens for these GPUs."""
        ...

    def driver_line(self, root: Path) -> str | None:
        """The driver as doctor names it (one line), None when there is none."""
        ...

    def run_flags(self, nodes: list[str], groups: list[int]) -> list[str]:
        """docker run flags for this host's nodes and their numeric groups (doctor)."""
        ...

    def compose(self, nodes: list[str], groups: list[int]) -> list[str]:
        """The compose service's lines for the same (doctor); [] for none."""
        ...
