"""The platform kinds, registered: one module per kind (rocm, cuda, cpu), each answering `PlatformKind`.

Adding a kind is its module here plus its line in `_MODULES`, and its name in the schema's `Literal`s
(imagebuild/matrix/fields.py `PlatformKind`, imagecontract/models/manifest.py `Platform.kind`); no other module
names a kind (tests/test_kinds_layout.py counts them). Both sides import this package: the host (plan, render,
engine device flags, doctor, the report) and the image (preflight, smoke), so it stays stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from imagecontract.kinds import cpu, cuda, rocm
from imagecontract.kinds.base import DeviceFlags as DeviceFlags
from imagecontract.kinds.base import PlatformKind as PlatformKind

_MODULES: tuple[PlatformKind, ...] = (rocm, cuda, cpu)  # the order `--gpu auto` and doctor look for a driver in

PLATFORMS: dict[str, PlatformKind] = {kind.NAME: kind for kind in _MODULES}
GPU_KINDS: tuple[PlatformKind, ...] = tuple(kind for kind in _MODULES if kind.VENDOR is not None)
NO_GPU: PlatformKind = cpu  # the kind whose answers are "no GPU" (a CPU image, a host without a GPU driver)
CPU_ARCH = cpu.ARCH
GPU_CHOICES: tuple[str, ...] = (*(kind.SMOKE_GPU for kind in GPU_KINDS), NO_GPU.SMOKE_GPU)  # `--gpu` values


def platform(name: str) -> PlatformKind:
    """The kind module of a platform kind name (the matrix's and manifest's `kind`); KeyError names it."""
    try:
        return PLATFORMS[name]
    except KeyError:
        raise KeyError(f"unknown platform kind {name!r} (known: {', '.join(PLATFORMS)})") from None


def for_gpu(gpu: str) -> PlatformKind:
    """The kind of a `--gpu` value (rocm, cuda, none)."""
    return next((kind for kind in _MODULES if kind.SMOKE_GPU == gpu), NO_GPU)


def for_vendor(vendor: str | None) -> PlatformKind:
    """The kind whose GPUs a vendor makes (amd -> rocm); anything else (cpu, None) -> the no-GPU kind."""
    return next((kind for kind in GPU_KINDS if kind.VENDOR == vendor), NO_GPU)


def detect_devices(root: Path = Path("/")) -> str:
    """`--gpu auto`: the `--gpu` value of the first kind whose device nodes are here, else none."""
    return next((kind.SMOKE_GPU for kind in GPU_KINDS if kind.device_present(root)), NO_GPU.SMOKE_GPU)


def detect_driver(root: Path = Path("/")) -> PlatformKind:
    """The first kind whose kernel driver is loaded (doctor), else the no-GPU kind."""
    return next((kind for kind in GPU_KINDS if kind.driver_present(root)), NO_GPU)


def from_torch_versions(versions: Mapping[str, object]) -> PlatformKind:
    """The kind of a torch build from its torch.version attributes (hip set -> rocm, cuda set -> cuda, else cpu)."""
    return next((kind for kind in GPU_KINDS if kind.TORCH_VERSION and versions.get(kind.TORCH_VERSION)), NO_GPU)


def from_platform_name(text: str) -> PlatformKind:
    """The kind a platform's name says (the io.imagebuild.platform label: `rocm6.1` -> rocm), else the no-GPU
    kind."""
    return next((kind for kind in GPU_KINDS if kind.NAME in text), NO_GPU)
