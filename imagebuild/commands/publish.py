"""`imagebuild publish`: push a smoked image (or promote a staged digest) to a registry's public tags.

A thin adapter: the options become one `release.flows.Job`, the plan's keys say which images a TARGET means
(plan/keys.py), and one flow of release/flows.py does the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from imagebuild.commands.common import check_writable, one_line, platforms_option, warn
from imagebuild.engine.reference import image_or_dash_argument, tag_option
from imagebuild.engine.registry import RepoRef
from imagebuild.errors import ConfigError, ImagebuildError
from imagebuild.plan.keys import named
from imagebuild.release import flows
from imagebuild.release.gate import SmokeReports
from imagebuild.release.publish import PublishResult
from imagebuild.release.signing_options import Signing, signing_options


@click.command("publish")
@click.argument("image", callback=image_or_dash_argument)
@click.option("--registry", "registry", required=True, help="HOST[:PORT]/REPO to publish to.")
@click.option("--allow-unsmoked", is_flag=True, help="Publish without a passing smoke report (recorded).")
@click.option("--allow-unlocked", is_flag=True, help="Publish an image built from unlocked inputs (recorded).")
@click.option(
    "--report",
    "smoke_reports",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Smoke report(s) that must all pass for this image (default: search build/smoke).",
)
@click.option("--out", "out_path", type=click.Path(path_type=Path, dir_okay=False), help="The publish report.")
@click.option(
    "--tag", "tags", multiple=True, callback=tag_option, help="Public tag (default: the image's imagebuild tags)."
)
@platforms_option("TARGET: publish only these OCI platforms (one: that image alone; default: all, as one index).")
@click.option(
    "--index-of",
    "index_of",
    multiple=True,
    help="--promote: staged per-platform HOST/REPO@sha256:... to promote as one index (IMAGE: -).",
)
@click.option("--promote", is_flag=True, help="IMAGE is a staged HOST/REPO@sha256:...: copy it, do not push.")
@click.option(
    "--oci",
    "require_oci",
    is_flag=True,
    help="Require OCI media types: exit 2 before any push on an engine without them, exit 5 if what was pushed "
    "reads back otherwise (no public tag moves).",
)
@signing_options
@click.pass_obj
def command(
    obj: dict[str, object],
    image: str,
    registry: str,
    allow_unsmoked: bool,
    allow_unlocked: bool,
    smoke_reports: tuple[Path, ...],
    out_path: Path | None,
    tags: tuple[str, ...],
    platforms: tuple[str, ...],
    index_of: tuple[str, ...],
    promote: bool,
    require_oci: bool,
    signing: Signing,
) -> None:
    """Publish TARGET|IMAGE to --registry, only when smoked; tags move only onto a verified digest."""
    try:
        dest = RepoRef.parse(registry)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    matrix_path = Path(str(obj["matrix_path"]))
    root = matrix_path.resolve().parent if matrix_path.exists() else Path.cwd()
    reports = SmokeReports.load(root, smoke_reports)  # each read and checked once for the whole command
    signing.check()  # signing usage errors, and the key password read, before anything is pushed
    if index_of and not promote:
        raise ConfigError("--index-of goes with --promote")
    if signing.require_signed and not promote:  # a push signs what it pushes: there is nothing staged to verify
        raise ConfigError("--require-signed goes with --promote")
    if require_oci and promote:
        raise ConfigError("--oci goes with a push, not --promote (promote copies what is staged, media types and all)")
    job = flows.Job(
        dest, root, matrix_path, reports, signing, _recorded, _log, warn, list(tags), out_path, allow_unsmoked,
        allow_unlocked, require_oci,
    )  # fmt: skip
    if promote:
        image = flows.stage_index(index_of, _log) if index_of else image
        if not flows.promote_index(job, image, staged_here=bool(index_of)):  # an index: children gated
            flows.promote_one(job, image)
        return
    from imagebuild.engine.docker import find_engine
    from imagebuild.engine.sdk import docker_engine

    if require_oci:  # before anything is pushed: one error line naming the feature and the engine that has it
        find_engine().require("oci-media-types", "publish --oci")
    engine = docker_engine()
    found = named(matrix_path, image, platforms)
    if len(found.keys) > 1:  # one OCI index per tag, every platform smoked (issue 15)
        flows.publish_index(engine, job, found.keys)
    else:  # one platform of the target, or an image reference: that image alone
        flows.publish_one(engine, job, found)


@contextmanager
def _recorded(result: PublishResult, out_path: Path) -> Iterator[None]:
    """Write the publish report whatever happens (a failure is recorded with its error), then list the refs.

    The report's folder is checked writable before anything is pushed; a report that still cannot be written
    afterwards is a warning, never an error that would hide what the push did."""
    check_writable(out_path)
    try:
        yield
        result.ok = True
    except ImagebuildError as exc:
        result.error = str(exc)
        raise
    finally:
        try:
            result.write(out_path)
            click.echo(f"publish report: {out_path}")
        except OSError as exc:
            warn(f"the publish report was not written: {one_line(exc)}")
    for ref in result.refs:
        click.echo(f"published {ref} ({result.digest})")


def _log(message: str) -> None:
    click.echo(message, err=True)
