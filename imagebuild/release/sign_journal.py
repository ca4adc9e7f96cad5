"""The `.sig`/`.att` tags a signing stage writes, journalled so that an interrupted or failed stage leaves none
half written (issue 34: SIGTERM during promote left them). Its own module: publish, index and flows wrap their
signing in it without importing the signing stage itself (which imports verify, which imports publish)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.errors import PublishFailed

# The `.sig`/`.att` tags a signing stage may write, as they were before it: (repo, tag) -> (manifest digest,
# bytes, media type), or None for a tag that did not exist. Set by undone_unless_complete for its block.
_Before = dict[tuple[str, str], tuple[str, bytes, str] | None]
_JOURNAL: contextvars.ContextVar[tuple[RepoRef, _Before] | None] = contextvars.ContextVar("signing", default=None)


def remember_sig_att(repo: RepoRef, digest: str) -> None:
    """Record the `.sig`/`.att` tags of repo@digest as they are now, before this signing stage writes them."""
    journal = _JOURNAL.get()
    if journal is None:
        return
    registry = Registry(repo)
    for suffix in (".sig", ".att"):
        tag = digest.replace(":", "-") + suffix
        if (repo.repo, tag) in journal[1]:
            continue
        try:
            now = registry.digest(repo.repo, tag)
            journal[1][(repo.repo, tag)] = None if now is None else (now, *registry.manifest(repo.repo, now))
        except RegistryError as exc:
            raise PublishFailed(f"reading {repo}:{tag} before signing failed: {exc}") from exc


@contextmanager
def undone_unless_complete(dest: RepoRef, log: Callable[[str], None]) -> Iterator[None]:
    """A signing stage (before any public tag moves) that leaves no `.sig`/`.att` tag behind unless it completes:
    on any exception, SIGINT's KeyboardInterrupt and SIGTERM's Terminated included (imagebuild/signals.py), every
    such tag it wrote is put back as it was (deleted when it did not exist). A cosign child still writing was
    killed first (subprocess.run kills it on the way out)."""
    journal: _Before = {}
    token = _JOURNAL.set((dest, journal))
    try:
        yield
    except BaseException:
        _restore(dest, journal, log)
        raise
    finally:
        _JOURNAL.reset(token)


def _restore(dest: RepoRef, journal: _Before, log: Callable[[str], None]) -> None:
    registry = Registry(dest)
    for (repo, tag), before in reversed(journal.items()):
        try:
            now = registry.digest(repo, tag)
            if now == (before[0] if before else None):
                continue
            log(f"undo {dest.host}/{repo}:{tag} ({'put back' if before else 'removed'}: the signing did not complete)")
            if before is not None:
                registry.put_manifest(repo, tag, before[1], before[2])
            elif now is not None:
                registry.delete_manifest(repo, now)
        except RegistryError as exc:  # said, never hiding the error that got us here
            log(f"warning: {dest.host}/{repo}:{tag} could not be undone: {exc}")
