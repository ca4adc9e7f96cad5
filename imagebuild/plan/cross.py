"""Which targets have one Dockerfile for every OCI platform with their pip steps cross-installed (issue 22), and the
stages that Dockerfile has (render/platforms.py renders it; the plan's stage table is read off the same list).

A target qualifies when nothing of its image compiles against the image's torch: a CPU platform, a torch wheel,
pure-Python (CPU-only kernels) components and a pip runtime. Its target-platform stages install only the system
packages; everything pip places runs on $BUILDPLATFORM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagebuild.matrix.oci_platform import platform
from imagecontract import kinds

if TYPE_CHECKING:
    from imagebuild.matrix import Target


def oci_arch(oci: str) -> str:
    """linux/arm64 -> arm64, linux/arm64/v8 -> arm64: the value of ${TARGETARCH} (a stage-name suffix); a
    ConfigError for a platform matrix/oci_platform.py does not know."""
    return platform(oci).architecture


def cross_reason(target: Target) -> str | None:
    """Why target's pip steps cannot all run on the build platform (None: they can).

    A GPU platform qualifies when nothing compiles in the image: no component at all (a CUDA stack made of wheels,
    issue 31); a CPU platform's kernels components are pure Python there."""
    from imagebuild.matrix import PipRuntime

    kind = target.platform.kind
    if kinds.platform(kind).VENDOR is not None and target.components and not target.compiles_with_wheels:
        return f"a {kind} image compiles its components against torch in the image"
    if target.torch_build.obtain != "wheel":
        return "torch is built from source"
    if target.runtime is None:
        return "it has no pip runtime"
    if not isinstance(target.runtime, PipRuntime):
        return f"the {target.runtime.kind} runtime builds in the image"
    for name, component in target.components:
        if component.kind != "kernels":
            return f"component {name} ({component.kind}) compiles in the image"
    return None


def one_dockerfile(target: Target) -> bool:
    """Whether target renders through dockerfiles/templates/cross/ (one Dockerfile for all its OCI platforms)."""
    return cross_reason(target) is None


def stage_names(target: Target, components: list[str]) -> list[tuple[str, str]]:
    """(stage, what it starts FROM) of the cross Dockerfile, in its order; `@<oci>` stands for that platform's base
    image (only the plan of that platform knows it) and components are the included ones."""
    arches = [oci_arch(oci) for oci in target.oci_platforms]
    stages = [(f"os-{a}", f"@{oci}") for a, oci in zip(arches, target.oci_platforms, strict=True)]
    stages.append(("build-base", "os-${BUILDARCH}"))
    stages += [(f"apt-{a}", "os-${BUILDARCH}") for a in arches] + [("apt", "apt-${TARGETARCH}")]
    stages.append(("base", "os-${TARGETARCH}"))
    stages += [(f"torch-{a}", "build-base") for a in arches]
    compiled = target.compiles_with_wheels
    if not compiled:  # pure Python on this platform: built once, installed into every venv
        stages += [(f"component-{name}", "build-base") for name in components]
    stages += [(f"venv-{a}", f"torch-{a}") for a in arches]
    stages += [(f"manifest-{a}", "scratch") for a in arches]
    stages += [("venv", "venv-${TARGETARCH}"), ("manifest", "manifest-${TARGETARCH}")]
    if compiled:  # compiled on the target platform against its venv, with the compiler wheels placed for it
        stages += [(f"cuda-compiler-{a}", "build-base") for a in arches] + [
            ("cuda-compiler", "cuda-compiler-${TARGETARCH}")
        ]
        stages += [(f"component-{name}", "base") for name in components]
    stages += [(f"final-{a}", "base") for a in arches] + [("final", "final-${TARGETARCH}")]
    return stages
