"""`imagebuild smoke IMAGE|TARGET`: run the in-image smoke suite and keep its report for the publish gate."""

from __future__ import annotations

from pathlib import Path

import click

from imagebuild.engine import GPU_KINDS, docker_client, resolve_image
from imagebuild.smoke import judge, run_smoke


def target_names(matrix_path: Path) -> list[str]:
    """Target names when the matrix loads; an image reference works without one."""
    from imagebuild.errors import ConfigError
    from imagebuild.matrix import load_matrix

    try:
        return [t.name for t in load_matrix(matrix_path).targets]
    except ConfigError:
        return []


@click.command("smoke")
@click.argument("image")
@click.option("--gpu", type=click.Choice(GPU_KINDS), default="auto", show_default=True, help="Device flags.")
@click.option("--report", "report_path", type=click.Path(path_type=Path, dir_okay=False), help="report.json path.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False), help="junit.xml path.")
@click.pass_obj
def command(obj: dict[str, object], image: str, gpu: str, report_path: Path | None, junit_path: Path | None) -> None:
    """Run `python -m smoke` inside IMAGE (or TARGET's local image); exit 4 on a failed check."""
    matrix_path = Path(str(obj["matrix_path"]))
    root = matrix_path.resolve().parent if matrix_path.exists() else Path.cwd()
    client = docker_client()
    name, found, ref = resolve_image(client, image, target_names(matrix_path), root)
    default_dir = root / "build" / "smoke" / name
    report_path = report_path or default_dir / "report.json"
    junit_path = junit_path or report_path.with_name("junit.xml")
    click.echo(f"smoke {image} ({found.id[:19]}) gpu={gpu}", err=True)
    outcome = run_smoke(client, found, gpu, report_path, junit_path, image, ref)
    lines, failure = judge(outcome)
    for line in lines:
        click.echo(line)
    click.echo(f"smoke report: {outcome.report_path}")
    click.echo(f"junit: {outcome.junit_path}")
    if failure is not None:
        raise failure
