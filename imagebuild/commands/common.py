"""Small pieces every command shares: loading the matrix named by --matrix, warnings, JSON output."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from imagebuild.matrix import Matrix, load_matrix

if TYPE_CHECKING:
    from imagebuild.plan import TargetPlan


def matrix_from(ctx: click.Context) -> Matrix:
    """The matrix named by the top-level --matrix option, loaded once per invocation."""
    root = ctx.find_root()
    cached = root.obj.get("matrix")
    if cached is None:
        cached = root.obj["matrix"] = load_matrix(root.obj["matrix_path"])
    return cached


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def echo_plans(plans: Iterable[TargetPlan]) -> None:
    """`--dry-run`: every command prints its target plans the same way, then what it would do with them."""
    for plan in plans:
        for line in plan.describe():
            click.echo(line)
