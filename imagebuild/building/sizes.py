"""Image size per build: the largest layers with the Dockerfile step that made each, and the target's budget.

`matrix.yaml` `size_budgets.<target>` gives what an image of the target may weigh unpacked (the engine's size) and,
optionally, compressed (gzip of its layers as `docker save` streams them, what a registry push stores at the
default level). A build over either fails (exit 3) naming the largest layers and their steps. Read through the
engine (ContainerEngine.history and save), never a subprocess.
"""

from __future__ import annotations

import re
import zlib
from typing import TYPE_CHECKING, Any

from imagebuild.engine.interface import EngineError
from imagebuild.errors import ConfigError

if TYPE_CHECKING:
    from imagebuild.engine.interface import ContainerEngine

MB = 1_000_000
LARGEST = 5
STEP_CHARS = 160


def dockerfile_steps(text: str) -> list[tuple[str, str]]:
    """(stage, RUN command with its --mount flags dropped, whitespace collapsed) of every RUN of a Dockerfile."""
    steps, stage = [], "?"
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "FROM" and words[-2].upper() == "AS":
            stage = words[-1]
        elif words and words[0] == "RUN":
            body = " ".join(w for w in words[1:] if not w.startswith("--mount="))
            steps.append((stage, body))
    return steps


def layers(engine: ContainerEngine, image_id: str, dockerfile: str = "") -> list[dict[str, Any]]:
    """The image's layers, largest first: bytes and the step that made each, named `<stage>: <command's end>` when
    the Dockerfile's RUN is found in it (BuildKit records the command without its --mount flags)."""
    known = dockerfile_steps(dockerfile)
    rows = []
    for row in engine.history(image_id):  # EngineError: handled by measure()
        size = row.size
        if size <= 0:
            continue
        made = " ".join(row.created_by.split()).removesuffix("# buildkit").strip()
        stage = next((name for name, body in known if body and body in made), None)
        step = (
            f"{stage}: RUN ...{made[-STEP_CHARS:]}"
            if stage and len(made) > STEP_CHARS
            else (made[:STEP_CHARS] or "(the base image)")
        )
        rows.append({"bytes": size, "step": step if not stage or step.startswith(stage) else f"{stage}: {step}"})
    return sorted(rows, key=lambda r: -r["bytes"])


def compressed_bytes(engine: ContainerEngine, image_id: str) -> int:
    """gzip (level 6) of the image as `docker save` streams it: an estimate of what a registry push stores."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    total = 0
    for chunk in engine.save(image_id):
        total += len(packer.compress(chunk))
    return total + len(packer.flush())


def measure(engine: ContainerEngine, image_id: str, budget: Any | None, dockerfile: str = "") -> dict[str, Any]:
    """The size record of one image (the build report's `size`); compressed only when budgeted (a full save)."""
    # What the engine calls the image's size is the unpacked size on a graph-driver store but the stored content
    # (its compressed layers) on the containerd store: 4.71 GB for the cuda13.0-torch2.14 image whose venv layer
    # alone is 10.25 GB unpacked (Docker 28.5). The sum of the layers' sizes (history) is unpacked on both.
    engine_size = engine.image(image_id).size or 0
    record: dict[str, Any] = {"unpacked_bytes": engine_size, "engine_size_bytes": engine_size, "largest_layers": []}
    try:
        rows = layers(engine, image_id, dockerfile)
    except EngineError as exc:
        # Docker 26.1's containerd store has no history of an image of another CPU platform (404 "snapshot ...
        # does not exist": it is not unpacked here; the platform argument came in API 1.48). Say so, keep the
        # engine's size (then possibly the compressed one: said in layers_unavailable's presence).
        record["layers_unavailable"] = " ".join(str(exc.explanation or exc).split())[:200]
    else:
        record["unpacked_bytes"] = sum(row["bytes"] for row in rows)
        record["largest_layers"] = rows[:LARGEST]
    if budget is not None:
        record["budget"] = {"unpacked_mb": budget.unpacked_mb, "compressed_mb": budget.compressed_mb}
        if budget.compressed_mb is not None:
            record["compressed_bytes"] = compressed_bytes(engine, image_id)
    return record


def over_budget(record: dict[str, Any]) -> str | None:
    """Why the image is over its budget (naming the largest layers and their steps), or None."""
    budget = record.get("budget")
    if not budget:
        return None
    over = []
    if record["unpacked_bytes"] > budget["unpacked_mb"] * MB:
        over.append(f"unpacked {record['unpacked_bytes'] / MB:.0f} MB > {budget['unpacked_mb']} MB")
    if budget.get("compressed_mb") and record.get("compressed_bytes", 0) > budget["compressed_mb"] * MB:
        over.append(f"compressed {record['compressed_bytes'] / MB:.0f} MB > {budget['compressed_mb']} MB")
    if not over:
        return None
    top = "; ".join(f"{r['bytes'] / MB:.0f} MB from `{r['step'][:100]}`" for r in record["largest_layers"][:3])
    return f"size budget: {', '.join(over)}; largest layers: {top}"


def budget_for(budgets: dict[str, Any], target: str, known: set[str]) -> Any | None:
    """target's budget (None: unbudgeted). A loaded matrix names only its targets (matrix/checks.py
    check_size_budgets refuses any other key at load, located); a dict from elsewhere is held to the same rule."""
    unknown = sorted(set(budgets) - known)
    if unknown:
        raise ConfigError(f"size_budgets.{unknown[0]}: no such target", hint=f"targets: {', '.join(sorted(known))}")
    return budgets.get(target)


def add_sizes(specs: list[Any], results: list[Any], budgets: dict[str, Any], known: set[str]) -> None:
    """Each built image's size record on its result; one over its budget becomes a failed build (exit 3)."""
    todo = [(spec, result) for spec, result in zip(specs, results, strict=True) if result.ok and result.image_id]
    if not todo:
        return
    from imagebuild.engine.sdk import docker_engine

    engine = docker_engine()
    for spec, result in todo:
        name = spec.plan.target.name if spec.plan is not None else result.target
        try:
            text = spec.dockerfile.read_text(encoding="utf-8")
        except OSError:
            text = ""
        result.size = measure(engine, result.image_id, budget_for(budgets, name, known), text)
        reason = over_budget(result.size)
        if reason:
            result.ok, result.failed_step = False, reason
