"""`imagebuild publish`: push a smoked image (or promote a staged digest) to a registry's public tags."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from imagebuild.commands import publish_index as index
from imagebuild.commands.common import check_writable, one_line, platform_option, warn
from imagebuild.engine.reference import image_or_dash_argument
from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.errors import ConfigError, ImagebuildError, PublishFailed
from imagebuild.release import signing_options as signing
from imagebuild.release.publish import (
    PublishResult,
    find_passing_report,
    gate_ids,
    promote,
    public_tags,
    publish_image,
    staged_ref,
)


def _repo(text: str) -> RepoRef:
    try:
        return RepoRef.parse(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _smoke_reports(root: Path, given: tuple[Path, ...]) -> tuple[list[Path], bool]:
    """The reports named with --report (each must pass), else every report under build/smoke (one must)."""
    for path in given:
        if not path.is_file():
            raise ConfigError(f"smoke report {path} not found")
    if given:
        return list(given), True
    return sorted((root / "build" / "smoke").rglob("report.json")), False  # <target>/<os>-<arch>/ too


def _gate(result: PublishResult, image_id: str, found: tuple[list[Path], bool], allow_unsmoked: bool) -> None:
    """Exit 5 unless smoke passed for this exact image ID; --allow-unsmoked overrides, loudly, on the record.

    Reports given with --report (one per GPU kind in CI) must all pass for this image; otherwise one passing
    report among those under build/smoke suffices.
    """
    reports, every = found
    passing = [p for p in reports if find_passing_report(image_id, [p]) is not None]
    if passing and (not every or len(passing) == len(reports)):
        result.smoke_report = ", ".join(map(str, passing))
        return
    if not allow_unsmoked:
        where = ", ".join(map(str, reports)) if 0 < len(reports) <= 3 else f"{len(reports)} report(s) under build/smoke"
        raise PublishFailed(
            f"refusing to publish {image_id[:19]}: no passing smoke report for this image ID "
            f"(looked in: {where or 'none'})",
            hint="run `imagebuild smoke` first, or pass --allow-unsmoked",
        )
    result.allow_unsmoked = True
    result.warning = f"published without a passing smoke report for {image_id}"
    click.echo(f"warning: {result.warning} (--allow-unsmoked)", err=True)


def _lock_gate(images: list[tuple[str, Any]], allow_unlocked: bool) -> dict[str, dict[str, Any]]:
    """Exit 5 when an image was built from unlocked inputs (its io.imagebuild.lock label, imagebuild.lock.stages);
    --allow-unlocked overrides, loudly, on the record. Returns what each image's lock record says."""
    from imagebuild.lock.stages import publish_gate

    records = {}
    for name, found in images:
        record, refusal = publish_gate(dict(found.labels or {}))
        records[name] = record
        if refusal is None:
            continue
        if not allow_unlocked:
            raise PublishFailed(
                f"refusing to publish {name}: {refusal}",
                hint="run `imagebuild lock`, rebuild, or pass --allow-unlocked",
            )
        record["allowed_by"] = "--allow-unlocked"
        warn(f"publishing {name} although {refusal} (--allow-unlocked)")
    return records


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
@click.option("--tag", "tags", multiple=True, help="Public tag (default: the image's imagebuild tags).")
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    callback=platform_option,
    help="TARGET: publish only these OCI platforms (one: that image alone; default: all, as one index).",
)
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
@signing.signing_options
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
) -> None:
    """Publish TARGET|IMAGE to --registry, only when smoked; tags move only onto a verified digest."""
    from imagebuild.commands.smoke import target_names

    dest = _repo(registry)
    matrix_path = Path(str(obj["matrix_path"]))
    root = matrix_path.resolve().parent if matrix_path.exists() else Path.cwd()
    reports = _smoke_reports(root, smoke_reports)
    signing.check_options()  # signing usage errors, and the key password read, before anything is pushed
    if index_of and not promote:
        raise ConfigError("--index-of goes with --promote")
    if require_oci and promote:
        raise ConfigError("--oci goes with a push, not --promote (promote copies what is staged, media types and all)")
    if promote:
        image = index.stage_index(index_of, _log) if index_of else image
        given = (image, dest, list(tags), reports[0], allow_unsmoked, out_path, root)
        if not index.promote_index(*given, _recorded, _log, staged_here=bool(index_of)):  # an index: children gated
            _promote(image, dest, tags, reports, allow_unsmoked, out_path, root)
        return
    from imagebuild.engine.docker import docker_client, find_engine, resolve_image

    if require_oci:  # before anything is pushed: one error line naming the feature and the engine that has it
        find_engine().require("oci-media-types", "publish --oci")
    client = docker_client()
    listed = index.chosen_platforms(matrix_path, image, platforms)
    if len(listed) > 1:  # one OCI index per tag, every platform smoked (issue 15)
        _lock_gate(_platform_images(client, image, listed, root), allow_unlocked)
        index.publish_target_index(
            client,
            image,
            listed,
            dest,
            root,
            reports[0],
            allow_unsmoked,
            list(tags),
            out_path,
            _recorded,
            _log,
            require_oci,
        )
        return
    if listed:  # one platform of the target: its image alone
        image = index.local_name(image, listed[0], index.target_platforms(matrix_path, image)[0])
    name, found, ref = resolve_image(client, image, target_names(matrix_path), root)
    result = PublishResult(image=image, image_id=ref.image_id, repository=str(dest), ref=ref, require_oci=require_oci)
    out = out_path or root / "build" / "publish" / name / "publish-report.json"
    with _recorded(result, out):
        _gate(result, ref.image_id, reports, allow_unsmoked)
        result.lock = _lock_gate([(image, found)], allow_unlocked)[image]
        sign = (lambda: signing.sign_publish(client, result, reports[0], out)) if signing.wanted() else None
        publish_image(client, found, image, dest, result, list(tags) or public_tags(ref, image), _log, sign)


def _platform_images(client: Any, target: str, platforms: tuple[str, ...], root: Path) -> list[tuple[str, Any]]:
    """Each platform's local image of the target, as publish_target_index resolves them (a missing one: skipped,
    that function says which and how to build it)."""
    from imagebuild.engine.docker import resolve_image

    found = []
    for platform in platforms:
        name = index.local_name(target, platform, platforms[0])
        try:
            found.append((name, resolve_image(client, name, [name], root)[1]))
        except ConfigError:
            continue
    return found


def _promote(
    source: str,
    dest: RepoRef,
    tags: tuple[str, ...],
    reports: tuple[list[Path], bool],
    allow_unsmoked: bool,
    out_path: Path | None,
    root: Path,
) -> None:
    """Gate on the staged image's config digest (its image ID), sign it in dest, then copy it to dest's public tags."""
    from imagebuild.release.publish import with_retries

    name, sep, reference = source.partition("@")
    if not sep:
        raise ConfigError(f"--promote takes HOST/REPO@sha256:..., not '{source}'")
    src = _repo(name)
    ref = with_retries(f"reading {source}", lambda: staged_ref(Registry(src), src, reference))
    wanted = list(tags) or ([ref.target] if ref.target else [])
    if not wanted:
        raise ConfigError(f"{source} has no io.imagebuild.target label", hint="pass --tag")
    # the ID smoke recorded: the config digest (graph-driver engine) or the manifest digest (containerd store)
    smoked = next((i for i in gate_ids(ref.image_id, ref.digest) if find_passing_report(i, reports[0])), ref.image_id)
    result = PublishResult(image=source, image_id=smoked, repository=str(dest), ref=ref)
    out = out_path or root / "build" / "publish" / wanted[0] / "publish-report.json"

    def sign(digest: str) -> None:  # the digest copied into dest, before any public tag there moves
        result.digest, result.digest_ref, result.staging_ref = digest, f"{dest}@{digest}", source
        signing.sign_promote(source, result, reports[0], out)

    with _recorded(result, out):
        signing.before_promote(source)
        _gate(result, smoked, reports, allow_unsmoked)
        result.digest, result.refs = promote(source, dest, wanted, _log, sign if signing.wanted() else None)
        result.staging_ref = source
        result.digest_ref = f"{dest}@{result.digest}"


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
