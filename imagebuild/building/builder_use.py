"""Which builder a build goes to, and which node each leg goes to (issue 33).

`--builder NAME` or `settings.builder`; a builder defined in `settings.builders` is created in buildx as configured
(engine/builders.py `ensure`), any other is taken as buildx knows it. A builder that cannot load into the local
engine needs a staging repository (`--staging` or the builder's `staging`): each leg is pushed there by digest and
pulled back (docs/builders.md).
"""

from __future__ import annotations

import platform
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from imagebuild.engine import builders
from imagebuild.errors import ConfigError
from imagebuild.matrix.oci_platform import for_host

if TYPE_CHECKING:
    from collections.abc import Callable

    from imagebuild.building.buildkit import BuildSpec, TargetResult
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
    from imagebuild.building import input_key

    name, staging = asked
    chosen = choose(engine, settings, name, staging, create=not dry_run)
    lines = apply(chosen, specs)
    where = staging or (chosen.staging if chosen else None)
    todo, reused = (specs, []) if where is None or dry_run else input_key.reuse(engine, where, specs)
    lines += [f"leg {r.target}: reused {r.reused} (input key {r.input_key}), not built" for r in reused]
    for line in lines:
        say(line)
    return todo, reused


def doctor_facts(engine: Engine, settings: Settings, name: str, legs: list[tuple[str, str]]) -> dict[str, object]:
    """What `doctor --builder NAME` says: the nodes (endpoint, BuildKit version, platforms) and the node of each
    leg (target, OCI platform). A configured kubernetes builder buildx does not know yet: its create commands."""
    config = settings.builders.get(name)
    try:  # a configured remote builder is made in buildx as configured (buildx's own record; no daemon changes)
        if config is not None and config.driver == "remote":
            builder = builders.ensure(engine, name, config)
        else:
            builder = builders.inspect(engine, name)
    except ConfigError as exc:
        if config is None:
            raise
        return {
            "name": name,
            "driver": config.driver,
            "created": False,
            "why": exc.message,
            "create_commands": builders.kubernetes_commands(name, config)
            if config.driver == "kubernetes"
            else [shlex.join(["docker", *argv]) for argv in builders.create_commands(name, config)],
        }
    routed = [(target, oci, builder.route(oci)) for target, oci in legs]
    return {
        "name": name,
        "driver": builder.driver,
        "created": True,
        "loads": builder.loads,
        "staging": config.staging if config is not None else None,
        "nodes": [node.as_dict() for node in builder.nodes],
        "legs": [{"target": t, "platform": p, "node": n.name if n else None} for t, p, n in routed],
    }


def doctor_lines(facts: dict[str, Any]) -> list[str]:
    """doctor_facts as text."""
    head = f"builder {facts['name']} ({facts['driver']} driver)"
    if not facts["created"]:
        commands = [f"  {c}" for c in facts["create_commands"]]
        return [f"{head}: not in buildx ({facts['why']}); create it with:", *commands]
    how = "loads into the engine" if facts["loads"] else f"legs pushed by digest to {facts['staging'] or '--staging'}"
    lines = [f"{head}: {how}"]
    for node in facts["nodes"]:
        pinned = ", ".join(node["pinned"]) or "none pinned"
        lines.append(
            f"  node {node['name']}: {node['endpoint']}, {node['status']}, BuildKit {node['buildkit']}, "
            f"platforms {', '.join(node['platforms'])} (builds {pinned} first)"
        )
    for leg in facts["legs"]:
        lines.append(f"  leg {leg['target']} {leg['platform']} -> {leg['node'] or 'NO NODE (the build refuses it)'}")
    return lines
