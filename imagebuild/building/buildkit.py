"""Drive BuildKit for one or more targets: labels, tags, secrets, caches, logs and the build report.

Builds run as a subprocess (`docker buildx build` or `DOCKER_BUILDKIT=1 docker build`) because only
the CLI passes BuildKit secrets. Secrets travel as `--secret id=...,src=FILE` (temp files, mode 0600)
and their values are scrubbed from every log line we keep, so they never reach args, layers or logs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.building.secrets import Secrets
from imagebuild.engine import builders
from imagebuild.engine.cli import built_image_id, start_build
from imagebuild.engine.docker import Engine
from imagebuild.errors import BuildFailed, ConfigError
from imagebuild.plan.git import GitInfo as GitInfo  # re-exported: `from imagebuild.building.buildkit import GitInfo`
from imagebuild.plan.imageref import ImageRef, write_record
from imagecontract.atomic import write_atomic

if TYPE_CHECKING:
    from imagebuild.plan.target_plan import TargetPlan

LOG_TAIL_LINES = 40


@dataclass
class BuildSpec:
    """Everything one `docker build` needs; built by plan_builds, turned into argv by command()."""

    target: str
    context: Path
    dockerfile: Path
    tags: list[str]
    labels: dict[str, str] = field(default_factory=dict)
    build_args: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, Path] = field(default_factory=dict)
    cache_from: list[str] = field(default_factory=list)
    cache_to: list[str] = field(default_factory=list)
    builder: str | None = None
    no_cache: bool = False
    wheels: list[Path] = field(default_factory=list)  # staged into build/wheelhouse before the build
    render_dir: Path | None = None  # where a non-default render is written before the build
    rendered_files: dict[str, str] = field(default_factory=dict)
    log_path: Path = Path("build/logs/build.log")
    plan: TargetPlan | None = None  # what the spec was read off (None for a hand-made spec)
    platform: str | None = None  # the OCI platform (--platform; None: the engine's own)
    source_date_epoch: int | None = None  # the commit time: BuildKit's image and history times, layer timestamps
    base_substitution: list[dict[str, Any]] = field(default_factory=list)  # build/base_substitute.py records
    staging: str | None = None  # a builder that cannot load (engine/builders.py): the leg is pushed here by digest
    input_key: str | None = None  # build/input_key.py: set when the leg was looked up and is built

    @property
    def iidfile(self) -> Path:
        return self.log_path.with_suffix(".iid")

    @property
    def metadata_file(self) -> Path:
        return self.log_path.with_suffix(".metadata.json")


@dataclass
class TargetResult:
    """One target's line in the build report."""

    target: str
    ok: bool
    image_id: str | None
    tags: list[str]
    duration_s: float
    cached_steps: int
    total_steps: int
    failed_step: str | None
    log_tail: list[str]
    log: str
    dockerfile: str
    command: list[str]
    coverage: str | None = None  # arch coverage: the document written, or why the image was not scanned
    size: dict[str, Any] | None = None  # unpacked (and compressed) bytes, largest layers, budget (sizes.py)
    base_substitution: list[dict[str, Any]] | None = None  # the public base, the one used and its digest
    node: str | None = None  # the builder node that built it (a builder of several nodes, engine/builders.py)
    pushed: str | None = None  # HOST/REPO@sha256:... the leg left its node as (pulled back into the engine)
    input_key: str | None = None  # build/input_key.py
    reused: str | None = None  # not built: the staged digest of a passing smoke for the same input key


LOADED = ["--provenance=false", "--output", "type=docker,oci-mediatypes=true"]


def command(spec: BuildSpec, engine: Engine) -> list[str]:
    """The exact argv of one build."""
    argv = [*engine.build_prefix(), "--progress", "plain", "--network", "host"]
    if engine.mode == "buildx":
        # Loaded into the engine (type=docker, what --load means) as one OCI manifest per platform. No BuildKit
        # provenance attestation: it records the build's invocation and times, so on the containerd store, where
        # it sits beside the image in a local index whose digest is the image ID, every cached rebuild was a new
        # ID ("there is no such thing as reproducible provenance", moby/buildkit#3421); publish attaches our own
        # signed SLSA provenance instead. OCI media types asked for: without an attestation the exporter writes
        # Docker's. Never with rewrite-timestamp: Docker 26.1's exporter into its own store refuses it ("conflicts
        # with unpack", seen); the OCI export and the push take it (bench/reproducible.py).
        output = (
            [*builders.push_output(spec.staging), "--metadata-file", str(spec.metadata_file)]
            if spec.staging
            else LOADED
        )
        argv += output + (["--builder", spec.builder] if spec.builder else [])
    elif spec.builder:
        raise ConfigError("--builder needs docker buildx", hint=f"{engine.client} runs BuildKit without buildx")
    argv += ["-f", str(spec.dockerfile), "--iidfile", str(spec.iidfile)] + (["--no-cache"] if spec.no_cache else [])
    argv += ["--platform", spec.platform] if spec.platform else []
    for tag in [] if spec.staging else spec.tags:  # a pushed leg gets its tags where it is pulled (pull)
        argv += ["-t", tag]
    for key, value in sorted(spec.build_args.items()):
        argv += ["--build-arg", f"{key}={value}"]
    if spec.source_date_epoch is not None:  # read by BuildKit itself (0.11+); no Dockerfile ARG, no cache key
        argv += ["--build-arg", f"SOURCE_DATE_EPOCH={spec.source_date_epoch}"]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    for secret_id, path in sorted(spec.secrets.items()):
        argv += ["--secret", f"id={secret_id},src={path}"]
    for ref in spec.cache_from:
        # Without buildx, `docker build --cache-from` takes an image reference (with inline cache).
        native = engine.mode != "buildx" and ref.startswith("type=registry,")
        argv += ["--cache-from", _ref_of(ref) if native else ref]
    for ref in spec.cache_to:
        if engine.mode == "buildx":
            argv += ["--cache-to", ref]
        elif ref.replace(" ", "") in {"type=inline", "inline"}:
            argv += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
        else:
            raise ConfigError(
                f"--cache-to {ref} needs docker buildx", hint="without buildx only --cache-to type=inline works"
            )
    argv.append(str(spec.context))
    return argv


REWRITE_TIMESTAMP_ENGINE = 26  # Docker 26.0 vendors BuildKit 0.13, the first with the exporter's rewrite-timestamp


def rewrites_timestamps(engine: Engine) -> bool:
    """Whether this engine's BuildKit can clamp layer file times to SOURCE_DATE_EPOCH (buildx on Docker 26+)."""
    try:
        major = int(engine.server_version.split(".")[0])
    except ValueError:
        return False
    return engine.mode == "buildx" and major >= REWRITE_TIMESTAMP_ENGINE


def reproducibility(engine: Engine) -> dict[str, object]:
    """The build report's word on whether two builds of one commit give one digest, and why not."""
    evidence = "bench/results/reproducible.json: two clean builds exported as OCI layouts, digests per platform"
    if rewrites_timestamps(engine):
        return {
            "digest_reproducible": False,
            "why": "the image loaded into the engine keeps its build's file times: Docker 26.1's exporter into its own "
            "store refuses rewrite-timestamp (conflicts with unpack); an OCI export or push with SOURCE_DATE_EPOCH "
            "(the commit time, passed) and rewrite-timestamp=true is reproducible",
            "evidence": evidence,
        }
    return {
        "digest_reproducible": False,
        "why": f"{engine.describe()}: every layer holds the file times of its build (timestamp rewriting is BuildKit "
        f"0.13, Docker {REWRITE_TIMESTAMP_ENGINE}+ through buildx); a rebuild from the same cache gives the same ID",
        "evidence": evidence,
    }


def _ref_of(cache: str) -> str:
    parts = dict(item.split("=", 1) for item in cache.split(",") if "=" in item)
    return parts.get("ref", cache)


_STEP = re.compile(r"^#(\d+) \[([^\]]+)\] (.*)$")
_CACHED = re.compile(r"^#(\d+) CACHED$")
_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ (.*)$")
# the failing step's own last lines: its error (pip's, apt's, the compiler's) is there, not in the log's end,
# which BuildKit fills with the Dockerfile excerpt and the solver's verdict
STEP_OUTPUT_LINES = 20


@dataclass
class LogSummary:
    """What the plain BuildKit progress tells: steps, cached steps and the failing step."""

    steps: dict[str, str] = field(default_factory=dict)
    cached: set[str] = field(default_factory=set)
    failed: str | None = None
    failed_id: str | None = None
    output: dict[str, deque[str]] = field(default_factory=dict)

    def feed(self, line: str) -> None:
        if match := _OUTPUT.match(line):
            kept = self.output.setdefault(match.group(1), deque(maxlen=STEP_OUTPUT_LINES))
            kept.append(match.group(2))
        elif match := _STEP.match(line):
            self.steps.setdefault(match.group(1), f"[{match.group(2)}] {match.group(3)}")
        elif match := _CACHED.match(line):
            self.cached.add(match.group(1))
        elif (match := _ERROR.match(line)) and self.failed is None:
            self.failed_id = match.group(1)
            self.failed = self.steps.get(match.group(1), f"step #{match.group(1)}")

    def failure_tail(self, log_tail: list[str]) -> list[str]:
        """What a failed build shows: the failing step's last output lines, then the engine's own error lines."""
        own = list(self.output.get(self.failed_id or "", ()))
        verdict = [line for line in log_tail if line.startswith("ERROR") or _ERROR.match(line)]
        return own + verdict if own else log_tail

    @property
    def build_steps(self) -> list[str]:
        """Dockerfile steps that do work (`[stage n/m] RUN|COPY ...`): not FROM, context or metadata."""
        return [
            sid
            for sid, text in self.steps.items()
            if re.match(r"^\[[^\]]*\d+/\d+\] ", text) and not re.match(r"^\[[^\]]*\] FROM ", text)
        ]


def stage_wheels(wheels: Iterable[Path], dest: Path) -> list[Path]:
    """Hardlink (else copy) wheels into the build context, keeping mtime so the cache key holds."""
    dest.mkdir(parents=True, exist_ok=True)
    staged = []
    for wheel in wheels:
        target = dest / wheel.name
        if target.exists() and target.stat().st_size == wheel.stat().st_size:
            staged.append(target)
            continue
        tmp = dest / f".{wheel.name}.tmp"
        tmp.unlink(missing_ok=True)
        try:
            os.link(wheel, tmp)
        except OSError:
            shutil.copy2(wheel, tmp)
        os.replace(tmp, target)
        staged.append(target)
    return staged


def prepare(spec: BuildSpec) -> None:
    """The side effects before a build: write a non-default render, stage wheels."""
    if spec.render_dir is not None:
        spec.render_dir.mkdir(parents=True, exist_ok=True)
        for name, text in spec.rendered_files.items():
            write_atomic(spec.render_dir / name, text)
    if spec.wheels:
        stage_wheels(spec.wheels, spec.context / "build" / "wheelhouse")


def run_build(
    spec: BuildSpec,
    engine: Engine,
    secrets: Secrets,
    on_line: Callable[[str, str], None] | None = None,
) -> TargetResult:
    """Build one target, writing its own log; a failure is a result, not an exception."""
    argv = command(spec, engine)
    prepare(spec)
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    spec.iidfile.unlink(missing_ok=True)
    summary = LogSummary()
    tail: list[str] = []
    started = time.monotonic()
    with open(spec.log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(argv) + "\n")
        proc = start_build(engine, argv, spec.context)
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = secrets.scrub(raw.rstrip("\n"))
            log.write(line + "\n")
            summary.feed(line)
            tail = (tail + [line])[-LOG_TAIL_LINES:]
            if on_line:
                on_line(spec.target, line)
        returncode = proc.wait()
    duration = round(time.monotonic() - started, 3)
    ok = returncode == 0 and spec.iidfile.is_file()
    pushed, failed = _fetch_pushed(spec, engine) if ok and spec.staging else (None, None)
    ok = ok and failed is None
    image_id, failed = built_id(spec, engine) if ok else (None, failed)
    ok = ok and image_id is not None
    failed = None if ok else (failed or summary.failed or f"docker build exited {returncode}")
    steps = summary.build_steps
    return TargetResult(
        target=spec.target,
        ok=ok,
        image_id=image_id,
        tags=spec.tags if ok else [],
        duration_s=duration,
        cached_steps=len([sid for sid in steps if sid in summary.cached]),
        total_steps=len(steps),
        failed_step=failed,
        log_tail=[] if ok else summary.failure_tail(tail),
        log=str(spec.log_path),
        dockerfile=str(spec.dockerfile),
        command=[secrets.scrub(arg) for arg in argv],
        base_substitution=list(spec.base_substitution) or None,
        node=pushed.node if pushed else None,
        pushed=pushed.ref if pushed else None,
        input_key=spec.input_key,
    )


def _fetch_pushed(spec: BuildSpec, engine: Engine) -> tuple[builders.Pushed | None, str | None]:
    """A leg a remote builder pushed by digest, pulled back into the engine under the build's tags; or why not."""
    assert spec.staging is not None
    try:
        pushed = builders.read_pushed(spec.metadata_file, spec.staging)
        builders.pull(engine, pushed, spec.tags)
    except BuildFailed as exc:
        return None, exc.message
    return pushed, None


def built_id(spec: BuildSpec, engine: Engine) -> tuple[str | None, str | None]:
    """(the built image's ID as the engine names it, None) or (None, why not): which digest that is depends on the
    engine's image store, the engine's to say (engine/cli.py built_image_id)."""
    return built_image_id(engine, spec.iidfile, spec.tags)


def run_builds(
    specs: list[BuildSpec],
    engine: Engine,
    secrets: Secrets,
    jobs: int = 1,
    on_line: Callable[[str, str], None] | None = None,
    on_done: Callable[[TargetResult], None] | None = None,
) -> list[TargetResult]:
    """Build in parallel (bounded by jobs); every target gets a result even when others fail."""

    def one(spec: BuildSpec) -> TargetResult:
        try:
            result = run_build(spec, engine, secrets, on_line)
        except OSError as exc:  # e.g. the client vanished: still a per-target failure
            result = TargetResult(
                spec.target,
                False,
                None,
                [],
                0.0,
                0,
                0,
                f"could not run the build: {exc}",
                [],
                str(spec.log_path),
                str(spec.dockerfile),
                [],
            )
        if on_done:
            on_done(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, specs))


def image_ref(result: TargetResult) -> ImageRef | None:
    """The reference a successful build hands to smoke and publish: the ID from BuildKit's iidfile."""
    if not result.ok or not result.image_id:
        return None
    return ImageRef(result.image_id, result.target, tuple(result.tags), recorded_by="build")


def write_report(path: Path, engine: Engine, results: list[TargetResult], root: Path | None = None) -> None:
    """The build report; with root, also each built image's record (imageref.record_path) for smoke and publish."""
    targets = []
    for result in results:
        ref = image_ref(result)
        targets.append({**asdict(result), "image": ref.as_dict() if ref else None})
        if ref is not None and root is not None:
            write_record(root, ref)
    report = {
        "schema_version": 1,
        "engine": engine.describe(),
        "reproducible": reproducibility(engine),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "ok": all(result.ok for result in results),
        "targets": targets,
    }
    write_atomic(path, json.dumps(report, indent=2) + "\n")


def raise_on_failure(results: list[TargetResult], report: Path) -> None:
    failed = [result for result in results if not result.ok]
    if failed:
        names = "; ".join(f"{r.target}: failed at {r.failed_step}" for r in failed)
        raise BuildFailed(f"{len(failed)} of {len(results)} target(s) failed: {names}", hint=f"report: {report}")
