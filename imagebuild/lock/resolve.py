"""`imagebuild lock`: resolve every input of the matrix into the lock document.

An entry whose spec is unchanged and that is locked (or local) is kept as it is unless `refresh`; everything else
is resolved anew. What cannot be resolved from here is written as `unresolved` with the reason (a registry or
index that does not answer from this machine): the lock covers every input, and says which are not pinned yet.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.engine.registry import RegistryError
from imagebuild.errors import ConfigError
from imagebuild.lock import debian, gitsrc, images, model, pipsets
from imagebuild.lock.http import FetchError
from imagebuild.lock.inputs import Input

MAX_WHY = 1000  # characters of an unresolved entry's reason


@dataclass
class Options:
    refresh: bool = False
    git_mirrors: dict[str, Path] = field(default_factory=dict)
    limit: float = 120.0  # seconds for one registry request or git fetch
    resolve_limit: float = 600.0  # seconds for one uv resolution


def lock(
    inputs: dict[str, Input],
    previous: dict[str, Any] | None,
    options: Options,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(entries by key, resolver facts) for every input; a ConfigError before anything is resolved when uv is
    missing (it was a traceback after the whole run)."""
    try:
        resolver = {"pip": f"{pipsets.uv_version()} (uv pip compile, PEP 751 pylock.toml: exact files and sha256)"}
    except pipsets.ResolveError as exc:
        raise ConfigError(str(exc)) from None
    old = (previous or {}).get("inputs", {})
    entries: dict[str, dict[str, Any]] = {}
    git_dirs: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="imagebuild-lock-") as scratch:
        work = Path(scratch)

        def git_dir(url: str, commit: str) -> Path:
            key = f"{url}@{commit}"
            if key not in git_dirs:
                _, git_dirs[key] = gitsrc.resolve(url, commit, options.git_mirrors, options.limit, work)
            return git_dirs[key]

        order = sorted(inputs, key=lambda k: (_rank(inputs[k]), k))
        for key in order:
            item = inputs[key]
            kept = old.get(key)
            if not options.refresh and kept and kept.get("spec") == item.spec and kept["status"] != "unresolved":
                entries[key] = kept
                say(f"kept      {key}")
                continue
            started = time.monotonic()
            entry = _resolve_one(item, entries, options, git_dir, git_dirs, work)
            if "why" in entry:  # what a server or a tool said: one line of the lock's length (lock.model's Note)
                entry["why"] = model.one_line(entry["why"], MAX_WHY)
            entries[key] = {"spec": item.spec, "where": item.where, **entry}
            took = time.monotonic() - started
            why = f": {entry['why']}" if entry["status"] == "unresolved" else ""
            say(f"{entry['status']:<9} {key} ({took:.1f} s){why}")
    return entries, resolver


def _rank(item: Input) -> int:
    """git before pip (a pip set may read its requirements from a source); a set after the sets it builds on."""
    if item.kind != "pip":
        return 0
    return 1 + len(item.spec["after"]) + (1 if item.spec.get("torch") else 0)


def _resolve_one(
    item: Input,
    done: dict[str, dict[str, Any]],
    options: Options,
    git_dir: Callable[[str, str], Path],
    git_dirs: dict[str, Path],
    work: Path,
) -> dict[str, Any]:
    spec = item.spec
    try:
        if item.kind == "image":
            if spec["local"]:
                found = images.resolve_local(spec["ref"])
                status = "unresolved" if "why" in found else "local"
                return {"status": status, **found}
            return {"status": "locked", **images.resolve_remote(spec["ref"], spec["platforms"], options.limit)}
        if item.kind == "git":
            if not spec["commit"]:
                return {"status": "unresolved", "why": "no commit in the matrix (a ref alone moves)"}
            entry, repo = gitsrc.resolve(spec["url"], spec["commit"], options.git_mirrors, options.limit, work)
            git_dirs[f"{spec['url']}@{spec['commit']}"] = repo
            return {"status": "locked", **entry}
        if item.kind == "apt":
            return {
                "status": "locked",
                **debian.release(spec["mirror"], spec["suite"], spec["architectures"], options.limit),
            }
        if item.kind == "file":
            return {"status": "locked"}  # the spec holds the file's sha256: the file is the lock
        return _pip(item, done, options, git_dir, work)
    except RegistryError as exc:
        return {"status": "unresolved", "why": str(exc)}
    except gitsrc.GitError as exc:
        return {"status": "unresolved", "why": f"{spec.get('url')}: {exc}"}
    except FetchError as exc:
        return {"status": "unresolved", "why": str(exc)}
    except pipsets.ResolveError as exc:
        return {"status": "unresolved", "why": f"uv: {exc}"}


def _pip(
    item: Input,
    done: dict[str, dict[str, Any]],
    options: Options,
    git_dir: Callable[[str, str], Path],
    work: Path,
) -> dict[str, Any]:
    spec = item.spec
    constraints: list[str] = []
    for before in spec["after"]:
        prior = done.get(before)
        if prior is None or prior["status"] != "locked":
            return {"status": "unresolved", "why": f"the set it is installed after ({before}) is not locked"}
        constraints += [f"{p['name']}=={p['version']}" for p in prior["packages"]]
    # a later set's pin of a package replaces an earlier one's (the torch set's setuptools over the base set's): the
    # later stage installs over the earlier one
    by_name = {pipsets.name_of(line): line for line in constraints}
    constraints = list(by_name.values())
    requirements = list(spec["requirements"])
    package_dir = None
    extras = None
    source = spec.get("from_source")
    if source:
        try:
            repo = git_dir(source["git"], source["commit"])
        except gitsrc.GitError as exc:
            return {"status": "unresolved", "why": f"needs {source['file']} of {source['git']}: {exc}"}
        text = gitsrc.read_file(repo, source["commit"], source["file"], options.limit)
        if source.get("make_target"):
            requirements += pipsets.gen_server_requirements(text, source["make_target"])
        elif source.get("part"):
            requirements += pipsets.part_requirements(text, source["part"])
        else:
            requirements += pipsets.requirement_lines(text)
        if source.get("package"):
            package_dir = gitsrc.export(repo, source["commit"], source["package"], work / "src", options.limit)
            extras = source.get("extras")
    earlier = {pipsets.name_of(line) for line in constraints}
    if spec.get("resolved_with"):
        # the versions a resolution with the later set's packages picks, as constraints of this set's own resolution
        joint = pipsets.resolve(spec, [*requirements, *spec["resolved_with"]], constraints, options.resolve_limit)
        constraints += [
            f"{p['name']}=={p['version']}" for p in joint["packages"] if pipsets.name_of(p["name"]) not in earlier
        ]
    entry = pipsets.resolve(spec, requirements, constraints, options.resolve_limit, package_dir, extras)
    # what an earlier set installs stays that set's: pinned the same (the constraints), never installed twice
    kept = [p for p in entry["packages"] if pipsets.name_of(p["name"]) not in earlier]
    if len(kept) != len(entry["packages"]):
        entry = {**entry, "packages": kept, "requirements": pipsets.requirements_text(kept)}
    return {"status": "locked", **entry}
