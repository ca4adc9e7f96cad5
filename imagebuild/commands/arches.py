"""`imagebuild arches`: the resolved GPU targets per component and the variables each stage gets.

With `--arch` and no target named, the targets whose platform builds one of those arches (the same choice as
`build --arch`); a product or family name (`MI300X`, `H100`, `RDNA4`) is said as what it stands for.
"""

from __future__ import annotations

import os
from typing import Any

import click

from imagebuild.commands.common import echo_json, matrix_from
from imagebuild.errors import ConfigError
from imagebuild.matrix import Matrix, Target
from imagebuild.matrix.arches import name_notes, targets_for_arch
from imagebuild.plan.target_plan import resolve_plan


def _plan_data(matrix: Matrix, target: Target, arch_arg: str | None, allow_experimental: bool) -> dict[str, object]:
    plan = resolve_plan(matrix, target, arch_arg, os.environ, allow_experimental)
    data = plan.resolution.as_dict()
    data["source"] = plan.source
    data["stages"] = {stage.name: dict(stage.arch_env) for stage in plan.stages}  # every stage, as rendered
    data["dockerfile"] = f"{plan.out_dir}/Dockerfile"
    return data


def _echo_text(data: dict[str, Any]) -> None:  # _plan_data's document, as JSON would hold it
    click.echo(f"{data['target']}: {';'.join(data['arches']) or '(no GPU)'}  [from {data['source']}]")
    for name, comp in data["components"].items():
        state = "included" if comp["included"] else f"LEFT OUT: {comp['reason']}"
        experimental = f" (experimental: {', '.join(comp['experimental'])})" if comp["experimental"] else ""
        click.echo(f"  {name:<22} {state}{experimental}")
    for stage, env in data["stages"].items():
        shown = " ".join(f"{k}={v}" for k, v in env.items()) or "-"
        click.echo(f"  stage {stage:<28} {shown}")
    click.echo(f"  rendered as {data['dockerfile']}")


@click.command(name="arches")
@click.argument("targets", nargs=-1)
@click.option(
    "--arch",
    "arch_arg",
    help="Arch list (`;`, `,` or space separated: gfx942:xnack-, sm_90a, 9.0, Hopper, MI300X, H100); overrides env "
    "and matrix. With no target named: the targets that build it.",
)
@click.option("--allow-experimental", is_flag=True, help="Accept arches a component marks experimental.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def command(
    ctx: click.Context, targets: tuple[str, ...], arch_arg: str | None, allow_experimental: bool, as_json: bool
) -> None:
    """Resolve GPU arches (--arch > PYTORCH_ROCM_ARCH / TORCH_CUDA_ARCH_LIST > matrix) per component."""
    matrix = matrix_from(ctx)
    notes = name_notes(arch_arg) if arch_arg else []
    if not targets and arch_arg and arch_arg.strip():
        chosen = targets_for_arch(matrix.targets, arch_arg)
    else:
        chosen = matrix.select(targets)
    results, unbuilt = [], []
    for target in chosen:
        try:
            results.append(_plan_data(matrix, target, arch_arg, allow_experimental))
        except ConfigError as exc:
            if targets or len(chosen) == 1:
                raise
            unbuilt.append({"target": target.name, "error": str(exc)})  # its platform has it; a component has not
    if not results:
        raise ConfigError(f"no target builds it: {unbuilt[0]['error']}")
    if as_json:
        for data in results:
            data["names"] = notes
        documents = results + unbuilt  # a target that cannot build it: {"target", "error"}
        echo_json(documents if len(documents) != 1 else documents[0])
        return
    for note in notes:
        click.echo(f"--arch: {note}")
    for data in results:
        _echo_text(data)
    for item in unbuilt:
        click.echo(f"{item['target']}: cannot build it: {item['error']}")
