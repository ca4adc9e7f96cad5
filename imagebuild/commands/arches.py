"""`imagebuild arches`: the resolved GPU targets per component and the variables each stage gets."""

from __future__ import annotations

import os

import click

from imagebuild.commands.common import echo_json, matrix_from
from imagebuild.render import _context


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
        resolution = target.resolve(arch_arg, dict(os.environ), allow_experimental)
        data = resolution.as_dict()
        context = _context(target, resolution, "", "")
        torch_stage = "torch-build" if target.torch_build.obtain == "source" else "torch"
        stages = {torch_stage: dict(context["torch"]["arch_env"])}
        for component in context["components"]:
            stages[component["stage"]] = dict(component["arch_env"])  # only what that build reads
        if target.runtime and target.runtime.kind == "tgi":
            stages["runtime-server"] = dict(resolution.env)
        stages["final"] = dict(resolution.env)
        data["stages"] = stages
        results.append(data)
    if as_json:
        echo_json(results if len(results) != 1 else results[0])
        return
    for data in results:
        click.echo(f"{data['target']}: {';'.join(data['arches']) or '(no GPU)'}  [from {data['source']}]")
        for name, plan in data["components"].items():
            state = "included" if plan["included"] else f"LEFT OUT: {plan['reason']}"
            experimental = f" (experimental: {', '.join(plan['experimental'])})" if plan["experimental"] else ""
            click.echo(f"  {name:<22} {state}{experimental}")
        for stage, env in data["stages"].items():
            shown = " ".join(f"{k}={v}" for k, v in env.items()) or "-"
            click.echo(f"  stage {stage:<28} {shown}")
