"""`imagebuild arches`: the resolved GPU targets per component and the variables each stage gets."""

from __future__ import annotations

import os

import click

from imagebuild.commands.common import echo_json, matrix_from
from imagebuild.plan.target_plan import resolve_plan


@click.command(name="arches")
@click.argument("targets", nargs=-1)
@click.option("--arch", "arch_arg", help="Arch list (`;`, `,` or space separated); overrides env and matrix.")
@click.option("--allow-experimental", is_flag=True, help="Accept arches a component marks experimental.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def command(
    ctx: click.Context, targets: tuple[str, ...], arch_arg: str | None, allow_experimental: bool, as_json: bool
) -> None:
    """Resolve GPU arches (--arch > PYTORCH_ROCM_ARCH / TORCH_CUDA_ARCH_LIST > matrix) per component."""
    matrix = matrix_from(ctx)
    results = []
    for target in matrix.select(targets):
        plan = resolve_plan(matrix, target, arch_arg, os.environ, allow_experimental)
        data = plan.resolution.as_dict()
        data["source"] = plan.source
        data["stages"] = {stage.name: dict(stage.arch_env) for stage in plan.stages}  # every stage, as rendered
        data["dockerfile"] = f"{plan.out_dir}/Dockerfile"
        results.append(data)
    if as_json:
        echo_json(results if len(results) != 1 else results[0])
        return
    for data in results:
        click.echo(f"{data['target']}: {';'.join(data['arches']) or '(no GPU)'}  [from {data['source']}]")
        for name, comp in data["components"].items():
            state = "included" if comp["included"] else f"LEFT OUT: {comp['reason']}"
            experimental = f" (experimental: {', '.join(comp['experimental'])})" if comp["experimental"] else ""
            click.echo(f"  {name:<22} {state}{experimental}")
        for stage, env in data["stages"].items():
            shown = " ".join(f"{k}={v}" for k, v in env.items()) or "-"
            click.echo(f"  stage {stage:<28} {shown}")
        click.echo(f"  rendered as {data['dockerfile']}")
