"""ImageKey: one image the plan makes, (target, OCI platform, arch resolution), and every name it goes by.

The one place of the naming rules; nothing else derives a name, a tag, a folder or a record path:
- the target's first OCI platform keeps the plain name; every other adds `-<os>-<arch>` (`local-cpu-linux-arm64`);
- an arch resolution other than the matrix default adds `-<arches>` (`rocm6.1-torch2.3-gfx942`), before the
  platform's suffix, so its tags and records never take the place of the matrix default's;
- files (dockerfiles/, build/render/) live under the folder `<target>`, one Dockerfile for every OCI platform and
  one manifest per platform (`manifest.json` for the first, `manifest.<os>-<arch>.json` for the others); records
  (build/smoke/, build/publish/) under `<variant>` or `<variant>/<os>-<arch>`, the variant being the target name
  with its arch suffix.
What a name promises (the arches and OCI platforms a public tag stands for) is `promise`, checked by publish.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.matrix.oci import slug
from imagebuild.plan.imageref import LOCAL_REPO
from imagecontract import kinds

MAX_VARIANT = 40  # characters of an arch suffix; a longer arch list is named by its checksum
MAX_LABEL = 16 * 1024  # characters of the image-key label read back from an image


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    return tuple(_text(v) for v in value)


def arch_variant(arch_ids: Sequence[str]) -> str:
    """`gfx942`, `gfx90a-gfx942_xnack-`, `sm_90pPTX`: the arch list as a tag-safe suffix (`:` -> `_`, `+` -> `p`)."""
    text = "-".join(re.sub(r"[^A-Za-z0-9_.-]", "_", a.replace(":", "_").replace("+", "p")) for a in arch_ids)
    text = text or kinds.CPU_ARCH
    if len(text) > MAX_VARIANT:
        text = "arches-" + hashlib.sha256(";".join(arch_ids).encode()).hexdigest()[:12]
    return text


@dataclass(frozen=True)
class Promise:
    """What a name stands for: the GPU arches its image has code for and the OCI platforms it holds."""

    arches: tuple[str, ...]
    platforms: tuple[str, ...]

    def describe(self) -> str:
        return f"arches {';'.join(self.arches) or 'none (CPU)'} on {', '.join(self.platforms)}"


@dataclass(frozen=True)
class ImageKey:
    """One image of one target: its OCI platform among those the target lists, and its arch variant."""

    target: str
    oci: str
    platforms: tuple[str, ...]  # every OCI platform the target lists; the first keeps the plain names
    variant: str = ""  # "" for the matrix default's arches, else arch_variant() of the resolution
    arches: tuple[str, ...] = ()  # the arch IDs this image is built for (none: a CPU image)
    default_arches: tuple[str, ...] = ()  # the matrix default's on this platform: what the plain names promise

    @property
    def primary(self) -> bool:
        """The target's first OCI platform: its names carry no platform suffix."""
        return self.oci == self.platforms[0]

    @property
    def platform_suffix(self) -> str:
        return "" if self.primary else f"-{slug(self.oci)}"

    @property
    def variant_suffix(self) -> str:
        return f"-{self.variant}" if self.variant else ""

    @property
    def suffix(self) -> str:
        """What the target name gets in tags, logs and records: `-<arches>` then `-<os>-<arch>`."""
        return self.variant_suffix + self.platform_suffix

    @property
    def name(self) -> str:
        """The image's local name: `imagebuild:<name>`, its build record, its log."""
        return self.target + self.suffix

    @property
    def folder(self) -> str:
        """Where its files are rendered (below dockerfiles/ or build/render/): `<target>`, the same for every OCI
        platform (one Dockerfile serves them all)."""
        return self.target

    @property
    def manifest_name(self) -> str:
        """Its manifest's file name in the folder: `manifest.json`, `manifest.<os>-<arch>.json` past the first
        platform."""
        return "manifest.json" if self.primary else f"manifest.{slug(self.oci)}.json"

    @property
    def records(self) -> str:
        """Where its smoke and publish records go (below build/smoke/, build/publish/): `<variant>[/<os>-<arch>]`."""
        base = self.target + self.variant_suffix
        return base if self.primary else f"{base}/{slug(self.oci)}"

    @property
    def local_tag(self) -> str:
        return f"{LOCAL_REPO}:{self.name}"

    def log_path(self, root: Path) -> Path:
        return root / "build" / "logs" / f"{self.name}.log"

    def smoke_dir(self, root: Path) -> Path:
        return root / "build" / "smoke" / self.records

    def publish_dir(self, root: Path) -> Path:
        return root / "build" / "publish" / self.records

    def tags(self, short_sha: str, extra: Sequence[str] = ()) -> list[str]:
        """`imagebuild:<name>`, `imagebuild:<name>-<short sha>`, then --tag values ({target} filled in, suffixed)."""
        tags = [self.local_tag, f"{self.local_tag}-{short_sha}"]
        for tag in extra:
            tag = tag.replace("{target}", self.target) + self.suffix
            tags.append(tag if ":" in tag.rsplit("/", 1)[-1] else f"{LOCAL_REPO}:{tag}")
        return tags

    def promise(self, tag: str, index: bool = False) -> Promise:
        """What a public tag stands for. Arches: this variant's when the tag carries its suffix, else the matrix
        default's. Platforms: the one whose suffix the tag carries; a plain tag, the first platform for one image
        (its local name) and every platform the target lists for an index."""
        arches = self.arches if self.variant and self.variant_suffix in tag else self.default_arches
        named = [p for p in self.platforms if f"-{slug(p)}" in tag]
        if named:
            platforms: tuple[str, ...] = (named[0],)
        else:
            platforms = self.platforms if index else self.platforms[:1]
        return Promise(arches, platforms)

    LABEL = "io.imagebuild.image-key"

    def label(self) -> str:
        """The build label that carries the key, so publish and promote read it off the image, not the matrix."""
        data = {
            "target": self.target,
            "oci": self.oci,
            "platforms": list(self.platforms),
            "variant": self.variant,
            "arches": list(self.arches),
            "default_arches": list(self.default_arches),
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_labels(cls, labels: object) -> ImageKey | None:
        """The key an image's labels carry; None for an image built without one (or a label that does not fit)."""
        text = labels.get(cls.LABEL) if isinstance(labels, dict) else None
        if not isinstance(text, str) or len(text) > MAX_LABEL:
            return None
        try:
            data = json.loads(text)
            key = cls(
                target=_text(data["target"]),
                oci=_text(data["oci"]),
                platforms=_texts(data["platforms"]),
                variant=_text(data["variant"]),
                arches=_texts(data["arches"]),
                default_arches=_texts(data["default_arches"]),
            )
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        return key if key.oci in key.platforms else None

    def on(self, oci: str) -> ImageKey:
        """The same target and variant on another of its OCI platforms."""
        return dataclasses.replace(self, oci=oci)

    def every_platform(self) -> list[ImageKey]:
        return [self.on(oci) for oci in self.platforms]
