"""One bounded HTTP GET for the lock: the whole answer within the deadline, at most MAX_PAGE bytes."""

from __future__ import annotations

import threading
from urllib.parse import urlparse

import requests

MAX_PAGE = 32 * 1024 * 1024  # bytes of one answer read at most (a simple-index page, a Debian InRelease)


class FetchError(Exception):
    pass


def http_get(url: str, limit: float, accept: str = "") -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET whose whole answer arrives within limit seconds."""
    answers: list[tuple[int, str, bytes]] = []  # the worker's answer, or
    errors: list[BaseException] = []  # what it raised

    def work() -> None:
        try:
            with requests.get(url, headers={"Accept": accept} if accept else {}, timeout=limit, stream=True) as r:
                body = b""
                for chunk in r.iter_content(1 << 16):
                    body += chunk
                    if len(body) > MAX_PAGE:
                        raise FetchError(f"{url}: answer larger than {MAX_PAGE} bytes")
                answers.append((r.status_code, r.headers.get("Content-Type", ""), body))
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=work, name="lock check", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise FetchError(f"{urlparse(url).netloc}: no complete answer within {limit:g} s")
    error = errors[0] if errors else None
    if isinstance(error, requests.RequestException):
        raise FetchError(f"{urlparse(url).netloc}: {type(error).__name__}")
    if error is not None:
        raise error
    return answers[0]
