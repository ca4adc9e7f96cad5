"""Run the in-image smoke suite (`python3 -m smoke`) with the device flags of the GPU kind, and keep
its report (with the image ID added) where `imagebuild publish` looks for proof.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.engine.docker import detect_gpu
from imagebuild.engine.interface import ContainerStartFailed, ContainerTimeout, Mount, RunSpec
from imagebuild.envvars import env_int
from imagebuild.errors import ConfigError, SmokeFailed
from imagecontract import kinds
from imagecontract.atomic import write_atomic
from imagecontract.models import ModelError, SmokeReport
from imagecontract.smoke_run import MAX_TIME_SCALE, TIME_SCALE_ENV

if TYPE_CHECKING:
    from imagebuild.engine.interface import ContainerEngine, LocalImage
    from imagebuild.plan.imageref import ImageRef

IMAGE_ROOT = "/opt/imagebuild"
TIMEOUT_ENV, TIMEOUT_DEFAULT_S = "IMAGEBUILD_SMOKE_TIMEOUT", 1800  # read when a run starts (a bad value: exit 2)
# An emulated platform's leg (QEMU) scales every deadline of its run by this factor (imagecontract/smoke_run.py)
EMULATION_SCALE_ENV, EMULATION_SCALE_DEFAULT = "IMAGEBUILD_SMOKE_EMULATION_SCALE", 4


def emulation_scale() -> int:
    """The deadline factor for a leg smoked under emulation (a bad value: exit 2, read when a run starts)."""
    return env_int(EMULATION_SCALE_ENV, EMULATION_SCALE_DEFAULT, minimum=1, maximum=MAX_TIME_SCALE)


@dataclass
class SmokeOutcome:
    image_id: str
    report_path: Path
    junit_path: Path
    log_path: Path
    report: SmokeReport
    exit_code: int


def run_smoke(
    engine: ContainerEngine,
    image: LocalImage,
    gpu: str,
    report_path: Path,
    junit_path: Path,
    image_ref: str,
    ref: ImageRef | None = None,
    time_scale: int = 1,
) -> SmokeOutcome:
    """Run the suite in a throwaway container; write report (with image_id), JUnit and the container log.
    time_scale multiplies the suite's deadlines and this run's own (an emulated platform's slow CPU)."""
    timeout_s = env_int(TIMEOUT_ENV, TIMEOUT_DEFAULT_S, minimum=1) * time_scale
    # --gpu none said by the operator runs the suite on the CPU on purpose (a GPU image's CPU part: environment,
    # imports, ops on the CPU, the runtime skipped with its reason; the report says device cpu). A GPU image smoked
    # with --gpu auto on a host that has none still fails its environment check: a runner that lost its GPU is an error.
    device_args = ("--device", kinds.CPU_ARCH) if gpu == kinds.NO_GPU.SMOKE_GPU else ()  # torch's "cpu" device
    gpu = detect_gpu() if gpu == "auto" else gpu
    node = kinds.for_gpu(gpu).REQUIRED_NODE
    if node and not Path(node).exists():
        toolkit = kinds.for_gpu(gpu).TOOLKIT
        raise ConfigError(
            f"--gpu {gpu}, but this host has no {node} (no {toolkit} driver)", hint="use --gpu auto or none"
        )
    report_path.parent.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=".smoke-", dir=report_path.parent))
    os.chmod(out, 0o777)  # the image may run as a non-root user
    log_path = report_path.with_name(report_path.stem + ".log")
    spec = RunSpec(
        image.id,
        command=(),
        entrypoint=(
            "python3",
            "-m",
            "smoke",
            "--report",
            "/out/report.json",
            "--junit",
            "/out/junit.xml",
            *device_args,
        ),
        environment={"PYTHONPATH": IMAGE_ROOT, TIME_SCALE_ENV: str(time_scale)},
        mounts=(Mount(str(out.resolve()), "/out"),),
        network="host",
        working_dir=IMAGE_ROOT,
        gpu=gpu,
        # found by its name when an interrupt (SIGINT, SIGTERM) lands before create returns; removed on every path
        name=f"imagebuild-smoke-{uuid.uuid4().hex[:16]}",
        timeout=timeout_s,
        combined_output=True,
    )
    try:
        try:
            ran = engine.run(spec)
        except ContainerStartFailed as exc:
            raise SmokeFailed(f"could not start the smoke container ({gpu}): {exc.explanation or exc}") from None
        except ContainerTimeout:
            raise SmokeFailed(f"the smoke suite did not finish within {timeout_s} s") from None
        exit_code, logs, image_id = ran.exit_code, ran.output.decode(errors="replace"), ran.image_id
        write_atomic(log_path, logs)
        produced = out / "report.json"
        if not produced.is_file():
            tail = " | ".join(logs.strip().splitlines()[-3:])
            raise SmokeFailed(f"the smoke suite wrote no report (exit {exit_code}): {tail}", hint=f"log: {log_path}")
        smoke = _checked(produced, log_path)  # checked before anything is written where publish looks
        host: dict[str, Any] = {"image_id": image_id, "image_ref": image_ref, "gpu": gpu, "exit_code": exit_code}
        if ref is not None:  # the reference publish reads back: the build's record, with the ID that ran
            host["image"] = replace(ref, image_id=image_id).as_dict()
        smoke = replace(smoke, **host)
        write_atomic(report_path, json.dumps(smoke.to_dict(), indent=2) + "\n")
        if (out / "junit.xml").is_file():
            write_atomic(junit_path, (out / "junit.xml").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return SmokeOutcome(image_id, report_path, junit_path, log_path, smoke, exit_code)


def _checked(produced: Path, log_path: Path) -> SmokeReport:
    """The suite's report read once and checked against the contract (SmokeFailed, exit 4, when it does not fit)."""
    try:
        data = json.loads(produced.read_text())
    except ValueError as exc:
        raise SmokeFailed(f"the smoke report is not JSON: {exc}", hint=f"log: {log_path}") from None
    try:
        return SmokeReport.from_dict(data)
    except ModelError as exc:
        raise SmokeFailed(f"the smoke report does not fit the contract: {exc}", hint=f"log: {log_path}") from None


def judge(outcome: SmokeOutcome) -> tuple[list[str], SmokeFailed | None]:
    """Lines to print, and SmokeFailed (exit 4) unless the report passes the rule the publish gate applies
    (`SmokeReport.refusal`: passed, no failed check, one that ran, suite exit 0)."""
    checks = outcome.report.checks
    lines = [f"{c.status:8} {c.name}" + (f"  ({c.reason})" if c.reason else "") for c in checks]
    refusal = outcome.report.refusal()
    if refusal is not None:
        what = ", ".join(c.name for c in checks if c.status == "failed") or refusal
        return lines, SmokeFailed(
            f"smoke failed in {outcome.image_id[:19]}: {what}", hint=f"report: {outcome.report_path}"
        )
    return lines, None
