"""`imagebuild tunableop`: inspect, check, merge, tune and bake TunableOp results files."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.tunableop import results as top
from imagebuild.tunableop import shapes as tunableop_shapes
from imagecontract import kinds
from imagecontract.atomic import write_atomic
from imagecontract.blob import read_bounded
from imagecontract.text import printable

GPU_ONLY = [kind.SMOKE_GPU for kind in kinds.GPU_KINDS]  # `tune` runs on a GPU

_FILE = click.Path(path_type=Path, dir_okay=False)


@click.group("tunableop")
def command() -> None:
    """TunableOp results: the tuned GEMM choices that make decoding fast, kept valid across images."""


def _fmt_time(row: top.Row) -> str:
    return "-" if row.time_text is None else f"{row.time_ms:.4f}"


@command.command("inspect")
@click.argument("files", nargs=-1, required=True, type=_FILE)
@click.option("--json", "as_json", is_flag=True, help="One JSON document with every file.")
def inspect_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Show validators and every result, shapes decoded as linear layers (tokens M, in K, out N)."""
    parsed = [top.load(f) for f in files]
    if as_json:
        click.echo(json.dumps({"files": [p.as_dict() for p in parsed]}, indent=1))
        return
    for p in parsed:
        click.echo(f"{p.source}: {len(p.rows)} result(s)")
        for k, v in p.validators.items():
            click.echo(f"  validator {printable(k, 200)} = {printable(v)}")
        header = ("op", "dtype", "layout", "tokens", "in", "out", "solution", "ms")
        table = [header] + [
            (
                r.family,
                r.dtype,
                r.shape.layout,
                str(r.shape.tokens) + (f"x{r.shape.batch}" if r.shape.batch else ""),
                str(r.shape.in_features),
                str(r.shape.out_features),
                printable(r.solution, 200),  # the file's own text: no terminal control reaches the screen
                _fmt_time(r),
            )
            for r in p.rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            click.echo("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@command.command("check")
@click.argument("file", type=_FILE)
@click.option("--image", help="Compare with this image's torch (asked on the GPU when there is one).")
@click.option("--expect", "expect", multiple=True, metavar="KEY=VALUE", help="Expected validator (repeatable).")
@click.option("--gpu", type=click.Choice(["auto", *kinds.GPU_CHOICES]), default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def check_cmd(file: Path, image: str | None, expect: tuple[str, ...], gpu: str, as_json: bool) -> None:
    """Exit 1 listing every validator that would make torch reject the whole file."""
    if not image and not expect:
        raise ConfigError("check needs --image IMAGE or --expect KEY=VALUE")
    results = top.load(file)
    given = top.parse_expectations(expect)
    if image:
        from imagebuild.engine.sdk import docker_engine
        from imagebuild.tunableop import tune as tt

        expected = tt.expect_with_overrides(tt.image_validators(docker_engine(), image, gpu), given)
    else:  # only the keys the user names are judged
        expected = top.Expected(values=given, complete=False, source="--expect")
    report = top.check_validators(results, expected)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        click.echo(f"{file}: compared with {printable(report.source)}")
        for note in report.notes:
            click.echo(f"note: {printable(note)}")
        for key in report.matched:
            click.echo(f"ok       {printable(key, 200)} = {printable(results.validators[key])}")
        for line in report.problems():
            click.echo(f"PROBLEM  {printable(line, 1000)}")
    if not report.ok:
        keys = [k for k, _, _ in report.mismatched] + [k for k, _ in report.missing] + report.extra
        keys += report.undetermined
        raise CheckFailed(
            f"{file}: torch would reject the whole file; check {printable(', '.join(keys), 300)}",
            hint=f"compared with {printable(report.source)}",
        )


@command.command("merge")
@click.option("--out", "out", required=True, type=_FILE, help="Merged file (written atomically).")
@click.argument("files", nargs=-1, required=True, type=_FILE)
def merge_cmd(out: Path, files: tuple[Path, ...]) -> None:
    """Merge per-device files with equal validators; for the same op and params keep the fastest."""
    parsed = [top.load(f) for f in files]
    merged = top.merge(parsed)
    write_atomic(out, top.render(merged))
    total = sum(len(p.rows) for p in parsed)
    click.echo(f"{out}: {len(merged.rows)} result(s) from {total} in {len(parsed)} file(s)")


@command.command("tune")
@click.argument("image")
@click.option("--shapes", required=True, type=_FILE, help="Lines of `out=N in=K tokens=M[,M...] [dtype=half]`.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=Path("."))
@click.option("--gpu", type=click.Choice(["auto", *GPU_ONLY]), default="auto", show_default=True)
@click.option("--device", type=int, default=0, show_default=True, help="GPU ordinal inside the container.")
@click.option("--bake", "bake_tag", metavar="TAG", help="Also build TAG: IMAGE with the results baked in.")
@click.option("--max-tuning-duration-ms", type=int, default=30, show_default=True)
@click.option("--max-tuning-iterations", type=int, default=100, show_default=True)
def tune_cmd(
    image: str,
    shapes: Path,
    out_dir: Path,
    gpu: str,
    device: int,
    bake_tag: str | None,
    max_tuning_duration_ms: int,
    max_tuning_iterations: int,
) -> None:
    """Tune the listed GEMMs inside IMAGE on this host's GPU (needs a GPU host)."""
    from imagebuild.engine.sdk import docker_engine
    from imagebuild.tunableop import tune as tt

    try:
        text = read_bounded(shapes, 16 << 20, what="a shapes file").decode("utf-8")
    except UnicodeDecodeError as exc:  # a binary file: say which one, never its bytes
        raise ConfigError(f"{shapes}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{shapes}: cannot read: {exc.strerror or exc}") from None
    gemms = tunableop_shapes.parse_shapes(text, str(shapes))
    outcome = tt.tune(
        docker_engine(),
        image,
        gemms,
        out_dir,
        gpu=gpu,
        device=device,
        bake_tag=bake_tag,
        max_tuning_duration_ms=max_tuning_duration_ms,
        max_tuning_iterations=max_tuning_iterations,
    )
    click.echo(f"{outcome.results_path}: {len(gemms)} GEMM(s) tuned in {outcome.report['tune_seconds']} s")
    click.echo(f"{outcome.report_path}: validators and tuned/untuned timings")
    if outcome.baked_image:
        click.echo(f"{outcome.baked_image}: {image} with the results under /opt/imagebuild/tunableop/")


@command.command("bake")
@click.argument("image")
@click.argument("file", type=_FILE)
@click.option("--tag", required=True, help="Tag of the derived image.")
@click.option("--expect", "expect", multiple=True, metavar="KEY=VALUE", help="Fill in what cannot be determined.")
@click.option("--gpu", type=click.Choice(["auto", *kinds.GPU_CHOICES]), default="auto", show_default=True)
def bake_cmd(image: str, file: Path, tag: str, expect: tuple[str, ...], gpu: str) -> None:
    """Build TAG from IMAGE with FILE under /opt/imagebuild/tunableop/, its validators checked first."""
    from imagebuild.engine.sdk import docker_engine
    from imagebuild.tunableop import tune as tt

    c = docker_engine()
    results = top.load(file)
    expected = tt.expect_with_overrides(tt.image_validators(c, image, gpu), top.parse_expectations(expect))
    slug = tt.arch_slug(results.validators.get("GCN_ARCH_NAME") or f"pt{results.validators['PT_VERSION']}")
    tt.bake(c, image, file, tag, expected, slug)
    click.echo(f"{tag}: {image} with {file} as {tt.BAKED_DIR}/tunableop_{slug}.csv")
