"""The work after a build that depends only on the image BuildKit gave (issue 22): arch coverage and its layer, the
SBOM and its layer, the size record. For the same built image ID, with the same code doing that work, it is not
redone: the final image of last time gets the tags again (Engine API calls, no process) and the result its records.

One record per image beside the build report (`post/<name>.json`): the built ID, the final ID, the key (a checksum
of the hooks' own source files, so a changed scanner or SBOM writer runs again, and of the target's required
libraries, so another coverage rule judges again), the coverage path and size record.
A record whose final image is gone, or whose coverage document is missing, is not used.

The final image is held by a tag of its own (`<local repo>-post-cache:<target>`, hold_tag): the next build loads its
image under the target's tags, which leaves the last final image untagged, and on Docker 28.5's containerd store the
tag API then no longer found it by ID, so every cached build redid the work (8 s for the CUDA image: its coverage
scan reads 100,487 files). One hold per target: the next final image takes it over. The image BuildKit gave is
removed once the final one replaced it (_drop).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagecontract.atomic import write_atomic

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from imagebuild.building.buildkit import TargetResult
    from imagebuild.engine.docker import Engine

_ROOT = Path(__file__).resolve().parents[2]
HOOK_SOURCES = (
    "imagecontract/coverage.py",
    "imagebuild/prove/coverage.py",
    "imagebuild/release/sbom.py",
    "imagebuild/release/sbom_image.py",
    "imagebuild/building/sizes.py",
    "imagebuild/building/post_cache.py",
)
MAX_RECORD = 256 * 1024


def hold_tag(target: str) -> str:
    """The tag that keeps a target's last final image in the engine (the module's docstring says why); outside the
    local repository, so publish never takes it for one of the image's tags."""
    from imagebuild.plan.imageref import LOCAL_REPO

    return f"{LOCAL_REPO}-post-cache:{target}"


def hooks_key() -> str:
    digest = hashlib.sha256()
    for name in HOOK_SOURCES:
        path = _ROOT / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
    return digest.hexdigest()


def target_key(key: str, required: Sequence[object] = ()) -> str:
    """The hooks' key for one target: the coverage rule's required libraries are part of it (another list judges the
    same image anew); a target without one keeps the hooks' key."""
    if not required:
        return key
    names = "\0".join(sorted(str(r) for r in required))
    return hashlib.sha256(f"{key}\0required\0{names}".encode()).hexdigest()


def record_path(report: Path, target: str) -> Path:
    return report.parent / "post" / f"{target}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > MAX_RECORD:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _retag(engine: Engine, image: str, tags: list[str]) -> bool:
    from imagebuild.engine import api, cli

    for tag in tags:
        done = api.tag(image, tag)
        if done is None:  # not a unix-socket engine: the CLI
            try:
                cli.docker(engine, "tag", image, tag)
            except cli.CliError:
                return False
        elif not done:
            return False
    return True


def reuse(
    engine: Engine,
    results: list[TargetResult],
    report: Path,
    required: Mapping[str, Sequence[object]] | None = None,
    say: Callable[[str], object] | None = None,
) -> list[TargetResult]:
    """Restore every successful result whose post-build work is recorded for its image ID (and its required
    libraries: `required` per target, as add_coverage takes them); the others, to do. `say` hears each reuse."""
    hooks = hooks_key()
    todo = []
    for result in results:
        if not (result.ok and result.image_id and result.tags):
            todo.append(result)
            continue
        record = _read(record_path(report, result.target))
        ok = (
            record is not None
            and record.get("built") == result.image_id
            and record.get("key") == target_key(hooks, (required or {}).get(result.target, ()))
            and isinstance(record.get("final"), str)
            and (not record.get("coverage_file") or Path(str(record["coverage_file"])).is_file())
        )
        if ok and record is not None and _retag(engine, str(record["final"]), result.tags):
            _drop(engine, result.image_id, str(record["final"]))
            result.image_id = str(record["final"])
            if say is not None:
                say(f"post-build work of {result.target} reused: BuildKit gave the image of last time")
            result.coverage = record.get("coverage")
            result.size = record.get("size")
            continue
        todo.append(result)
    return todo


def remember(
    built: dict[str, str | None],
    results: list[TargetResult],
    report: Path,
    required: Mapping[str, Sequence[object]] | None = None,
    engine: Engine | None = None,
) -> None:
    """Record the post-build outcome of each result that went through the hooks and stayed ok; with the engine, hold
    each final image by its hold_tag (a record is kept without it: reuse then finds the image gone and redoes)."""
    hooks = hooks_key()
    for result in results:
        before = built.get(result.target)
        if not (result.ok and before and result.image_id):
            continue
        coverage = result.coverage
        record = {
            "built": before,
            "final": result.image_id,
            "key": target_key(hooks, (required or {}).get(result.target, ())),
            "coverage": coverage,
            "coverage_file": coverage if coverage and Path(coverage).is_file() else None,
            "size": result.size,
        }
        path = record_path(report, result.target)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record, indent=1) + "\n")
        if engine is not None:
            _retag(engine, result.image_id, [hold_tag(result.target)])
            _drop(engine, before, result.image_id)


def _drop(engine: Engine, built: str, final: str) -> None:
    """The image BuildKit gave, now that the final image (with the post-build layers) replaced it under every tag:
    the containerd store keeps it untagged with its own unpacked snapshots (15 GB for the CUDA image, found when the
    disk filled during issue 31's bench); an engine that refuses (a child image uses it) keeps it."""
    from imagebuild.engine import api, cli

    if built != final and api.remove_image(built) is None:
        try:
            cli.docker(engine, "rmi", built)
        except cli.CliError:
            return
