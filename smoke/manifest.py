"""The image manifest and kernels.json (docs/contracts.md), with the defaults used when an image has none.

The manifest is read through the contract's model (`imagecontract.models.Manifest`) and arches are matched by the
contract's one rule (`imagecontract.targets.covers`, the preflight's; a per-arch table is keyed through
`imagecontract.models.manifest.covering`): the host writes what the image reads, in one shape."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from imagecontract.blob import read_bounded
from imagecontract.models import KernelsReport, ModelError
from imagecontract.models.manifest import ComponentEntry, Runtime, Versions, covering
from imagecontract.models.manifest import Manifest as ImageManifest
from smoke import torch_names

DEFAULT_MANIFEST = "/opt/imagebuild/manifest.json"
DEFAULT_KERNELS_JSON = "/opt/imagebuild/kernels.json"

# Without a manifest: every SDPA backend the platform normally has.
DEFAULT_BACKENDS = {
    "nvidia": ["flash", "efficient", "cudnn", "math"],
    "amd": ["flash", "efficient", "math"],
    torch_names.CPU: ["math"],
}


MAX_DOCUMENT = 16 << 20  # a manifest, kernels.json or baseline report (ours: a few KiB)


class ManifestError(Exception):
    """A manifest or kernels.json that exists but cannot be used: a usage error (exit 2)."""


def load_json(path: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(read_bounded(path, MAX_DOCUMENT, what=what).decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{what} {path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    except (UnicodeDecodeError, RecursionError) as exc:  # a binary file; JSON nested thousands deep
        raise ManifestError(f"{what} {path}: not a UTF-8 JSON document ({type(exc).__name__})") from None
    except ValueError:  # an integer of 4,300+ digits (json raises a plain ValueError for it)
        raise ManifestError(f"{what} {path}: a number too long to read") from None
    except OSError as exc:
        raise ManifestError(f"{what} {path}: {exc.strerror}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{what} {path}: expected a JSON object, got {type(data).__name__}")
    return data


@dataclass
class Manifest:
    """What the image claims (the contract's model); ``present`` is False when the suite runs with defaults."""

    path: str
    present: bool
    doc: ImageManifest | None = None
    kernels_path: str = DEFAULT_KERNELS_JSON
    kernels: dict[str, Any] | None = None  # kernels.json as read (what the report records)
    kernels_report: KernelsReport | None = None  # the same, the contract's model (what the checks read)

    @property
    def target(self) -> str | None:
        return self.doc.target if self.doc else None

    @property
    def gpu_arches(self) -> list[str]:
        return list(self.doc.gpu_arches) if self.doc else []

    @property
    def experimental_arches(self) -> list[str]:
        return list(self.doc.experimental_arches) if self.doc else []

    @property
    def versions(self) -> Versions | None:
        return self.doc.versions if self.doc else None

    @property
    def runtime(self) -> Runtime | None:
        return self.doc.runtime if self.doc else None

    def component(self, name: str) -> ComponentEntry | None:
        return self.doc.components.get(name) if self.doc else None

    def component_included(self, name: str) -> bool:
        return bool(self.doc and self.doc.included(name))

    def components_like(self, fragment: str) -> list[str]:
        """Included components whose name contains ``fragment`` (e.g. the flash-attention builds)."""
        return self.doc.components_like(fragment) if self.doc else []

    def image_arches(self) -> list[str]:
        return self.doc.image_arches() if self.doc else []

    def supports(self, arch: str) -> bool:
        return bool(self.doc and self.doc.supports(arch))

    def coverage(self, arch: str) -> tuple[str, str] | None:
        """The image arch whose code runs on ``arch`` and how (``("sm_80", "cubin compatible")``), or None."""
        return self.doc.coverage(arch) if self.doc else None

    def attention_backends(self, arch: str, vendor: str) -> tuple[list[str], str]:
        """Backends to force for ``arch`` and where the list came from: the device's own key, else the nearest
        arch whose code runs on it (an sm_86 GPU takes an sm_80 image's list: its cubins run there)."""
        if self.doc is None:
            return list(DEFAULT_BACKENDS[vendor]), "default (no manifest)"
        table = self.doc.attention_backends
        if arch in table:
            return list(table[arch]), f"manifest[{arch}]"
        found = covering(table, arch)
        if found is not None:
            return list(table[found[0]]), f"manifest[{found[0]}] ({found[1]})"
        return ["math"], f"manifest lists no attention backends for {arch}: math only"


def load(manifest_path: str | None = None, kernels_path: str | None = None) -> Manifest:
    """Read the manifest (``--manifest`` / ``IMAGEBUILD_MANIFEST`` / default path) and kernels.json."""
    path = manifest_path or os.environ.get("IMAGEBUILD_MANIFEST") or DEFAULT_MANIFEST
    kpath = kernels_path or os.environ.get("IMAGEBUILD_KERNELS_JSON") or DEFAULT_KERNELS_JSON
    explicit = bool(manifest_path or os.environ.get("IMAGEBUILD_MANIFEST"))
    if os.path.exists(path):
        try:
            doc = ImageManifest.from_dict(load_json(path, "manifest"))
        except ModelError as exc:  # names the key path: `tunableop.filename: expected str, got NoneType None`
            raise ManifestError(f"manifest {path}: {exc}") from None
        man = Manifest(path=path, present=True, doc=doc, kernels_path=kpath)
    elif explicit:
        raise ManifestError(f"manifest {path}: no such file")
    else:
        man = Manifest(path=path, present=False, kernels_path=kpath)
    if os.path.exists(kpath):
        man.kernels = load_json(kpath, "kernels.json")
        try:
            man.kernels_report = KernelsReport.from_dict(man.kernels)
        except ModelError as exc:  # names the key path: `code_objects[0]: expected str, got int 1`
            raise ManifestError(f"kernels.json {kpath}: {exc}") from None
    return man
