"""`imagebuild lock --check-remote`: is every locked input still reachable and unchanged? Nothing is written.

One line per input: `ok`, `unreachable: why` or `changed: expected X got Y` (an input the lock could not pin is
`unlocked`, with why). Every request runs on a pool of `jobs` threads and gets `limit` seconds in all (a server that
accepts and never answers costs that, no more): images through the registry API (token flow included), git
commits by a fetch of the commit object alone, pip files through the index's simple API (PEP 691 JSON, else the
PEP 503 page's `#sha256=` fragments), files from a local wheelhouse by hashing them.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from imagebuild.engine.registry import RegistryError
from imagebuild.lock import debian, gitsrc, images
from imagebuild.lock.http import FetchError, http_get

FAILED = ("unreachable", "changed", "unlocked")
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def project_files(index_url: str, project: str, limit: float) -> dict[str, str]:
    """file name -> sha256 of every file the index lists for the project."""
    url = f"{index_url.rstrip('/')}/{project}/"
    status, ctype, body = http_get(url, limit, accept=f"{SIMPLE_JSON}, text/html;q=0.1")
    if status == 404:
        return {}
    if status != 200:
        raise FetchError(f"{urlparse(url).netloc}: HTTP {status} for {project}")
    text = body.decode("utf-8", "replace")
    if SIMPLE_JSON in ctype:
        import json

        files = json.loads(text).get("files", [])
        return {str(f.get("filename")): str((f.get("hashes") or {}).get("sha256", "")) for f in files}
    found = {}
    for href in re.findall(r'href="([^"]+)"', text):
        path, _, fragment = href.partition("#")
        if fragment.startswith("sha256="):
            found[unquote(path.rsplit("/", 1)[-1])] = fragment[len("sha256=") :]
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check(
    doc: dict[str, Any],
    wanted: set[str] | None,
    limit: float,
    jobs: int,
    say: Callable[[str], None] = lambda line: None,
) -> list[dict[str, Any]]:
    """One result per input of the lock (those in wanted, when given), in key order."""
    entries = {k: v for k, v in doc["inputs"].items() if wanted is None or k in wanted}
    lookups: dict[tuple[str, str], Any] = {}
    for entry in entries.values():
        if entry["spec"].get("requirements") is not None and entry["status"] == "locked":
            for package in entry["packages"]:
                for f in package["files"]:
                    if not f["url"].startswith("file:"):
                        lookups[(entry["spec"]["index_url"], _normal(package["name"]))] = None
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pages = {key: pool.submit(_page, key[0], key[1], limit) for key in lookups}
        futures = {key: pool.submit(_check_one, key, entry, limit, pages) for key, entry in sorted(entries.items())}
        results = []
        for key, future in futures.items():
            result = future.result()
            results.append(result)
            say(f"{result['status']:<11} {key}: {result['detail']}")
    for result in results:
        result.setdefault("total_s", round(time.monotonic() - started, 3))
    return results


def _page(index_url: str, project: str, limit: float) -> dict[str, str] | str:
    try:
        return project_files(index_url, project, limit)
    except (FetchError, ValueError) as exc:
        return f"unreachable: {exc}"


def _check_one(key: str, entry: dict[str, Any], limit: float, pages: dict[tuple[str, str], Any]) -> dict[str, Any]:
    started = time.monotonic()
    kind = key.split(":", 1)[0]
    try:
        checks = {"image": _image, "git": _git, "pip": _pip, "file": _file, "apt": _apt}
        status, detail = checks[kind](entry, limit, pages)
    except Exception as exc:  # one input's surprise is its own line, never the whole check's traceback
        status, detail = "unreachable", f"{type(exc).__name__}: {str(exc)[:200]}"
    return {"key": key, "status": status, "detail": detail, "seconds": round(time.monotonic() - started, 3)}


def _image(entry: dict[str, Any], limit: float, pages: Any) -> tuple[str, str]:
    spec = entry["spec"]
    if entry["status"] == "local" and spec["ref"].startswith("local/"):
        return "ok", f"made on this machine (scripts/setup.sh); locked ID {entry.get('image_id', '?')[:19]}"
    try:
        got = images.resolve_remote(spec["ref"], spec["platforms"], limit)
    except RegistryError as exc:
        return "unreachable", str(exc)
    if entry["status"] == "local":  # made by each machine's setup.sh: another machine's digest is no change
        same = "as locked" if got["digest"] == entry.get("digest") else f"locked {entry.get('digest')} on its machine"
        return "ok", f"{spec['ref']} is {got['digest']} (made on this machine by scripts/setup.sh; {same})"
    if entry["status"] == "unresolved":
        return "unlocked", f"resolvable now ({got['digest']}): run imagebuild lock"
    if got["digest"] != entry["digest"]:
        return "changed", f"{spec['ref']}: expected {entry['digest']} got {got['digest']}"
    return "ok", f"{spec['ref']} is {got['digest']}"


def _git(entry: dict[str, Any], limit: float, pages: Any) -> tuple[str, str]:
    spec = entry["spec"]
    if not spec.get("commit"):
        return "unlocked", "no commit in the matrix"
    status, detail = gitsrc.check(spec["url"], spec["commit"], entry.get("tree"), limit)
    if status == "ok" and entry["status"] == "unresolved":
        return "unlocked", f"{detail}: run imagebuild lock"
    return status, detail


def _pip(entry: dict[str, Any], limit: float, pages: dict[tuple[str, str], Any]) -> tuple[str, str]:
    spec = entry["spec"]
    if entry["status"] != "locked":
        try:
            first = (spec["requirements"] or ["pip"])[0]
            project = re.split(r"[=<>!~; \[]", first, maxsplit=1)[0]
            project_files(spec["index_url"], _normal(project), limit)
        except (FetchError, ValueError) as exc:
            return "unreachable", str(exc)
        return "unlocked", f"index answers; not locked: {entry.get('why', '')[:160]}"
    problems: list[str] = []
    checked = 0
    for package in entry["packages"]:
        for f in package["files"]:
            checked += 1
            if f["url"].startswith("file:"):
                problem = _local_file(Path(unquote(urlparse(f["url"]).path)), f["sha256"])
            else:
                page = pages[(spec["index_url"], _normal(package["name"]))].result()
                if isinstance(page, str):
                    return "unreachable", page.removeprefix("unreachable: ")
                got = page.get(f["file"])
                problem = (
                    f"{f['file']} is no longer on {spec['index_url']}"
                    if got is None
                    else (f"{f['file']}: expected sha256 {f['sha256']} got {got}" if got != f["sha256"] else None)
                )
            if problem:
                problems.append(problem)
    if problems:
        return "changed", "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
    return (
        "ok",
        f"{checked} file(s) on {spec['index_url'] if spec['index_url'] else 'the index'} with the locked sha256",
    )


def _local_file(path: Path, sha256: str) -> str | None:
    try:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    got = digest.hexdigest()
    return None if got == sha256 else f"{path.name}: expected sha256 {sha256} got {got}"


def _apt(entry: dict[str, Any], limit: float, pages: Any) -> tuple[str, str]:
    return debian.check(entry, limit)


def _file(entry: dict[str, Any], limit: float, pages: Any) -> tuple[str, str]:
    return "ok", f"{entry['spec']['path']} is in this repository (render --check compares its sha256)"


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for result in results:
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    failed = sum(n for s, n in counts.items() if s in FAILED)
    total = max((r.get("total_s", 0.0) for r in results), default=0.0)
    line = (
        f"{len(results)} input(s): " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" in {total:.1f} s"
    )
    return {"line": line, "counts": counts, "failed": failed, "seconds": total}
