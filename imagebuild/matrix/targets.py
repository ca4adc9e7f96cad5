"""Target expansion: the target groups crossed into targets, after the cross-checks pydantic cannot do alone
(references between sections, arches of the platform's vendor, sources of the kind their template renders,
repository paths confined, target names that are image tags, default arches that resolve).
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.matrix import arches
from imagebuild.matrix.fields import ArchForm, excerpt
from imagebuild.matrix.loader import KeyPath, _located_error, _Positions, format_path
from imagebuild.matrix.models import Combo, Component, MatrixModel, Platform, Torch, TorchBuild, TunableOp
from imagebuild.matrix.oci import check_references as check_oci_references
from imagebuild.matrix.runtimes import PipRuntime, TgiRuntime
from imagebuild.matrix.sources import Source


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
    runtime: TgiRuntime | PipRuntime | None
    tunableop: TunableOp
    allow_experimental: bool
    oci_platforms: tuple[str, ...] = ("linux/amd64",)  # the OCI (CPU) platforms it is built for
    oci_platform: str = "linux/amd64"  # the one this target value is for (matrix.oci.for_oci)
    oci_notes: tuple[str, ...] = ()  # what differs on that OCI platform, and why (recorded in the manifest)
    left_out: tuple[tuple[str, str], ...] = ()  # optional components absent on that OCI platform, with the reason

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
            components=self.arch_supports(),
            arch_arg=arch_arg,
            env=env,
            allow_experimental=allow_experimental or self.allow_experimental,
        )


def _vars_for(vendor: str | None, wanted: dict[str, ArchForm]) -> tuple[tuple[str, ArchForm], ...]:
    """The arch variables of this vendor only: a ROCm stage never gets TORCH_CUDA_ARCH_LIST."""
    return tuple((name, form) for name, form in wanted.items() if arches.ARCH_VARIABLES[name][0] == vendor)


def _check_references(model: MatrixModel, pos: _Positions, file: Path) -> list[Target]:
    """Cross-checks pydantic cannot do alone; returns the expanded targets."""

    def fail(path: KeyPath, message: str, valid: list[str] | None = None, value: str | None = None) -> ConfigError:
        if valid is not None and value is not None:
            close = difflib.get_close_matches(value, valid, n=1, cutoff=0.5)
            message += f"; did you mean '{close[0]}'?" if close else f"; expected one of: {', '.join(valid)}"
        return _located_error(file, pos.find(path), path, message)

    for name, platform in model.platforms.items():
        processors = [arches.parse_target(a) for a in platform.arches]
        vendor = arches.PLATFORM_VENDOR[platform.kind]
        for i, target in enumerate(processors):
            if target.vendor != vendor:
                raise fail(("platforms", name, "arches", i), f"{target.id} is not a {platform.kind} arch")
        for i, arch in enumerate(platform.default_arches):
            if arches.parse_target(arch).processor not in {t.processor for t in processors}:
                raise fail(("platforms", name, "default_arches", i), f"{arch} is not in this platform's arches")
    for key, torch in model.torch.items():
        for kind, build in torch.builds.items():
            for field_name in ("supported", "experimental"):
                for i, arch in enumerate(getattr(build, field_name)):
                    if arches.PLATFORM_VENDOR[kind] != arches.parse_target(arch).vendor:
                        raise fail(("torch", key, "builds", kind, field_name, i), f"{arch} is not a {kind} arch")
            if kind != "cpu":
                covered = set()
                for arch in build.attention:
                    try:
                        covered.add(arches.parse_target(arch).processor)
                    except ConfigError as exc:
                        raise fail(("torch", key, "builds", kind, "attention", arch), str(exc)) from None
                missing = sorted(set(build.supported + build.experimental) - covered)
                if missing:
                    raise fail(
                        ("torch", key, "builds", kind, "attention"),
                        f"no attention backends listed for {', '.join(missing)}",
                    )
            for var in build.arch_vars:
                if arches.ARCH_VARIABLES[var][0] != arches.PLATFORM_VENDOR[kind]:
                    raise fail(("torch", key, "builds", kind, "arch_vars", var), f"{var} is not read on {kind}")
    for name, component in model.components.items():
        vendors = {arches.PLATFORM_VENDOR[kind] for kind in component.platforms}
        for var in component.arch_vars:
            if arches.ARCH_VARIABLES[var][0] not in vendors:
                raise fail(
                    ("components", name, "arch_vars", var),
                    f"{var} is not read on {', '.join(component.platforms)}",
                )
        gpu = [kind for kind in component.platforms if kind != "cpu"]
        if component.kind == "python-ext" and gpu and not (component.arch_vars or component.fixed_arches):
            raise fail(
                ("components", name),
                "a GPU component needs arch_vars (what its build reads) or fixed_arches (what it hard-codes)",
            )
        both = set(component.supported) & set(component.experimental)
        if both:
            raise fail(
                ("components", name, "experimental"), f"{', '.join(sorted(both))} listed as supported and experimental"
            )

    _check_sources(model, file, fail)
    targets: list[Target] = []
    seen: dict[str, KeyPath] = {}
    for g, group in enumerate(model.targets):
        gpath: KeyPath = ("targets", g)
        for i, platform_name in enumerate(group.axes.platform):
            if platform_name not in model.platforms:
                raise fail(
                    (*gpath, "axes", "platform", i),
                    f"unknown platform '{platform_name}'",
                    list(model.platforms),
                    platform_name,
                )
        for i, torch_key in enumerate(group.axes.torch):
            if torch_key not in model.torch:
                raise fail((*gpath, "axes", "torch", i), f"unknown torch '{torch_key}'", list(model.torch), torch_key)
        for i, component_name in enumerate(group.components):
            if component_name not in model.components:
                raise fail(
                    (*gpath, "components", i),
                    f"unknown component '{component_name}'",
                    list(model.components),
                    component_name,
                )
        if group.runtime is not None and group.runtime not in model.runtimes:
            raise fail((*gpath, "runtime"), f"unknown runtime '{group.runtime}'", list(model.runtimes), group.runtime)
        _check_runtime_refs(model, group.runtime, fail)
        combos = [Combo(platform=p, torch=t) for p, t in itertools.product(group.axes.platform, group.axes.torch)]
        for i, extra in enumerate(group.include):
            if extra.platform is None or extra.torch is None:
                raise fail((*gpath, "include", i), "an include entry needs both platform and torch")
            if extra.platform not in model.platforms or extra.torch not in model.torch:
                raise fail(
                    (*gpath, "include", i), f"unknown platform or torch in include ({extra.platform}, {extra.torch})"
                )
            combos.append(extra)
        for i, rule in enumerate(group.exclude):
            if not any(_matches(rule, c) for c in combos):
                raise fail((*gpath, "exclude", i), "this exclude entry matches no target (a typo would hide it)")
        combos = [c for c in combos if not any(_matches(rule, c) for rule in group.exclude)]
        for combo in combos:
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
            if name in seen:
                raise fail((*gpath, "name"), f"target name '{name}' repeats the one of {format_path(seen[name])}")
            seen[name] = gpath
            chosen = [
                (c, model.components[c]) for c in group.components if platform.kind in model.components[c].platforms
            ]
            skipped = tuple(c for c in group.components if platform.kind not in model.components[c].platforms)
            runtime = model.runtimes[group.runtime] if group.runtime else None
            targets.append(
                Target(
                    name=name,
                    platform_name=combo.platform,
                    platform=platform,
                    torch_key=combo.torch,
                    torch=torch,
                    torch_build=torch.builds[platform.kind],
                    components=tuple(chosen),
                    skipped_components=skipped,
                    runtime_name=group.runtime,
                    runtime=runtime,
                    tunableop=model.tunableop,
                    allow_experimental=group.allow_experimental or model.settings.allow_experimental,
                    oci_platforms=tuple(group.oci_platforms),
                )
            )
    for target in targets:
        try:
            target.resolve(env={})
        except ConfigError as exc:
            raise fail(seen[target.name], f"default arches do not resolve: {exc}") from None
    check_oci_references(model, fail)  # after the targets: their own errors come first
    return targets


MAX_TAG = 128  # an image tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}, and target names are tags


def _check_sources(model: MatrixModel, file: Path, fail: Callable[..., ConfigError]) -> None:
    """Each source is of the kind its template renders (a git checkout, a URL, a repository path), and every
    repository path stays inside the repository once symlinks are resolved: nothing renders `None` into a
    command, and no COPY reaches outside the build context."""
    root = file.resolve().parent

    def confined(where: KeyPath, relative: str) -> None:
        resolved = (root / relative).resolve()
        if not resolved.is_relative_to(root):
            raise fail(
                where, f"{excerpt(relative)} leaves the repository {root} (resolves to {excerpt(str(resolved))})"
            )

    def need(where: KeyPath, source: Source, kind: str, why: str) -> None:
        if getattr(source, kind) is None:
            raise fail(where, f"needs a {kind} source: {why}")

    for key, torch in model.torch.items():
        for kind, build in torch.builds.items():
            where: KeyPath = ("torch", key, "builds", kind)
            if build.source is not None:
                need((*where, "source"), build.source, "git", "a torch source build is a git checkout")
            for i, patch in enumerate(build.patches):
                if patch.url is None and (patch.git is None or patch.commit is None):
                    raise fail(
                        (*where, "patches", i),
                        "a patch is a url (with sha256) or a git commit (git and commit); "
                        "the torch template applies nothing else",
                    )
    for name, component in model.components.items():
        where = ("components", name, "source")
        if component.kind == "kernels":
            need(where, component.source, "path", "a kernels component is copied from this repository")
        else:
            need(where, component.source, "git", "a python-ext component is built from a git checkout")
        if component.source.path is not None:
            confined((*where, "path"), component.source.path)
    for name, runtime in model.runtimes.items():
        if isinstance(runtime, TgiRuntime):
            need(("runtimes", name, "source"), runtime.source, "git", "TGI is built from a git checkout")
        else:
            confined(("runtimes", name, "requirements"), runtime.requirements)


def _check_runtime_refs(model: MatrixModel, name: str | None, fail: Callable[..., ConfigError]) -> None:
    """Components named by a TGI runtime's attention needs exist (a typo would silently drop a promise)."""
    runtime = model.runtimes.get(name) if name else None
    if not isinstance(runtime, TgiRuntime):
        return
    for which, needs in (("flash", runtime.attention.flash), ("paged", runtime.attention.paged)):
        for kind, names in needs.items():
            for i, component in enumerate(names):
                if component not in model.components:
                    where = ("runtimes", name, "attention", which, kind, i)
                    raise fail(where, f"unknown component '{component}'", list(model.components), component)


def _matches(rule: Combo, combo: Combo) -> bool:
    return (rule.platform is None or rule.platform == combo.platform) and (
        rule.torch is None or rule.torch == combo.torch
    )
