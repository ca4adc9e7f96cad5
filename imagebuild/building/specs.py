"""Turn matrix targets into BuildSpecs, each read off the target's TargetPlan (imagebuild/plan/target_plan.py).

Kept apart from build.py (which only runs builds) so that `build --dry-run` and `bake` share one plan.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.building import base_substitute
from imagebuild.building.buildkit import BuildSpec
from imagebuild.errors import ConfigError
from imagebuild.plan.git import GitInfo
from imagebuild.plan.target_plan import RENDER_DIR, oci_platforms, resolve_plan

if TYPE_CHECKING:
    from imagebuild.matrix import Matrix, Target


@dataclass(frozen=True)
class PlanOptions:
    """The build command's options that shape a plan."""

    arch: str | None = None
    allow_experimental: bool = False
    tags: tuple[str, ...] = ()
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    builder: str | None = None
    no_cache: bool = False
    platforms: tuple[str, ...] = ()  # OCI platforms (--platform); empty: every one the target lists
    base_substitutes: tuple[str, ...] = ()  # --base-substitute PUBLIC=LOCAL[,platform=OCI] (build/base_substitute.py)


def select_targets(matrix: Matrix, names: Sequence[str], arch: str | None) -> list[Target]:
    """Named targets; with none named and --arch, every target whose platform has one of those arches."""
    if names:
        return matrix.select(list(names))
    if not arch:
        return list(matrix.targets)
    from imagebuild.matrix.arches import targets_for_arch

    return targets_for_arch(matrix.targets, arch)


def torch_wheels(target: Target, env: Mapping[str, str]) -> list[Path]:
    """The torch wheel(s) of a wheelhouse target ($PIP_FIND_LINKS overrides the matrix's find_links)."""
    build = target.torch_build
    where = env.get("PIP_FIND_LINKS") or build.find_links
    if not where:
        return []
    folder = Path(where.split()[0].removeprefix("file://"))
    version = target.torch.version
    wheels = sorted(p for p in folder.glob(f"torch-{version}*.whl") if p.name[len(f"torch-{version}")] in "+-")
    if not wheels:
        raise ConfigError(
            f"target {target.name}: no torch {version} wheel in {folder}",
            hint="set PIP_FIND_LINKS to a folder holding it",
        )
    return wheels


def plan_target(
    matrix: Matrix, target: Target, options: PlanOptions, env: Mapping[str, str], git: GitInfo, oci: str | None = None
) -> BuildSpec:
    """One target's BuildSpec on one OCI platform, read off its TargetPlan; a non-default plan, or one whose base is
    substituted (--base-substitute), is rendered into build/render/. The spec's name is the image's (ImageKey.name)."""
    subs = base_substitute.parse_all(options.base_substitutes)
    from imagebuild.lock.stages import label as lock_label
    from imagebuild.render.dockerfile import render_plan

    target_plan = resolve_plan(matrix, target, options.arch, env, options.allow_experimental, oci=oci)
    target = target_plan.target
    rendered: dict[str, str] = {}
    if target_plan.default:
        files = {name: _read(target_plan.root / target_plan.out_dir / name) for name in ("Dockerfile", "manifest.json")}
    else:
        rendered = files = dict(render_plan(target_plan, matrix).files)
    render_dir = None if target_plan.default else target_plan.dockerfile.parent
    dockerfile, substituted = (
        base_substitute.apply(files["Dockerfile"], subs, target_plan.oci, base_substitute.build_platform())
        if subs
        else ("", [])
    )
    if substituted:  # the committed Dockerfile stays as it is: the substituted one is built from build/render/
        render_dir = target_plan.root / RENDER_DIR / "base-substituted" / target_plan.image.name
        rendered = {**rendered, "Dockerfile": dockerfile}
    return BuildSpec(
        target=target_plan.image.name,
        platform=target_plan.oci,
        source_date_epoch=git.epoch,
        context=target_plan.root,
        dockerfile=render_dir / "Dockerfile" if substituted and render_dir is not None else target_plan.dockerfile,
        tags=target_plan.tags(git, options.tags),
        labels={
            **target_plan.build_labels(git, matrix.sha256),
            # the lock record names the pip steps of the Dockerfile this build runs (imagebuild.lock.pipsteps)
            **lock_label(target_plan.root, target, dockerfile or files["Dockerfile"]),
        },
        build_args=target_plan.build_args(files["Dockerfile"]),
        cache_from=list(options.cache_from),
        cache_to=list(options.cache_to),
        builder=options.builder,
        no_cache=options.no_cache,
        wheels=torch_wheels(target, env) if _from_wheelhouse(target, files["Dockerfile"]) else [],
        render_dir=render_dir,
        rendered_files=rendered,
        base_substitution=substituted,
        log_path=target_plan.log_path,
        plan=target_plan,
    )


def plan(
    matrix: Matrix, names: Sequence[str], options: PlanOptions, env: Mapping[str, str] | None = None
) -> list[BuildSpec]:
    env = dict(os.environ if env is None else env)
    targets = select_targets(matrix, names, options.arch)
    if options.tags and len(targets) > 1 and not all("{target}" in t for t in options.tags):
        raise ConfigError("--tag with several targets must contain {target}", hint="e.g. --tag '{target}-rc1'")
    git = GitInfo.read(matrix.path.resolve().parent)
    specs = [
        plan_target(matrix, target, options, env, git, oci)
        for target in targets
        for oci in oci_platforms(target, options.platforms)
    ]
    idle = base_substitute.unused(
        base_substitute.parse_all(options.base_substitutes), [s.base_substitution for s in specs]
    )
    if idle:
        raise ConfigError(f"{base_substitute.OPTION} {idle[0]}: no FROM of the builds planned names {idle[0].public}")
    return specs


def _from_wheelhouse(target: Target, dockerfile: str) -> bool:
    """The target's torch (on its OCI platform) comes from the staged wheelhouse the Dockerfile mounts."""
    return bool(target.torch_build.find_links) and "build/wheelhouse" in dockerfile


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing", hint="run `imagebuild render` first") from None
