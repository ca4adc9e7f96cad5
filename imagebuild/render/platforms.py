"""One Dockerfile for every OCI platform of a target (issue 22), with its pip steps cross-installed.

A target whose image only places wheels (a CPU torch wheel, pure-Python components, a pip runtime) renders through
dockerfiles/templates/cross/: the target platform's stages install the system packages (the only step that runs the
target's code, emulated on a host of another arch), every pip step runs on $BUILDPLATFORM with
`pip install --target --platform ... --only-binary=:all:` (hashes kept) and the final stage copies the result.
What differs per OCI platform (base image, torch version and index, the runtime's pins, the manifest, the labels)
is one small stage per platform chosen by ${TARGETARCH}, rendered from that platform's plan: one BuildKit build can
make every platform, and a build of one platform (Docker 20.10, or `--platform`) reads only its own stages.

Files: one Dockerfile under dockerfiles/<target>/ and one manifest per platform beside it (manifest.json for the
first, manifest.<os>-<arch>.json for the others); no dockerfiles/<target>/<os>-<arch>/ copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from imagebuild.errors import ConfigError
from imagebuild.matrix.oci import slug
from imagebuild.matrix.oci_platform import platform
from imagebuild.plan.cross import cross_reason, oci_arch, one_dockerfile

if TYPE_CHECKING:
    from imagebuild.matrix import Matrix
    from imagebuild.plan.target_plan import TargetPlan

TEMPLATE = "cross/Dockerfile.j2"


def _platform_context(plan: TargetPlan, locked: dict[str, str]) -> dict[str, Any]:
    target = plan.target
    build = target.torch_build
    arch = oci_arch(plan.oci)
    names = platform(plan.oci)
    runtime = target.runtime
    return {
        "oci": plan.oci,
        "arch": arch,  # ${TARGETARCH}: the stage-name suffix
        "debian": names.debian,  # apt's architecture (APT::Architecture)
        "pyarch": names.machine,  # the machine of its wheel tags (cross.py platforms)
        "base_ref": plan.stage(f"os-{arch}").parent,
        "torch": {
            "reported_version": target.torch.reported_version(target.platform.kind),
            "obtain": build.obtain,
            "index_url": build.index_url,
            "find_links": "build/wheelhouse" if build.find_links else None,
        },
        "requirements": getattr(runtime, "requirements", None),  # a pip runtime's file (else: locked["runtime"])
        "packages": list(getattr(runtime, "packages", None) or []),
        "extra_index": getattr(runtime, "index_url", None),  # a vllm runtime's index besides PyPI (AMD's ROCm builds)
        "manifest_path": plan.manifest_path,
        "labels": plan.labels,
        "locked": locked,
    }


def sibling_plans(matrix: Matrix, plan: TargetPlan) -> list[TargetPlan]:
    """Every OCI platform's plan of plan's target (plan itself for its own), their files in plan's folder."""
    from imagebuild.plan.target_plan import plan_for

    target = next((t for t in matrix.targets if t.name == plan.name), None)
    if target is None:
        raise ConfigError(f"target {plan.name} is not in {matrix.path.name}")
    resolution = None if plan.default else plan.resolution
    plans = [
        plan if oci == plan.oci else plan_for(matrix, target, resolution, out_dir=plan.out_dir, oci=oci)
        for oci in target.oci_platforms
    ]
    arches = [oci_arch(p.oci) for p in plans]
    if len(set(arches)) != len(arches):
        raise ConfigError(f"target {plan.name}: two OCI platforms of one arch ({', '.join(target.oci_platforms)})")
    return plans


def platform_context(plan: TargetPlan, sets: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """The template's `oci` entry of one platform; sets are its locked pip sets (render.dockerfile)."""
    locked = {stage: f"{plan.out_dir}/{name}" for stage, (name, _) in renamed(plan, sets).items()}
    return _platform_context(plan, locked)


def renamed(plan: TargetPlan, sets: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """A non-first platform's locked sets named requirements/<stage>.<os>-<arch>.txt beside the first's."""
    if plan.primary:
        return sets
    suffix = f".{slug(plan.oci)}.txt"
    return {stage: (name.removesuffix(".txt") + suffix, text) for stage, (name, text) in sets.items()}


__all__ = ["TEMPLATE", "cross_reason", "one_dockerfile", "platform_context", "renamed", "sibling_plans"]
