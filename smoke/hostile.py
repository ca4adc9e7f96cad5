"""The runtime under hostile clients: chat (plain and streaming) as well as completions, then requests a server
must refuse or bound, each followed by a normal request that must answer within RECOVERY_S.

Standard library only (http.client, sockets). Per case the check requires a 4xx, or a bounded answer (a 200 whose
token count is within the manifest's `limits.max_new_tokens`), never a 5xx and never a hang; a client that
disconnects mid-stream must leave the server answering the next request within RECOVERY_S. The limits come from
the manifest's runtime section (docs/contracts.md); an over-size body is sent only when a limit is declared.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from smoke.serve import ServeError, generate

RECOVERY_S = 10.0  # a normal answer after each hostile request, within this
HOSTILE_TIMEOUT_S = 60.0  # a hostile request's own answer
HUGE = 1_000_000_000


@dataclass
class Answer:
    status: int
    body: bytes
    seconds: float


def request(base_url: str, method: str, path: str, body: bytes | None, timeout: float) -> Answer:
    host, _, port = base_url.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    start = time.perf_counter()
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read(1 << 20)
        return Answer(resp.status, data, time.perf_counter() - start)
    except (OSError, http.client.HTTPException) as exc:
        raise ServeError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def _json(answer: Answer) -> dict[str, Any]:
    try:
        doc = json.loads(answer.body)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _sse_events(body: bytes) -> list[dict[str, Any]]:
    events = []
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                events.append(json.loads(line[5:]))
            except ValueError:
                continue
    return [e for e in events if isinstance(e, dict)]


def chat(base_url: str, model: str, prompt: str, stream: bool, max_tokens: int = 8) -> str:
    """One chat completion (plain or SSE); the text, or ServeError naming what was wrong."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
    answer = request(base_url, "POST", "/v1/chat/completions", _dumps(body), HOSTILE_TIMEOUT_S)
    kind = "streaming chat" if stream else "chat"
    if answer.status != 200:
        raise ServeError(f"{kind} request answered {answer.status}: {answer.body[:200]!r}")
    text: object  # whatever the server put there: checked to be a non-empty string below
    if stream:
        parts = [
            ((e.get("choices") or [{}])[0].get("delta") or {}).get("content") or ""
            for e in _sse_events(answer.body)
            if isinstance((e.get("choices") or [{}])[0], dict)
        ]
        text = "".join(p for p in parts if isinstance(p, str))
    else:
        choice = (_json(answer).get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content") if isinstance(choice, dict) else None
    if not isinstance(text, str) or not text:
        raise ServeError(f"{kind} request answered 200 without text: {answer.body[:200]!r}")
    return text


def _dumps(doc: object) -> bytes:
    """A request body: the document as JSON bytes."""
    return json.dumps(doc).encode()


def _cases(api: str, model: str, prompt: str, limits: dict[str, int]) -> list[tuple[str, str, bytes]]:
    """(name, path, raw body) of every hostile request for the API flavour."""
    if api == "tgi":
        gen = "/generate"
        cases = [
            ("malformed-json", gen, b'{"inputs": '),
            ("missing-inputs", gen, _dumps({"parameters": {"max_new_tokens": 4}})),
            ("negative-max-tokens", gen, _dumps({"inputs": prompt, "parameters": {"max_new_tokens": -5}})),
            ("huge-max-tokens", gen, _dumps({"inputs": prompt, "parameters": {"max_new_tokens": HUGE}})),
        ]
    else:
        comp, chat_path = "/v1/completions", "/v1/chat/completions"
        cases = [
            ("malformed-json", comp, b'{"model": '),
            ("not-an-object", comp, b"[1, 2, 3]"),
            ("missing-prompt", comp, _dumps({"model": model, "max_tokens": 4})),
            ("missing-messages", chat_path, _dumps({"model": model, "max_tokens": 4})),
            ("negative-max-tokens", comp, _dumps({"model": model, "prompt": prompt, "max_tokens": -5})),
            ("huge-max-tokens", comp, _dumps({"model": model, "prompt": prompt, "max_tokens": HUGE})),
            (
                "huge-max-tokens-chat",
                chat_path,
                _dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": HUGE}),
            ),
        ]
    if limits.get("max_request_bytes"):
        padding = "x" * (int(limits["max_request_bytes"]) + 1)
        cases.append(("oversize-body", cases[0][1], _dumps({"model": model, "prompt": padding, "inputs": padding})))
    return cases


def _tokens(api: str, answer: Answer) -> int | None:
    doc = _json(answer)
    if api == "tgi":
        return (doc.get("details") or {}).get("generated_tokens")
    return (doc.get("usage") or {}).get("completion_tokens")


def disconnect_mid_stream(base_url: str, api: str, model: str, prompt: str, max_tokens: int) -> float:
    """Start a streaming request, read until the first event arrives, close the socket; seconds it took."""
    host, _, port = base_url.removeprefix("http://").partition(":")
    body: dict[str, object]
    if api == "tgi":
        path, body = "/generate_stream", {"inputs": prompt, "parameters": {"max_new_tokens": max_tokens}}
    else:
        path = "/v1/chat/completions"
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
        body["stream"] = True
    data = _dumps(body)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    start = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=HOSTILE_TIMEOUT_S) as sock:
        sock.sendall(head.encode() + b"\r\n" + data)
        seen = b""
        while b"data:" not in seen and len(seen) < (1 << 16):
            chunk = sock.recv(4096)
            if not chunk:
                break
            seen += chunk
    if b"data:" not in seen:
        raise ServeError(f"the streaming request sent no event before closing: {seen[:200]!r}")
    return time.perf_counter() - start


def run(api: str, base_url: str, model: str, prompt: str, limits: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
    """Every hostile case: (numbers for the report, failure lines)."""
    cap = int(limits.get("max_new_tokens") or 0)
    numbers: dict[str, Any] = {}
    failures: list[str] = []
    recovery: list[float] = []

    def recovered(after: str) -> None:
        try:
            g = generate(api, base_url, model, prompt, 1, RECOVERY_S)
            recovery.append(g.seconds)
        except ServeError as exc:
            failures.append(f"after {after}: no normal answer within {RECOVERY_S:.0f} s ({exc})")

    for name, path, body in _cases(api, model, prompt, limits):
        try:
            answer = request(base_url, "POST", path, body, HOSTILE_TIMEOUT_S)
        except ServeError as exc:
            failures.append(f"{name}: {exc}")
            recovered(name)
            continue
        numbers[name] = answer.status
        tokens = _tokens(api, answer) if answer.status == 200 else None
        bounded = answer.status == 200 and name.startswith("huge") and cap and isinstance(tokens, int) and tokens <= cap
        if not (400 <= answer.status < 500 or bounded):
            failures.append(f"{name}: answered {answer.status} (a 4xx or a bounded answer is required)")
        recovered(name)
    try:
        # 16 without a declared limit: within TGI's --max-total-tokens 64 with the prompt
        numbers["disconnect_mid_stream_s"] = round(disconnect_mid_stream(base_url, api, model, prompt, cap or 16), 3)
    except (ServeError, OSError) as exc:
        failures.append(f"disconnect-mid-stream: {exc}")
    recovered("disconnect-mid-stream")
    if recovery:
        numbers["recovery_s_max"] = round(max(recovery), 3)
    return numbers, failures
