"""Reading the evidence under build/: every file bounded, every document checked before a fact is taken from it.

A file that is missing is "not run"; one that cannot be read or does not fit its model is a warning (named in the
page) and also "not run" for the facts it would have given: never a pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagebuild.matrix.oci import slug
from imagecontract.blob import read_bounded
from imagecontract.models import ArchCoverage, ModelError, SmokeReport

MAX_EVIDENCE_BYTES = 32 << 20  # a coverage document of a large image is a few MB; a report past this is refused


def mtime_utc(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")


@dataclass
class Evidence:
    """The evidence folder of one checkout (`<root>/build/`), read once per file."""

    root: Path
    read: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _cache: dict[Path, Any] = field(default_factory=dict)

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def raw(self, path: Path) -> bytes | None:
        """The file's bytes (at most MAX_EVIDENCE_BYTES), None when absent; unreadable: a warning, None."""
        if not path.exists():
            return None
        try:
            return read_bounded(path, MAX_EVIDENCE_BYTES, what="evidence file")
        except OSError as exc:  # not a regular file, larger than the limit, unreadable
            self.warnings.append(f"{self.rel(path)}: not read: {getattr(exc, 'strerror', None) or exc}")
            return None

    def json(self, path: Path, track: bool = True) -> Any:
        """A JSON document, None when absent or not JSON (the latter a warning); `track`: listed as read."""
        if path in self._cache:
            return self._cache[path]
        data = self.raw(path)
        value = None
        if data is not None:
            try:
                value = json.loads(data)
                if track:
                    self.read.append(self.rel(path))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                self.warnings.append(f"{self.rel(path)}: not JSON: {str(exc)[:120]}")
        self._cache[path] = value
        return value

    # --- the documents, by where their writers put them -------------------------------------------------

    def build_entries(self) -> dict[str, dict[str, Any]]:
        """build/build-report.json targets by name (`local-cpu`, `local-cpu-linux-arm64`), with the report's time."""
        doc = self.json(self.build_dir / "build-report.json")
        if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list):
            if doc is not None:
                self.warnings.append("build/build-report.json: no targets list")
            return {}
        created = doc.get("created") if isinstance(doc.get("created"), str) else None
        return {
            str(t["target"]): {**t, "created": created}
            for t in doc["targets"]
            if isinstance(t, dict) and isinstance(t.get("target"), str)
        }

    def smoke_report(self, target: str, oci: str, first: str) -> tuple[SmokeReport | None, Path]:
        """build/smoke/<target>/report.json (first OCI platform) or .../<os>-<arch>/report.json, checked."""
        base = self.build_dir / "smoke" / target
        path = (base if oci == first else base / slug(oci)) / "report.json"
        return self.smoke_at(path), path

    def smoke_at(self, path: Path) -> SmokeReport | None:
        doc = self.json(path)
        if doc is None:
            return None
        try:
            return SmokeReport.from_dict(doc)
        except ModelError as exc:
            self.warnings.append(f"{self.rel(path)}: not a smoke report: {exc}")
            return None

    def coverage(self, name: str, entry: dict[str, Any] | None) -> tuple[ArchCoverage | None, str | None, str]:
        """The arch-coverage document the build wrote for `name` (its path in the build report, else the usual
        place); (doc, why-not, path)."""
        given = entry.get("coverage") if entry else None
        if isinstance(given, str) and not given.endswith(".json"):
            return None, given, ""  # "not scanned: no python3 in the image"
        path = Path(given) if isinstance(given, str) else self.build_dir / "coverage" / f"{name}.json"
        if not path.is_absolute():
            path = self.root / path
        doc = self.json(path)
        if doc is None:
            return None, None, self.rel(path)
        try:
            return ArchCoverage.from_dict(doc), None, self.rel(path)
        except ModelError as exc:
            self.warnings.append(f"{self.rel(path)}: not an arch-coverage document: {exc}")
            return None, None, self.rel(path)

    def sbom(self, name: str) -> Path | None:
        path = self.build_dir / "sbom" / f"{name}.cdx.json"
        return path if path.is_file() else None

    def publish(self, target: str, name: str, oci: str) -> tuple[dict[str, Any] | None, Path | None]:
        """The publish report of this platform's image: an index child's (build/publish/<target>/<os>-<arch>/) or
        a single image's (build/publish/<name>/, not an index)."""
        for path in (
            self.build_dir / "publish" / target / slug(oci) / "publish-report.json",
            self.build_dir / "publish" / name / "publish-report.json",
        ):
            doc = self.json(path)
            if isinstance(doc, dict) and not doc.get("platforms"):
                return doc, path
        return None, None

    def index_report(self, target: str) -> tuple[dict[str, Any] | None, Path]:
        path = self.build_dir / "publish" / target / "publish-report.json"
        doc = self.json(path)
        return (doc if isinstance(doc, dict) and doc.get("platforms") else None), path

    def signing(self, publish_report: Path) -> dict[str, Any] | None:
        doc = self.json(publish_report.with_name("signing.json"))
        return doc if isinstance(doc, dict) else None
