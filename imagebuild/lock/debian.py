"""The Debian suite a local base image is debootstrapped from: its signed Release file (InRelease) at the mirror.

The lock records the InRelease file's sha256 and its Date and Version: the package set a base made from that
suite gets. A point release moves them, and `--check-remote` then says `changed` (a base made now differs).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from imagebuild.lock.http import FetchError, http_get


def release(mirror: str, suite: str, architectures: list[str], limit: float) -> dict[str, Any]:
    """The lock entry fields of a Debian suite; FetchError when the mirror does not answer with it."""
    url = f"{mirror.rstrip('/')}/dists/{suite}/InRelease"
    status, _, body = http_get(url, limit)
    if status != 200:
        raise FetchError(f"{url}: HTTP {status}")
    text = body.decode("utf-8", "replace")
    fields = dict(re.findall(r"^(Date|Version|Codename|Architectures): (.*)$", text, flags=re.M))
    offered = fields.get("Architectures", "").split()
    missing = [a for a in architectures if a not in offered]
    if missing:
        raise FetchError(f"{url} offers no {', '.join(missing)}")
    return {
        "url": url,
        "inrelease_sha256": hashlib.sha256(body).hexdigest(),
        "date": fields.get("Date"),
        "version": fields.get("Version"),
        "codename": fields.get("Codename"),
    }


def check(spec: dict[str, Any], entry: dict[str, Any], limit: float) -> tuple[str, str]:
    """(status, detail) of a locked suite; spec: the matrix's (what to fetch), entry: the lock's pin."""
    try:
        got = release(spec["mirror"], spec["suite"], spec["architectures"], limit)
    except FetchError as exc:
        return "unreachable", str(exc)
    if entry["status"] != "locked":
        return "unlocked", f"resolvable now ({got['date']}): run imagebuild lock"
    if got["inrelease_sha256"] != entry["inrelease_sha256"]:
        return "changed", (
            f"{got['url']}: expected {entry['version']} of {entry['date']} (sha256 {entry['inrelease_sha256'][:12]}) "
            f"got {got['version']} of {got['date']} (sha256 {got['inrelease_sha256'][:12]})"
        )
    return "ok", f"{got['url']}: {got['version']} of {got['date']}"
