"""`imagebuild bake`: a docker-bake.json of the matrix for remote BuildKit builders."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.building.bake import bake_file, write_bake
from imagebuild.building.buildkit import prepare
from imagebuild.building.specs import PlanOptions, plan
from imagebuild.commands.common import echo_plans


@click.command("bake")
@click.argument("targets", nargs=-1)
@click.option(
    "--out", "out_path", type=click.Path(path_type=Path, dir_okay=False), help="Default: build/docker-bake.json."
)
@click.option("--arch", help="GPU arches; with no TARGET, every target having them.")
@click.option("--allow-experimental", is_flag=True)
@click.option("--cache-from", multiple=True)
@click.option("--cache-to", multiple=True)
@click.option("--tag", "tags", multiple=True, help="Extra tag; may contain {target}.")
@click.option("--dry-run", is_flag=True, help="Print each target's plan and the bake file; write nothing.")
@click.pass_obj
def command(
    obj: dict[str, object],
    targets: tuple[str, ...],
    out_path: Path | None,
    arch: str | None,
    allow_experimental: bool,
    cache_from: tuple[str, ...],
    cache_to: tuple[str, ...],
    tags: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Write docker-bake.json (and the context it needs: non-default renders, staged wheels)."""
    from imagebuild.matrix import load_matrix

    matrix = load_matrix(Path(str(obj["matrix_path"])))
    root = matrix.path.resolve().parent
    specs = plan(matrix, targets, PlanOptions(arch, allow_experimental, tags, cache_from, cache_to))
    out = out_path or root / "build" / "docker-bake.json"
    if dry_run:
        echo_plans(spec.plan for spec in specs if spec.plan is not None)
        click.echo(f"would write {out}:")
        click.echo(json.dumps(bake_file(specs, root), indent=2))
        return
    for spec in specs:
        prepare(spec)
    write_bake(specs, root, out)
    click.echo(f"bake file: {out} ({len(specs)} target(s)); run: docker buildx bake -f {out}")
