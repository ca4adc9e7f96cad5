"""The engine side of TunableOp: ask an image for its validators, tune inside it, bake a derived image.

Results are only valid for the torch, ROCm libraries and GPU arch they were tuned with, so every step runs
the image itself (through the container engine, honouring DOCKER_HOST) rather than trusting the host's torch.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.engine.docker import detect_gpu
from imagebuild.engine.interface import BuildError, EngineError, ImageNotFound, Mount, RunSpec
from imagebuild.errors import BuildFailed, CheckFailed, ConfigError
from imagebuild.tunableop import results as top
from imagebuild.tunableop import shapes as tunableop_shapes
from imagecontract import kinds
from imagecontract.atomic import write_atomic
from imagecontract.blob import read_bounded
from imagecontract.models import Manifest, ModelError
from imagecontract.text import printable

if TYPE_CHECKING:
    from imagebuild.engine.interface import ContainerEngine, LocalImage

BAKED_DIR = "/opt/imagebuild/tunableop"
MANIFEST_PATH = "/opt/imagebuild/manifest.json"
SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "image" / "tunableop"
CONTRACT_DIR = Path(__file__).resolve().parents[2] / "imagecontract"  # tune_gemms.py imports it
MANIFEST_LIMIT = 16 << 20  # the manifest is a few KB; its archive from the engine is bounded by this
ROCM_KEYS = ("ROCM_VERSION", "HIP_VERSION", "HIPBLASLT_VERSION", "ROCBLAS_VERSION", "GCN_ARCH_NAME")

# Runs inside the image: what torch is there and, with a GPU, the validators it registers.
VALIDATORS_PY = r"""
import json, sys
out = {"torch": None, "hip": None, "cuda": None, "gpu": False, "validators": None, "error": None}
try:
    import torch
    out.update(torch=torch.__version__, hip=torch.version.hip, cuda=torch.version.cuda)
    out["gpu"] = bool(torch.cuda.is_available())
    if out["gpu"]:
        out["validators"] = dict(torch.cuda.tunable.get_validators())
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGEBUILD-JSON " + json.dumps(out))
"""


def _require_image(engine: ContainerEngine, image: str) -> LocalImage:
    try:
        return engine.image(image)
    except ImageNotFound:
        raise ConfigError(f"image {image!r} not found in the engine", hint="build or pull it first") from None


def _read_manifest(engine: ContainerEngine, image: str) -> Manifest | None:
    """/opt/imagebuild/manifest.json from the image, read from a created (never started) container, as the
    contract's model; one that does not fit it is an error naming the key."""
    try:
        raw = engine.read_file(image, MANIFEST_PATH, MANIFEST_LIMIT)
        data = json.loads(raw) if raw is not None else None
    except (EngineError, ValueError):  # json.JSONDecodeError is a ValueError, and so is a file over the limit
        return None
    try:
        return None if data is None else Manifest.from_dict(data)
    except ModelError as exc:
        raise ConfigError(f"{image}: {MANIFEST_PATH} does not fit the contract: {exc}") from None


def _probe_torch(engine: ContainerEngine, image: str, gpu: str) -> dict[str, Any] | None:
    """Run VALIDATORS_PY in the image (with the GPU when there is one); None when the image has no python.

    When the engine cannot hand the GPU to a container, asks again without it and says so in the result.
    """
    found = _run_probe(engine, image, gpu)
    if found is None and gpu != "none":
        found = _run_probe(engine, image, "none")
        if found is not None:  # python and torch are there, so it was the GPU the engine could not give
            found["error"] = f"the container could not be started with the {gpu} GPU; asked without it"
    return found


def _run_probe(engine: ContainerEngine, image: str, gpu: str) -> dict[str, Any] | None:
    try:
        ran = engine.run(
            RunSpec(image, command=("-c", VALIDATORS_PY), entrypoint=("python3",), network="host", gpu=gpu)
        )
    except EngineError:
        return None
    if ran.exit_code != 0:
        return None
    for line in ran.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("IMAGEBUILD-JSON "):
            try:
                probe = json.loads(line.removeprefix("IMAGEBUILD-JSON "))
            except ValueError:
                return None
            return probe if isinstance(probe, dict) else None  # the image's own answer: an object or nothing
    return None


def _from_versions(kind: str, torch_version: str | None, source: str, notes: list[str]) -> top.Expected:
    """What is known without a GPU: PT_VERSION; on CUDA and CPU builds that is the whole set."""
    values: dict[str, str] = {}
    pt = top.pt_version_of(torch_version) if torch_version else None
    if pt:
        values["PT_VERSION"] = pt
    platform = kinds.platform(kind)
    if platform.TUNABLEOP_NEEDS_GPU:
        return top.Expected(
            values=values,
            complete=False,
            source=source,
            undetermined=[*([] if pt else ["PT_VERSION"]), *ROCM_KEYS],
            notes=[
                *notes,
                f"{platform.TOOLKIT} validators need the image's torch on a GPU: run on a GPU host or pass --expect",
            ],
        )
    if platform.VENDOR is None:
        notes = [*notes, f"a {platform.TOOLKIT} build of torch runs no TunableOp; PT_VERSION is all it could check"]
    else:
        notes = [*notes, f"a {platform.TOOLKIT.upper()} build of torch registers PT_VERSION only"]
    return top.Expected(
        values=values,
        complete=bool(pt),
        source=source,
        undetermined=[] if pt else ["PT_VERSION"],
        notes=notes,
    )


def image_validators(engine: ContainerEngine, image: str, gpu: str = "auto") -> top.Expected:
    """The validators an image's torch requires: asked of torch (GPU), else derived, else the manifest."""
    _require_image(engine, image)
    gpu = detect_gpu() if gpu == "auto" else gpu
    probe = _probe_torch(engine, image, gpu)
    if probe and probe.get("validators"):
        return top.Expected(
            values=dict(probe["validators"]),
            complete=True,
            source=f"torch {probe['torch']} in {image} on a GPU",
        )
    notes = []
    if probe and probe.get("torch"):
        if probe.get("error"):
            notes.append(f"torch in the image said: {printable(probe['error'], 300)}")
        kind = kinds.from_torch_versions(probe).NAME
        torch = printable(probe["torch"], 100)  # what the image printed: text for a line, never a control
        return _from_versions(kind, torch, f"torch {torch} in {image} (no GPU)", notes)
    manifest = _read_manifest(engine, image)
    if manifest:
        if manifest.gpu_arches:
            notes.append(f"image built for {', '.join(manifest.gpu_arches)}")
        source = f"the manifest of {image} (no torch could be run)"
        return _from_versions(manifest.platform.kind, manifest.torch.version, source, notes)
    labels = _require_image(engine, image).labels or {}
    if "io.imagebuild.torch" in labels:
        kind = kinds.from_platform_name(labels.get("io.imagebuild.platform", "")).NAME
        return _from_versions(kind, labels["io.imagebuild.torch"], f"the labels of {image}", notes)
    why = f" (torch in the image said: {printable(probe['error'], 300)})" if probe and probe.get("error") else ""
    raise ConfigError(f"cannot tell which torch {image!r} holds: no importable torch, manifest or labels{why}")


def expect_with_overrides(base: top.Expected, given: dict[str, str]) -> top.Expected:
    """--expect values fill in (or override) what the image could not tell."""
    if not given:
        return base
    undetermined = [k for k in base.undetermined if k not in given]
    if any(k in given for k in ("ROCM_VERSION", "HIP_VERSION")):
        undetermined = [k for k in undetermined if k not in ("ROCM_VERSION", "HIP_VERSION")]
    return top.Expected(
        values={**base.values, **given},
        complete=base.complete or not undetermined,
        source=f"{base.source} and --expect",
        undetermined=undetermined,
        notes=base.notes,
    )


# ----------------------------------------------------------------------------------------------------


def arch_slug(arch: str) -> str:
    """A file-name-safe form of a target ID: gfx942:sramecc+:xnack- -> gfx942_sramecc+_xnack-."""
    return re.sub(r"[^A-Za-z0-9+._-]", "_", arch)


@dataclass
class TuneOutcome:
    results_path: Path
    report_path: Path
    report: dict[str, Any]
    baked_image: str | None = None


def bake(engine: ContainerEngine, image: str, results_path: Path, tag: str, expected: top.Expected, slug: str) -> str:
    """Build `tag` FROM image with the results under /opt/imagebuild/tunableop/, after checking validators."""
    results = top.load(results_path)
    report = top.check_validators(results, expected)
    if not report.ok:
        raise CheckFailed(
            f"not baking {results_path} into {image}: " + "; ".join(report.problems()),
            hint="tune inside this image, or pass --expect for what cannot be determined here",
        )
    name = f"tunableop_{slug}.csv"
    old = (_require_image(engine, image).labels or {}).get("io.imagebuild.tunableop.baked", "")
    baked = ",".join(sorted({*filter(None, old.split(",")), name}))
    with tempfile.TemporaryDirectory(prefix="imagebuild-bake-") as ctx:
        Path(ctx, name).write_text(top.render(results), encoding="utf-8")
        dockerfile = [
            f"FROM {image}",
            f"COPY {name} {BAKED_DIR}/{name}",
            f"LABEL io.imagebuild.tunableop.baked={json.dumps(baked)}",
        ]
        Path(ctx, "Dockerfile").write_text("\n".join(dockerfile) + "\n", encoding="utf-8")
        try:
            return engine.build_context(ctx, tag)
        except BuildError as exc:
            raise BuildFailed(f"baking {name} into {image} failed: {exc}") from None


def run_tuning(
    engine: ContainerEngine,
    image: str,
    gemms: list[dict[str, object]],
    io_dir: Path,
    *,
    gpu: str,
    device: int = 0,
    max_tuning_duration_ms: int = 30,
    max_tuning_iterations: int = 100,
) -> tuple[dict[str, Any], top.ResultsFile]:
    """Run tune_gemms.py in the image (scripts mounted read-only, results under io_dir); its report and file."""
    if not (SCRIPTS_DIR / "tune_gemms.py").is_file():
        raise ConfigError(f"the in-image tuning script is missing: {SCRIPTS_DIR / 'tune_gemms.py'}")
    Path(io_dir, "shapes.json").write_text(tunableop_shapes.shapes_json(gemms), encoding="utf-8")
    command = (
        "/opt/imagebuild-tune/tune_gemms.py",
        "--shapes=/io/shapes.json",
        "--out=/io/results/tunableop_results%d.csv",
        f"--device={device}",
        "--report=/io/report.json",
        f"--max-tuning-duration-ms={max_tuning_duration_ms}",
        f"--max-tuning-iterations={max_tuning_iterations}",
    )
    mounts = (
        Mount(str(io_dir), "/io"),
        Mount(str(SCRIPTS_DIR), "/opt/imagebuild-tune", read_only=True),
        # Beside, not inside, the read-only scripts mount: a mount point cannot be made in a read-only one.
        Mount(str(CONTRACT_DIR), "/opt/imagebuild-contract/imagecontract", read_only=True),
    )
    try:
        ran = engine.run(
            RunSpec(
                image,
                command=command,
                entrypoint=("python3",),
                environment={"PYTHONPATH": "/opt/imagebuild-contract"},
                mounts=mounts,
                network="host",
                gpu=gpu,
            )
        )
    except EngineError as exc:
        raise ConfigError(f"cannot run {image} with a {gpu} GPU: {exc.explanation or exc}") from None
    if ran.exit_code != 0:
        tail = ran.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        raise BuildFailed(f"tuning in {image} failed (exit {ran.exit_code}): {printable(' '.join(tail), 300)}")
    report = json.loads(read_bounded(Path(io_dir, "report.json"), 64 << 20, follow=False).decode("utf-8"))
    return report, top.load(Path(io_dir, "results", f"tunableop_results{device}.csv"))


def tune(
    engine: ContainerEngine,
    image: str,
    gemms: list[dict[str, object]],
    out_dir: Path,
    *,
    gpu: str = "auto",
    device: int = 0,
    bake_tag: str | None = None,
    max_tuning_duration_ms: int = 30,
    max_tuning_iterations: int = 100,
) -> TuneOutcome:
    """Tune the GEMMs inside the image on this host's GPU; write the results for that image and arch."""
    _require_image(engine, image)
    gpu = detect_gpu() if gpu == "auto" else gpu
    if gpu == "none":
        raise ConfigError("tune needs a GPU host (no /dev/kfd or NVIDIA device here)", hint="run it on a GPU host")
    # The container writes as root; on a host run by a user the leftovers may not be removable.
    with tempfile.TemporaryDirectory(prefix="imagebuild-tune-", ignore_cleanup_errors=True) as io_dir:
        report, results = run_tuning(
            engine,
            image,
            gemms,
            Path(io_dir),
            gpu=gpu,
            device=device,
            max_tuning_duration_ms=max_tuning_duration_ms,
            max_tuning_iterations=max_tuning_iterations,
        )
    live = top.Expected(values=dict(report["validators"]), complete=True, source=f"torch in {image} (this run)")
    check = top.check_validators(results, live)
    if not check.ok:
        raise CheckFailed(f"{image} wrote a file its own torch would reject: " + "; ".join(check.problems()))
    slug = arch_slug(str(report.get("arch") or results.validators.get("GCN_ARCH_NAME") or gpu))
    results_path = out_dir / f"tunableop_{slug}.csv"
    report_path = out_dir / f"tunableop_{slug}.report.json"
    write_atomic(results_path, top.render(results))
    write_atomic(report_path, json.dumps({"image": image, **report}, indent=1) + "\n")
    outcome = TuneOutcome(results_path=results_path, report_path=report_path, report=report)
    if bake_tag:
        bake(engine, image, results_path, bake_tag, live, slug)
        outcome.baked_image = bake_tag
    return outcome
