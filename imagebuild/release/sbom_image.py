"""Read an image's inventory from inside it, and add its SBOM as a last layer (`/opt/imagebuild/sbom.json`).

Decision: the SBOM goes in the image as one post-build layer (`FROM <built image>` + `COPY sbom.json`), made by
`imagebuild build` right after BuildKit finishes, so smoke, publish and users all see the same final image ID,
and `docker run IMAGE cat /opt/imagebuild/sbom.json` answers offline. The layer is deterministic (the document
is a function of the image), so BuildKit's cache gives an unchanged image the same ID on a rebuild. A copy is
written beside the build report (`<report dir>/sbom/<target>.cdx.json`); publish attaches it as an attestation.

The collector runs the image's own `python3` (no shell, no network) with stdlib code only: the Python of the
image is the environment its SBOM describes, and it reads dpkg's status file where the image keeps it.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from imagecontract.models import KernelsReport, Manifest, Model, ModelError

M = TypeVar("M", bound=Model)

if TYPE_CHECKING:
    from imagebuild.building.buildkit import TargetResult
    from imagebuild.engine.docker import Engine
    from imagebuild.release.sbom import Inventory


def parse_dpkg(text: str) -> list[dict[str, str]]:  # also runs in the image's python3 (3.9 or newer)
    """Package, Version, Architecture, Status and Source of each paragraph of dpkg's status file."""
    out: list[dict[str, str]] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if (
                sep
                and line[:1] not in (" ", "\t")
                and key in ("Package", "Version", "Architecture", "Status", "Source")
            ):
                fields[key] = value.strip()
        if "Package" in fields:
            out.append(fields)
    return out


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines of os-release, quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            out[key] = value.strip().strip('"')
    return out


FILES = {"dpkg": "/var/lib/dpkg/status", "os_release": "/etc/os-release",
         "manifest": "/opt/imagebuild/manifest.json", "kernels": "/opt/imagebuild/kernels.json"}  # fmt: skip

# Runs as `python3 -I -c COLLECTOR` in the image: the same parsers, the distributions of that interpreter.
COLLECTOR = (
    inspect.getsource(parse_dpkg)
    + inspect.getsource(parse_os_release)
    + f"FILES = {FILES!r}\n"
    + r"""
import importlib.metadata as md, json, sys
def read(path):
    try:
        return open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None
def load(path):
    try:
        return json.loads(read(path) or "null")
    except ValueError:
        return None
dists = []
for dist in md.distributions():
    if dist.metadata["Name"]:
        direct = dist.read_text("direct_url.json")
        dists.append({"name": dist.metadata["Name"], "version": dist.version, "location": str(dist.locate_file("")),
                      "installed_from": json.loads(direct).get("url") if direct else None})
json.dump({"python": sys.version.split()[0], "dists": dists, "dpkg": parse_dpkg(read(FILES["dpkg"]) or ""),
           "os_release": parse_os_release(read(FILES["os_release"]) or ""),
           "manifest": load(FILES["manifest"]), "kernels": load(FILES["kernels"])}, sys.stdout)
"""
)


class SbomError(Exception):
    """The inventory could not be read from the image, or the SBOM layer could not be built."""


def _docker(engine: Engine, *args: str, timeout: int = 300, input_text: str | None = None) -> str:
    from imagebuild.engine import cli

    try:
        return cli.docker(engine, *args, timeout=timeout, input_text=input_text)
    except cli.CliError as exc:
        raise SbomError(str(exc)) from None


def _without_python(engine: Engine, image: str) -> dict[str, Any]:
    """The same files for an image without python3 (a minimal base): read from a created, never started
    container; no Python distributions then."""
    cid = _docker(engine, "create", "--network", "none", "--entrypoint", "/nonexistent", image).strip()
    try:
        texts = {key: _copy_out(engine, cid, path) for key, path in FILES.items()}
        if texts["os_release"] is None:  # /etc/os-release is usually a link to /usr/lib/os-release
            texts["os_release"] = _copy_out(engine, cid, "/usr/lib/os-release")
    finally:
        _docker(engine, "rm", "-f", "-v", cid)  # with its anonymous volumes (an image's VOLUME makes one)

    def load(text: str | None) -> Any:
        try:
            return json.loads(text or "null")
        except ValueError:
            return None

    return {
        "python": None,
        "dists": [],
        "dpkg": parse_dpkg(texts["dpkg"] or ""),
        "os_release": parse_os_release(texts["os_release"] or ""),
        "manifest": load(texts["manifest"]),
        "kernels": load(texts["kernels"]),
    }


def _copy_out(engine: Engine, cid: str, path: str) -> str | None:
    from imagebuild.engine.cli import copy_out

    return copy_out(engine, cid, path)


def collect(engine: Engine, image: str, component_sources: dict[str, dict[str, Any]]) -> Inventory:
    """Run the collector in the image (`--network none`, its own python3) and parse what it printed;
    an image without python3 gets its files read from outside."""
    from imagebuild.release.sbom import Inventory

    inspect_out = json.loads(_docker(engine, "image", "inspect", image))[0]
    try:
        out = _docker(
            engine, "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-I", "-c", COLLECTOR
        )
        data = json.loads(out)
    except SbomError as exc:
        if "executable file not found" not in str(exc):
            raise
        data = _without_python(engine, image)
    except ValueError as exc:
        raise SbomError(f"the collector in {image} printed no JSON") from exc
    return Inventory(
        image_id=inspect_out["Id"],
        labels=(inspect_out.get("Config") or {}).get("Labels") or {},
        os_release=data.get("os_release") or {},
        dpkg=data.get("dpkg") or [],
        dists=data.get("dists") or [],
        manifest=_document(Manifest, data.get("manifest"), image, "manifest.json"),
        kernels=_document(KernelsReport, data.get("kernels"), image, "kernels.json"),
        component_sources=component_sources,
    )


def _document(model: type[M], data: Any, image: str, what: str) -> M | None:
    """A contract document the collector read in the image, checked once against its model (None: absent)."""
    try:
        return None if data is None else model.from_dict(data)
    except ModelError as exc:
        raise SbomError(f"/opt/imagebuild/{what} of {image} does not fit the contract: {exc}") from None


def add_layer(engine: Engine, image: str, tags: list[str], sbom_text: str) -> str:
    """Build `FROM image` + the SBOM file under the same tags; returns the new image ID."""
    from imagebuild.engine import cli
    from imagebuild.release.sbom import IMAGE_PATH

    try:
        return cli.add_layer(engine, image, tags, {"sbom.json": sbom_text}, f"COPY sbom.json {IMAGE_PATH}\n")
    except cli.CliError as exc:
        raise SbomError(str(exc)) from None


def component_sources(matrix_path: Path) -> dict[str, dict[str, Any]]:
    """`components.<name>.source` of the matrix (the manifest names which were built, the matrix pins them)."""
    from imagebuild.matrix import load_matrix

    matrix = load_matrix(matrix_path)
    return {name: comp.source.model_dump() for name, comp in matrix.model.components.items()}


def sbom_path(report: Path, target: str) -> Path:
    """Where the SBOM is written beside the build report."""
    return report.parent / "sbom" / f"{target}.cdx.json"


def _layer_record(path: Path) -> Path:
    return path.with_name(path.name.replace(".cdx.json", ".layer.json"))


def _cached(engine: Engine, path: Path, built_id: str, tags: list[str]) -> str | None:
    """When BuildKit gave the same image as last time and its SBOM image still exists: tag that, skip the rest.

    Keeps a fully cached `imagebuild build` cheap (a `docker tag` per tag instead of a container run and a build).
    """
    try:
        record = json.loads(_layer_record(path).read_text())
    except (OSError, ValueError):
        return None
    if record.get("built") != built_id or not path.is_file():
        return None
    try:  # `docker tag` fails when the image is gone: then build the layer again
        for tag in tags:
            _docker(engine, "tag", str(record["image"]), tag)
    except SbomError:
        return None
    return str(record["image"])


def add_sboms(engine: Engine, results: list[TargetResult], matrix_path: Path, report: Path) -> None:
    """For each built target: collect, write the SBOM beside the report, add the layer; a failure fails it."""
    sources: dict[str, dict[str, Any]] | None = None
    for result in [r for r in results if r.ok and r.image_id and r.tags]:
        try:
            path = sbom_path(report, result.target)
            cached = _cached(engine, path, str(result.image_id), result.tags)
            if cached:
                result.image_id = cached
                continue
            from imagebuild.release.sbom import render

            sources = component_sources(matrix_path) if sources is None else sources
            text = render(collect(engine, result.tags[0], sources))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            built_id = str(result.image_id)
            result.image_id = add_layer(engine, result.tags[0], result.tags, text)
            _layer_record(path).write_text(json.dumps({"built": built_id, "image": result.image_id}) + "\n")
        except (SbomError, ValueError, OSError) as exc:
            result.ok = False
            result.failed_step = f"sbom: {exc}"
            result.log_tail = [str(exc)]
