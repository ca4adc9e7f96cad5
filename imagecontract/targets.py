"""GPU target IDs: the one parser the host (arch resolution) and the image (verifier, smoke) both use.

A target ID written by the host must mean the same thing when the image reads it back; four parsers with four
alias tables did not (`sm_90+PTX` rendered by the host was an unknown arch to the in-image verifier).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Vendor = Literal["amd", "nvidia"]

# AMD processors (LLVM AMDGPU names) and the target features each accepts.
AMD_FEATURES: dict[str, frozenset[str]] = {
    "gfx900": frozenset({"xnack"}),
    "gfx906": frozenset({"sramecc", "xnack"}),
    "gfx908": frozenset({"sramecc", "xnack"}),
    "gfx90a": frozenset({"sramecc", "xnack"}),
    "gfx940": frozenset({"sramecc", "xnack"}),
    "gfx941": frozenset({"sramecc", "xnack"}),
    "gfx942": frozenset({"sramecc", "xnack"}),
    "gfx950": frozenset({"sramecc", "xnack"}),
    "gfx1030": frozenset(),
    "gfx1100": frozenset(),
    "gfx1101": frozenset(),
    "gfx1102": frozenset(),
    "gfx1200": frozenset(),
    "gfx1201": frozenset(),
}
AMD_PRODUCTS: dict[str, str] = {
    "gfx900": "MI25",
    "gfx906": "MI50/MI60",
    "gfx908": "MI100",
    "gfx90a": "MI210/MI250/MI250X",
    "gfx940": "MI300 (early)",
    "gfx941": "MI300 (early)",
    "gfx942": "MI300X/MI300A/MI325X",
    "gfx950": "MI350X/MI355X",
    "gfx1030": "Radeon PRO W6800/V620",
    "gfx1100": "Radeon PRO W7900/RX 7900",
    "gfx1101": "Radeon PRO W7800",
    "gfx1102": "Radeon RX 7600",
    "gfx1200": "Radeon RX 9060",
    "gfx1201": "Radeon RX 9070",
}
# NVIDIA SM versions known to CUDA 12/13 toolchains: name -> compute capability.
NVIDIA_SMS: dict[str, str] = {
    "sm_70": "7.0",
    "sm_75": "7.5",
    "sm_80": "8.0",
    "sm_86": "8.6",
    "sm_87": "8.7",
    "sm_89": "8.9",
    "sm_90": "9.0",
    "sm_90a": "9.0a",
    "sm_100": "10.0",
    "sm_100a": "10.0a",
    "sm_120": "12.0",
}
# Product names per SM, for lookups by card name (the compatibility page): NVIDIA's compute capability table,
# https://developer.nvidia.com/cuda-gpus (data center and workstation cards; read 2026-12).
NVIDIA_PRODUCTS: dict[str, str] = {
    "sm_70": "V100",
    "sm_75": "T4/RTX 2080",
    "sm_80": "A100/A30",
    "sm_86": "A10/A40/RTX A6000/RTX 3090",
    "sm_87": "Jetson AGX Orin",
    "sm_89": "L4/L40/L40S/RTX 4090",
    "sm_90": "H100/H200/GH200",
    "sm_100": "B200/GB200",
    "sm_120": "RTX 5090/RTX PRO 6000",
}
# The one alias table: architecture names TORCH_CUDA_ARCH_LIST accepts, expanded as torch expands them
# (named_arches in torch/utils/cpp_extension.py, torch 2.13.0 wheel, git cf30153c4c13, lines 2666-2680).
# Only names whose whole expansion is in NVIDIA_SMS (torch's Blackwell adds 10.3 and 12.1, unknown here).
NVIDIA_NAMED: dict[str, str] = {
    "volta": "7.0+PTX",
    "turing": "7.5+PTX",
    "ampere+tegra": "8.7",
    "ampere": "8.0;8.6+PTX",
    "ada": "8.9+PTX",
    "hopper": "9.0+PTX",
}
# LLVM knows only these target ID features (getAllPossibleAMDGPUTargetIDFeatures, clang/lib/Basic/TargetID.cpp).
AMDGPU_FEATURES = ("sramecc", "xnack")
_CAPABILITY_TO_SM = {cap: sm for sm, cap in NVIDIA_SMS.items()}
KNOWN_NAMES: tuple[str, ...] = tuple(AMD_FEATURES) + tuple(NVIDIA_SMS)

_LIST_SEPARATORS = re.compile(r"[;,\s]+")
_AMD_FEATURE = re.compile(r"^(sramecc|xnack)([+-])$")
_FEATURE_RE = re.compile(r"^([a-z0-9_]+)([+-])$")


class TargetError(ValueError):
    """A target ID or list that does not parse; `hint` says what would."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint

    def __str__(self) -> str:
        return self.message + (f" ({self.hint})" if self.hint else "")


@dataclass(frozen=True, order=True)
class GpuTarget:
    """One GPU code target: an AMD target ID (processor + features) or an NVIDIA SM (optionally + PTX)."""

    vendor: Vendor
    processor: str
    features: tuple[str, ...] = ()
    ptx: bool = False

    @property
    def id(self) -> str:
        """The full ID, as compilers take it: `gfx942:sramecc+:xnack-`, `sm_90`, `sm_90+PTX`."""
        if self.vendor == "amd":
            return ":".join((self.processor, *self.features))
        return self.processor + ("+PTX" if self.ptx else "")

    @property
    def capability(self) -> str:
        """Compute capability (`9.0`) for NVIDIA targets."""
        return NVIDIA_SMS[self.processor]

    @property
    def bare(self) -> GpuTarget:
        """The processor alone: no features, no PTX."""
        return GpuTarget(self.vendor, self.processor)

    @property
    def ptx_id(self) -> str | None:
        """`compute_90` for an NVIDIA target with PTX (how fat binaries list it), else None."""
        return "compute_" + self.processor.removeprefix("sm_") if self.ptx else None

    def __str__(self) -> str:
        return self.id


def _unknown(raw: str) -> TargetError:
    close = difflib.get_close_matches(raw.lower(), KNOWN_NAMES, n=3, cutoff=0.5)
    hint = f"closest known: {', '.join(close)}" if close else f"known: {', '.join(KNOWN_NAMES)}"
    return TargetError(f"unknown GPU target '{raw}'", hint=hint)


def _parse_amd(raw: str) -> GpuTarget:
    processor, *features = raw.split(":")
    processor = processor.lower()
    if processor not in AMD_FEATURES:
        raise _unknown(raw)
    allowed = AMD_FEATURES[processor]
    seen: dict[str, str] = {}
    for feature in features:
        match = _AMD_FEATURE.match(feature.lower())
        if not match or match.group(1) not in allowed:
            valid = ", ".join(f"{name}+/-" for name in sorted(allowed)) or "none"
            raise TargetError(f"invalid feature '{feature}' in GPU target '{raw}'", hint=f"{processor} takes: {valid}")
        if match.group(1) in seen:
            raise TargetError(f"feature '{match.group(1)}' given twice in GPU target '{raw}'")
        seen[match.group(1)] = match.group(0)
    # LLVM requires the features of a target ID in alphabetical order.
    return GpuTarget("amd", processor, tuple(seen[name] for name in sorted(seen)))


def _parse_nvidia(raw: str) -> GpuTarget:
    text = raw.strip()
    ptx = False
    if text.upper().endswith("+PTX"):
        ptx, text = True, text[: -len("+PTX")]
    lowered = text.lower()
    if lowered.startswith("compute_"):  # a virtual (PTX) arch: taking it for sm_XX would drop the PTX silently
        sm = "sm_" + lowered.split("_", 1)[1]
        raise TargetError(
            f"GPU target '{raw}' is a PTX (virtual) arch, not a GPU",
            hint=f"write {sm}+PTX for {sm} code plus PTX, or {sm} for {sm} code only",
        )
    if lowered.startswith("sm_"):
        name = lowered
    elif re.fullmatch(r"\d+\.\d+a?", lowered):
        name = _CAPABILITY_TO_SM.get(lowered, "")
    else:
        name = ""
    if name not in NVIDIA_SMS:
        raise _unknown(raw)
    return GpuTarget("nvidia", name, (), ptx)


def parse_target(raw: str) -> GpuTarget:
    """Parse one target ID in any accepted spelling; unknown IDs raise TargetError with the closest names."""
    text = raw.strip()
    if not text:
        raise TargetError("empty GPU target")
    if text.lower().startswith("gfx"):
        return _parse_amd(text)
    return _parse_nvidia(text)


def _expand(item: str) -> list[GpuTarget]:
    """One list item: a target ID, or an architecture name (`Hopper`, `Ampere+PTX`) from the alias table."""
    lowered = item.lower()
    name = lowered if lowered in NVIDIA_NAMED else lowered.removesuffix("+ptx")
    if name not in NVIDIA_NAMED:
        return [parse_target(item)]
    extra_ptx = name != lowered
    return [
        GpuTarget("nvidia", t.processor, (), t.ptx or extra_ptx)
        for t in map(_parse_nvidia, NVIDIA_NAMED[name].split(";"))
    ]


def parse_list(spec: str | Iterable[str], variants: bool = False) -> list[GpuTarget]:
    """Parse a list (`;`, `,` or space separated, or an iterable); keep order, drop exact duplicates.

    variants: accept one processor with several feature settings (`gfx90a:xnack+;gfx90a:xnack-`), as a code
    object listing may hold; a build's arch list may not (its variables would disagree on the processor).
    """
    items = _LIST_SEPARATORS.split(spec.strip()) if isinstance(spec, str) else list(spec)
    targets: list[GpuTarget] = []
    for item in items:
        if item:
            targets.extend(target for target in _expand(item) if target not in targets)
    processors = [target.processor for target in targets]
    duplicates = sorted({name for name in processors if processors.count(name) > 1})
    if duplicates and not variants:
        raise TargetError(
            f"GPU target(s) {', '.join(duplicates)} listed more than once with different features or PTX flags"
        )
    return targets


def format_list(targets: Iterable[GpuTarget]) -> str:
    """The list as the host writes it into a build (`gfx90a;gfx942:xnack-`, `sm_80;sm_90+PTX`): parse_list reads
    it back to the same targets."""
    return ";".join(t.id for t in targets)


# --- compatibility: does a code object load on a device ------------------------------------------------


def split_id(text: str) -> tuple[str, dict[str, str]] | None:
    """`gfx942:sramecc+:xnack-` -> ("gfx942", {"sramecc": "+", "xnack": "-"}); None when a feature is malformed or
    unknown to LLVM (such a code object never loads). Processors are not checked: code objects may name any."""
    proc, *parts = text.split(":")
    features: dict[str, str] = {}
    for part in parts:
        m = _FEATURE_RE.match(part)
        if not proc or not m or m.group(1) in features or m.group(1) not in AMDGPU_FEATURES:
            return None
        features[m.group(1)] = m.group(2)
    return proc, features


def loads_on(code_object: str, device: str) -> bool:
    """LLVM's isCompatibleTargetID (clang/lib/Basic/TargetID.cpp, llvm-project 5c3355625bc9): same processor, and
    every feature the code object fixes has the same sign on the device. A device feature left unspecified (an ID
    read from an override, not the GPU) is taken to match. NVIDIA IDs compare by processor (+PTX ignored)."""
    have, dev = split_id(code_object.removesuffix("+PTX")), split_id(device.removesuffix("+PTX"))
    if have is None or dev is None or have[0] != dev[0]:
        return False
    return all(dev[1].get(feature, sign) == sign for feature, sign in have[1].items())


def device_configs(request: str) -> list[str] | None:
    """Every concrete device setting an AMD request covers: its features as given, the others either way."""
    parsed = split_id(request)
    if parsed is None:
        return None
    configs: list[dict[str, str]] = [{}]
    for feature in AMDGPU_FEATURES:
        signs = [parsed[1][feature]] if feature in parsed[1] else ["+", "-"]
        configs = [{**c, feature: sign} for c in configs for sign in signs]
    return [":".join([parsed[0], *(f"{k}{v}" for k, v in c.items())]) for c in configs]
