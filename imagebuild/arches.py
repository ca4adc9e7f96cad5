"""GPU target IDs: parsing, the known tables, resolution per target and component, and the env fan-out.

One resolved list per build; every variable a build stage reads for arches is derived from it, so no
stage can fall back to a default or autodetect (the classic "arch list silently dropped" failure).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from imagebuild.errors import ConfigError

Vendor = Literal["amd", "nvidia"]

# AMD processors (LLVM AMDGPU names) and the target features each accepts.
_AMD_FEATURES: dict[str, frozenset[str]] = {
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
# Architecture names torch's TORCH_CUDA_ARCH_LIST accepts, expanded the way torch expands them.
_NVIDIA_NAMED: dict[str, tuple[str, ...]] = {
    "volta": ("sm_70",),
    "turing": ("sm_75",),
    "ampere": ("sm_80", "sm_86"),
    "ada": ("sm_89",),
    "hopper": ("sm_90",),
}
_CAPABILITY_TO_SM = {cap: sm for sm, cap in NVIDIA_SMS.items()}
KNOWN_NAMES: tuple[str, ...] = tuple(_AMD_FEATURES) + tuple(NVIDIA_SMS)

_LIST_SEPARATORS = re.compile(r"[;,\s]+")
_AMD_FEATURE = re.compile(r"^(sramecc|xnack)([+-])$")


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

    def __str__(self) -> str:
        return self.id


def _unknown(raw: str) -> ConfigError:
    close = difflib.get_close_matches(raw.lower(), KNOWN_NAMES, n=3, cutoff=0.5)
    hint = f"closest known: {', '.join(close)}" if close else f"known: {', '.join(KNOWN_NAMES)}"
    return ConfigError(f"unknown GPU target '{raw}'", hint=hint)


def _parse_amd(raw: str) -> GpuTarget:
    processor, *features = raw.split(":")
    processor = processor.lower()
    if processor not in _AMD_FEATURES:
        raise _unknown(raw)
    allowed = _AMD_FEATURES[processor]
    seen: dict[str, str] = {}
    for feature in features:
        match = _AMD_FEATURE.match(feature.lower())
        if not match or match.group(1) not in allowed:
            valid = ", ".join(f"{name}+/-" for name in sorted(allowed)) or "none"
            raise ConfigError(f"invalid feature '{feature}' in GPU target '{raw}'", hint=f"{processor} takes: {valid}")
        if match.group(1) in seen:
            raise ConfigError(f"feature '{match.group(1)}' given twice in GPU target '{raw}'")
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
        raise ConfigError(
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
    """Parse one target ID in any accepted spelling; unknown IDs raise ConfigError with the closest names."""
    text = raw.strip()
    if not text:
        raise ConfigError("empty GPU target")
    if text.lower().startswith("gfx"):
        return _parse_amd(text)
    return _parse_nvidia(text)


def parse_list(spec: str | Iterable[str]) -> list[GpuTarget]:
    """Parse a list (`;`, `,` or space separated, or an iterable); keep order, drop exact duplicates."""
    items = _LIST_SEPARATORS.split(spec.strip()) if isinstance(spec, str) else list(spec)
    targets: list[GpuTarget] = []
    for item in items:
        if not item:
            continue
        lowered = item.lower().removesuffix("+ptx")
        if lowered in _NVIDIA_NAMED:
            expanded = [GpuTarget("nvidia", sm, (), item.lower().endswith("+ptx")) for sm in _NVIDIA_NAMED[lowered]]
        else:
            expanded = [parse_target(item)]
        targets.extend(target for target in expanded if target not in targets)
    processors = [target.processor for target in targets]
    duplicates = sorted({name for name in processors if processors.count(name) > 1})
    if duplicates:
        raise ConfigError(
            f"GPU target(s) {', '.join(duplicates)} listed more than once with different features or PTX flags"
        )
    return targets


# --- fan-out: one resolved list -> every variable the stages read -------------------------------------


def _amd_full(targets: list[GpuTarget]) -> str:
    return ";".join(t.id for t in targets)


def _amd_processors(targets: list[GpuTarget]) -> str:
    return ";".join(t.processor for t in targets)


def _torch_cuda_list(targets: list[GpuTarget]) -> str:
    return ";".join(t.capability + ("+PTX" if t.ptx else "") for t in targets)


def _cmake_cuda(targets: list[GpuTarget]) -> str:
    # CMake: "90-real" is SASS only; plain "90" adds PTX too.
    return ";".join(t.capability.replace(".", "") + ("" if t.ptx else "-real") for t in targets)


# variable -> (vendor, formatter, why). Features are kept where the tool passes IDs to the compiler
# verbatim; CK flash-attention and AOTriton compare bare processor names.
ARCH_VARIABLES: dict[str, tuple[Vendor, Callable[[list[GpuTarget]], str], str]] = {
    "PYTORCH_ROCM_ARCH": ("amd", _amd_full, "torch and torch extensions (cpp_extension) on ROCm"),
    "GPU_TARGETS": ("amd", _amd_full, "CMake HIP projects"),
    "AMDGPU_TARGETS": ("amd", _amd_full, "CMake HIP projects (older name)"),
    "GPU_ARCHS": ("amd", _amd_processors, "ROCm flash-attention (CK); bare processor names"),
    "FA_GFX_ARCHS": ("amd", _amd_processors, "vLLM's flash-attention build; bare processor names"),
    "AOTRITON_TARGET_ARCH": ("amd", _amd_processors, "AOTriton (SDPA on ROCm); bare processor names"),
    "TORCH_CUDA_ARCH_LIST": ("nvidia", _torch_cuda_list, "torch and torch extensions on CUDA"),
    "CMAKE_CUDA_ARCHITECTURES": ("nvidia", _cmake_cuda, "CMake CUDA projects"),
}
PLATFORM_VENDOR: dict[str, Vendor | None] = {"rocm": "amd", "cuda": "nvidia", "cpu": None}
# How a component's build wants the list: `full` keeps AMD target features (gfx942:sramecc+:xnack-) and NVIDIA
# +PTX; `bare` gives processor names / capabilities only, for builds that compare names exactly (vLLM's CMake
# filter, ROCm flash-attention's allow-list) and would drop or reject an ID with features.
ArchForm = Literal["bare", "full"]


def format_variable(name: str, form: ArchForm, targets: list[GpuTarget]) -> str:
    """One variable's value in the form one component reads it."""
    if form == "bare":
        targets = [GpuTarget(t.vendor, t.processor) for t in targets]
    if name in ("GPU_ARCHS", "FA_GFX_ARCHS", "AOTRITON_TARGET_ARCH") and form == "full":
        return _amd_full(targets)
    return ARCH_VARIABLES[name][1](targets)


ENV_OVERRIDE: dict[str, str] = {"rocm": "PYTORCH_ROCM_ARCH", "cuda": "TORCH_CUDA_ARCH_LIST"}


def fan_out(vendor: Vendor | None, targets: list[GpuTarget]) -> dict[str, str]:
    """Every arch variable of this vendor, all from the same list."""
    if vendor is None or not targets:
        return {}
    return {name: fmt(targets) for name, (var_vendor, fmt, _why) in ARCH_VARIABLES.items() if var_vendor == vendor}


# --- resolution ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchSupport:
    """What one component (or the torch build) says about arches; decoupled from the matrix models."""

    name: str
    supported: tuple[str, ...]
    experimental: tuple[str, ...] = ()
    optional: bool = False
    arch_vars: tuple[tuple[str, ArchForm], ...] = ()  # the variables its build reads, each in its form
    fixed_arches: tuple[str, ...] = ()  # arches its build hard-codes whatever the variables say


@dataclass
class ComponentPlan:
    """The outcome for one component: included for these arches, or left out and why."""

    name: str
    included: bool
    arches: list[GpuTarget] = field(default_factory=list)
    experimental: list[GpuTarget] = field(default_factory=list)
    reason: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # what its build stage sets, and nothing else
    fixed_arches: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "included": self.included,
            "arches": [t.id for t in self.arches],
            "experimental": [t.id for t in self.experimental],
            "reason": self.reason,
            "arch_vars": dict(self.env),
            "fixed_arches": list(self.fixed_arches),
        }


@dataclass
class Resolution:
    """The one arch list of a build, where it came from, and what each component does with it."""

    target: str
    platform_kind: str
    source: str
    arches: list[GpuTarget]
    components: dict[str, ComponentPlan]
    env: dict[str, str]

    @property
    def experimental(self) -> list[GpuTarget]:
        found: list[GpuTarget] = []
        for plan in self.components.values():
            found.extend(t for t in plan.experimental if t not in found)
        return found

    @property
    def arch_list(self) -> str:
        return ";".join(t.id for t in self.arches)

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "platform": self.platform_kind,
            "source": self.source,
            "arches": [t.id for t in self.arches],
            "experimental": [t.id for t in self.experimental],
            "components": {name: plan.as_dict() for name, plan in self.components.items()},
            "env": dict(self.env),
        }


def requested_arches(
    platform_kind: str, arch_arg: str | None, env: Mapping[str, str], default: Iterable[str]
) -> tuple[list[GpuTarget], str]:
    """Apply the resolution order: --arch > PYTORCH_ROCM_ARCH / TORCH_CUDA_ARCH_LIST > the matrix default."""
    if arch_arg is not None:
        if not arch_arg.strip():  # an unset CI variable, not a request for the default
            raise ConfigError("empty arch list (--arch '')", hint="leave --arch out for the matrix default")
        return parse_list(arch_arg), "--arch"
    variable = ENV_OVERRIDE.get(platform_kind)
    if variable and env.get(variable, "").strip():  # an empty variable counts as unset, as in torch's build
        return _parse_from(env[variable], f"env {variable}"), f"env {variable}"
    return parse_list(list(default)), "matrix default"


def _parse_from(spec: str, source: str) -> list[GpuTarget]:
    """parse_list, its errors naming the variable the list came from (`env PYTORCH_ROCM_ARCH: ...`)."""
    try:
        return parse_list(spec)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc.message}", hint=exc.hint) from None


def _plan_component(
    support: ArchSupport, targets: list[GpuTarget], allow_experimental: bool, problems: list[str]
) -> ComponentPlan:
    unsupported = [t for t in targets if t.processor not in support.supported + support.experimental]
    experimental = [t for t in targets if t.processor in support.experimental]
    if unsupported:
        names = ", ".join(t.id for t in unsupported)
        supported = ", ".join(support.supported) or "none"
        if support.optional:
            return ComponentPlan(
                support.name, False, reason=f"optional; left out: no support for {names} (supports {supported})"
            )
        problems.append(f"{support.name} does not support {names} (supported: {supported})")
    if experimental and not allow_experimental:
        names = ", ".join(t.id for t in experimental)
        problems.append(f"{names} is experimental for {support.name}: pass --allow-experimental to build it")
    env = {name: format_variable(name, form, targets) for name, form in support.arch_vars}
    return ComponentPlan(support.name, True, list(targets), experimental, None, env, list(support.fixed_arches))


def resolve(
    *,
    target: str,
    platform_kind: str,
    platform_arches: Iterable[str],
    default_arches: Iterable[str],
    components: Iterable[ArchSupport],
    arch_arg: str | None = None,
    env: Mapping[str, str] | None = None,
    allow_experimental: bool = False,
) -> Resolution:
    """Resolve the arch list of one target; every unsupported or experimental arch is an error or recorded."""
    env = env if env is not None else {}
    vendor = PLATFORM_VENDOR[platform_kind]
    if vendor is None:
        if arch_arg is not None and not arch_arg.strip():
            raise ConfigError("empty arch list (--arch '')", hint="leave --arch out for a CPU target")
        if arch_arg:
            raise ConfigError(f"target {target} is a CPU target and takes no GPU arch (got --arch {arch_arg})")
        plans = {c.name: ComponentPlan(c.name, True) for c in components}
        return Resolution(target, platform_kind, "cpu platform", [], plans, {})
    targets, source = requested_arches(platform_kind, arch_arg, env, default_arches)
    if not targets:
        raise ConfigError(f"target {target}: the arch list from {source} is empty")
    known = tuple(platform_arches)
    wrong_vendor = [t.id for t in targets if t.vendor != vendor]
    if wrong_vendor:
        raise ConfigError(
            f"{', '.join(wrong_vendor)} from {source} is not a {platform_kind.upper()} arch; "
            f"target {target} builds for {', '.join(known)}"
        )
    outside = [t.id for t in targets if t.processor not in known]
    if outside:
        raise ConfigError(
            f"{', '.join(outside)} from {source} is not an arch of target {target}'s platform",
            hint=f"the platform supports {', '.join(known)}",
        )
    problems: list[str] = []
    plans = {c.name: _plan_component(c, targets, allow_experimental, problems) for c in components}
    if problems:
        raise ConfigError(f"target {target} ({source}): " + "; ".join(problems))
    return Resolution(target, platform_kind, source, targets, plans, fan_out(vendor, targets))
