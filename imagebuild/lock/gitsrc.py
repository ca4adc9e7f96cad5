"""Git inputs: the pinned commit exists at its remote; its tree, the sha256 of its archive, its submodule commits.

`imagebuild lock` fetches the one commit by SHA (`git fetch --depth 1 URL SHA`, as the Dockerfiles do) into a
scratch repository, or reads it from a local mirror given with `--git-mirror URL=PATH` (a host that cannot reach
the remote); the archive hash is that of `git archive --format=tar <commit>` (uncompressed: git's tar output is
stable, gzip's is not). `--check-remote` fetches only the commit object (`--filter=tree:0`) within the deadline.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from imagebuild.matrix.fields import Commit, Url

UNREACHABLE_SIGNS = (
    "could not resolve host",
    "connection refused",
    "connection timed out",
    "unable to access",
    "unable to connect",
    "network is unreachable",
    "no route to host",
    "failed to connect",
    "could not read from remote repository",
)
MAX_STDERR = 400


class GitError(Exception):
    """A git step failed; `unreachable` says whether the remote did not answer (else: it answered without it)."""

    def __init__(self, message: str, unreachable: bool) -> None:
        super().__init__(message)
        self.unreachable = unreachable


# The transports a remote may use (the matrix's URL grammar: imagebuild/matrix/fields.py Url): git refuses every
# other one, `ext::` (which runs a command) and `file://` included, whatever a user's git configuration says.
ALLOWED_PROTOCOLS = "https:http:ssh:git"
_URL: TypeAdapter[str] = TypeAdapter(Url)
_COMMIT: TypeAdapter[str] = TypeAdapter(Commit)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/true", "GIT_CONFIG_NOSYSTEM": "1"})
    env["GIT_ALLOW_PROTOCOL"] = ALLOWED_PROTOCOLS
    return env


def checked_url(url: str) -> str:
    """url as the matrix's grammar has it (an allowed scheme, never an option, one line) before it reaches git;
    GitError otherwise. Every git call below also puts `--` before its positional arguments."""
    try:
        return _URL.validate_python(url, strict=True)
    except ValidationError:
        raise GitError(
            f"refused: {str(url)[:80]!r} is not a git URL (https://, http://, ssh:// or git://)", False
        ) from None


def checked_commit(commit: str) -> str:
    """A commit of 40 hex digits (so `commit:path` and `commit^{tree}` can never be options); GitError otherwise."""
    try:
        return _COMMIT.validate_python(commit, strict=True)
    except ValidationError:
        raise GitError(f"refused: {str(commit)[:80]!r} is not a commit (40 hex digits)", False) from None


def _git(args: list[str], limit: float, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=_env(), capture_output=True, timeout=limit, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"no answer within {limit:g} s", unreachable=True) from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()
        last = " ".join(err.splitlines()[-2:])[:MAX_STDERR] or f"git exit {done.returncode}"
        raise GitError(last, unreachable=any(sign in err.lower() for sign in UNREACHABLE_SIGNS))
    return done.stdout.decode("utf-8", "replace")


def fetch_commit(url: str, commit: str, into: Path, limit: float, objects_only: bool = False) -> None:
    """Fetch one commit by SHA from url into the bare repository `into` (made when missing)."""
    url, commit = checked_url(url), checked_commit(commit)
    if not (into / "HEAD").exists():
        _git(["init", "-q", "--bare", "--", str(into)], limit)
    extra = ["--filter=tree:0"] if objects_only else []
    _git(["-C", str(into), "fetch", "-q", "--no-tags", "--depth=1", *extra, "--", url, commit], limit)


def describe_commit(git_dir: Path, commit: str, limit: float) -> dict[str, Any]:
    """tree, archive sha256 and submodules of a commit held in git_dir."""
    commit = checked_commit(commit)
    base = ["--git-dir", str(git_dir)]
    kind = _git([*base, "cat-file", "-t", commit], limit).strip()
    if kind != "commit":
        raise GitError(f"{commit} is a {kind}, not a commit", unreachable=False)
    tree = _git([*base, "rev-parse", f"{commit}^{{tree}}"], limit).strip()
    digest = hashlib.sha256()
    size = 0
    proc = subprocess.Popen(
        ["git", *base, "archive", "--format=tar", commit], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env()
    )
    assert proc.stdout is not None
    for chunk in iter(lambda: proc.stdout.read(1 << 20), b""):  # type: ignore[union-attr]
        digest.update(chunk)
        size += len(chunk)
    if proc.wait(timeout=limit) != 0:
        raise GitError(f"git archive {commit} failed", unreachable=False)
    submodules: dict[str, dict[str, str]] = {}
    for line in _git([*base, "ls-tree", "-r", commit], limit).splitlines():
        meta, _, path = line.partition("\t")
        mode, otype, sha = meta.split()
        if otype == "commit":
            submodules[path] = {"commit": sha}
    if submodules:
        try:
            urls = _git([*base, "config", "--blob", f"{commit}:.gitmodules", "--get-regexp", r"submodule\..*"], limit)
        except GitError:
            urls = ""
        paths: dict[str, str] = {}
        found: dict[str, str] = {}
        for line in urls.splitlines():
            name, _, value = line.partition(" ")
            if name.endswith(".path"):
                paths[name[: -len(".path")]] = value
            elif name.endswith(".url"):
                found[name[: -len(".url")]] = value
        for section, path in paths.items():
            if path in submodules and section in found:
                submodules[path]["url"] = found[section]
    return {
        "commit": commit,
        "tree": tree,
        "archive": "git archive --format=tar",
        "archive_sha256": digest.hexdigest(),
        "archive_bytes": size,
        "submodules": submodules,
    }


def resolve(
    url: str, commit: str, mirrors: dict[str, Path], limit: float, workdir: Path
) -> tuple[dict[str, Any], Path]:
    """The lock entry fields of a git input and the git directory holding the commit (a mirror, or a scratch
    repository under workdir); GitError when the commit cannot be had."""
    mirror = mirrors.get(url)
    if mirror is not None:
        entry = describe_commit(mirror, commit, limit)
        entry["verified_at"] = f"a local mirror of {url} (--git-mirror): the remote itself was not asked"
        return entry, mirror
    repo = workdir / hashlib.sha256(f"{url}@{commit}".encode()).hexdigest()[:16]
    fetch_commit(url, commit, repo, limit)
    entry = describe_commit(repo, commit, limit)
    entry["verified_at"] = f"{url} (git fetch --depth 1 of the commit)"
    return entry, repo


def read_file(git_dir: Path, commit: str, path: str, limit: float) -> str:
    """One file of the commit, as text (`commit:path`: a commit of 40 hex first, so never an option)."""
    commit = checked_commit(commit)
    return _git(["--git-dir", str(git_dir), "show", f"{commit}:{path}"], limit)


def export(git_dir: Path, commit: str, path: str, dest: Path, limit: float) -> Path:
    """Extract one folder of the commit under dest; returns dest/path."""
    commit = checked_commit(commit)
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "--format=tar", commit, "--", path],
        capture_output=True,
        timeout=limit,
        env=_env(),
    )
    if archive.returncode != 0:
        raise GitError(f"git archive {commit} {path} failed", unreachable=False)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=limit)
    return dest / path


def check(url: str, commit: str, tree: str | None, limit: float) -> tuple[str, str]:
    """('ok' | 'unreachable' | 'changed', detail) for a locked commit at its remote."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-check-git-") as scratch:
        repo = Path(scratch) / "repo.git"
        try:
            fetch_commit(url, commit, repo, limit, objects_only=True)
            got = _git(["--git-dir", str(repo), "rev-parse", f"{commit}^{{tree}}"], limit).strip()
        except GitError as exc:
            if exc.unreachable:
                return "unreachable", str(exc)
            return "changed", f"the remote answered without commit {commit[:12]}: {exc}"
    if tree and got != tree:
        return "changed", f"tree expected {tree} got {got}"
    return "ok", f"commit {commit[:12]} fetchable, tree {got[:12]}"
