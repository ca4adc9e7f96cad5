"""OCI (CPU) platforms: what differs from the baseline, linux/amd64, on another CPU platform, in one section.

`matrix.yaml`'s `oci_platforms:` section says, per OCI platform other than the baseline, which platforms exist
there (with their base image and the GPU arches hosts of that CPU have), which torch builds are another version
or absent, which components are absent and where a runtime's pins for that platform live. `for_oci` turns a
target into the target of one OCI platform, or refuses with the reason, the way an unsupported GPU arch is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from imagebuild.errors import ConfigError
from imagebuild.matrix.oci_platform import OciPlatform as OciPlatform
from imagebuild.matrix.oci_rules import BASELINE as BASELINE
from imagebuild.matrix.oci_rules import OciRules as OciRules
from imagebuild.matrix.oci_rules import slug as slug

if TYPE_CHECKING:
    from imagebuild.matrix.targets import Target


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
        return dataclasses.replace(target, oci_platform=oci, placed=True)
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
        placed=True,
    )
