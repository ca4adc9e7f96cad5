"""One bounded HTTP GET for the lock: the whole answer within the deadline, at most MAX_PAGE bytes."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlparse

import requests

MAX_PAGE = 32 * 1024 * 1024  # bytes of one answer read at most (a simple-index page, a Debian InRelease)


class FetchError(Exception):
    pass


def http_get(url: str, limit: float, accept: str = "") -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET whose whole answer arrives within limit seconds."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            with requests.get(url, headers={"Accept": accept} if accept else {}, timeout=limit, stream=True) as r:
                body = b""
                for chunk in r.iter_content(1 << 16):
                    body += chunk
                    if len(body) > MAX_PAGE:
                        raise FetchError(f"{url}: answer larger than {MAX_PAGE} bytes")
                outcome["answer"] = (r.status_code, r.headers.get("Content-Type", ""), body)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="lock check", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise FetchError(f"{urlparse(url).netloc}: no complete answer within {limit:g} s")
    error = outcome.get("error")
    if isinstance(error, requests.RequestException):
        raise FetchError(f"{urlparse(url).netloc}: {type(error).__name__}")
    if error is not None:
        raise error
    return outcome["answer"]
