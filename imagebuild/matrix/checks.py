"""The matrix cross-checks pydantic cannot do alone: references between sections, arches of the platform's
vendor, sources of the kind their template renders, repository paths confined, the `oci_platforms:` names.

Each check takes `fail(path, message, valid=None, value=None)`, which makes the located ConfigError
(file:line:column: key.path: message, with "did you mean" when valid and value are given); `targets.py` runs them
before it expands the target groups.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.matrix import arches
from imagebuild.matrix.fields import excerpt
from imagebuild.matrix.loader import KeyPath, _located_error, _Positions
from imagebuild.matrix.models import Combo, MatrixModel, TargetGroup
from imagebuild.matrix.oci_platform import KNOWN
from imagebuild.matrix.oci_rules import BASELINE
from imagebuild.matrix.runtimes import PipRuntime, TgiRuntime
from imagebuild.matrix.sources import Source

Fail = Callable[..., ConfigError]


def locator(file: Path, pos: _Positions) -> Fail:
    """The `fail` every check raises through: the error at the key path's line and column."""

    def fail(path: KeyPath, message: str, valid: list[str] | None = None, value: str | None = None) -> ConfigError:
        if valid is not None and value is not None:
            close = difflib.get_close_matches(value, valid, n=1, cutoff=0.5)
            message += f"; did you mean '{close[0]}'?" if close else f"; expected one of: {', '.join(valid)}"
        return _located_error(file, pos.find(path), path, message)

    return fail


def check_sections(model: MatrixModel, file: Path, fail: Fail) -> None:
    """Everything about platforms, torch builds, components and sources, before any target is made."""
    check_platforms(model, fail)
    check_torch(model, fail)
    check_components(model, fail)
    check_sources(model, file, fail)


def check_platforms(model: MatrixModel, fail: Fail) -> None:
    """A platform's arches are of its vendor; its default arches are among them."""
    for name, platform in model.platforms.items():
        processors = [arches.parse_target(a) for a in platform.arches]
        vendor = arches.PLATFORM_VENDOR[platform.kind]
        for i, target in enumerate(processors):
            if target.vendor != vendor:
                raise fail(("platforms", name, "arches", i), f"{target.id} is not a {platform.kind} arch")
        for i, arch in enumerate(platform.default_arches):
            if arches.parse_target(arch).processor not in {t.processor for t in processors}:
                raise fail(("platforms", name, "default_arches", i), f"{arch} is not in this platform's arches")


def check_torch(model: MatrixModel, fail: Fail) -> None:
    """A torch build's arches are of its kind, each GPU arch has attention backends, its variables are read."""
    for key, torch in model.torch.items():
        for kind, build in torch.builds.items():
            for field_name in ("supported", "experimental"):
                for i, arch in enumerate(getattr(build, field_name)):
                    if arches.PLATFORM_VENDOR[kind] != arches.parse_target(arch).vendor:
                        raise fail(("torch", key, "builds", kind, field_name, i), f"{arch} is not a {kind} arch")
            if arches.PLATFORM_VENDOR[kind] is not None:  # a GPU kind
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


def check_components(model: MatrixModel, fail: Fail) -> None:
    """A component's variables are read on its platforms, a GPU extension says how it gets its arches, and no
    arch is both supported and experimental."""
    for name, component in model.components.items():
        vendors = {arches.PLATFORM_VENDOR[kind] for kind in component.platforms}
        for var in component.arch_vars:
            if arches.ARCH_VARIABLES[var][0] not in vendors:
                raise fail(
                    ("components", name, "arch_vars", var),
                    f"{var} is not read on {', '.join(component.platforms)}",
                )
        gpu = [kind for kind in component.platforms if arches.PLATFORM_VENDOR[kind] is not None]
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


def check_group(model: MatrixModel, g: int, group: TargetGroup, fail: Fail) -> list[Combo]:
    """A target group's names exist; returns its (platform, torch) pairs: the axes crossed, includes added,
    excludes taken out (an exclude that matches nothing is an error: a typo would hide it)."""
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
            where = (*gpath, "components", i)
            raise fail(where, f"unknown component '{component_name}'", list(model.components), component_name)
    if group.runtime is not None and group.runtime not in model.runtimes:
        raise fail((*gpath, "runtime"), f"unknown runtime '{group.runtime}'", list(model.runtimes), group.runtime)
    check_runtime_refs(model, group.runtime, fail)
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
    return [c for c in combos if not any(_matches(rule, c) for rule in group.exclude)]


def check_sources(model: MatrixModel, file: Path, fail: Fail) -> None:
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
        elif runtime.requirements is not None:  # else its packages are resolved by the lock
            confined(("runtimes", name, "requirements"), runtime.requirements)


def check_runtime_refs(model: MatrixModel, name: str | None, fail: Fail) -> None:
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


def check_oci_references(model: MatrixModel, fail: Fail) -> None:
    """Every name under `oci_platforms:` (platforms, torch keys and builds, components, runtimes) exists, and every
    platform a target lists other than the baseline has its section: a typo would silently drop a refusal."""
    for oci, rules in model.oci_platforms.items():
        names: list[tuple[str, dict[str, object], dict[str, object]]] = [
            ("platforms", dict(rules.platforms), dict(model.platforms)),
            ("torch", dict(rules.torch), dict(model.torch)),
            ("components", dict(rules.components), dict(model.components)),
            ("runtimes", dict(rules.runtimes), dict(model.runtimes)),
        ]
        for section, used, known in names:
            for name in used:
                if name not in known:
                    where: KeyPath = ("oci_platforms", oci, section, name)
                    raise fail(where, f"unknown {section} entry '{name}'", list(known), name)
        for key, kinds in rules.torch.items():
            for kind in kinds:
                if kind not in model.torch[key].builds:
                    where = ("oci_platforms", oci, "torch", key, kind)
                    raise fail(where, f"torch {key} has no {kind} build", list(model.torch[key].builds), kind)
    for g, group in enumerate(model.targets):
        for i, oci in enumerate(group.oci_platforms):
            if oci != BASELINE and oci not in model.oci_platforms:
                raise fail(("targets", g, "oci_platforms", i), f"{oci} has no section under oci_platforms")


# What the smoke suite (smoke/serve.py) fills into a runtime's serve argv; the guard of a runtime with `limits`
# (smoke/serve_guard.py) fills `{upstream_port}`, the port it moves the runtime's `{port}` to.
SERVE_PLACEHOLDERS = ("model", "port")
GUARD_PLACEHOLDERS = ("upstream_port",)
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def check_runtime_limits(model: MatrixModel, fail: Fail) -> None:
    """Every `{name}` in a runtime's serve argv is one something fills in (a typo would reach the server as text,
    found only when the smoke suite starts it), and a runtime with `limits` names `{port}`: the guard takes that
    port and moves the runtime to `{upstream_port}`; without it the guard relays to a port nothing listens on."""
    for name, runtime in model.runtimes.items():
        limits = isinstance(runtime, PipRuntime) and runtime.limits is not None
        known = [f"{{{k}}}" for k in (*SERVE_PLACEHOLDERS, *(GUARD_PLACEHOLDERS if limits else ()))]
        for i, arg in enumerate(runtime.serve):
            for used in _PLACEHOLDER.findall(arg):
                if f"{{{used}}}" not in known:
                    where = ("runtimes", name, "serve", i)
                    why = " (the guard of a runtime with limits fills it)" if used in GUARD_PLACEHOLDERS else ""
                    raise fail(where, f"unknown placeholder '{{{used}}}'{why}", known, f"{{{used}}}")
        if limits and not any("{port}" in arg for arg in runtime.serve):
            raise fail(
                ("runtimes", name, "limits"),
                "limits put the guard on '{port}' and the runtime behind it, but serve never names '{port}'",
            )


def check_size_budgets(model: MatrixModel, targets: Iterable[str], fail: Fail) -> None:
    """Every `size_budgets` key is a target's name: a typo would leave the image unbudgeted, found only when the
    build measures it. A key naming a target and one of its OCI platforms (the image name `local-cpu-linux-arm64`)
    is refused with what a budget holds for: every OCI platform of its target."""
    names = list(targets)
    for key in model.size_budgets:
        if key in names:
            continue
        where = ("size_budgets", key)
        for oci in KNOWN:
            stem = key.removesuffix(f"-{oci.slug}")
            if stem != key and stem in names:
                raise fail(
                    where,
                    f"unknown target '{key}': a budget is per target and holds on every OCI platform it is built "
                    f"for ({oci.oci} included); name '{stem}'",
                )
        raise fail(where, f"unknown target '{key}'", names, key)


def _matches(rule: Combo, combo: Combo) -> bool:
    return (rule.platform is None or rule.platform == combo.platform) and (
        rule.torch is None or rule.torch == combo.torch
    )
