"""The TargetPlan: every fact one (target, arch resolution) builds into, computed once.

`render`, `build`, `bake`, `arches` and `matrix list` read a plan; none of them re-derives a stage, a variable,
a label, a path or a tag. A plan for a non-default arch resolution lives under build/render/, so it never touches
the committed dockerfiles/<target>/ files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from imagebuild.errors import ConfigError
from imagebuild.matrix import TgiRuntime
from imagebuild.matrix.oci import for_oci
from imagebuild.plan import cross
from imagebuild.plan.image_key import ImageKey, arch_variant
from imagebuild.plan.manifest import manifest as build_manifest
from imagecontract import kinds
from imagecontract.models import Manifest, ModelError

if TYPE_CHECKING:
    from imagebuild.matrix import Matrix, Target
    from imagebuild.matrix.arches import Resolution
    from imagebuild.plan.git import GitInfo

COMMITTED_DIR = "dockerfiles"
RENDER_DIR = "build/render"
DEFAULT_SOURCES = ("matrix default", "cpu platform")
# The GPU kind `imagebuild smoke --gpu` takes for each platform kind (the device flags a smoke job needs).


class PlanSummary(TypedDict):
    """One target's entry of `matrix list --json` (TargetPlan.summary)."""

    name: str
    oci_platform: str
    oci_platforms: list[str]
    platform: str
    kind: str
    platform_version: str | None
    torch: str
    torch_obtained: str
    arches: list[str]
    arch_list: str
    platform_arches: list[str]
    components: list[str]
    not_for_this_platform: list[str]
    runtime: str | None
    dockerfile: str
    stages: list[str]
    smoke: list[dict[str, str]]


@dataclass(frozen=True)
class Stage:
    """One Dockerfile stage: its name, the stage or image it starts FROM, and the arch variables it sets."""

    name: str
    parent: str
    arch_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetPlan:
    """One target under one arch resolution: stages, variables, manifest, labels, paths; tags and build labels
    once the git revision is known."""

    target: Target
    resolution: Resolution  # what the files are rendered from (the matrix default's when they build the same)
    source: str  # where the arch list came from: --arch, an environment variable, the matrix
    default: bool  # builds what the matrix default builds: its files are the committed ones
    root: Path  # the repository (build context) the paths are relative to
    out_dir: str  # where its Dockerfile and manifest.json live, relative to root
    stages: tuple[Stage, ...]
    manifest: dict[str, Any]  # the image manifest as render writes it: document.to_dict()
    labels: dict[str, str]  # static labels, written as the Dockerfile's LABEL (never busting the cache)
    render_command: str  # the command named in the do-not-edit header
    image: ImageKey  # every name, tag, folder and record path of the image this plan builds
    document: Manifest  # the image manifest, the contract's model (imagecontract.models.Manifest)

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def oci(self) -> str:
        """The OCI platform this plan builds (linux/amd64, linux/arm64)."""
        return self.target.oci_platform

    @property
    def primary(self) -> bool:
        """The target's first OCI platform: its files, tags and records keep the target's plain names."""
        return self.image.primary

    @property
    def key(self) -> str:
        """The folder of its files (ImageKey.folder): `<target>` on every OCI platform."""
        return self.image.folder

    @property
    def suffix(self) -> str:
        """What the target name gets in tags, logs and records (ImageKey.suffix)."""
        return self.image.suffix

    @property
    def dockerfile(self) -> Path:
        return self.root / self.out_dir / "Dockerfile"

    @property
    def manifest_path(self) -> str:
        """Where the Dockerfile COPYs the manifest from, relative to the build context."""
        return f"{self.out_dir}/{self.image.manifest_name}"

    @property
    def log_path(self) -> Path:
        return self.image.log_path(self.root)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def build_labels(self, git: GitInfo, matrix_sha: str) -> dict[str, str]:
        """The labels only a build knows (revision, commit time, matrix checksum): passed with --label."""
        return {
            "org.opencontainers.image.revision": git.revision,
            "org.opencontainers.image.created": git.created,
            "io.imagebuild.matrix-sha256": matrix_sha,
            ImageKey.LABEL: self.image.label(),
        }

    def all_labels(self, git: GitInfo, matrix_sha: str) -> dict[str, str]:
        """Every label the built image carries (the Dockerfile's and the build's)."""
        return {**self.labels, **self.build_labels(git, matrix_sha)}

    def tags(self, git: GitInfo, extra: Sequence[str] = ()) -> list[str]:
        """`imagebuild:<name>`, `imagebuild:<name>-<short sha>`, then --tag values (ImageKey.tags)."""
        return self.image.tags(git.short, extra)

    def build_args(self, dockerfile_text: str) -> dict[str, str]:
        """Arch variables the Dockerfile declares as ARG (stages set them with ENV, so today none)."""
        declared = set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", dockerfile_text, flags=re.M))
        return {k: v for k, v in self.resolution.env.items() if k in declared}

    def smoke_jobs(self) -> list[dict[str, str]]:
        """One smoke job per GPU processor the image is built for (`cpu` for a CPU target), with its GPU kind."""
        gpu = kinds.platform(self.target.platform.kind).SMOKE_GPU
        processors: list[str] = []
        for arch in self.resolution.arches:
            if arch.processor not in processors:
                processors.append(arch.processor)
        return [{"arch": arch, "gpu": gpu} for arch in processors or [kinds.CPU_ARCH]]

    def summary(self) -> PlanSummary:
        """`matrix list --json`: what CI builds and where it smokes it."""
        target = self.target
        return {
            "name": target.name,
            "oci_platform": self.oci,
            "oci_platforms": list(target.oci_platforms),
            "platform": target.platform_name,
            "kind": target.platform.kind,
            "platform_version": target.platform.version,
            "torch": target.torch.version,
            "torch_obtained": target.torch_build.obtain,
            "arches": [t.id for t in self.resolution.arches],
            "arch_list": self.resolution.arch_list,
            "platform_arches": list(target.platform.arches),
            "components": [name for name, _ in target.components],
            "not_for_this_platform": list(target.skipped_components),
            "runtime": target.runtime_name,
            "dockerfile": f"{self.out_dir}/Dockerfile",
            "stages": [stage.name for stage in self.stages],
            "smoke": self.smoke_jobs(),
        }

    def describe(self) -> list[str]:
        """The plan as `--dry-run` prints it, the same for every command."""
        res = self.resolution
        lines = [
            f"plan {self.name} ({self.oci}): arches {res.arch_list or 'none (CPU)'} [from {self.source}]"
            + ("" if self.default else " (not the matrix default)"),
            f"  files   {self.out_dir}/Dockerfile, {self.manifest_path}",
        ]
        for name, comp in res.components.items():
            if not comp.included:
                lines.append(f"  leaves out {name}: {comp.reason}")
        lines += [f"  leaves out {name}: {reason}" for name, reason in self.target.left_out]
        lines += [f"  {self.oci}: {note}" for note in self.target.oci_notes]
        for stage in self.stages:
            shown = " ".join(f"{k}={v}" for k, v in stage.arch_env.items()) or "-"
            lines.append(f"  stage   {stage.name:<28} FROM {stage.parent:<10} {shown}")
        return lines


def image_ref(image: str, digest: str | None) -> str:
    return f"{image}@{digest}" if digest else image


def _cross_arch_env(stage: str, target: Target, resolution: Resolution) -> dict[str, str]:
    """A cross Dockerfile's arch variables: the final stage ships them; a component compiled there (a CUDA platform of
    wheels, Target.compiles_with_wheels) reads its own."""
    if stage == "final":
        return dict(resolution.env)
    name = stage.removeprefix("component-")
    if stage != name and target.compiles_with_wheels and (plan := resolution.components.get(name)) is not None:
        return dict(plan.env)
    return {}


def _stages(target: Target, resolution: Resolution) -> tuple[Stage, ...]:
    """The stages the Dockerfile has, in order, each with the arch variables it sets (and only those)."""
    platform, runtime = target.platform, target.runtime
    if cross.one_dockerfile(target):  # one Dockerfile for every OCI platform (plan/cross.py)
        included = [n for n, _ in target.components if (c := resolution.components.get(n)) is not None and c.included]
        own = image_ref(platform.base_image, platform.base_digest)
        return tuple(
            Stage(
                name,
                own if parent == f"@{target.oci_platform}" else parent.replace("@", "base image of "),
                _cross_arch_env(name, target, resolution),
            )
            for name, parent in cross.stage_names(target, included)
        )
    stages = [Stage("base", image_ref(platform.base_image, platform.base_digest))]
    torch_env = dict(resolution.components["pytorch"].env) if "pytorch" in resolution.components else {}
    if target.torch_build.obtain == "source":
        stages.append(Stage("torch-build", "base", torch_env))
    stages.append(Stage("torch", "base"))
    for name, _component in target.components:
        plan = resolution.components.get(name)
        if plan is not None and plan.included:
            stages.append(Stage(f"component-{name}", "torch", dict(plan.env)))
    if isinstance(runtime, TgiRuntime):
        builder = image_ref(runtime.builder_image, runtime.builder_digest)
        stages += [Stage("runtime-source", builder), Stage("runtime-build", builder)]
        stages.append(Stage("runtime-server", "torch", dict(resolution.env)))
    elif runtime is not None:
        stages.append(Stage("runtime-pip", "torch"))
    final = image_ref(platform.runtime_image, platform.runtime_digest) if platform.runtime_image else "torch"
    stages.append(Stage("final", final, dict(resolution.env)))
    return tuple(stages)


def _json_label(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def static_labels(manifest: Manifest) -> dict[str, str]:
    """The OCI labels that follow from the manifest (docs/contracts.md), the same in every build of the plan."""
    torch, source = manifest.torch, manifest.torch.source
    components = {
        name: (info.arches or [kinds.CPU_ARCH]) if info.included else "excluded"
        for name, info in manifest.components.items()
    }
    return {
        "org.opencontainers.image.title": manifest.target,
        "org.opencontainers.image.version": torch.version,
        "io.imagebuild.target": manifest.target,
        "io.imagebuild.platform": manifest.platform.name,
        "io.imagebuild.oci-platform": manifest.platform.oci,
        "io.imagebuild.torch": torch.version,
        "io.imagebuild.arches": ";".join(manifest.gpu_arches) or "none",
        "io.imagebuild.patches": ",".join(p.name for p in torch.patches),
        # Where a source-built torch came from: the fork carries its fixes, so no patch names them.
        "io.imagebuild.torch-source": (
            f"{source.git}@{source.commit or source.ref or 'HEAD'}" if source is not None and source.git else ""
        ),
        "io.imagebuild.components": _json_label(components),
        "io.imagebuild.versions": _json_label(manifest.to_dict()["versions"]),
    }


def _is_default(target: Target, resolution: Resolution) -> bool:
    """True when this resolution builds what the matrix default builds (then the committed files serve)."""
    if resolution.source in DEFAULT_SOURCES:
        return True
    default = target.resolve(env={})
    return [t.id for t in resolution.arches] == [t.id for t in default.arches] and {
        name: comp.as_dict() for name, comp in resolution.components.items()
    } == {name: comp.as_dict() for name, comp in default.components.items()}


def plan_for(
    matrix: Matrix,
    target: Target,
    resolution: Resolution | None = None,
    *,
    out_dir: str | None = None,
    oci: str | None = None,
) -> TargetPlan:
    """The plan of target under resolution (the matrix default when None) for one OCI platform (None: the one
    target is already for, else its first).

    out_dir (relative to the repository) overrides where the files live; the committed dockerfiles/ directory
    only ever holds the default resolution.
    """
    target = on_oci(matrix, target, oci)
    root = matrix.path.resolve().parent
    resolution = resolution or target.resolve(env={})
    source = resolution.source
    default = _is_default(target, resolution)
    if default and source not in DEFAULT_SOURCES:  # the same arches asked for by name: the committed files
        resolution = target.resolve(env={})
    image = image_key(target, resolution, default)
    where = out_dir or (f"{COMMITTED_DIR}/{image.folder}" if default else f"{RENDER_DIR}/{image.folder}")
    if not default and Path(where).parts[:1] == (COMMITTED_DIR,):
        raise ConfigError(
            f"target {target.name}: arches {resolution.arch_list} are not the matrix default; "
            f"their files never go to the committed {COMMITTED_DIR}/",
            hint=f"leave --out out (they go to {RENDER_DIR}/{target.name}) or name another directory",
        )
    command = f"imagebuild render {target.name}"
    if not image.primary:
        command += f" --platform {target.oci_platform}"
    if not default:
        command += f" --arch '{resolution.arch_list}'"
        if resolution.experimental:
            command += " --allow-experimental"
    document = build_manifest(target, resolution)
    manifest = document.to_dict()
    try:  # what crosses the seam fits the contract's model (every type checked), or the plan is not made
        document = Manifest.from_dict(manifest)
    except ModelError as exc:
        raise ConfigError(f"target {target.name}: the manifest does not fit the contract: {exc}") from None
    return TargetPlan(
        target=target,
        resolution=resolution,
        source=source,
        default=default,
        root=root,
        out_dir=where,
        stages=_stages(target, resolution),
        manifest=manifest,
        document=document,
        labels=static_labels(document),
        render_command=command,
        image=image,
    )


def image_key(target: Target, resolution: Resolution, default: bool) -> ImageKey:
    """The key of the image a placed target builds under resolution (default: what the matrix default builds)."""
    arches = tuple(t.id for t in resolution.arches)
    default_arches = arches if default else tuple(t.id for t in target.resolve(env={}).arches)
    return ImageKey(
        target=target.name,
        oci=target.oci_platform,
        platforms=tuple(target.oci_platforms),
        variant="" if default else arch_variant(arches),
        arches=arches,
        default_arches=default_arches,
    )


def resolve_plan(
    matrix: Matrix,
    target: Target,
    arch: str | None,
    env: Mapping[str, str],
    allow_experimental: bool = False,
    out_dir: str | None = None,
    oci: str | None = None,
) -> TargetPlan:
    """Resolve arches (--arch > environment > matrix) and plan; the one entry point of every command."""
    target = on_oci(matrix, target, oci)
    return plan_for(matrix, target, target.resolve(arch, dict(env), allow_experimental), out_dir=out_dir)


def on_oci(matrix: Matrix, target: Target, oci: str | None) -> Target:
    """target for OCI platform oci; None keeps the one it is for (a target from the matrix: its first)."""
    want = oci or (target.oci_platform if target.placed else target.oci_platforms[0])
    if target.placed and want == target.oci_platform:
        return target
    if target.placed:
        raise ConfigError(f"target {target.name} is already planned for {target.oci_platform}, not {want}")
    return for_oci(target, matrix.model.oci_platforms, want)


def oci_platforms(target: Target, wanted: Sequence[str] = ()) -> list[str]:
    """The OCI platforms to act on: those asked for (--platform), else every one the target lists."""
    return list(wanted) or list(target.oci_platforms)
