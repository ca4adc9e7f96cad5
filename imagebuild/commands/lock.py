"""`imagebuild lock`: pin every external input of the matrix in matrix.lock.json; `--check-remote` proves them."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.commands.common import check_writable, matrix_from
from imagebuild.errors import CheckFailed, ConfigError
from imagebuild.lock import inputs as lock_inputs
from imagebuild.lock import lockfile
from imagecontract.atomic import write_atomic


def _mirrors(values: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for value in values:
        url, sep, path = value.partition("=")
        if not sep or not url or not Path(path).is_dir():
            raise ConfigError(f"--git-mirror {value!r}: expected URL=PATH of a local git repository")
        out[url] = Path(path)
    return out


@click.command(name="lock")
@click.argument("targets", nargs=-1)
@click.option(
    "--check-remote", is_flag=True, help="Prove every locked input still reachable and unchanged; write nothing."
)
@click.option(
    "--refresh", is_flag=True, help="Resolve every input anew (default: keep entries whose spec is unchanged)."
)
@click.option(
    "--git-mirror", "git_mirrors", multiple=True, metavar="URL=PATH", help="Read a git remote from a local mirror."
)
@click.option(
    "--deadline",
    type=click.FloatRange(0.1, 3600),
    default=20.0,
    show_default=True,
    help="Seconds one request may take (registry, index, git).",
)
@click.option("--jobs", type=click.IntRange(1, 64), default=16, show_default=True, help="Parallel checks.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="--check-remote: also write the results as JSON here.",
)
@click.pass_context
def command(
    ctx: click.Context,
    targets: tuple[str, ...],
    check_remote: bool,
    refresh: bool,
    git_mirrors: tuple[str, ...],
    deadline: float,
    jobs: int,
    report_path: Path | None,
) -> None:
    """Resolve every base image, git source and pip install of TARGETS (all by default) into matrix.lock.json."""
    matrix = matrix_from(ctx)
    path = lockfile.lock_path(matrix)
    previous = lockfile.load(path)
    if check_remote:
        from imagebuild.lock import remote

        if previous is None:
            raise ConfigError(f"{path.name} is missing: run `imagebuild lock` first")
        if report_path is not None:
            check_writable(report_path)  # a FIFO, a device or a folder there is refused before any request
        # What is fetched is what the MATRIX says (its specs), never the lock's own copy: a lock made from another
        # matrix is stale, refused before anything runs; the lock gives only the pins the answers are compared with.
        lockfile.require_current(lock_inputs.collect(matrix), previous, path.name)
        selected = lock_inputs.collect(matrix, targets)
        specs = {key: item.spec for key, item in selected.items()}
        results = remote.check(previous, specs, limit=deadline, jobs=jobs, say=click.echo, root=path.parent)
        summary = remote.summary(results)
        click.echo(summary["line"])
        if report_path is not None:
            import platform
            import sys
            from datetime import UTC, datetime

            report = summary | {
                "command": " ".join(["imagebuild", *sys.argv[1:]]),
                "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "host": f"{platform.node()} ({platform.machine()})",
                "results": results,
            }
            write_atomic(report_path, json.dumps(report, indent=1, sort_keys=True) + "\n")
        if summary["failed"]:
            raise CheckFailed(f"{summary['failed']} input(s) unreachable, changed or not locked")
        return
    from imagebuild.lock import resolve

    every = lock_inputs.collect(matrix)
    selected = lock_inputs.collect(matrix, targets) if targets else every
    options = resolve.Options(refresh=refresh, git_mirrors=_mirrors(git_mirrors), limit=max(deadline, 60.0))
    entries, resolver = resolve.lock(selected, previous, options, say=click.echo)
    old = (previous or {}).get("inputs", {})
    for key in every:
        if key not in entries and key in old:
            entries[key] = old[key]
    doc = lockfile.document({k: every[k] for k in every if k in entries}, entries, resolver)
    written = lockfile.save(path, doc)
    counts = {s: sum(1 for e in entries.values() if e["status"] == s) for s in lockfile.STATUSES}
    click.echo(
        f"{path.name}: {'written' if written else 'unchanged'}; " + ", ".join(f"{n} {s}" for s, n in counts.items())
    )
