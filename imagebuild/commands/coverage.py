"""`imagebuild coverage IMAGE [--json] [--arch LIST]`: library x arch table of any image; exit 1 on a gap the matrix
does not allow. The scanner runs in the image (its python3); an image without python3 is exported and scanned from
the host (imagebuild/prove/host_scan.py); a `coverage: scanned ...` line on stderr says which."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.engine.reference import image_argument
from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.prove.coverage import CoverageError, NoPython, distributions_of, judge, scan_image
from imagebuild.prove.host_scan import FROM_HOST, IN_IMAGE, scan_from_host
from imagecontract.models.coverage import ArchCoverage

MARK = {"present": "yes", "partial": "part", "compatible": "compat", "ptx": "ptx", "absent": "-"}


def render_table(doc: ArchCoverage) -> list[str]:
    """One row per library: its status per arch, then owner and component."""
    width = max([len(lib.path) for lib in doc.libraries] + [7])
    cols = [max(len(a), 6) for a in doc.requested]
    head = "library".ljust(width) + "".join(f"  {a:<{w}}" for a, w in zip(doc.requested, cols, strict=True))
    lines = [head + "  owner / component"]
    for lib in doc.libraries:
        cells = "".join(f"  {MARK[lib.arches.get(a, 'absent')]:<{w}}" for a, w in zip(doc.requested, cols, strict=True))
        owner = f"{lib.owner or '?'}" + (f" / {lib.component}" if lib.component else "")
        lines.append(lib.path.ljust(width) + cells + f"  {owner}")
    scan = doc.scan
    lines.append(
        f"{len(doc.libraries)} libraries with device code; {scan.files_seen} files seen, {scan.files_read} "
        f"read, {scan.seconds or 0:.1f} s; {len(scan.errors)} unreadable"
    )
    lines.append(f"label: {doc.summary()}")
    return lines


@click.command("coverage")
@click.argument("image", callback=image_argument)
@click.option("--json", "as_json", is_flag=True, help="Print the arch-coverage.json document.")
@click.option("--arch", help="Arches to tabulate (default: the image manifest's, else every arch found).")
@click.pass_obj
def command(obj: dict[str, object], image: str, as_json: bool, arch: str | None) -> None:
    """Scan every library with device code in IMAGE (ours or not) and print library x arch."""
    from imagebuild.engine.docker import find_engine, resolve_image
    from imagebuild.engine.sdk import docker_engine
    from imagebuild.plan.keys import target_names

    matrix_path = Path(str(obj["matrix_path"]))
    root = matrix_path.resolve().parent if matrix_path.exists() else Path.cwd()
    _, found, ref = resolve_image(docker_engine(), image, target_names(matrix_path), root)
    engine = find_engine()
    method = IN_IMAGE
    try:
        try:
            raw = scan_image(engine, str(found.id), arch)
        except NoPython:
            method = FROM_HOST
            raw = scan_from_host(engine, str(found.id), arch)
    except CoverageError as exc:
        raise ConfigError(f"cannot scan {image}: {exc}") from None
    click.echo(f"coverage: scanned {method}", err=True)
    doc = judge(raw, distributions_of(matrix_path), ref.target)
    click.echo(json.dumps(doc.to_dict(), indent=1) if as_json else "\n".join(render_table(doc)))
    if not doc.ok:
        raise CheckFailed(
            f"{image}: " + "; ".join(f"{g.library} lacks {g.arch}" for g in doc.gaps if not g.allowed)[:600]
        )
