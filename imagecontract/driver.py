"""What the GPU driver says about this machine: GPUs and their arches, device nodes, who may open them.

Stdlib only and fast (no torch, no HIP/CUDA runtime): the in-image preflight runs it before the server starts and
`imagebuild doctor` runs it on the host. Every path is read under `root`, so tests build fake sysfs and /dev trees.
ROCm: the KFD topology (`/sys/class/kfd/kfd/topology/nodes/N/properties`: `gfx_target_version` is
major*10000 + minor*100 + stepping, as the amdkfd driver's kfd_topology.c writes it; CPU nodes have 0) and its
`drm_render_minor` (the node's `/dev/dri/renderD<minor>`). CUDA: the driver's own query, `nvidia-smi
--query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader`; without nvidia-smi, /proc/driver/nvidia
names the GPUs but not their arch.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from imagecontract.blob import read_bounded
from imagecontract.numbers import ascii_int, is_ascii_int, shown
from imagecontract.targets import AMD_PRODUCTS
from imagecontract.text import printable

MAX_DRIVER_FILE = 1 << 16  # a sysfs or procfs file (one page, 4 KiB, in practice)

TOPOLOGY = "sys/class/kfd/kfd/topology/nodes"


@dataclass(frozen=True)
class Gpu:
    """One GPU as the driver lists it; `index` is the runtime's ordinal (HIP/CUDA_VISIBLE_DEVICES numbering)."""

    index: int
    vendor: str  # "amd" or "nvidia"
    arch: str | None  # gfx942, sm_90; None when the driver does not say
    name: str
    render: str | None = None  # /dev/dri/renderD128 (ROCm)

    def describe(self) -> str:
        return f"GPU {self.index} ({self.name}, {self.arch or 'arch unknown'})"


@dataclass(frozen=True)
class Identity:
    """Who opens the device nodes: uid and every group ID (the container's, or the host user's)."""

    uid: int
    gids: tuple[int, ...]

    @classmethod
    def current(cls) -> Identity:
        return cls(os.geteuid(), tuple(sorted({os.getegid(), *os.getgroups()})))


@dataclass(frozen=True)
class DeviceNode:
    """A device node a GPU container needs, its owning group (numeric: names differ between host and image)."""

    path: str
    exists: bool
    gid: int | None = None
    mode: str | None = None
    openable: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def gfx_name(version: int) -> str | None:
    """90402 -> gfx942, 90010 -> gfx90a, 110000 -> gfx1100; 0 (a CPU node) -> None."""
    if version <= 0:
        return None
    major, minor, stepping = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor}{stepping:x}"


def _properties(path: Path) -> dict[str, str]:
    """A KFD node's `key value` lines; OSError when the file cannot be read whole (absent, not a regular file,
    over MAX_DRIVER_FILE): the caller must not take that node for a CPU."""
    out: dict[str, str] = {}
    text = read_bounded(path, MAX_DRIVER_FILE, what="a KFD properties file").decode("ascii", "replace")
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out[key] = value.strip()
    return out


def _int(text: str | None) -> int:
    """A sysfs number: ASCII decimal digits, at most 19 (numbers.ascii_int); anything else (absent, `0x10`,
    `1_000`, other scripts' digits, 5,000 digits) is 0."""
    return ascii_int(text) or 0


def rocm_gpus(root: Path = Path("/")) -> list[Gpu]:
    """GPU nodes of the KFD topology in node order (HIP numbers the GPU nodes 0, 1, ... in that order)."""
    base = root / TOPOLOGY
    try:
        nodes = sorted((p for p in base.iterdir() if is_ascii_int(p.name, 9)), key=lambda p: int(p.name))
    except OSError:
        return []
    gpus: list[Gpu] = []
    for node in nodes:
        try:
            props = _properties(node / "properties")
        except OSError as exc:  # kept as a GPU whose arch cannot be read: silence would hide it (issue 34)
            why = printable(exc.strerror or exc, 120)
            gpus.append(Gpu(len(gpus), "amd", None, f"AMD GPU? (KFD node {node.name}: properties unreadable: {why})"))
            continue
        raw = props.get("gfx_target_version")
        version = ascii_int(raw, 9)
        if raw is not None and version is None:  # a GPU whose arch cannot be read: kept, the caller cannot decide
            gpus.append(Gpu(len(gpus), "amd", None, f"AMD GPU (gfx_target_version {shown(raw)} in {node})"))
            continue
        arch = gfx_name(version or 0)
        if arch is None:
            continue
        minor = props.get("drm_render_minor")
        render = f"/dev/dri/renderD{_int(minor)}" if minor and _int(minor) > 0 else None
        gpus.append(Gpu(len(gpus), "amd", arch, AMD_PRODUCTS.get(arch, f"AMD {arch}"), render))
    return gpus


Query = Callable[[], str | None]


def nvidia_smi_query() -> str | None:
    """The driver's device list as CSV, or None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    argv = [exe, "--query-gpu=index,name,compute_cap", "--format=csv,noheader"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def cuda_gpus(root: Path = Path("/"), query: Query = nvidia_smi_query) -> list[Gpu]:
    """NVIDIA GPUs from the driver query (`0, NVIDIA H200, 9.0` -> sm_90), else named from /proc/driver/nvidia."""
    text = query()
    gpus: list[Gpu] = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and is_ascii_int(parts[0], 9):
            cap = re.fullmatch(r"(\d+)\.(\d+)", parts[2])
            arch = f"sm_{cap.group(1)}{cap.group(2)}" if cap else None
            gpus.append(Gpu(int(parts[0]), "nvidia", arch, parts[1]))
    if gpus or text is not None:
        return gpus
    for i, info in enumerate(sorted((root / "proc/driver/nvidia/gpus").glob("*/information"))):
        model = _properties_colon(info).get("Model", "NVIDIA GPU")
        gpus.append(Gpu(i, "nvidia", None, model))
    return gpus


def _properties_colon(path: Path) -> dict[str, str]:
    try:
        lines = read_bounded(path, MAX_DRIVER_FILE).decode("utf-8", "replace").splitlines()
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines) if k.strip()}


def _may_open(st: os.stat_result, who: Identity) -> bool:
    """Read-write permission of a node for `who` by its mode bits (root passes, as the kernel's DAC check does)."""
    if who.uid == 0:
        return True
    if st.st_uid == who.uid:
        return bool(st.st_mode & stat.S_IRUSR and st.st_mode & stat.S_IWUSR)
    if st.st_gid in who.gids:
        return bool(st.st_mode & stat.S_IRGRP and st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IROTH and st.st_mode & stat.S_IWOTH)


def device_node(root: Path, path: str, who: Identity | None = None) -> DeviceNode:
    """The node's owner and mode; openable: opened read-write for real (who=None: also catches a device cgroup
    that refuses it), or judged from the mode bits for `who` (simulated trees, another user)."""
    full = root / path.lstrip("/")
    try:
        st = full.stat()
    except OSError:
        return DeviceNode(path, False, error="not present")
    mode = stat.filemode(st.st_mode)
    if who is not None:
        ok = _may_open(st, who)
        return DeviceNode(path, True, st.st_gid, mode, ok, None if ok else "permission denied (mode bits)")
    try:
        fd = os.open(full, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return DeviceNode(path, True, st.st_gid, mode, False, exc.strerror or str(exc))
    os.close(fd)
    return DeviceNode(path, True, st.st_gid, mode, True)


def nodes_for(root: Path, paths: list[str], who: Identity | None = None) -> list[DeviceNode]:
    """Each device node a container opens (a kind's `device_paths`: /dev/kfd and each render node, /dev/nvidiactl
    and /dev/nvidiaN), as `device_node` finds it."""
    return [device_node(root, p, who) for p in paths]


def visible(gpus: list[Gpu], env: dict[str, str], names: tuple[str, ...]) -> list[Gpu]:
    """The GPUs a runtime would use: the first of its visible-devices variables that is set (a kind's
    VISIBLE_VARIABLES: HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES), when it holds indices
    (UUIDs are left to the runtime); each GPU keeps its driver index in messages."""
    for name in names:
        value = env.get(name)
        if value is None:
            continue
        items = [item.strip() for item in value.split(",") if item.strip()]
        if not all(is_ascii_int(item, 9) for item in items):  # UUIDs are the runtime's; `²` is not an index
            return gpus
        by_index = {g.index: g for g in gpus}
        return [by_index[int(i)] for i in items if int(i) in by_index]
    return gpus


def first_line(path: Path) -> str | None:
    """A driver file's first line, read bounded (MAX_DRIVER_FILE), at most 200 printable characters."""
    try:
        lines = read_bounded(path, MAX_DRIVER_FILE, what="a driver version file").decode("utf-8", "replace")
    except OSError:
        return None
    first = lines.strip().splitlines()[:1]
    return printable(first[0].strip(), 200) if first else None


# --- min_driver: the one check, run by the preflight, doctor and the smoke suite --------------------------------

_RELEASE = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,7}", re.ASCII)


def release(version: str | None) -> tuple[int, ...]:
    """A driver version's leading numeric release, ASCII digits only, bounded: '550.54.14' -> (550, 54, 14)."""
    match = _RELEASE.match(version or "")
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def driver_version(root: Path, file: str | None, pattern: re.Pattern[str] | None) -> str | None:
    """The loaded kernel driver's version from a kind's DRIVER_FILE (under `root`, read bounded) and its
    DRIVER_VERSION pattern; None when the kind has none or the file cannot be read or says no version."""
    if file is None or pattern is None:
        return None
    try:
        text = read_bounded(root / file, MAX_DRIVER_FILE, what="a driver version file").decode("ascii", "replace")
    except OSError:
        return None
    found = pattern.search(text)
    return found.group(1) if found and release(found.group(1)) else None


def min_driver(minimum: str | None, live: str | None, who: str) -> tuple[str, str] | None:
    """The manifest's platform.min_driver against the loaded driver's version: ("fail", why) when older,
    ("skip", why) when the version could not be read, None when it holds or nothing is asked. `who` names the
    driver in the skip line (nvidia, amd)."""
    if not minimum:
        return None
    if live is None:
        return "skip", f"the {who} driver's version could not be read: min_driver {minimum} not checked"
    if release(live) < release(minimum):
        return (
            "fail",
            f"driver {live} is older than {minimum}, the lowest this image runs on (manifest platform.min_driver)",
        )
    return None
