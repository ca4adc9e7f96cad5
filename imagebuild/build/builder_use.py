"""Which builder a build goes to, and which node each leg goes to (issue 33).

`--builder NAME` or `settings.builder`; a builder defined in `settings.builders` is created in buildx as configured
(engine/builders.py `ensure`), any other is taken as buildx knows it. A builder that cannot load into the local
engine needs a staging repository (`--staging` or the builder's `staging`): each leg is pushed there by digest and
pulled back (docs/builders.md).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagebuild.engine import builders
from imagebuild.errors import ConfigError
from imagebuild.matrix.oci_platform import for_host

if TYPE_CHECKING:
    from collections.abc import Callable

    from imagebuild.build.buildkit import BuildSpec, TargetResult
    from imagebuild.engine.docker import Engine
    from imagebuild.matrix.models import Settings


@dataclass(frozen=True)
class Chosen:
    builder: builders.Builder
    staging: str | None  # None: results load into the local engine


def choose(engine: Engine, settings: Settings, name: str | None, staging: str | None, create: bool) -> Chosen | None:
    """The builder of this build (None: the engine's own, as before); ConfigError (exit 2) naming what is missing."""
    name = name or settings.builder
    if not name:
        return None
    config = settings.builders.get(name)
    if config is not None and config.driver == "kubernetes" and create:
        builder = builders.inspect(engine, name)  # created by the user from the commands doctor prints
    elif config is not None and create:
        builder = builders.ensure(engine, name, config)
    else:
        builder = builders.inspect(engine, name)
    where = staging or (config.staging if config is not None else None)
    if builder.loads:
        return Chosen(builder, None)
    if not where:
        raise ConfigError(
            f"builder {name} ({builder.driver} driver) cannot load into the local engine: its legs need a staging "
            "repository to be pushed to by digest",
            hint=f"--staging HOST/REPO, or settings.builders.{name}.staging",
        )
    return Chosen(builder, where)


def leg_platform(spec: BuildSpec) -> str:
    """The leg's OCI platform (every planned spec names one; a hand-made spec without: the host's)."""
    host = for_host(platform.machine())
    return spec.platform or (host.oci if host else platform.machine())


def apply(chosen: Chosen | None, specs: list[BuildSpec]) -> list[str]:
    """Point every spec at the builder; one line per leg saying which node builds it. A leg no node builds: exit 2."""
    if chosen is None:
        return []
    lines = []
    for spec in specs:
        node = chosen.builder.route(leg_platform(spec))
        if node is None:
            raise ConfigError(
                f"builder {chosen.builder.name}: no node builds {leg_platform(spec)} ({spec.target})",
                hint="docker buildx ls; a node's --platform or settings.builders.<name>.nodes[].platforms",
            )
        spec.builder, spec.staging = chosen.builder.name, chosen.staging
        where = f"pushed to {chosen.staging} by digest" if chosen.staging else "loaded"
        lines.append(f"leg {spec.target} ({leg_platform(spec)}) -> node {node.name} ({node.endpoint}), {where}")
    return lines


def prepare_legs(
    engine: Engine,
    settings: Settings,
    asked: tuple[str | None, str | None],
    specs: list[BuildSpec],
    dry_run: bool,
    say: Callable[[str], None],
) -> tuple[list[BuildSpec], list[TargetResult]]:
    """Builder and node per leg (asked: --builder, --staging), then reuse by input key where a staging repository
    is known. (the specs to build, the results of legs reused instead); each decision is said in one line."""
    from imagebuild.build import input_key

    name, staging = asked
    chosen = choose(engine, settings, name, staging, create=not dry_run)
    lines = apply(chosen, specs)
    where = staging or (chosen.staging if chosen else None)
    todo, reused = (specs, []) if where is None or dry_run else input_key.reuse(engine, where, specs)
    lines += [f"leg {r.target}: reused {r.reused} (input key {r.input_key}), not built" for r in reused]
    for line in lines:
        say(line)
    return todo, reused
