"""A leg's input key (issue 33 item 4): the sha256 of everything that decides its image, and reuse by that key.

The key hashes, as one canonical JSON document (`parts`):
- `lock`: the lock entries (matrix.lock.json `inputs`) the target lists for this OCI platform (`targets.<name>.<oci>`);
- `dockerfile`: the sha256 of the Dockerfile that is built (after a base substitution, the substituted one);
- `context`: the sha256 of every context file the Dockerfile copies (`COPY`/`ADD` sources without `--from`, bind
  mounts without `from=`), folders walked, `.dockerignore` applied as the build applies it; `build/wheelhouse`,
  which the build itself fills, as `wheels`: the sha256 of each wheel the spec stages there (a key taken before the
  first build and one taken after it are the same: seen on two real nodes, where the wheelhouse made them differ);
- `build_args`: the build arguments, the platform and the target (not SOURCE_DATE_EPOCH: the commit time changes
  with every commit and decides only file and history times; not the secrets: they carry no image content and
  never enter a key or a log);
- `bases`: the digest each substituted base had when the build was planned (build/base_substitute.py), beside the
  lock's pinned images.

Labels only a build knows (revision, commit time) are not in it: a reused image keeps the labels of the build that
made it, and the report says it was reused, with its digest.

Reuse: after its smoke passed, a staged leg is recorded in the staging repository under the tag `ik-<key>`: an OCI
index of one child, the staged image, whose annotation holds the passing smoke report (no blob of its own, so
nothing but a manifest is written). Before building, `find_reusable` asks for that tag: one manifest read per leg.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.errors import ConfigError
from imagebuild.lock import lockfile

if TYPE_CHECKING:
    from imagebuild.building.buildkit import BuildSpec, TargetResult
    from imagebuild.engine.docker import Engine
    from imagebuild.engine.registry import Registry

TAG_PREFIX = "ik-"
REPORT_ANNOTATION = "io.imagebuild.smoke-report"
KEY_ANNOTATION = "io.imagebuild.input-key"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
WHEELHOUSE = "build/wheelhouse"  # filled by the build itself (buildkit.prepare): its wheels are hashed at the source
MAX_CONTEXT_FILES = 100_000  # a COPY of more files than this is refused rather than hashed for minutes
_COPY = re.compile(r"^(?:COPY|ADD)\s+(.*)$", re.IGNORECASE)
_BIND = re.compile(r"--mount=(\S+)")


def _logical_lines(text: str) -> list[str]:
    """Dockerfile lines with `\\` continuations joined, comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append((current + raw).strip())
        current = ""
    return lines + ([current.strip()] if current.strip() else [])


def copied_paths(dockerfile: str) -> list[str]:
    """Context paths the Dockerfile reads: COPY/ADD sources without --from, bind mounts without from=."""
    found: list[str] = []
    for line in _logical_lines(dockerfile):
        if match := _COPY.match(line):
            words = [w for w in shlex.split(match.group(1), posix=True)]
            if any(w.startswith("--from") for w in words):
                continue
            sources = [w for w in words if not w.startswith("--")][:-1]
            found += [s for s in sources if "://" not in s]
        for mount in _BIND.findall(line):
            fields: dict[str, str] = dict(item.split("=", 1) for item in mount.split(",") if "=" in item)
            if fields.get("type") == "bind" and "from" not in fields:
                found.append(fields.get("source", fields.get("src", ".")))
    return sorted(set(found))


def _ignore_rules(context: Path) -> list[tuple[bool, str]]:
    try:
        text = (context / ".dockerignore").read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, line.lstrip("!").strip("/")))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, str]]) -> bool:
    """The .dockerignore verdict on one relative path (the last matching rule wins; a folder's rule covers it)."""
    verdict = False
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for negated, pattern in rules:
        bare = pattern.removeprefix("**/")
        hit = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)
        if pattern.startswith("**/"):
            hit = hit or any(fnmatch.fnmatchcase(part, bare) for part in parts)
        if hit:
            verdict = not negated
    return verdict


def context_digests(context: Path, paths: list[str]) -> dict[str, str]:
    """relative path -> sha256 of each regular file under the copied paths (symlinks: their target text)."""
    rules, out = _ignore_rules(context), dict[str, str]()
    for given in paths:
        base = context / given.lstrip("/")
        matches = sorted(context.glob(given.lstrip("/"))) if any(c in given for c in "*?[") else [base]
        for start in matches:
            walk = [start] if not start.is_dir() or start.is_symlink() else sorted(start.rglob("*"))
            for path in walk:
                rel = path.relative_to(context).as_posix()
                if _ignored(rel, rules) or (path.is_dir() and not path.is_symlink()):
                    continue
                if len(out) >= MAX_CONTEXT_FILES:
                    raise ConfigError(f"input key: the build copies more than {MAX_CONTEXT_FILES} files")
                out[rel] = _file_digest(path)
    return dict(sorted(out.items()))


def _file_digest(path: Path) -> str:
    if path.is_symlink():
        return "symlink:" + os.readlink(path)
    if not path.exists():
        return "absent"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def lock_entries(context: Path, target: str, oci: str) -> dict[str, Any]:
    """The lock's entries the target lists for this platform (empty without a lock)."""
    found = lockfile.read(context / lockfile.LOCK_NAME) if (context / lockfile.LOCK_NAME).is_file() else None
    if found is None:
        return {}
    doc = found[0]
    names = doc.get("targets", {}).get(target, {}).get(oci, [])
    return {name: doc["inputs"].get(name) for name in sorted(names)}


def parts_of(spec: BuildSpec) -> dict[str, Any]:
    """Everything that decides the leg's image, as one JSON-able document."""
    if "Dockerfile" in spec.rendered_files:  # a render written only when the build starts
        dockerfile = spec.rendered_files["Dockerfile"].encode()
    else:
        dockerfile = spec.dockerfile.read_bytes()
    target = spec.plan.target.name if spec.plan is not None else spec.target
    copied = copied_paths(dockerfile.decode("utf-8", "replace"))
    oci = spec.platform or ""
    return {
        "schema": 1,
        "lock": lock_entries(spec.context, target, oci),
        "dockerfile": hashlib.sha256(dockerfile).hexdigest(),
        "context": context_digests(spec.context, [p for p in copied if p.rstrip("/") != WHEELHOUSE]),
        "wheels": {wheel.name: _file_digest(wheel) for wheel in sorted(spec.wheels)},  # what is staged there
        "build_args": {"target": spec.target, "platform": oci, **spec.build_args},
        "bases": [
            {k: sub.get(k) for k in ("public", "used", "used_digest", "platform")} for sub in spec.base_substitution
        ],
    }


def key_of(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_key(spec: BuildSpec) -> str:
    return key_of(parts_of(spec))


@dataclass(frozen=True)
class Reusable:
    """A staged leg with a passing smoke report for the same key."""

    key: str
    ref: str  # HOST/REPO@sha256:... of the staged image
    report: dict[str, Any]


def record_smoked(registry: Registry, repo: str, key: str, digest: str, report: dict[str, Any]) -> str:
    """Tag `ik-<key>` in repo: an index of the staged image `digest` carrying its passing smoke report of that image
    (its image ID the staged config digest or manifest digest: engine.interface.smoke_ids)."""
    from imagebuild.engine.interface import smoke_ids
    from imagecontract.models.smoke_report import SmokeReport

    refusal = SmokeReport.from_dict(report).refusal()
    if refusal is not None:
        raise ConfigError(f"input key {key[:12]}: the smoke report did not pass: {refusal}")
    config_digest, _ = registry.config(repo, digest)
    if report.get("image_id") not in smoke_ids(config_digest, digest):  # the staged image is the one that was smoked
        raise ConfigError(f"input key {key[:12]}: the smoke report is for {report.get('image_id')}, not {digest}")
    body, media_type = registry.manifest(repo, digest)
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [{"mediaType": media_type.split(";")[0], "digest": digest, "size": len(body)}],
        "annotations": {KEY_ANNOTATION: key, REPORT_ANNOTATION: json.dumps(report, sort_keys=True)},
    }
    return registry.put_manifest(repo, TAG_PREFIX + key, json.dumps(index).encode(), INDEX_TYPE)


def find_reusable(registry: Registry, repo: str, key: str) -> Reusable | None:
    """The staged image recorded under the key with a passing smoke report; None when there is none."""
    from imagecontract.models.smoke_report import SmokeReport

    if registry.digest(repo, TAG_PREFIX + key) is None:
        return None
    body, _ = registry.manifest(repo, TAG_PREFIX + key)  # bounded by the registry client (MANIFEST_LIMIT)
    try:
        index = json.loads(body)
        notes = index.get("annotations") or {}
        children = index.get("manifests") or []
        report = json.loads(notes.get(REPORT_ANNOTATION, "null"))
        passed = notes.get(KEY_ANNOTATION) == key and SmokeReport.from_dict(report).refusal() is None
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    if not passed or len(children) != 1 or not isinstance(children[0], dict):
        return None
    return Reusable(key, f"{registry.ref.host}/{repo}@{children[0].get('digest')}", report)


def reuse(engine: Engine, staging: str, specs: list[BuildSpec]) -> tuple[list[BuildSpec], list[TargetResult]]:
    """(the specs still to build, a result for each leg reused from staging), every spec's key looked up once."""
    from imagebuild.building.buildkit import TargetResult, built_id
    from imagebuild.engine import builders
    from imagebuild.engine.registry import Registry, RegistryError, RepoRef

    repo = RepoRef.parse(staging)
    registry = Registry(repo)
    todo, done = [], []
    for spec in specs:
        started = time.monotonic()
        key = input_key(spec)
        try:
            found = find_reusable(registry, repo.repo, key)
        except RegistryError:
            found = None  # no answer is no reuse: the leg is built
        if found is None:
            spec.input_key = key
            todo.append(spec)
            continue
        digest = found.ref.rsplit("@", 1)[1]
        builders.pull(engine, builders.Pushed(found.ref, digest, None), spec.tags)
        image_id, why = built_id(spec, engine)
        done.append(
            TargetResult(
                spec.target,
                image_id is not None,
                image_id,
                spec.tags if image_id else [],
                round(time.monotonic() - started, 3),
                0,
                0,
                why,
                [],
                str(spec.log_path),
                str(spec.dockerfile),
                [],
                input_key=key,
                reused=found.ref,
            )
        )
    return todo, done
