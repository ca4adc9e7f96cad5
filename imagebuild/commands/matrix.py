"""`imagebuild matrix list|schema`: the expanded targets, and the JSON Schema of matrix.yaml."""

from __future__ import annotations

import json

import click

from imagebuild.commands.common import echo_json, matrix_from
from imagebuild.matrix import Matrix, Target, json_schema
from imagebuild.plan.target_plan import PlanSummary, plan_for


def target_summary(matrix: Matrix, target: Target) -> PlanSummary:
    """One target's line: read off its default plan (the CI matrix is computed from it)."""
    return plan_for(matrix, target).summary()


@click.group(name="matrix")
def command() -> None:
    """Inspect matrix.yaml."""


@command.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (for CI job matrices).")
@click.pass_context
def list_targets(ctx: click.Context, as_json: bool) -> None:
    """Expanded targets: name, platform, versions, arches, components."""
    matrix = matrix_from(ctx)
    summaries = [target_summary(matrix, t) for t in matrix.targets]
    if as_json:
        echo_json(summaries)
        return
    for s in summaries:
        arches = s["arch_list"] or "-"
        click.echo(
            f"{s['name']:<20} {s['platform']:<10} torch {s['torch']:<7} arches {arches:<16} "
            f"components {', '.join(s['components']) or '-'}  runtime {s['runtime'] or '-'}"
        )


@command.command(name="schema")
def schema() -> None:
    """Print the JSON Schema of matrix.yaml."""
    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))
