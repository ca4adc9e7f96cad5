"""`imagebuild build`: plan, run BuildKit per target (optionally in parallel), report, show progress."""

from __future__ import annotations

import functools
import os
import shlex
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from imagebuild.building import base_substitute, builder_use, post_cache
from imagebuild.building.buildkit import (
    TargetResult,
    raise_on_failure,
    run_builds,
    write_report,
)
from imagebuild.building.buildkit import (
    command as build_argv,
)
from imagebuild.building.secrets import Secrets, check_secret_flags, collect_secrets
from imagebuild.building.sizes import add_sizes
from imagebuild.building.specs import PlanOptions, plan
from imagebuild.commands.common import echo_plans, platforms_option, warn
from imagebuild.engine.docker import Engine, find_engine
from imagebuild.prove.coverage import add_coverage, required_libraries
from imagebuild.release.sbom_image import add_sboms


def _say(line: str) -> None:
    click.echo(line, err=True)


def _shell(argv: list[str], engine: Engine) -> str:
    env = " ".join(f"{k}={v}" for k, v in engine.env.items())
    return (env + " " if env else "") + shlex.join(argv)


class PlainProgress:
    """Grouped logs for CI (GitHub `::group::`) or one line per event elsewhere; no interleaved output."""

    def __init__(self, github: bool) -> None:
        self.github = github
        self.lock = threading.Lock()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def line(self, target: str, text: str) -> None:
        return None

    def done(self, result: TargetResult) -> None:
        state = "ok" if result.ok else f"FAILED at {result.failed_step}"
        with self.lock:
            if self.github:
                click.echo(f"::group::build {result.target}: {state} ({result.duration_s:.1f} s)")
                click.echo(Path(result.log).read_text(errors="replace"), nl=False)
                click.echo("::endgroup::")
                if not result.ok:
                    click.echo(f"::error title=build {result.target}::failed at {result.failed_step}")
            else:
                cached = f", {result.cached_steps}/{result.total_steps} steps cached" if result.ok else ""
                click.echo(f"build {result.target}: {state} ({result.duration_s:.1f} s{cached}; log {result.log})")
                for tail in result.log_tail if not result.ok else []:
                    click.echo(f"  | {tail}")


class RichProgress(PlainProgress):
    """A live line per target on a terminal: spinner, last log line, then the outcome."""

    def __init__(self, targets: list[str]) -> None:
        super().__init__(github=False)
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=False
        )
        self.tasks = {name: self.progress.add_task(f"{name}: waiting", total=1) for name in targets}

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def line(self, target: str, text: str) -> None:
        if text.startswith("#") and "[" in text:
            self.progress.update(self.tasks[target], description=f"{target}: {text[:100]}")

    def done(self, result: TargetResult) -> None:
        state = "[green]ok[/]" if result.ok else f"[red]FAILED[/] at {result.failed_step}"
        self.progress.update(self.tasks[result.target], description=f"{result.target}: {state}", completed=1)
        if not result.ok:
            for tail in result.log_tail[-15:]:
                self.progress.console.print(f"  | {tail}", markup=False, highlight=False)


@click.command("build")
@click.argument("targets", nargs=-1)
@click.option("--arch", help="GPU arches (; , or space separated); with no TARGET, every target having them.")
@click.option("--allow-experimental", is_flag=True, help="Allow arches marked experimental.")
@click.option("--dry-run", is_flag=True, help="Print the exact commands; change nothing.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True, help="Parallel builds.")
@click.option("--report", "report_path", type=click.Path(path_type=Path, dir_okay=False), help="Build report.")
@click.option("--cache-from", multiple=True, help="Registry cache to read (passed to BuildKit).")
@click.option("--cache-to", multiple=True, help="Registry cache to write (passed to BuildKit).")
@click.option("--builder", help="A buildx builder (e.g. a remote BuildKit); default: settings.builder.")
@click.option("--staging", help="Repository legs are pushed to by digest and reused from by input key (HOST/REPO).")
@click.option("--no-cache", is_flag=True, help="Build every step again (cold build timing).")
@platforms_option("OCI platform to build (linux/arm64; repeatable); default: every one the target lists.")
@click.option("--tag", "tags", multiple=True, help="Extra tag; may contain {target}.")
@click.option("--secret", "secrets", multiple=True, help="Extra BuildKit secret: id=NAME,src=FILE or id=NAME,env=VAR.")
@click.option(
    "--base-substitute",
    "base_substitutes",
    multiple=True,
    help="Build FROM LOCAL where the Dockerfile names the public base PUBLIC: PUBLIC=LOCAL[,platform=OCI] "
    "(recorded in the build report, the image label and the provenance).",
)
@click.pass_obj
def command(  # noqa: PLR0913
    obj: dict[str, object],
    targets: tuple[str, ...],
    arch: str | None,
    allow_experimental: bool,
    dry_run: bool,
    jobs: int,
    report_path: Path | None,
    cache_from: tuple[str, ...],
    cache_to: tuple[str, ...],
    builder: str | None,
    staging: str | None,
    no_cache: bool,
    platforms: tuple[str, ...],
    tags: tuple[str, ...],
    secrets: tuple[str, ...],
    base_substitutes: tuple[str, ...],
) -> None:
    """Build images with BuildKit: labels, tags, secrets, caches and a JSON build report."""
    check_secret_flags(os.environ, secrets)  # every usage error comes before a secret is written
    # Probing the engine waits on processes: overlap it with loading the matrix (CPU-bound imports).
    with ThreadPoolExecutor(max_workers=1) as pool:
        probe = pool.submit(find_engine)
        from imagebuild.matrix import load_matrix

        matrix = load_matrix(Path(str(obj["matrix_path"])))
        options = PlanOptions(
            arch, allow_experimental, tags, cache_from, cache_to, builder, no_cache, platforms, base_substitutes
        )
        specs = plan(matrix, targets, options)
        engine = probe.result()
    for spec in specs:  # the digest each substitute has now: in the report, the label and so the provenance
        if spec.base_substitution:
            spec.base_substitution = base_substitute.resolve_used(spec.base_substitution)
            spec.labels.update(base_substitute.label(spec.base_substitution))
    specs, reused = builder_use.prepare_legs(engine, matrix.model.settings, (builder, staging), specs, dry_run, _say)
    for spec in specs:
        build_argv(spec, engine)  # --builder / --cache-to usage errors, still before any secret is written
    secret_set: Secrets = collect_secrets(os.environ, secrets)
    try:
        for spec in specs:
            spec.secrets = dict(secret_set.files)
        if dry_run:
            echo_plans(spec.plan for spec in specs if spec.plan is not None)
            for spec in specs:
                if spec.render_dir is not None:
                    click.echo(f"# render {spec.target} into {spec.render_dir}")
                for sub in spec.base_substitution:
                    used = sub["used_digest"] or f"digest unknown: {sub.get('why')}"
                    where = f"{spec.target} ({sub['platform']})"
                    click.echo(f"# base substitution {where}: {sub['public']} -> {sub['used']} ({used})")
                if spec.wheels:
                    click.echo(f"# stage {' '.join(map(str, spec.wheels))} into {spec.context / 'build/wheelhouse'}")
                click.echo(_shell(build_argv(spec, engine), engine))
            return
        report = report_path or matrix.path.resolve().parent / "build" / "build-report.json"
        github = os.environ.get("GITHUB_ACTIONS") == "true"
        progress = (
            RichProgress([s.target for s in specs]) if sys.stdout.isatty() and not github else PlainProgress(github)
        )
        click.echo(f"building {len(specs)} target(s) with {engine.describe()}", err=True)
        with progress:
            results = run_builds(specs, engine, secret_set, jobs, progress.line, progress.done)
        # What depends only on the built image ID is not redone for the same ID (build/post_cache.py, issue 22).
        built = {r.target: r.image_id for r in results}
        required = required_libraries(specs)  # the matrix's coverage_required per image: part of the cache key
        todo = post_cache.reuse(engine, results, report, required, say=functools.partial(click.echo, err=True))
        for line in add_coverage(engine, todo, matrix.path, report, required):  # arch-coverage.json; a gap: exit 3
            warn(line)  # an image without python3: not scanned, said here and in the report
        add_sboms(engine, todo, matrix.path, report)  # the SBOM layer: /opt/imagebuild/sbom.json (issue 16)
        # size and budget (matrix size_budgets): the largest layers with their steps; over budget: exit 3
        by_name = {spec.target: spec for spec in specs}
        add_sizes([by_name[r.target] for r in todo], todo, matrix.model.size_budgets, {t.name for t in matrix.targets})
        post_cache.remember(built, todo, report, required, engine)
        results += reused  # legs not built (a staged image with a passing smoke for the same input key): no post steps
        write_report(report, engine, results, matrix.path.resolve().parent)
        click.echo(f"build report: {report}")
        raise_on_failure(results, report)
    finally:
        secret_set.cleanup()
