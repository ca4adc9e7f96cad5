"""Files of a pushed image read from its layers in the registry, top layer first.

Why: CI's release job promotes digests that other runners built and staged unsigned; it has no local image to
read /opt/imagebuild/sbom.json and manifest.json from, yet it must attest the SBOM and the provenance of what it
signs. Both files sit in small top layers (the SBOM hook's own layer; the final stage's COPY), so only layers up to
a bound are fetched, each checked against its digest, and each file read bounded.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable

from imagebuild.engine.registry import Registry, RegistryError

LAYER_LIMIT = 64 * 1024 * 1024  # a layer larger than this is not fetched (the venv and the base are hundreds of MB)
FILE_LIMIT = 16 * 1024 * 1024
_TAR_TYPES = ("tar+gzip", "tar")  # zstd layers are not read here (Python's tarfile cannot)


def _layers(registry: Registry, repo: str, digest: str) -> list[dict[str, object]]:
    body, _ = registry.manifest(repo, digest)
    manifest = json.loads(body)
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list):
        raise RegistryError(f"{repo}@{digest} is not one image's manifest")
    return [layer for layer in layers if isinstance(layer, dict)]


def _found_in(blob: bytes, wanted: set[str]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
        for member in tar:
            name = member.name.removeprefix("./").lstrip("/")
            if name in wanted and member.isfile() and member.size <= FILE_LIMIT:
                handle = tar.extractfile(member)
                if handle is not None:
                    found[name] = handle.read(FILE_LIMIT)
    return found


def read_files(registry: Registry, repo: str, digest: str, paths: Iterable[str]) -> dict[str, bytes]:
    """path -> bytes of each absolute path found, from the topmost layer (within LAYER_LIMIT) that holds it."""
    wanted = {p.lstrip("/") for p in paths}
    found: dict[str, bytes] = {}
    for layer in reversed(_layers(registry, repo, digest)):
        size, media_type = layer.get("size"), str(layer.get("mediaType", ""))
        if not isinstance(size, int) or size > LAYER_LIMIT or not media_type.endswith(_TAR_TYPES):
            continue
        try:
            inside = _found_in(registry.blob(repo, layer, LAYER_LIMIT), wanted - set(found))
        except (tarfile.TarError, OSError, EOFError):
            continue  # a layer that is not a readable tar holds nothing we can use
        found.update(inside)
        if set(found) == wanted:
            break
    return {"/" + name: body for name, body in found.items()}
