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

if TYPE_CHECKING:
    from imagebuild.matrix import Matrix, Target
    from imagebuild.plan.target_plan import TargetPlan

TEMPLATE = "cross/Dockerfile.j2"
# OCI architecture (TARGETARCH) -> the machine name in wheel platform tags
WHEEL_ARCH = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}


def oci_arch(oci: str) -> str:
    """linux/arm64 -> arm64, linux/arm64/v8 -> arm64: the value of ${TARGETARCH} (a stage-name suffix)."""
    parts = oci.split("/")
    if len(parts) < 2 or parts[0] != "linux" or parts[1] not in WHEEL_ARCH:
        known = ", ".join(f"linux/{a}" for a in WHEEL_ARCH)
        raise ConfigError(f"OCI platform {oci}: no wheel tags known for it (known: {known})")
    return parts[1]


def cross_reason(target: Target) -> str | None:
    """Why target's pip steps cannot all run on the build platform (None: they can)."""
    kind = target.platform.kind
    if kind != "cpu":
        return f"a {kind} image compiles its components against torch in the image"
    if target.torch_build.obtain != "wheel":
        return "torch is built from source"
    if target.runtime is None:
        return "it has no pip runtime"
    if target.runtime.kind != "pip":
        return f"the {target.runtime.kind} runtime builds in the image"
    for name, component in target.components:
        if component.kind != "kernels":
            return f"component {name} ({component.kind}) compiles in the image"
    return None


def one_dockerfile(target: Target) -> bool:
    """Whether target renders through the cross templates (one Dockerfile for all its OCI platforms)."""
    return cross_reason(target) is None


def _platform_context(plan: TargetPlan, locked: dict[str, str]) -> dict[str, Any]:
    target = plan.target
    build = target.torch_build
    arch = oci_arch(plan.oci)
    runtime = target.runtime
    return {
        "oci": plan.oci,
        "arch": arch,
        "pyarch": WHEEL_ARCH[arch],
        "base_ref": plan.stage("base").parent,
        "torch": {
            "reported_version": target.torch.reported_version(target.platform.kind),
            "obtain": build.obtain,
            "index_url": build.index_url,
            "find_links": "build/wheelhouse" if build.find_links else None,
        },
        "requirements": runtime.requirements if runtime is not None and runtime.kind == "pip" else None,
        "manifest_path": plan.manifest_path,
        "labels": plan.labels,
        "locked": locked,
    }


def render_cross(matrix: Matrix, plan: TargetPlan) -> tuple[list[TargetPlan], str]:
    """Every OCI platform's plan of plan's target (its files in plan's folder) and their one Dockerfile."""
    from imagebuild.plan.target_plan import plan_for
    from imagebuild.render import dockerfile

    target = next((t for t in matrix.targets if t.name == plan.name), None)
    if target is None:
        raise ConfigError(f"target {plan.name} is not in {matrix.path.name}")
    resolution = None if plan.default else plan.resolution
    plans = [
        plan if oci == plan.oci else plan_for(matrix, target, resolution, out_dir=plan.out_dir, oci=oci)
        for oci in target.oci_platforms
    ]
    first = plans[0]
    oci = []
    for each in plans:
        sets = locked_sets(each)
        oci.append(_platform_context(each, {stage: f"{each.out_dir}/{name}" for stage, (name, _) in sets.items()}))
    arches = [p["arch"] for p in oci]
    if len(set(arches)) != len(arches):
        raise ConfigError(f"target {first.name}: two OCI platforms of one arch ({', '.join(target.oci_platforms)})")
    context = {**dockerfile._context(first), "oci": oci, "locked_build": oci[0]["locked"]}
    env = dockerfile.environment(first.root / "dockerfiles" / "templates")
    return plans, env.get_template(TEMPLATE).render(**context)


def locked_sets(plan: TargetPlan) -> dict[str, tuple[str, str]]:
    """The plan's locked pip sets (render.dockerfile), a non-first platform's named requirements/<stage>.<os>-<arch>.txt
    beside the first's."""
    from imagebuild.render import dockerfile

    sets = dockerfile._locked_sets(plan)
    if plan.primary:
        return sets
    suffix = f".{slug(plan.oci)}.txt"
    return {stage: (name.removesuffix(".txt") + suffix, text) for stage, (name, text) in sets.items()}
