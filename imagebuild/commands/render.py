"""`imagebuild render`: Dockerfiles and manifests from the matrix; `--check` fails on drift."""

from __future__ import annotations

import os
from pathlib import Path

import click

from imagebuild import render
from imagebuild.commands.common import matrix_from, warn
from imagebuild.errors import ConfigError


@click.command(name="render")
@click.argument("targets", nargs=-1)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Output directory (default: dockerfiles/ next to the matrix).",
)
@click.option("--check", is_flag=True, help="Render in memory; exit 1 naming each file that differs.")
@click.option("--arch", "arch_arg", help="Render for this arch list instead of the matrix default.")
@click.option("--allow-experimental", is_flag=True, help="Accept experimental arches (with --arch).")
@click.pass_context
def command(
    ctx: click.Context,
    targets: tuple[str, ...],
    out_dir: Path | None,
    check: bool,
    arch_arg: str | None,
    allow_experimental: bool,
) -> None:
    """Render dockerfiles/<target>/Dockerfile and manifest.json for each target (all by default)."""
    matrix = matrix_from(ctx)
    selected = matrix.select(targets)
    unpinned = matrix.unpinned()
    if unpinned and matrix.model.settings.require_pins:
        raise ConfigError(
            f"{len(unpinned)} unpinned source(s) and settings.require_pins is true: "
            + "; ".join(str(u) for u in unpinned)
        )
    for item in unpinned:
        warn(f"unpinned: {item}")
    out_dir = out_dir or render.default_out_dir(matrix)
    if check:
        render.check(matrix, selected, out_dir, all_targets=not targets)
        click.echo(f"{len(selected)} target(s) up to date in {out_dir}")
        return
    if arch_arg:
        rendered = [
            render.render_target(
                matrix,
                t,
                t.resolve(arch_arg, dict(os.environ), allow_experimental),
                manifest_path=f"{_relative(out_dir, matrix)}/{t.name}/manifest.json",
            )
            for t in selected
        ]
    else:
        rendered = render.render_all(matrix, selected)
    for item in rendered:
        changed = render.write_rendered(item, out_dir / item.target)
        state = "written" if changed else "unchanged"
        click.echo(f"{item.target}: {state} {out_dir / item.target}")
        for note in item.notes:
            warn(f"{item.target}: {note}")


def _relative(out_dir: Path, matrix: object) -> str:
    root = render.repo_root(matrix)  # type: ignore[arg-type]
    try:
        return str(out_dir.resolve().relative_to(root))
    except ValueError:
        raise ConfigError(f"--out with --arch must be inside the build context {root}") from None
