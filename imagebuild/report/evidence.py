"""Reading the evidence under build/: every file bounded, every document checked before a fact is taken from it.

A file that is missing is "not run"; one that cannot be read or does not fit its model is a warning (named in the
page) and also "not run" for the facts it would have given: never a pass.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagebuild.matrix.oci import slug
from imagebuild.plan.image_key import ImageKey
from imagebuild.report import records
from imagecontract.blob import MissingFile, read_bounded
from imagecontract.models import ArchCoverage, ModelError, SmokeReport
from imagecontract.text import printable

MAX_EVIDENCE_BYTES = 32 << 20  # a coverage document of a large image is a few MB; a report past this is refused
MAX_SAID = 160  # characters of an untrusted text quoted in a warning line


def said(text: object, limit: int = MAX_SAID) -> str:
    """Untrusted text for a warning line: the one terminal rule (imagecontract.text.printable)."""
    return printable(text, limit)


MAX_NAMED = 3  # skipped entries named in a document's warning line


def skipped_warning(where: str, skipped: list[str], total: int, what: str) -> str:
    """One warning line for a document some of whose entries were skipped: how many, the first few named."""
    more = f", and {len(skipped) - MAX_NAMED} more" if len(skipped) > MAX_NAMED else ""
    return f"{said(where)}: {len(skipped)} of {total} {what}: " + "; ".join(skipped[:MAX_NAMED]) + more


def validation_said(exc: ValidationError) -> str:
    """A pydantic error as one short line: where and what, never the value."""
    first = exc.errors(include_url=False, include_input=False)[:2]
    parts = []
    for e in first:
        msg = "not in the form expected" if e["type"] == "string_pattern_mismatch" else e["msg"]
        parts.append(f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {msg}")
    return said("; ".join(parts), 240)


def mtime_utc(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")


@dataclass
class Evidence:
    """The evidence folder of one checkout (`<root>/build/`), read once per file."""

    root: Path
    read: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unreadable: set[Path] = field(default_factory=set)  # there, but not read or not JSON: never written over
    _cache: dict[Path, Any] = field(default_factory=dict)
    _checked: dict[tuple[Path, type], dict[str, Any] | None] = field(default_factory=dict)

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def raw(self, path: Path) -> bytes | None:
        """The file's bytes (at most MAX_EVIDENCE_BYTES), None when absent; unreadable: a warning, None.
        Opened without blocking and refused unless a regular file (a FIFO or a device is never read)."""
        try:
            return read_bounded(path, MAX_EVIDENCE_BYTES, what="evidence file")
        except MissingFile:
            return None
        except (OSError, ValueError) as exc:  # not a regular file, larger than the limit, unreadable, a NUL in it
            self.warnings.append(f"{said(self.rel(path))}: not read: {said(getattr(exc, 'strerror', None) or exc)}")
            self.unreadable.add(path)
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
            except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, too deep, a 5000-digit number
                self.warnings.append(f"{said(self.rel(path))}: not JSON: {said(exc)}")
                self.unreadable.add(path)
        self._cache[path] = value
        return value

    # --- the documents, by where their writers put them -------------------------------------------------

    def record(self, path: Path, model: type[records._Record], what: str) -> dict[str, Any] | None:
        """A record checked by its model (records.py): its fields, None when absent or (a warning, once) when it
        does not fit."""
        if (path, model) in self._checked:
            return self._checked[(path, model)]
        doc = self.json(path)
        value = None
        if doc is not None:
            try:
                value = records.checked(model, doc)
            except records.ValidationError as exc:
                self.warnings.append(f"{said(self.rel(path))}: not {what}: {validation_said(exc)}: not used")
        self._checked[(path, model)] = value
        return value

    def build_entries(self) -> dict[str, dict[str, Any]]:
        """build/build-report.json targets by name (`local-cpu`, `local-cpu-linux-arm64`), with the report's time;
        an entry that does not fit records.BuildEntry is left out (a warning naming it)."""
        path = self.build_dir / "build-report.json"
        doc = self.record(path, records.BuildReport, "a build report")
        if doc is None:
            return {}
        out = {}
        for i, entry in enumerate(doc["targets"]):
            try:
                checked = records.checked(records.BuildEntry, entry)
            except records.ValidationError as exc:
                self.warnings.append(f"{self.rel(path)}: targets[{i}] not used: {validation_said(exc)}")
                continue
            out[checked["target"]] = {**checked, "created": doc["created"]}
        return out

    def smoke_report(self, key: ImageKey) -> tuple[SmokeReport | None, Path]:
        """The smoke report of this image where `imagebuild smoke` writes it (ImageKey.smoke_dir), checked."""
        path = key.smoke_dir(self.root) / "report.json"
        return self.smoke_at(path), path

    def smoke_at(self, path: Path) -> SmokeReport | None:
        doc = self.json(path)
        if doc is None:
            return None
        try:
            return SmokeReport.from_dict(doc)
        except ModelError as exc:
            self.warnings.append(f"{self.rel(path)}: not a smoke report: {said(exc)}")
            return None

    def inside(self, path: Path) -> bool:
        """The path, its `..` resolved by name, is in the checkout (a record names no file elsewhere)."""
        where = os.path.normpath(self.root / path)
        return any(where.startswith(os.path.normpath(r) + os.sep) for r in (self.root, self.root.resolve()))

    def coverage(self, key: ImageKey, entry: dict[str, Any] | None) -> tuple[ArchCoverage | None, str | None, str]:
        """The arch-coverage document the build wrote for this image (its path in the build report, else
        build/coverage/<ImageKey.name>.json); (doc, why-not, path). A document for another image is not used."""
        given = entry.get("coverage") if entry else None
        if isinstance(given, str) and not given.endswith(".json"):
            return None, said(given, 300), ""  # "not scanned: no python3 in the image"
        path = Path(given) if isinstance(given, str) else self.build_dir / "coverage" / f"{key.name}.json"
        if "\0" in str(path) or not self.inside(path):
            where = f"build/build-report.json: {key.name}: coverage {said(given)}"
            self.warnings.append(f"{where} is not in the checkout: not read")
            return None, None, ""
        path = self.root / path
        doc = self.json(path)
        if doc is None:
            return None, None, self.rel(path)
        try:
            cov = ArchCoverage.from_dict(doc)
        except ModelError as exc:
            self.warnings.append(f"{self.rel(path)}: not an arch-coverage document: {said(exc)}")
            return None, None, self.rel(path)
        if cov.target not in (None, key.name):  # the build names each platform's image by ImageKey.name
            self.warnings.append(f"{self.rel(path)}: is for image {said(cov.target)}, not {key.name}: not used")
            return None, None, self.rel(path)
        return cov, None, self.rel(path)

    def sbom(self, key: ImageKey) -> Path | None:
        path = self.build_dir / "sbom" / f"{key.name}.cdx.json"
        return path if path.is_file() else None

    def publish(self, key: ImageKey) -> tuple[dict[str, Any] | None, Path | None]:
        """The publish report of this platform's image: an index child's (beside the index's report, one folder a
        platform: build/publish/<target>/<os>-<arch>/) or a single image's (ImageKey.publish_dir, not an index)."""
        index_dir = key.on(key.platforms[0]).publish_dir(self.root)
        for path in dict.fromkeys(
            (index_dir / slug(key.oci) / "publish-report.json", key.publish_dir(self.root) / "publish-report.json")
        ):
            doc = self.record(path, records.PublishReport, "a publish report")
            if doc is not None and not doc["platforms"]:
                return doc, path
        return None, None

    def index_report(self, key: ImageKey) -> tuple[dict[str, Any] | None, Path]:
        """The OCI index's publish report of this image's target (the first platform's ImageKey.publish_dir)."""
        path = key.on(key.platforms[0]).publish_dir(self.root) / "publish-report.json"
        doc = self.record(path, records.PublishReport, "a publish report")
        return (doc if doc is not None and doc["platforms"] else None), path

    def signing(self, publish_report: Path) -> dict[str, Any] | None:
        return self.record(publish_report.with_name("signing.json"), records.SigningRecord, "a signing record")
