"""`imagebuild doctor [IMAGE] [--json]`: can this host run GPU containers (and IMAGE)? Exit 0 fits, 1 not, 2 usage."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import click

from imagebuild.building.builder_use import doctor_facts, doctor_lines
from imagebuild.commands.common import echo_json
from imagebuild.engine.features import FEATURES
from imagebuild.engine.reference import image_argument
from imagebuild.errors import ConfigError
from imagebuild.prove.doctor import as_dict, describe, engine_since, gather
from imagecontract.text import printable

MANIFEST = "/opt/imagebuild/manifest.json"
MAX_MANIFEST_TAR = 16 << 20  # the manifest is a few KB; its tar archive from the engine is bounded by this


def image_arches(obj: dict[str, object], given: str) -> tuple[str, list[str], str | None, str | None]:
    """The image's arches from its manifest (gpu_arches + experimental_arches) and its platform.min_driver, copied
    out of a created, never started container (no python3 needed in the image); the io.imagebuild.arches label
    (and no min_driver) when it has none."""
    from imagebuild.engine.docker import resolve_image
    from imagebuild.engine.interface import EngineError
    from imagebuild.engine.sdk import docker_engine
    from imagebuild.plan.keys import target_names

    matrix_path = Path(str(obj["matrix_path"]))
    root = matrix_path.resolve().parent if matrix_path.exists() else Path.cwd()
    engine = docker_engine()
    _, image, _ = resolve_image(engine, given, target_names(matrix_path), root)
    labels = image.labels or {}
    try:
        raw = engine.read_file(image.id, MANIFEST, MAX_MANIFEST_TAR)  # the image's file: bounded before it is read
        if raw is None:
            label = labels.get("io.imagebuild.arches", "")
            arches = [a for a in label.split(";") if a and a != "none"]
            return (
                str(image.id),
                arches,
                f"{MANIFEST} not in the image: arches from its label ({label or 'none'})",
                None,
            )
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        lists = [data.get(key, []) for key in ("gpu_arches", "experimental_arches")]
        if not all(isinstance(items, list) and all(isinstance(a, str) for a in items) for items in lists):
            raise ValueError("gpu_arches and experimental_arches must be lists of strings")
        platform = data.get("platform")
        minimum = platform.get("min_driver") if isinstance(platform, dict) else None
        if minimum is not None and not isinstance(minimum, str):
            raise ValueError("platform.min_driver must be a string")
        return str(image.id), [a for items in lists for a in items], None, minimum
    except (EngineError, ValueError, tarfile.TarError) as exc:
        raise ConfigError(f"cannot read {MANIFEST} from {given}: {printable(exc, 300)}") from None


def engine_report(require: tuple[str, ...]) -> dict[str, object]:
    """The engine's versions, image store and features; a --require'd feature it lacks is a ConfigError (exit 2)."""
    from imagebuild.engine.docker import find_engine
    from imagebuild.engine.features import engine_facts

    where = engine_since(os.environ.get("DOCKER_HOST"))  # which address, since when, kept running by what
    try:
        engine = find_engine()
    except ConfigError as exc:
        if require:
            raise
        return {"error": exc.message, **where, "since": None}
    for feature in require:
        engine.require(feature, f"doctor --require {feature}")
    return {**engine_facts(engine.describe(), engine.facts), **where}


def builder_report(obj: dict[str, object], name: str) -> dict[str, object]:
    """The builder's nodes and the node of every leg of the matrix (build/builder_use.py doctor_facts)."""
    from imagebuild.engine.docker import find_engine
    from imagebuild.matrix import load_matrix
    from imagebuild.plan.target_plan import oci_platforms

    matrix = load_matrix(Path(str(obj["matrix_path"])))
    legs = [(target.name, oci) for target in matrix.targets for oci in oci_platforms(target, ())]
    return doctor_facts(find_engine(), matrix.model.settings, name, legs)


@click.command("doctor")
@click.argument("image", required=False, callback=image_argument)
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
@click.option(
    "--require",
    "require",
    multiple=True,
    type=click.Choice(list(FEATURES)),
    help="An engine feature that must be there (exit 2 naming it when not).",
)
@click.option("--builder", help="A buildx builder: its nodes, their BuildKit versions and platforms, each leg's node.")
@click.pass_obj
def command(  # noqa: PLR0913
    obj: dict[str, object], image: str | None, as_json: bool, require: tuple[str, ...], builder: str | None
) -> None:
    """Host GPUs, driver, device nodes (numeric group IDs, can this user open them), whether IMAGE's arches cover
    the GPUs, the docker run / compose / Kubernetes settings for this host, and the container engine: versions,
    image store, and features (multi-platform in one build, OCI media types on push, timestamp rewriting)."""
    facts = gather()
    facts.engine = engine_report(require)
    nodes = builder_report(obj, builder) if builder else None  # issue 33: JSON under engine.builder
    facts.engine.update({"builder": nodes} if nodes else {})
    if image is not None:
        image_id, facts.image_arches, note, facts.min_driver = image_arches(obj, image)
        facts.image = image
        facts.notes += [note] if note else []
        facts.notes.append(f"image ID {image_id}")
    if as_json:
        echo_json(as_dict(facts))
    else:
        click.echo("\n".join(describe(facts) + (doctor_lines(nodes) if nodes else [])))
    raise SystemExit(0 if not facts.problems() else 1)
