"""The image manifest and kernels.json (docs/contracts.md), with the defaults used when an image has none."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MANIFEST = "/opt/imagebuild/manifest.json"
DEFAULT_KERNELS_JSON = "/opt/imagebuild/kernels.json"

# Without a manifest: every SDPA backend the platform normally has.
DEFAULT_BACKENDS = {
    "nvidia": ["flash", "efficient", "cudnn", "math"],
    "amd": ["flash", "efficient", "math"],
    "cpu": ["math"],
}


class ManifestError(Exception):
    """A manifest or kernels.json that exists but cannot be used: a usage error (exit 2)."""


def load_json(path: str, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{what} {path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    except (UnicodeDecodeError, RecursionError) as exc:  # a binary file; JSON nested thousands deep
        raise ManifestError(f"{what} {path}: not a UTF-8 JSON document ({type(exc).__name__})") from None
    except OSError as exc:
        raise ManifestError(f"{what} {path}: {exc.strerror}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{what} {path}: expected a JSON object, got {type(data).__name__}")
    return data


def arch_base(arch: str) -> str:
    return arch.split(":", 1)[0]


def arch_features(arch: str) -> dict[str, str]:
    """``gfx942:sramecc+:xnack-`` -> {"sramecc": "+", "xnack": "-"}."""
    feats: dict[str, str] = {}
    for part in arch.split(":")[1:]:
        if part and part[-1] in "+-":
            feats[part[:-1]] = part[-1]
    return feats


def arch_matches(device_arch: str, image_arch: str) -> bool:
    """Same processor, and every feature the image fixed (``xnack-``) equal to the device's, when it says."""
    if arch_base(device_arch) != arch_base(image_arch):
        return False
    have = arch_features(device_arch)
    return all(have.get(k, v) == v for k, v in arch_features(image_arch).items())


@dataclass
class Manifest:
    """What the image claims; ``present`` is False when the suite runs with defaults."""

    path: str
    present: bool
    data: dict[str, Any] = field(default_factory=dict)
    kernels_path: str = DEFAULT_KERNELS_JSON
    kernels: dict[str, Any] | None = None

    @property
    def target(self) -> str | None:
        return self.data.get("target")

    @property
    def gpu_arches(self) -> list[str]:
        return list(self.data.get("gpu_arches") or [])

    @property
    def experimental_arches(self) -> list[str]:
        return list(self.data.get("experimental_arches") or [])

    @property
    def versions(self) -> dict[str, Any]:
        return dict(self.data.get("versions") or {})

    @property
    def runtime(self) -> dict[str, Any] | None:
        return self.data.get("runtime")

    @property
    def platform_kind(self) -> str | None:
        return (self.data.get("platform") or {}).get("kind")

    def component(self, name: str) -> dict[str, Any] | None:
        return (self.data.get("components") or {}).get(name)

    def component_included(self, name: str) -> bool:
        comp = self.component(name)
        return bool(comp and comp.get("included"))

    def components_like(self, fragment: str) -> list[str]:
        """Included components whose name contains ``fragment`` (e.g. the flash-attention builds)."""
        comps = self.data.get("components") or {}
        return sorted(n for n, c in comps.items() if fragment in n and isinstance(c, dict) and c.get("included"))

    def image_arches(self) -> list[str]:
        return self.gpu_arches + self.experimental_arches

    def supports(self, arch: str) -> bool:
        return any(arch_matches(arch, a) for a in self.image_arches())

    def attention_backends(self, arch: str, vendor: str) -> tuple[list[str], str]:
        """Backends to force for ``arch`` and where the list came from."""
        if not self.present:
            return list(DEFAULT_BACKENDS[vendor]), "default (no manifest)"
        table = self.data.get("attention_backends") or {}
        if arch in table:
            return list(table[arch]), f"manifest[{arch}]"
        for key, value in table.items():
            if key != "cpu" and arch != "cpu" and arch_matches(arch, key):
                return list(value), f"manifest[{key}]"
        return ["math"], f"manifest lists no attention backends for {arch}: math only"


def load(manifest_path: str | None = None, kernels_path: str | None = None) -> Manifest:
    """Read the manifest (``--manifest`` / ``IMAGEBUILD_MANIFEST`` / default path) and kernels.json."""
    path = manifest_path or os.environ.get("IMAGEBUILD_MANIFEST") or DEFAULT_MANIFEST
    kpath = kernels_path or os.environ.get("IMAGEBUILD_KERNELS_JSON") or DEFAULT_KERNELS_JSON
    explicit = bool(manifest_path or os.environ.get("IMAGEBUILD_MANIFEST"))
    if os.path.exists(path):
        data = load_json(path, "manifest")
        version = data.get("schema_version")
        if version != 1:
            raise ManifestError(f"manifest {path}: schema_version {version!r} is not supported (expected 1)")
        man = Manifest(path=path, present=True, data=data, kernels_path=kpath)
    elif explicit:
        raise ManifestError(f"manifest {path}: no such file")
    else:
        man = Manifest(path=path, present=False, kernels_path=kpath)
    if os.path.exists(kpath):
        man.kernels = load_json(kpath, "kernels.json")
    return man
