"""`imagebuild render`: Dockerfiles and manifests from the matrix; `--check` fails on drift.

Each target's files are those of its TargetPlan: the matrix default goes to the committed dockerfiles/<target>/,
any other arch resolution to build/render/<target>/ (or --out), never over the committed files.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from imagebuild.commands.common import echo_plans, matrix_from, platforms_option, warn, write_all
from imagebuild.errors import ConfigError
from imagebuild.matrix import Matrix, Target
from imagebuild.plan.target_plan import TargetPlan, oci_platforms, on_oci, plan_for
from imagebuild.render import dockerfile as render


@click.command(name="render")
@click.argument("targets", nargs=-1)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Output directory (default: dockerfiles/ for the matrix default, build/render/ for another --arch).",
)
@click.option("--check", is_flag=True, help="Render in memory; exit 1 naming each file that differs.")
@click.option("--arch", "arch_arg", help="Render for this arch list instead of the matrix default.")
@click.option("--allow-experimental", is_flag=True, help="Accept experimental arches (with --arch).")
@click.option("--dry-run", is_flag=True, help="Print each target's plan and where its files go; write nothing.")
@platforms_option("OCI platform to render (linux/arm64; repeatable); default: every one the target lists.")
@click.pass_context
def command(
    ctx: click.Context,
    targets: tuple[str, ...],
    out_dir: Path | None,
    check: bool,
    arch_arg: str | None,
    allow_experimental: bool,
    dry_run: bool,
    platforms: tuple[str, ...],
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
    for source in unpinned:
        warn(f"unpinned: {source}")
    plans = [
        _plan(matrix, on_oci(matrix, target, oci), arch_arg, allow_experimental, out_dir)
        for target in selected
        for oci in oci_platforms(target, platforms)
    ]
    if dry_run:
        echo_plans(plans)
        for plan in plans:
            click.echo(f"would write {_dest(plan, out_dir)}")
        return
    if check:
        _check_lock(matrix)
        if arch_arg is None:  # the committed files: also report directories of targets no longer in the matrix
            render.check(matrix, selected, out_dir or render.default_out_dir(matrix), all_targets=not targets)
        else:
            render.raise_on_drift(
                [
                    line
                    for p in plans
                    for line in render.differences(render.render_plan(p, matrix).files, _dest(p, out_dir))
                ]
            )
        click.echo(f"{len(selected)} target(s) up to date")
        return
    rendered = [(plan, render.render_plan(plan, matrix)) for plan in plans]  # all in memory before any file is written
    files = {_dest(plan, out_dir) / name: text for plan, item in rendered for name, text in item.files.items()}
    changed = write_all(files)  # every target's files or none
    for plan, item in rendered:
        dest = _dest(plan, out_dir)
        written = any(dest / name in changed for name in item.files)
        click.echo(f"{item.target}: {'written' if written else 'unchanged'} {dest}")
        for note in item.notes:
            warn(f"{item.target}: {note}")


def _check_lock(matrix: Matrix) -> None:
    """The lock beside the matrix must be made from the matrix as it is (exit 1 naming each stale input).

    No lock at all is a warning (a matrix of one's own), an error under settings.require_pins."""
    from imagebuild.lock import inputs as lock_inputs
    from imagebuild.lock import lockfile

    path = lockfile.lock_path(matrix)
    doc = lockfile.load(path)
    if doc is None:
        if matrix.model.settings.require_pins:
            raise ConfigError(f"no {path.name} beside {matrix.path.name} and settings.require_pins is true")
        warn(f"no {path.name} beside {matrix.path.name}: inputs are not locked (imagebuild lock)")
        return
    lockfile.require_current(lock_inputs.collect(matrix), doc, path.name)


def _plan(
    matrix: Matrix, target: Target, arch_arg: str | None, allow_experimental: bool, out_dir: Path | None
) -> TargetPlan:
    """The default plan without --arch; with it, the plan of that resolution (its files never the committed ones)."""
    if arch_arg is None:
        return plan_for(matrix, target)
    resolution = target.resolve(arch_arg, dict(os.environ), allow_experimental)
    key = plan_for(matrix, target).key
    where = f"{_relative(out_dir, matrix)}/{key}" if out_dir is not None else None
    return plan_for(matrix, target, resolution, out_dir=where)


def _dest(plan: TargetPlan, out_dir: Path | None) -> Path:
    return out_dir / plan.key if out_dir is not None else plan.root / plan.out_dir


def _relative(out_dir: Path, matrix: Matrix) -> str:
    """--out with --arch: the Dockerfile COPYs its manifest from there, so it must be inside the build context."""
    root = render.repo_root(matrix)
    try:
        return str(out_dir.resolve().relative_to(root))
    except ValueError:
        raise ConfigError(f"--out with --arch must be inside the build context {root}") from None
