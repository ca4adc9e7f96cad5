#!/usr/bin/env python3
"""openai-guard: the limits a serving runtime cannot enforce itself, enforced in front of it.

`transformers serve` (5.24.0) has no option for a maximum of new tokens, a request size or a number of
concurrent requests, answers a malformed request with 500, generates up to a client's `max_tokens` (10^9 runs
for hours after the client left) and also exposes `/load_model` and `/reset` to anyone who can reach it. This
guard is what the image's serve command starts: uvicorn (a maintained HTTP server, with its own connection
limit and header-size bound) runs a small Starlette app that checks every request, then relays it to the runtime
listening on a private 127.0.0.1 port. Nothing in the runtime changes.

  openai-guard --host H --port P --model DIR --max-new-tokens N --max-request-bytes B --max-concurrency C \
      -- RUNTIME ARGV...   ({upstream_port} in the runtime's argv is replaced by the port the guard picked)

What a request gets (OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`):
- 413: a body over B bytes (Content-Length, or counted as it arrives); 400: not UTF-8 JSON, not an object,
  NaN/Infinity, a 4,300+ digit number, nesting past Python's limit, an unknown field, a field of the wrong type
  or outside its range, `messages` / `prompt` missing or empty, `n` other than 1, `max_tokens` (or
  `max_completion_tokens`) below 1 or above N. A request without one gets N (transformers would use 1024).
- 429: C generations are running. 503: the runtime is not up; 504: it did not answer in time.
- `model` is always the served model (a client cannot make the runtime load another); only POST
  /v1/completions, POST /v1/chat/completions, GET /v1/models and GET /health are relayed, all else is 404.
- A client that leaves mid-stream closes the relayed stream, which `transformers serve` answers by cancelling
  its streamer; a non-streaming generation goes on at most N tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "stream",
    "stream_options",
    "stop",
    "seed",
    "n",
    "user",
    "frequency_penalty",
    "presence_penalty",
}
FIELDS = {
    "/v1/chat/completions": COMMON | {"messages", "max_completion_tokens"},
    "/v1/completions": COMMON | {"prompt"},
}
MAX_MESSAGES = 256
MAX_STOP = 4
MAX_ANSWER = 16 << 20  # a non-streaming answer read back from the runtime
HEALTH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Limits:
    max_new_tokens: int
    max_request_bytes: int
    max_concurrency: int
    upstream_timeout_s: float = 300.0


class Refused(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def parse(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise Refused(400, f"the body is not UTF-8 (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise Refused(400, f"the body is not valid JSON: {' '.join(str(exc).split())[:120]}") from None
    if not isinstance(doc, dict):
        raise Refused(400, f"the body must be a JSON object, not {type(doc).__name__}")
    return doc


def _number(doc: dict[str, Any], key: str, low: float, high: float) -> None:
    value = doc.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Refused(400, f"{key} must be a number", key)
    if not low <= value <= high:
        raise Refused(400, f"{key} must be between {low:g} and {high:g}", key)


def _integer(doc: dict[str, Any], key: str, low: int, high: int, what: str = "") -> None:
    value = doc.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refused(400, f"{key} must be an integer", key)
    if not low <= value <= high:
        raise Refused(400, f"{key} must be between {low} and {high}{what}", key)


def _text(value: object, what: str, limit: int) -> None:
    if not isinstance(value, str):
        raise Refused(400, f"{what} must be a string", what)
    if len(value) > limit:
        raise Refused(400, f"{what} is longer than {limit} characters", what)


def _messages(value: object, limit: int) -> None:
    if not isinstance(value, list) or not value:
        raise Refused(400, "messages is required: a non-empty list of {role, content}", "messages")
    if len(value) > MAX_MESSAGES:
        raise Refused(400, f"messages holds more than {MAX_MESSAGES} entries", "messages")
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or set(message) - {"role", "content", "name"}:
            raise Refused(400, f"{where} must be an object of role, content (and name)", where)
        if message.get("role") not in ROLES:
            raise Refused(400, f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
        content = message.get("content")
        if isinstance(content, list):  # OpenAI's content parts: text only here
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or set(part) != {"type", "text"}:
                    raise Refused(400, f"{where}.content[{j}] must be {{type: text, text}}", f"{where}.content")
                _text(part["text"], f"{where}.content[{j}].text", limit)
        else:
            _text(content, f"{where}.content", limit)


def check(path: str, doc: dict[str, Any], limits: Limits, model: str | None) -> dict[str, Any]:
    """The request to relay (max_tokens set, model fixed), or Refused naming the field."""
    allowed = FIELDS[path]
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise Refused(400, f"unknown field {unknown[0][:60]!r} (accepted: {', '.join(sorted(allowed))})", unknown[0])
    if "model" in doc and not isinstance(doc["model"], str):
        raise Refused(400, "model must be a string", "model")
    if path == "/v1/chat/completions":
        _messages(doc.get("messages"), limits.max_request_bytes)
    else:
        prompt = doc.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise Refused(400, "prompt is required: a non-empty string", "prompt")
    cap = f" (this server's limit of new tokens is {limits.max_new_tokens})"
    for key in ("max_tokens", "max_completion_tokens"):
        _integer(doc, key, 1, limits.max_new_tokens, cap)
    _integer(doc, "n", 1, 1, " (one choice per request)")
    _integer(doc, "seed", 0, (1 << 63) - 1)
    _number(doc, "temperature", 0, 2)
    _number(doc, "top_p", 0, 1)
    _number(doc, "frequency_penalty", -2, 2)
    _number(doc, "presence_penalty", -2, 2)
    if "stream" in doc and not isinstance(doc["stream"], bool):
        raise Refused(400, "stream must be true or false", "stream")
    if "stream_options" in doc and not isinstance(doc["stream_options"], dict):
        raise Refused(400, "stream_options must be an object", "stream_options")
    stop = doc.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or len(stops) > MAX_STOP:
            raise Refused(400, f"stop must be a string or a list of at most {MAX_STOP}", "stop")
        for item in stops:
            _text(item, "stop", 256)
    if "user" in doc:
        _text(doc["user"], "user", 256)
    out = dict(doc)
    if out.get("max_tokens") is None and out.get("max_completion_tokens") is None:
        out["max_tokens"] = limits.max_new_tokens  # transformers' default would be 1024
    if model is not None:
        out["model"] = model
    return out


# --- relaying --------------------------------------------------------------------------------------------


async def _open(port: int, method: str, path: str, body: bytes | None, timeout: float) -> tuple[int, str, Any, Any]:
    """(status, content type, reader, writer) of the runtime's answer; HTTP/1.0 so the body ends at close."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    except (TimeoutError, OSError):
        raise Refused(503, "the runtime is not accepting connections") from None
    head = f"{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    writer.write(head.encode() + b"\r\n" + (body or b""))
    try:
        await writer.drain()
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except TimeoutError:
        writer.close()
        raise Refused(504, f"the runtime did not answer within {timeout:.0f} s") from None
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        writer.close()
        raise Refused(502, "the runtime closed the connection without an answer") from None
    lines = raw.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        writer.close()
        raise Refused(502, "the runtime's answer is not HTTP") from None
    ctype = "application/json"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-type":
            ctype = value.strip()
    return status, ctype, reader, writer


def build_app(limits: Limits, upstream: dict[str, int], model: str | None) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    running = {"n": 0}

    def refused(exc: Refused) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    async def read_body(request: Request) -> bytes:
        length = request.headers.get("content-length")
        if length is not None and (not length.isascii() or not length.isdigit() or len(length) > 19):
            raise Refused(400, "Content-Length is not a number")
        if length is not None and int(length) > limits.max_request_bytes:
            raise Refused(413, f"the body is larger than this server's {limits.max_request_bytes} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_request_bytes:
                raise Refused(413, f"the body is larger than this server's {limits.max_request_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def generate(request: Request) -> Response:
        try:
            raw = await read_body(request)
            doc = check(request.url.path, parse(raw), limits, model)
        except Refused as exc:
            return refused(exc)
        except ClientDisconnect:
            return Response(status_code=400)
        if running["n"] >= limits.max_concurrency:
            return refused(Refused(429, f"this server runs at most {limits.max_concurrency} requests at once"))
        running["n"] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released, running["n"] = True, running["n"] - 1

        try:
            status, ctype, reader, writer = await _open(
                upstream["port"], "POST", request.url.path, json.dumps(doc).encode(), limits.upstream_timeout_s
            )
        except Refused as exc:
            release()
            return refused(exc)
        if doc.get("stream") and status == 200:

            async def relay() -> Any:
                try:
                    while chunk := await reader.read(1 << 14):
                        yield chunk
                finally:  # the client left (cancelled) or the stream ended: the runtime sees the close
                    writer.close()
                    release()

            return StreamingResponse(relay(), status_code=status, media_type=ctype)
        try:
            body = await _bounded_answer(request, reader, limits.upstream_timeout_s)
        except Refused as exc:
            return refused(exc)
        finally:
            writer.close()
            release()
        if body is None:  # the client left: nothing to answer
            return Response(status_code=499)
        return Response(body, status_code=status, media_type=ctype)

    async def passthrough(request: Request) -> Response:
        try:
            status, ctype, reader, writer = await _open(
                upstream["port"], "GET", request.url.path, None, HEALTH_TIMEOUT_S
            )
            try:
                body = await asyncio.wait_for(reader.read(1 << 20), HEALTH_TIMEOUT_S)
            finally:
                writer.close()
        except (TimeoutError, Refused, OSError):
            return JSONResponse({"status": "starting"}, status_code=503)
        return Response(body, status_code=status, media_type=ctype)

    async def not_found(request: Request) -> Response:
        return refused(Refused(404, f"{request.method} {request.url.path[:80]} is not served here"))

    routes = [
        Route("/v1/completions", generate, methods=["POST"]),
        Route("/v1/chat/completions", generate, methods=["POST"]),
        Route("/v1/models", passthrough, methods=["GET"]),
        Route("/health", passthrough, methods=["GET"]),
        Route("/{rest:path}", not_found, methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    ]
    return Starlette(routes=routes)


async def _bounded_answer(request: Any, reader: Any, timeout: float) -> bytes | None:
    """The runtime's whole answer (at most MAX_ANSWER bytes), or None when the client disconnected first."""

    async def body() -> bytes:
        out = bytearray()
        while chunk := await reader.read(1 << 16):
            out += chunk
            if len(out) > MAX_ANSWER:
                raise Refused(502, f"the runtime's answer is larger than {MAX_ANSWER} bytes")
        return bytes(out)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    reading, leaving = asyncio.ensure_future(body()), asyncio.ensure_future(gone())
    done, _ = await asyncio.wait({reading, leaving}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for task in (reading, leaving):
        if task not in done:
            task.cancel()
    if reading in done:
        return reading.result()
    if leaving in done:
        return None
    raise Refused(504, f"the runtime did not finish within {timeout:.0f} s")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def positive(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 12 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a positive integer (ASCII digits)")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if "--" not in args_in:
        print("error: openai-guard ... -- RUNTIME ARGV (the runtime's command after --)", file=sys.stderr)
        return 2
    split = args_in.index("--")
    parser = argparse.ArgumentParser(prog="openai-guard", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=positive, required=True)
    parser.add_argument("--model", help="the served model: every request's `model` is set to it")
    parser.add_argument("--max-new-tokens", type=positive, required=True)
    parser.add_argument("--max-request-bytes", type=positive, required=True)
    parser.add_argument("--max-concurrency", type=positive, required=True)
    parser.add_argument("--upstream-timeout-s", type=positive, default=300)
    args = parser.parse_args(args_in[:split])
    runtime = args_in[split + 1 :]
    if not runtime:
        print("error: openai-guard: no runtime command after --", file=sys.stderr)
        return 2
    limits = Limits(args.max_new_tokens, args.max_request_bytes, args.max_concurrency, args.upstream_timeout_s)
    upstream = {"port": free_port()}
    child_argv = [a.replace("{upstream_port}", str(upstream["port"])) for a in runtime]
    try:
        child = subprocess.Popen(child_argv, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"error: openai-guard: cannot start {child_argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    import uvicorn

    config = uvicorn.Config(
        build_app(limits, upstream, args.model),
        host=args.host,
        port=args.port,
        log_level="warning",
        lifespan="off",
        limit_concurrency=4 * limits.max_concurrency + 4,  # connections: the health poller and waiting clients
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 << 10,  # request line and headers
    )
    server = uvicorn.Server(config)

    def watch() -> None:
        child.wait()
        server.should_exit = True

    import threading

    threading.Thread(target=watch, daemon=True).start()
    print(
        f"openai-guard: {args.host}:{args.port} -> 127.0.0.1:{upstream['port']} ({child_argv[0]}); limits: "
        f"{limits.max_new_tokens} new tokens, {limits.max_request_bytes} bytes, {limits.max_concurrency} at once",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.run()
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if child.poll() is None:
                child.kill()
    code = child.wait()
    return code if code and code > 0 else (128 - code if code else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
