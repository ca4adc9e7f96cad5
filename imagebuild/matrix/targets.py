"""Target expansion: the target groups crossed into targets, after the cross-checks pydantic cannot do alone
(references between sections, arches of the platform's vendor, sources of the kind their template renders,
repository paths confined, target names that are image tags, default arches that resolve).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.matrix import arches
from imagebuild.matrix.checks import Fail, check_group, check_oci_references, check_sections, locator
from imagebuild.matrix.fields import ArchForm, ArchVariable, excerpt
from imagebuild.matrix.loader import KeyPath, _Positions, format_path
from imagebuild.matrix.models import Combo, Component, MatrixModel, Platform, TargetGroup, Torch, TorchBuild, TunableOp
from imagebuild.matrix.oci_rules import BASELINE
from imagebuild.matrix.runtimes import PipRuntime, TgiRuntime


@dataclass(frozen=True)
class Target:
    """One expanded target: a platform, a torch build, components and a runtime, ready to resolve and render."""

    name: str
    platform_name: str
    platform: Platform
    torch_key: str
    torch: Torch
    torch_build: TorchBuild
    components: tuple[tuple[str, Component], ...]
    skipped_components: tuple[str, ...]
    runtime_name: str | None
    runtime: TgiRuntime | PipRuntime | None  # a VllmRuntime is a PipRuntime
    tunableop: TunableOp
    allow_experimental: bool
    oci_platforms: tuple[str, ...] = (BASELINE,)  # the OCI (CPU) platforms it is built for
    oci_platform: str = BASELINE  # the one this target value is for (matrix.oci.for_oci); unplaced: the baseline's
    oci_notes: tuple[str, ...] = ()  # what differs on that OCI platform, and why (recorded in the manifest)
    left_out: tuple[tuple[str, str], ...] = ()  # optional components absent on that OCI platform, with the reason
    placed: bool = False  # True once for_oci made it the target of one OCI platform (the matrix's are not yet)
    coverage_required: tuple[str, ...] = ()  # libraries that must run on every requested arch (prove/coverage.py)

    @property
    def compiles_with_wheels(self) -> bool:
        """Whether its kernels compile in its one cross Dockerfile: a GPU platform of wheels that names its CUDA
        compiler wheels (platforms.<p>.cuda_compiler), compiled on the target platform against the venv's torch
        (issue 31; plan/cross.py places the stages, lock/inputs.py locks the compiler set)."""
        return bool(self.platform.cuda_compiler) and any(c.kind == "kernels" for _, c in self.components)

    def arch_supports(self) -> list[arches.ArchSupport]:
        """The torch build and every component, as the arch resolver sees them."""
        vendor = arches.PLATFORM_VENDOR[self.platform.kind]
        build = self.torch_build
        supports = [
            arches.ArchSupport(
                "pytorch",
                tuple(build.supported),
                tuple(build.experimental),
                arch_vars=_vars_for(vendor, build.arch_vars),
            )
        ]
        for name, component in self.components:
            supports.append(
                arches.ArchSupport(
                    name,
                    tuple(component.supported),
                    tuple(component.experimental),
                    component.optional,
                    _vars_for(vendor, component.arch_vars),
                    tuple(a for a in component.fixed_arches if arches.parse_target(a).vendor == vendor),
                )
            )
        return supports

    def resolve(
        self, arch_arg: str | None = None, env: dict[str, str] | None = None, allow_experimental: bool = False
    ) -> arches.Resolution:
        return arches.resolve(
            target=self.name,
            platform_kind=self.platform.kind,
            platform_arches=[arches.parse_target(a).processor for a in self.platform.arches],
            default_arches=self.platform.default_arches,
            platform_version=self.platform.version,
            components=self.arch_supports(),
            arch_arg=arch_arg,
            env=env,
            allow_experimental=allow_experimental or self.allow_experimental,
        )


def _vars_for(vendor: str | None, wanted: dict[ArchVariable, ArchForm]) -> tuple[tuple[str, ArchForm], ...]:
    """The arch variables of this vendor only: a ROCm stage never gets TORCH_CUDA_ARCH_LIST."""
    return tuple((name, form) for name, form in wanted.items() if arches.ARCH_VARIABLES[name][0] == vendor)


def _check_references(model: MatrixModel, pos: _Positions, file: Path) -> list[Target]:
    """The cross-checks (matrix/checks.py), then the target groups expanded into targets."""
    fail = locator(file, pos)
    check_sections(model, file, fail)
    targets: list[Target] = []
    seen: dict[str, KeyPath] = {}
    for g, group in enumerate(model.targets):
        for combo in check_group(model, g, group, fail):
            target = _target(model, group, combo, fail, ("targets", g))
            if target.name in seen:
                raise fail(
                    ("targets", g, "name"),
                    f"target name '{target.name}' repeats the one of {format_path(seen[target.name])}",
                )
            seen[target.name] = ("targets", g)
            targets.append(target)
    for target in targets:
        try:
            target.resolve(env={})
        except ConfigError as exc:
            raise fail(seen[target.name], f"default arches do not resolve: {exc}") from None
    check_oci_references(model, fail)  # after the targets: their own errors come first
    return targets


def _target(model: MatrixModel, group: TargetGroup, combo: Combo, fail: Fail, gpath: KeyPath) -> Target:
    """One (platform, torch) pair of a group as a target, its name a valid image tag."""
    assert combo.platform is not None and combo.torch is not None
    platform = model.platforms[combo.platform]
    torch = model.torch[combo.torch]
    if platform.kind not in torch.builds:
        raise fail(
            (*gpath, "axes"),
            f"torch '{combo.torch}' has no {platform.kind} build for platform {combo.platform}; "
            f"add one or exclude the pair",
        )
    try:
        name = group.name.format(platform=combo.platform, torch=combo.torch)
    except (KeyError, IndexError, ValueError) as exc:
        raise fail((*gpath, "name"), f"bad name template ({exc}); use {{platform}} and {{torch}}") from None
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name) or len(name) > MAX_TAG:
        raise fail(
            (*gpath, "name"),
            f"target name {excerpt(name)} is not a valid image tag "
            f"(at most {MAX_TAG} characters: a-z, 0-9, '.', '_', '-', starting with a letter or digit)",
        )
    chosen = [(c, model.components[c]) for c in group.components if platform.kind in model.components[c].platforms]
    skipped = tuple(c for c in group.components if platform.kind not in model.components[c].platforms)
    return Target(
        name=name,
        platform_name=combo.platform,
        platform=platform,
        torch_key=combo.torch,
        torch=torch,
        torch_build=torch.builds[platform.kind],
        components=tuple(chosen),
        skipped_components=skipped,
        runtime_name=group.runtime,
        runtime=model.runtimes[group.runtime] if group.runtime else None,
        tunableop=model.tunableop,
        allow_experimental=group.allow_experimental or model.settings.allow_experimental,
        oci_platforms=tuple(group.oci_platforms),
        coverage_required=tuple(group.coverage_required),
    )


MAX_TAG = 128  # an image tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}, and target names are tags
