"""OCI (CPU) platforms: what differs from the baseline, linux/amd64, on another CPU platform, in one section.

`matrix.yaml`'s `oci_platforms:` section says, per OCI platform other than the baseline, which platforms exist
there (with their base image and the GPU arches hosts of that CPU have), which torch builds are another version
or absent, which components are absent and where a runtime's pins for that platform live. `for_oci` turns a
target into the target of one OCI platform, or refuses with the reason, the way an unsupported GPU arch is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pydantic import Field

from imagebuild.errors import ConfigError
from imagebuild.matrix.fields import (
    ArchName,
    Digest,
    ImageName,
    Name,
    PlatformKind,
    RepoPath,
    Text,
    TorchKey,
    Url,
    Version,
)
from imagebuild.matrix.fields import _typed as typed
from imagebuild.matrix.sources import Strict

if TYPE_CHECKING:
    from collections.abc import Callable

    from imagebuild.matrix.models import MatrixModel
    from imagebuild.matrix.targets import Target

BASELINE = "linux/amd64"
OciPlatform = typed("an OCI platform (linux/amd64 or linux/arm64)", r"linux/(?:amd64|arm64)")


class PlatformOnOci(Strict):
    base_image: ImageName | None = Field(default=None, description="Base image for this CPU platform.")
    base_digest: Digest | None = Field(default=None, description="sha256 digest pinning that base image.")
    arches: list[ArchName] | None = Field(
        default=None, description="The GPU arches hosts of this CPU platform have (unset: all of the platform's)."
    )
    unavailable: Text | None = Field(default=None, description="Why this platform has no build for it.")
    why: Text = Field(default="", description="What differs, for readers (recorded in the manifest).")


class TorchOnOci(Strict):
    version: Version | None = Field(default=None, description="The torch version installed on this CPU platform.")
    index_url: Url | None = Field(
        default=None, description="Package index of that wheel (instead of the baseline's local wheelhouse)."
    )
    unavailable: Text | None = Field(default=None, description="Why this torch build does not exist for it.")
    why: Text = Field(default="", description="Why the version differs (recorded in the manifest).")


class ComponentOnOci(Strict):
    unavailable: Text = Field(description="Why the component does not exist for this CPU platform.")


class RuntimeOnOci(Strict):
    requirements: RepoPath | None = Field(default=None, description="The pip runtime's pins for this platform.")
    unavailable: Text | None = Field(default=None, description="Why the runtime does not exist for it.")


class OciRules(Strict):
    platforms: dict[Name, PlatformOnOci] = Field(
        default={}, description="Platforms that exist for this CPU platform (an unlisted one does not)."
    )
    torch: dict[TorchKey, dict[PlatformKind, TorchOnOci]] = Field(
        default={}, description="Torch builds that differ or are absent here (unlisted: the same version)."
    )
    components: dict[Name, ComponentOnOci] = Field(default={}, description="Components absent here.")
    runtimes: dict[Name, RuntimeOnOci] = Field(default={}, description="Runtimes that differ or are absent here.")


def slug(oci: str) -> str:
    """linux/arm64 -> linux-arm64 (directory, tag and file names)."""
    return oci.replace("/", "-")


def for_oci(target: Target, rules: dict[str, OciRules], oci: str | None = None) -> Target:
    """The target as built for one OCI platform (its first listed one when None); a ConfigError says why not."""
    oci = oci or target.oci_platforms[0]
    name = target.name
    listed = ConfigError(
        f"target {name} is not built for {oci}",
        hint=f"it lists {', '.join(target.oci_platforms)} (targets: oci_platforms in matrix.yaml)",
    )
    if oci == BASELINE:
        if oci not in target.oci_platforms:
            raise listed
        return dataclasses.replace(target, oci_platform=oci)
    rule = rules.get(oci)
    place = rule.platforms.get(target.platform_name) if rule else None
    if place is None or place.unavailable:
        reason = place.unavailable if place else f"oci_platforms.{oci}.platforms does not list it"
        raise ConfigError(f"target {name}: platform {target.platform_name} has no {oci} build: {reason}")
    assert rule is not None
    kind = target.platform.kind
    torch_rule = rule.torch.get(target.torch_key, {}).get(kind)
    if torch_rule and torch_rule.unavailable:
        raise ConfigError(
            f"target {name}: torch {target.torch.version} ({kind}) has no {oci} build: {torch_rule.unavailable}"
        )
    if oci not in target.oci_platforms:
        raise listed
    notes = [f"platform: {place.why}"] if place.why else []
    platform = target.platform
    if place.base_image:
        platform = platform.model_copy(update={"base_image": place.base_image, "base_digest": place.base_digest})
    if place.arches is not None:
        keep = set(place.arches)
        platform = platform.model_copy(
            update={
                "arches": [a for a in platform.arches if a in keep],
                "default_arches": [a for a in platform.default_arches if a in keep],
            }
        )
    torch = target.torch
    if torch_rule and torch_rule.version:
        torch = torch.model_copy(update={"version": torch_rule.version})
        notes.append(f"torch {torch_rule.version} (not {target.torch.version}): {torch_rule.why}")
    if torch_rule and torch_rule.index_url:
        build = torch.builds[kind].model_copy(update={"index_url": torch_rule.index_url, "find_links": None})
        torch = torch.model_copy(update={"builds": {**torch.builds, kind: build}})
    components, left_out = [], list(target.left_out)
    for comp_name, component in target.components:
        absent = rule.components.get(comp_name)
        if absent is None:
            components.append((comp_name, component))
        elif component.optional:
            left_out.append((comp_name, f"no {oci} build: {absent.unavailable}"))
        else:
            raise ConfigError(f"target {name}: component {comp_name} has no {oci} build: {absent.unavailable}")
    runtime, runtime_name = target.runtime, target.runtime_name
    run_rule = rule.runtimes.get(runtime_name) if runtime_name else None
    if run_rule and run_rule.unavailable:
        notes.append(f"runtime {runtime_name} absent: {run_rule.unavailable}")
        runtime, runtime_name = None, None
    elif run_rule and run_rule.requirements and runtime is not None:
        runtime = runtime.model_copy(update={"requirements": run_rule.requirements})
    return dataclasses.replace(
        target,
        platform=platform,
        torch=torch,
        torch_build=torch.builds[kind],
        components=tuple(components),
        left_out=tuple(left_out),
        runtime=runtime,
        runtime_name=runtime_name,
        oci_platform=oci,
        oci_notes=tuple(notes),
    )


def check_references(model: MatrixModel, fail: Callable[..., ConfigError]) -> None:
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
                    where = ("oci_platforms", oci, section, name)
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
