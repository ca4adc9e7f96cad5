"""GPU targets of a build: resolution per target and component (parsing and the fan-out are the contract's).

One resolved list per build; every variable a build stage reads for arches is derived from it, so no
stage can fall back to a default or autodetect (the classic "arch list silently dropped" failure).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from imagebuild.errors import ConfigError
from imagecontract import targets as _targets

# Re-exported (`as` names): callers keep importing the resolution's vocabulary from here.
from imagecontract.fanout import ARCH_VARIABLES as ARCH_VARIABLES
from imagecontract.fanout import PLATFORM_VENDOR as PLATFORM_VENDOR
from imagecontract.fanout import ArchForm as ArchForm
from imagecontract.fanout import fan_out as fan_out
from imagecontract.fanout import format_variable as format_variable
from imagecontract.kinds import PLATFORMS
from imagecontract.numbers import shown
from imagecontract.targets import AMD_PRODUCTS as AMD_PRODUCTS
from imagecontract.targets import KNOWN_NAMES as KNOWN_NAMES
from imagecontract.targets import NVIDIA_SMS as NVIDIA_SMS
from imagecontract.targets import GpuTarget as GpuTarget
from imagecontract.targets import TargetError, toolchain_gap

T = TypeVar("T", bound="_HasArches")


def _config_error(exc: TargetError) -> ConfigError:
    return ConfigError(exc.message, hint=exc.hint)


def parse_target(raw: str) -> GpuTarget:
    """The contract's parser (imagecontract.targets); unknown IDs raise ConfigError with the closest names."""
    try:
        return _targets.parse_target(raw)
    except TargetError as exc:
        raise _config_error(exc) from None


def parse_list(spec: str | Iterable[str]) -> list[GpuTarget]:
    """The contract's list parser (`;`, `,` or space separated; torch's names such as Hopper; product names such as
    MI300X, RX 7900 XTX or H100); errors as ConfigError."""
    try:
        return _targets.parse_list(spec)
    except TargetError as exc:
        raise _config_error(exc) from None


def name_notes(spec: str) -> list[str]:
    """What each product or family name of a list stands for (`MI300X is gfx942`, `RDNA4 names 2 GPUs: gfx1200,
    gfx1201`): said wherever one is resolved, so a name standing for several processors is never silent."""
    try:
        return [note for named in _targets.resolve_list(spec) if (note := named.note)]
    except TargetError as exc:
        raise _config_error(exc) from None


class _HasArches(Protocol):
    @property
    def platform(self) -> Any: ...


def targets_for_arch(targets: Iterable[T], arch: str) -> list[T]:
    """The targets whose platform builds one of the processors `arch` names (`--arch gfx942` with no target named:
    `build` and `arches` alike); none is a ConfigError."""
    asked = parse_list(arch)
    wanted = {t.processor for t in asked}
    chosen = [t for t in targets if wanted & {parse_target(a).processor for a in t.platform.arches}]
    if not chosen:
        said = "; ".join(name_notes(arch))
        raise ConfigError(
            f"no target's platform has arch {', '.join(t.id for t in asked)}" + (f" ({said})" if said else ""),
            hint="see `imagebuild matrix list`",
        )
    return chosen


# The variable that overrides a build's arch list, per platform kind (imagecontract/kinds: ARCH_VARIABLE).
ENV_OVERRIDE: dict[str, str] = {name: kind.ARCH_VARIABLE for name, kind in PLATFORMS.items() if kind.ARCH_VARIABLE}


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
        return _targets.format_list(self.arches)

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
    platform_version: str | None = None,
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
            raise ConfigError(f"target {target} is a CPU target and takes no GPU arch (got --arch {shown(arch_arg)})")
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
    outside = [t for t in targets if t.processor not in known]
    if outside:
        gaps = [gap for t in outside if (gap := toolchain_gap(t, vendor, platform_version))]
        raise ConfigError(
            f"{', '.join(t.id for t in outside)} from {source} is not an arch of target {target}'s platform"
            + (f": {'; '.join(gaps)}" if gaps else ""),
            hint=f"the platform supports {', '.join(known)}",
        )
    problems: list[str] = []
    plans = {c.name: _plan_component(c, targets, allow_experimental, problems) for c in components}
    if problems:
        raise ConfigError(f"target {target} ({source}): " + "; ".join(problems))
    return Resolution(target, platform_kind, source, targets, plans, fan_out(vendor, targets))
