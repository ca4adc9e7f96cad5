"""Start a serving runtime from the manifest's argv, wait for its health endpoint, ask it to generate, stop it.

Standard library only: it runs inside every image, whatever the runtime brings. The server runs in its own
process group so stopping it also stops what it forked (TGI's launcher starts shards and a router).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.25
STOP_GRACE_S = 15.0


class ServeError(Exception):
    """The server did not start, did not answer, or answered without tokens: the message says which."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fill(argv: list[str], model: str, port: int) -> list[str]:
    """Replace the ``{model}`` and ``{port}`` placeholders (whole element or substring); no shell is involved."""
    return [str(a).replace("{model}", model).replace("{port}", str(port)) for a in argv]


@dataclass
class Server:
    """A running server process, its log file and where it listens."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    base_url: str

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], log_path: Path, port: int) -> Server:
        log = open(log_path, "wb")  # noqa: SIM115 - the child writes it for its whole life
        try:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as exc:
            raise ServeError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        finally:
            log.close()
        return cls(proc, log_path, f"http://127.0.0.1:{port}")

    def wait_healthy(self, path: str, timeout_s: float) -> float:
        """Seconds until ``GET path`` answered 200; raises when the process exits first or time runs out."""
        start = time.perf_counter()
        deadline = start + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServeError(f"the server exited with code {code} before {path} answered")
            try:
                with urllib.request.urlopen(self.base_url + path, timeout=5) as resp:
                    if resp.status == 200:
                        return time.perf_counter() - start
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or not ready (503)
            if time.perf_counter() >= deadline:
                raise ServeError(f"{path} did not answer 200 within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def stop(self) -> int | None:
        """SIGTERM to the whole process group, SIGKILL after a grace period; returns the exit code."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.proc.pid, signal.SIGKILL)  # children the server left behind go too
        try:
            return self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return [line.rstrip()[:400] for line in deque(fh, maxlen=lines)]
        except OSError:
            return []


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Generation:
    """One generate request: the text and token count the server reported, and the wall time it took."""

    text: str
    tokens: int
    seconds: float


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            payload = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise ServeError(f"POST {url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServeError(f"POST {url} failed: {getattr(exc, 'reason', exc)}") from None
    try:
        answer = json.loads(payload)
    except json.JSONDecodeError:
        raise ServeError(f"POST {url} answered non-JSON: {payload[:200]!r}") from None
    if not isinstance(answer, dict):
        raise ServeError(f"POST {url} answered {type(answer).__name__}, not a JSON object")
    return answer


def generate(api: str, base_url: str, model: str, prompt: str, max_tokens: int, timeout_s: float) -> Generation:
    """One request in the runtime's API flavour (docs/contracts.md): ``openai`` completions or ``tgi`` generate."""
    start = time.perf_counter()
    if api == "openai":
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": False}
        answer = post_json(base_url + "/v1/completions", body, timeout_s)
        choices = answer.get("choices") or [{}]
        text = choices[0].get("text") if isinstance(choices[0], dict) else None
        tokens = (answer.get("usage") or {}).get("completion_tokens")
    elif api == "tgi":
        body = {"inputs": prompt, "parameters": {"max_new_tokens": max_tokens, "details": True}}
        answer = post_json(base_url + "/generate", body, timeout_s)
        text = answer.get("generated_text")
        tokens = (answer.get("details") or {}).get("generated_tokens")
    else:
        raise ServeError(f"unknown runtime api {api!r} (expected openai or tgi)")
    seconds = time.perf_counter() - start
    if not isinstance(tokens, int) or tokens <= 0:
        raise ServeError(f"the server answered without tokens (token count {tokens!r}): {json.dumps(answer)[:300]}")
    if not isinstance(text, str) or not text:
        raise ServeError(f"the server reported {tokens} token(s) but no text: {json.dumps(answer)[:300]}")
    return Generation(text, tokens, seconds)
