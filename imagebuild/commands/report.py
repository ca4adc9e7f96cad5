"""`imagebuild report`: the compatibility page (compat.html + compat.json) from the matrix and the evidence."""

from __future__ import annotations

from pathlib import Path

import click

from imagebuild.commands.common import matrix_from, warn
from imagebuild.engine.reference import image_argument


@click.command("report")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder for compat.html and compat.json (default: build/report beside the matrix).",
)
@click.option("--registry", callback=image_argument, help="Also read the attestations of HOST/REPO:<target>.")
@click.option("--key", type=click.Path(path_type=Path, dir_okay=False), help="--registry: cosign public key.")
@click.option("--certificate-identity-regexp", "identity", help="--registry, keyless: the signer identity.")
@click.option("--certificate-oidc-issuer", "issuer", help="--registry, keyless: its OIDC issuer.")
@click.option(
    "--bench", "bench_dir", type=click.Path(path_type=Path, file_okay=False), help="Kernel benchmark results."
)
@click.option("--no-engine", is_flag=True, help="Do not ask the container engine for image sizes and labels.")
@click.option("--no-history", is_flag=True, help="Do not add this run's smoke numbers to the history file.")
@click.pass_context
def command(
    ctx: click.Context,
    out_dir: Path | None,
    registry: str | None,
    key: Path | None,
    identity: str | None,
    issuer: str | None,
    bench_dir: Path | None,
    no_engine: bool,
    no_history: bool,
) -> None:
    """Write the page: one row per (target, OCI platform, GPU arch), what was verified there, and a GPU lookup."""
    from imagebuild.plan.git import GitInfo
    from imagebuild.release.signing import verifier_from
    from imagebuild.report.html import write
    from imagebuild.report.page import engine_inspect, make_page

    matrix = matrix_from(ctx)
    root = matrix.path.resolve().parent
    verifier = verifier_from(key, identity, issuer) if registry else None
    if not registry and (key or identity or issuer):
        raise click.UsageError("--key / --certificate-* need --registry")
    warnings: list[str] = []
    inspect = None if no_engine else engine_inspect(warnings)
    git = GitInfo.read(root)
    page = make_page(
        matrix,
        root,
        inspect=inspect,
        registry=registry,
        verifier=verifier,
        bench_dir=bench_dir,
        revision=None if git.revision == "unknown" else git.revision,
        keep_history=not no_history,
    )
    page.warnings[:0] = warnings
    html_path, json_path = write(page, out_dir or root / "build" / "report")
    for line in page.warnings:
        warn(line)
    counts = {v: sum(1 for r in page.rows if r.verdict == v) for v in ("passed", "failed", "not run")}
    click.echo(
        f"{len(page.rows)} rows: {counts['passed']} passed, {counts['failed']} failed, {counts['not run']} not run"
    )
    click.echo(f"data: {json_path.resolve()}")
    click.echo(f"compatibility page: {html_path.resolve()}")
