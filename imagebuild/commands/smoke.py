"""`imagebuild smoke IMAGE|TARGET`: run the in-image smoke suite and keep its report for the publish gate.

A TARGET is smoked on every OCI platform it lists (`--platform` to choose), one report per platform:
build/smoke/<target>/ for the first, build/smoke/<target>/<os>-<arch>/ for the others. A platform other than the
host's runs under emulation (qemu binfmt) on the CPU, which is the suite's small-size mode (`--gpu none`).
"""

from __future__ import annotations

import platform as host
from pathlib import Path

import click

from imagebuild.commands.common import platforms_option
from imagebuild.engine.docker import GPU_KINDS, resolve_image
from imagebuild.engine.reference import image_argument
from imagebuild.errors import ConfigError, ImagebuildError
from imagebuild.matrix.oci_platform import for_host
from imagebuild.plan.keys import Named, named
from imagebuild.prove.smoke import emulation_scale, judge, run_smoke


def host_platform() -> str:
    """The OCI platform this host runs natively (others run under emulation)."""
    machine = host.machine().lower()
    known = for_host(machine)
    return known.oci if known else f"linux/{machine}"


def _runs(named: Named, root: Path) -> list[tuple[str, str | None, Path]]:
    """(local name, OCI platform or None, default report folder) for each image to smoke (plan/keys.py)."""
    if not named.keys:
        return [(named.given, None, root / "build" / "smoke" / named.given)]
    return [(key.name, key.oci, key.smoke_dir(root)) for key in named.keys]


@click.command("smoke")
@click.argument("image", callback=image_argument)
@click.option("--gpu", type=click.Choice(GPU_KINDS), default="auto", show_default=True, help="Device flags.")
@platforms_option("TARGET: smoke only this OCI platform (repeatable).")
@click.option("--report", "report_path", type=click.Path(path_type=Path, dir_okay=False), help="report.json path.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False), help="junit.xml path.")
@click.pass_obj
def command(
    obj: dict[str, object],
    image: str,
    gpu: str,
    platforms: tuple[str, ...],
    report_path: Path | None,
    junit_path: Path | None,
) -> None:
    """Run `python -m smoke` inside IMAGE (or each platform's image of TARGET); exit 4 on a failed check."""
    matrix_path = Path(str(obj["matrix_path"]))
    root = matrix_path.resolve().parent if matrix_path.exists() else Path.cwd()
    found_names = named(matrix_path, image, platforms)
    runs = _runs(found_names, root)
    if len(runs) > 1 and (report_path or junit_path):
        raise ConfigError("--report/--junit name one file: pass one --platform with them")
    from imagebuild.engine.sdk import docker_engine

    engine = docker_engine()
    names = list(found_names.targets)
    failures: list[ImagebuildError] = []
    for name, oci, folder in runs:
        slug, found, ref = resolve_image(engine, name, [*names, name] if oci else names, root)
        folder = folder if oci else root / "build" / "smoke" / slug  # an image reference: its name as a folder
        emulated = oci is not None and oci != host_platform()
        kind = "none" if emulated else gpu  # emulated: the CPU, the suite's small sizes
        report = report_path or folder / "report.json"
        junit = junit_path or report.with_name("junit.xml")
        where = f" {oci}{' (emulated)' if emulated else ''}" if oci else ""
        click.echo(f"smoke {name}{where} ({found.id[:19]}) gpu={kind}", err=True)
        scale = emulation_scale() if emulated else 1
        outcome = run_smoke(engine, found, kind, report, junit, name if oci else image, ref, time_scale=scale)
        lines, failure = judge(outcome)
        for line in lines:
            click.echo(line)
        click.echo(f"smoke report: {outcome.report_path}")
        click.echo(f"junit: {outcome.junit_path}")
        if failure is not None:
            failures.append(failure)
    if failures:
        raise failures[0]
