"""Turn matrix targets into BuildSpecs: which Dockerfile, which build args, labels, tags and wheels.

Kept apart from build.py (which only runs builds) so that `build --dry-run` and `bake` share one plan.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.build import LOCAL_REPO, BuildSpec, GitInfo
from imagebuild.errors import ConfigError

if TYPE_CHECKING:
    from imagebuild.arches import Resolution
    from imagebuild.matrix import Matrix, Target

DEFAULT_SOURCES = {"matrix default", "cpu platform"}


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


def select_targets(matrix: Matrix, names: Sequence[str], arch: str | None) -> list[Target]:
    """Named targets; with none named and --arch, every target whose platform has one of those arches."""
    if names:
        return matrix.select(list(names))
    if not arch:
        return list(matrix.targets)
    from imagebuild.arches import parse_list

    wanted = {t.processor for t in parse_list(arch)}
    chosen = [t for t in matrix.targets if wanted & {parse_list(a)[0].processor for a in t.platform.arches}]
    if not chosen:
        raise ConfigError(f"no target's platform has arch {arch}", hint="see `imagebuild matrix list`")
    return chosen


def labels_for(manifest: Mapping[str, Any], matrix_sha: str, git: GitInfo) -> dict[str, str]:
    """OCI labels summarising the manifest; set with --label so they never bust the layer cache."""
    torch = manifest.get("torch") or {}
    platform = manifest.get("platform") or {}
    components = {
        name: (info.get("arches") or ["cpu"]) if info.get("included") else "excluded"
        for name, info in (manifest.get("components") or {}).items()
    }
    return {
        "org.opencontainers.image.title": str(manifest.get("target")),
        "org.opencontainers.image.version": str(torch.get("version")),
        "org.opencontainers.image.revision": git.revision,
        "org.opencontainers.image.created": git.created,
        "io.imagebuild.target": str(manifest.get("target")),
        "io.imagebuild.platform": str(platform.get("name")),
        "io.imagebuild.torch": str(torch.get("version")),
        "io.imagebuild.arches": ";".join(manifest.get("gpu_arches") or []) or "none",
        "io.imagebuild.matrix-sha256": matrix_sha,
        "io.imagebuild.patches": ",".join(p.get("name", "") for p in torch.get("patches") or []),
        "io.imagebuild.torch-source": _source_label(torch.get("source") or {}),
        "io.imagebuild.components": json.dumps(components, sort_keys=True, separators=(",", ":")),
        "io.imagebuild.versions": json.dumps(manifest.get("versions") or {}, sort_keys=True, separators=(",", ":")),
    }


def _source_label(source: dict[str, Any]) -> str:
    """Where a source-built torch came from (`repo@commit`): the fork carries its fixes, so no patch names them."""
    if not source.get("git"):
        return ""
    return f"{source['git']}@{source.get('commit') or source.get('ref') or 'HEAD'}"


def tags_for(target: str, git: GitInfo, extra: Sequence[str]) -> list[str]:
    tags = [f"{LOCAL_REPO}:{target}", f"{LOCAL_REPO}:{target}-{git.short}"]
    for tag in extra:
        tag = tag.replace("{target}", target)
        tags.append(tag if ":" in tag.rsplit("/", 1)[-1] else f"{LOCAL_REPO}:{tag}")
    return tags


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
    matrix: Matrix, target: Target, options: PlanOptions, env: Mapping[str, str], git: GitInfo
) -> BuildSpec:
    """One target's BuildSpec; a non-default arch list is rendered into build/render/<target>/."""
    root = matrix.path.resolve().parent
    resolution: Resolution = target.resolve(options.arch, dict(env), options.allow_experimental)
    committed = root / "dockerfiles" / target.name
    render_dir: Path | None = None
    rendered: dict[str, str] = {}
    if resolution.source in DEFAULT_SOURCES:
        files = {name: _read(committed / name) for name in ("Dockerfile", "manifest.json")}
        dockerfile = committed / "Dockerfile"
    else:
        from imagebuild.render import render_target

        render_dir = root / "build" / "render" / target.name
        manifest_path = f"build/render/{target.name}/manifest.json"
        rendered = dict(render_target(matrix, target, resolution, manifest_path=manifest_path).files)
        files, dockerfile = rendered, render_dir / "Dockerfile"
    try:
        manifest = json.loads(files["manifest.json"])
    except (KeyError, json.JSONDecodeError) as exc:
        raise ConfigError(f"target {target.name}: the rendered manifest.json is unreadable: {exc}") from None
    return BuildSpec(
        target=target.name,
        context=root,
        dockerfile=dockerfile,
        tags=tags_for(target.name, git, options.tags),
        labels=labels_for(manifest, matrix.sha256, git),
        build_args=dict(resolution.env),
        cache_from=list(options.cache_from),
        cache_to=list(options.cache_to),
        builder=options.builder,
        no_cache=options.no_cache,
        wheels=torch_wheels(target, env) if "build/wheelhouse" in files["Dockerfile"] else [],
        render_dir=render_dir,
        rendered_files=rendered,
        log_path=root / "build" / "logs" / f"{target.name}.log",
    )


def plan(
    matrix: Matrix, names: Sequence[str], options: PlanOptions, env: Mapping[str, str] | None = None
) -> list[BuildSpec]:
    env = dict(os.environ if env is None else env)
    targets = select_targets(matrix, names, options.arch)
    if options.tags and len(targets) > 1 and not all("{target}" in t for t in options.tags):
        raise ConfigError("--tag with several targets must contain {target}", hint="e.g. --tag '{target}-rc1'")
    git = GitInfo.read(matrix.path.resolve().parent)
    return [plan_target(matrix, target, options, env, git) for target in targets]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing", hint="run `imagebuild render` first") from None
