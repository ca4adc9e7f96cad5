"""`imagebuild kernels verify` (code objects of a built library) and `explain` (skinny_linear's dispatch)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import click

from imagebuild.errors import CheckFailed, ConfigError
from imagecontract import verify as kv
from imagecontract.blob import read_bounded
from imagecontract.codeobjects import VerifyError, list_code_objects
from imagecontract.text import printable

MAX_TABLE = 16 << 20  # a measured table is a few hundred KB


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


def _table_module() -> ModuleType:
    """kernels/imagebuild_kernels/_table.py (torch-free), loaded by path: the rule lives beside the kernels."""
    path = Path(__file__).resolve().parents[2] / "kernels" / "imagebuild_kernels" / "_table.py"
    spec = importlib.util.spec_from_file_location("imagebuild_kernels_table", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ConfigError(f"{path} not found: explain runs from a source checkout")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@command.command("explain")
@click.argument("n", type=click.IntRange(min=1))
@click.argument("k", type=click.IntRange(min=1))
@click.argument("m", type=click.IntRange(min=1))
@click.argument("dtype", type=click.Choice(["float16", "bfloat16", "fp16", "bf16"]))
@click.option("--table", type=click.Path(path_type=Path, dir_okay=False), help="Table file (default: packaged one).")
def explain(n: int, k: int, m: int, dtype: str, table: Path | None) -> None:
    """What skinny_linear runs for x [M, K] @ w [N, K]^T, and the measurements the choice rests on."""
    t = _table_module()
    name = {"fp16": "float16", "bf16": "bfloat16"}.get(dtype, dtype)
    given = table if table is not None else Path(os.environ[t.TABLE_ENV]) if os.environ.get(t.TABLE_ENV) else None
    if given is not None:  # a table someone named must be one: /dev/zero or a FIFO is not "no table installed"
        try:
            read_bounded(given, MAX_TABLE, what="a skinny table")
        except OSError as exc:
            where = "--table" if table is not None else t.TABLE_ENV
            raise ConfigError(f"{where} {printable(exc.filename, 200)}: {exc.strerror}") from None
    try:
        doc = t.load_table(given)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the skinny table: {exc}") from None
    click.echo("\n".join(t.explain(doc, name, n, k, m)))
