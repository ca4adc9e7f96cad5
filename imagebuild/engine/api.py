"""A few Docker Engine API calls straight over the engine's unix socket, where a `docker` process (tens of ms each)
or the SDK's import (hundreds) would be most of the work: tag an image, ask whether one exists.

Only unix:// engines are spoken to this way; for any other DOCKER_HOST the callers get None and use the CLI.
Answers are bounded (MAX_BODY) and a call that does not finish in IMAGEBUILD_ENGINE_TIMEOUT seconds fails.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any

from imagebuild.envvars import env_seconds

API = "/v1.41"  # Docker 20.10's API version; later engines answer it too
MAX_BODY = 1024 * 1024


def engine_timeout() -> float:
    """Seconds an engine gets to answer a question (not a build): an address that never answers ends here."""
    return env_seconds("IMAGEBUILD_ENGINE_TIMEOUT", 30)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def socket_path() -> str | None:
    """The engine's unix socket (DOCKER_HOST, else the default), or None for a host of another kind."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return host.removeprefix("unix://") if host.startswith("unix://") else None


def _call(method: str, path: str) -> tuple[int, Any] | None:
    where = socket_path()
    if where is None:
        return None
    conn = _UnixConnection(where, engine_timeout())
    try:
        conn.request(method, API + path)
        response = conn.getresponse()
        body = response.read(MAX_BODY + 1)
    except OSError:
        return None
    finally:
        conn.close()
    if len(body) > MAX_BODY:
        return response.status, None
    try:
        return response.status, json.loads(body) if body else None
    except ValueError:
        return response.status, None


def tag(image: str, reference: str) -> bool | None:
    """Point reference (`repo:tag`) at image; True when done, False when the engine refused (no such image), None
    when this engine is not reached over a unix socket (use `docker tag`)."""
    repo, _, name = reference.rpartition(":")
    if not repo or "/" in name:  # no tag part: the CLI's default applies
        repo, name = reference, "latest"
    query = urllib.parse.urlencode({"repo": repo, "tag": name})
    answer = _call("POST", f"/images/{urllib.parse.quote(image, safe=':')}/tag?{query}")
    return None if answer is None else answer[0] == 201


def remove_image(image: str) -> bool | None:
    """Remove image (not forced: one a container or a child image still uses stays); True when removed, None when
    this engine is not reached over a unix socket."""
    answer = _call("DELETE", f"/images/{urllib.parse.quote(image, safe=':')}")
    return None if answer is None else answer[0] == 200


def image_id(reference: str) -> str | None:
    """The ID of the local image reference names; None when there is none (or the engine is not on a socket)."""
    answer = _call("GET", f"/images/{urllib.parse.quote(reference, safe=':@')}/json")
    if answer is None or answer[0] != 200 or not isinstance(answer[1], dict):
        return None
    found = answer[1].get("Id")
    return found if isinstance(found, str) else None
