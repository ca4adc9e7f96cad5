"""Arch coverage of an image that cannot run the scanner itself (no python3 in it): scanned from the host.

The image's filesystem is exported by the engine (imagebuild/engine/export.py: safe unpacking, size limit) into a
temporary folder, and the same stdlib scanner that runs inside images (imagecontract/coverage.py) reads it with
`--root`; paths in its answer are made the image's again (`/usr/lib/...`). `method` in the answer says which way
was used; imagebuild/prove/coverage.py's in-image scan is tried first.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.prove.coverage import CoverageError

if TYPE_CHECKING:
    from imagebuild.engine.docker import Engine

IN_IMAGE = "in the image (its python3)"
FROM_HOST = "from the host (exported filesystem: the image has no python3)"


def _image_paths(value: Any, root: str) -> Any:
    """Every string under `value` that starts with the temporary root, as the image's absolute path."""
    if isinstance(value, str):
        return "/" + value[len(root) :].lstrip("/") if value.startswith(root) else value.replace(root, "")
    if isinstance(value, list):
        return [_image_paths(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _image_paths(v, root) for k, v in value.items()}
    return value


def scan_root(root: Path, arch: str | None = None) -> dict[str, Any]:
    """The scanner's raw document for a filesystem tree on this host, its paths relative to `root` as `/`."""
    from imagecontract import coverage as scanner

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        scanner.main(["--root", str(root), *(["--arch", arch] if arch else [])])
    data = json.loads(out.getvalue())
    doc: dict[str, Any] = _image_paths(data, str(root))  # the scanner prints one JSON object
    doc["root"] = "/"
    return doc


def scan_from_host(engine: Engine, image: str, arch: str | None = None) -> dict[str, Any]:
    """Export `image`'s filesystem, scan it here; the raw document plus `method` and the export's numbers."""
    from imagebuild.engine.export import ExportError, export_filesystem

    with tempfile.TemporaryDirectory(prefix="imagebuild-export-") as tmp:
        try:
            stats = export_filesystem(engine, image, Path(tmp))
        except ExportError as exc:
            raise CoverageError(str(exc)) from None
        doc = scan_root(Path(tmp), arch)
    doc["method"] = FROM_HOST
    doc["export"] = {"files": stats.files, "bytes": stats.bytes, "skipped": stats.skipped_count}
    return doc
