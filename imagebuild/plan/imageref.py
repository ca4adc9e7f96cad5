"""The image reference that travels build -> smoke -> publish -> promote, read back from the reports.

The image ID (the config digest: the same in the engine and in a registry) is recorded once, by the step that
learns it (the build's iidfile, or the registry for a staged digest), and every later step reads that record
instead of resolving a tag again: a tag can move between two steps, a recorded ID cannot.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

LOCAL_REPO = os.environ.get("IMAGEBUILD_LOCAL_REPO", "imagebuild")
RECORD_DIR = "build/images"


@dataclass(frozen=True)
class ImageRef:
    """One image: its ID, where its name came from, and once pushed the repository and manifest digest."""

    image_id: str
    target: str | None = None
    tags: tuple[str, ...] = ()
    repository: str | None = None  # HOST/REPO it was pushed or promoted to
    digest: str | None = None  # the manifest digest in that repository
    recorded_by: str = "build"  # build, engine (resolved from a name), registry
    refs: tuple[str, ...] = field(default=())  # public references it was published under

    @property
    def short_id(self) -> str:
        return self.image_id[:19]

    @property
    def digest_ref(self) -> str | None:
        return f"{self.repository}@{self.digest}" if self.repository and self.digest else None

    def pushed(self, repository: str, digest: str, refs: list[str] | tuple[str, ...] = ()) -> ImageRef:
        return replace(self, repository=repository, digest=digest, refs=tuple(refs))

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"], data["refs"] = list(self.tags), list(self.refs)
        data["digest_ref"] = self.digest_ref
        return data

    @classmethod
    def from_dict(cls, data: object) -> ImageRef | None:
        """The `image` object of a build, smoke or publish report; None when absent or malformed."""
        if not isinstance(data, dict) or not isinstance(image_id := data.get("image_id"), str):
            return None
        text = {k: data.get(k) if isinstance(data.get(k), str) else None for k in ("target", "repository", "digest")}
        tags, refs = data.get("tags"), data.get("refs")
        return cls(
            image_id=image_id,
            target=text["target"],
            tags=tuple(str(t) for t in tags) if isinstance(tags, list) else (),
            repository=text["repository"],
            digest=text["digest"],
            recorded_by=str(data.get("recorded_by") or "build"),
            refs=tuple(str(r) for r in refs) if isinstance(refs, list) else (),
        )


def local_tag(target: str) -> str:
    """The engine tag a build gives a target's image (`imagebuild:<target>`)."""
    return f"{LOCAL_REPO}:{target}"


def record_path(root: Path, target: str) -> Path:
    """build/images/<local repository>/<target>.json: one record per name a build tags."""
    return root / RECORD_DIR / re.sub(r"[^A-Za-z0-9._-]+", "_", LOCAL_REPO) / f"{target}.json"


def write_record(root: Path, ref: ImageRef) -> Path:
    """Record a built image (the build report holds the same object)."""
    from imagecontract.atomic import write_atomic

    if not ref.target:
        raise ValueError("an image record needs a target")
    path = record_path(root, ref.target)
    write_atomic(path, json.dumps(ref.as_dict(), indent=2, sort_keys=True) + "\n")
    return path


def read_record(root: Path, target: str) -> ImageRef | None:
    """The image the last build of target recorded, or None when there is no readable record."""
    try:
        return ImageRef.from_dict(json.loads(record_path(root, target).read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):
        return None


def from_report(report: Any) -> ImageRef | None:
    """The image a smoke or publish report is about: its `image` object, else its `image_id` field."""
    if not isinstance(report, dict):
        return None
    found = ImageRef.from_dict(report.get("image"))
    if found is None and isinstance(report.get("image_id"), str):
        found = ImageRef(report["image_id"], recorded_by="report")
    return found
