"""`imagebuild kernels verify`: which GPU code objects a built library holds, against the requested arches."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.errors import CheckFailed, ConfigError
from imagecontract import verify as kv
from imagecontract.codeobjects import VerifyError, list_code_objects


@click.group("kernels")
def command() -> None:
    """Inspect the image's own GPU kernels."""


@command.command("verify")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--arch", "arch", required=True, help="Requested arches: 'gfx90a;gfx942', 'sm_80,sm_90', '9.0+PTX'.")
@click.option("--json-out", type=click.Path(path_type=Path, dir_okay=False), help="Write kernels.json here.")
@click.option("--json", "as_json", is_flag=True, help="Print the kernels.json document instead of a listing.")
def verify(file: Path, arch: str, json_out: Path | None, as_json: bool) -> None:
    """List the code objects in FILE (HIP: gfx IDs, CUDA: sm IDs and PTX); exit 1 if they differ from --arch."""
    try:
        requested = kv.parse_arch_list(arch)
        listing = list_code_objects(file)
    except VerifyError as exc:
        raise ConfigError(str(exc)) from exc
    result = kv.compare(listing, requested)
    doc = kv.report(listing, requested)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo("\n".join(kv.describe(listing, requested, result)))
    if not result.ok:
        raise CheckFailed(kv.mismatch_message(result), hint=f"rebuild {file.name} with the requested arch list")
    if json_out is not None:
        try:
            kv.write_report(json_out, doc)
        except OSError as exc:
            raise ConfigError(f"cannot write {json_out}: {exc.strerror or exc}") from None
