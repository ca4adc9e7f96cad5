"""`imagebuild lock --check-remote`: is every locked input still reachable and unchanged? Nothing is written.

One line per input: `ok`, `unreachable: why` or `changed: expected X got Y` (an input the lock could not pin is
`unlocked`, with why). Every request runs on a pool of `jobs` threads and gets `limit` seconds in all (a server that
accepts and never answers costs that, no more): images through the registry API (token flow included), git
commits by a fetch of the commit object alone, pip files through the index's simple API (PEP 691 JSON, else the
PEP 503 page's `#sha256=` fragments), files from a local wheelhouse by hashing them.

What is asked is what the MATRIX names (its specs); the lock gives only the pins the answers are compared with, so
no URL written into the lock is ever fetched. A `file:` URL is read only inside the wheelhouse the matrix (or
$PIP_FIND_LINKS) names, only a regular file (opened without blocking: a FIFO or /dev/zero is refused), at most its
locked size and within the deadline.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from imagebuild.engine.registry import RegistryError
from imagebuild.lock import debian, gitsrc, images
from imagebuild.lock.http import FetchError, http_get
from imagebuild.lock.model import one_line
from imagecontract.blob import open_regular

FAILED = ("unreachable", "changed", "unlocked")
MAX_DETAIL = 600  # characters of one result's detail
MAX_LOCAL_FILE = 8 << 30  # bytes of a wheel in a local wheelhouse hashed at most (the lock's size, when given)
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
    specs: dict[str, dict[str, Any]],
    limit: float,
    jobs: int,
    say: Callable[[str], None] = lambda line: None,
    root: Path | None = None,
) -> list[dict[str, Any]]:
    """One result per input of specs, in key order.

    specs are the MATRIX's specifications of the inputs to check (imagebuild.lock.inputs.collect: what the matrix
    says to fetch, already compared with the lock by lockfile.require_current); the lock entry gives only the pin
    each is compared with. An input the lock does not hold is `unlocked`. root: the matrix's folder (a relative
    find_links is relative to it; default: the working directory)."""
    entries = {k: doc["inputs"].get(k) for k in sorted(specs)}
    lookups: dict[tuple[str, str], Any] = {}
    for key, entry in entries.items():
        if key.startswith("pip:") and entry is not None and entry["status"] == "locked":
            for package in entry["packages"]:
                if any(not f["url"].startswith("file:") for f in package["files"]):
                    index = _index_of(specs[key], next(f["url"] for f in package["files"]))
                    lookups[(index, _normal(package["name"]))] = None
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pages = {key: pool.submit(_page, key[0], key[1], limit) for key in lookups}
        ctx = _Context(limit, pages, (root or Path.cwd()).resolve())
        futures = {key: pool.submit(_check_one, key, specs[key], entry, ctx) for key, entry in entries.items()}
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


@dataclass(frozen=True)
class _Context:
    limit: float  # seconds for one input's requests
    pages: dict[tuple[str, str], Any]  # (index URL, project) -> the future of its simple-API page
    root: Path  # the matrix's folder


def _check_one(key: str, spec: dict[str, Any], entry: dict[str, Any] | None, ctx: _Context) -> dict[str, Any]:
    started = time.monotonic()
    kind = key.split(":", 1)[0]
    if entry is None:
        status, detail = "unlocked", "not in the lock: run imagebuild lock"
    else:
        try:
            checks = {"image": _image, "git": _git, "pip": _pip, "file": _file, "apt": _apt}
            status, detail = checks[kind](spec, entry, ctx)
        except Exception as exc:  # one input's surprise is its own line, never the whole check's traceback
            status, detail = "unreachable", f"{type(exc).__name__}: {str(exc)[:200]}"
    detail = one_line(detail, MAX_DETAIL)  # one line, whatever a server or a file said
    return {"key": key, "status": status, "detail": detail, "seconds": round(time.monotonic() - started, 3)}


def _image(spec: dict[str, Any], entry: dict[str, Any], ctx: _Context) -> tuple[str, str]:
    limit = ctx.limit
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


def _git(spec: dict[str, Any], entry: dict[str, Any], ctx: _Context) -> tuple[str, str]:
    limit = ctx.limit
    if not spec.get("commit"):
        return "unlocked", "no commit in the matrix"
    status, detail = gitsrc.check(spec["url"], spec["commit"], entry.get("tree"), limit)
    if status == "ok" and entry["status"] == "unresolved":
        return "unlocked", f"{detail}: run imagebuild lock"
    return status, detail


def _pip(spec: dict[str, Any], entry: dict[str, Any], ctx: _Context) -> tuple[str, str]:
    limit, pages = ctx.limit, ctx.pages
    deadline = time.monotonic() + limit
    if entry["status"] != "locked":
        try:
            first = (spec["requirements"] or ["pip"])[0]
            project = re.split(r"[=<>!~; \[]", first, maxsplit=1)[0]
            for index in filter(None, (spec.get("extra_index_url"), spec["index_url"])):
                project_files(index, _normal(project), limit)  # the extra index first: it holds the first one
        except (FetchError, ValueError) as exc:
            return "unreachable", str(exc)
        return "unlocked", f"index answers; not locked: {entry.get('why', '')[:160]}"
    problems: list[str] = []
    checked = 0
    for package in entry["packages"]:
        for f in package["files"]:
            checked += 1
            if f["url"].startswith("file:"):
                problem = _local_file(f["url"], f["sha256"], f.get("size"), _wheelhouses(spec, ctx.root), deadline)
            else:
                index = _index_of(spec, package["files"][0]["url"])
                page = pages[(index, _normal(package["name"]))].result()
                if isinstance(page, str):
                    return "unreachable", page.removeprefix("unreachable: ")
                got = page.get(f["file"])
                problem = (
                    f"{f['file']} is no longer on {index}"
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


def _index_of(spec: dict[str, Any], file_url: str) -> str:
    """The index that lists a locked file: the set's extra index (AMD's vLLM builds) when the file lies on its host,
    else the set's index (PyPI's files lie on another host than its pages)."""
    extra, index = spec.get("extra_index_url"), str(spec["index_url"])
    return str(extra) if extra and urlparse(str(extra)).netloc == urlparse(file_url).netloc else index


def _wheelhouses(spec: dict[str, Any], root: Path) -> list[Path]:
    """The folders a pip set's `file:` URLs may lie in: the wheelhouse the matrix names for it (find_links,
    relative to the repository) and $PIP_FIND_LINKS (the override `imagebuild lock` and the build honour), each
    with its symlinks resolved. No other local file is read, whatever the lock says."""
    names = [spec.get("find_links") or "", *os.environ.get("PIP_FIND_LINKS", "").split()]
    found = []
    for name in filter(None, names):
        folder = Path(name.removeprefix("file://"))
        found.append(os.path.realpath(folder if folder.is_absolute() else root / folder))
    return [Path(f) for f in found]


def _local_file(url: str, sha256: str, size: int | None, allowed: list[Path], deadline: float) -> str | None:
    """None when the file at a `file:` URL has the locked sha256, else the problem: it lies outside the allowed
    wheelhouses, is not a regular file (a FIFO, /dev/zero: refused without blocking), is larger than its locked
    size (or MAX_LOCAL_FILE) or is not read by the deadline."""
    parsed = urlparse(url)
    path = Path(unquote(parsed.path))
    if parsed.scheme != "file" or parsed.netloc or not path.is_absolute():
        return f"{url[:120]}: not a file:///absolute/path URL"
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(folder) for folder in allowed):
        shown = ", ".join(str(f) for f in allowed) or "none"
        return f"{path}: outside the wheelhouse the matrix names (find_links, $PIP_FIND_LINKS: {shown}): not read"
    bound = MAX_LOCAL_FILE if size is None else min(size, MAX_LOCAL_FILE)
    digest = hashlib.sha256()
    read = 0
    try:
        with open_regular(real, follow=False) as fh:  # real holds no link: one swapped in since is refused
            while chunk := fh.read(1 << 20):
                read += len(chunk)
                if read > bound:
                    return f"{path.name}: larger than the {bound} bytes locked"
                if time.monotonic() > deadline:
                    return f"{path.name}: not read within the deadline"
                digest.update(chunk)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    got = digest.hexdigest()
    return None if got == sha256 else f"{path.name}: expected sha256 {sha256} got {got}"


def _apt(spec: dict[str, Any], entry: dict[str, Any], ctx: _Context) -> tuple[str, str]:
    return debian.check(spec, entry, ctx.limit)


def _file(spec: dict[str, Any], entry: dict[str, Any], ctx: _Context) -> tuple[str, str]:
    return "ok", f"{spec['path']} is in this repository (render --check compares its sha256)"


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
