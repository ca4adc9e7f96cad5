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
- A request past the C running waits for a slot (first come, first served), at most Q waiting (4 C unless
  --max-waiting) for at most --queue-timeout-s (300 s: transformers serve generates one request at a time, so
  with 4 running and 4 waiting the eighth waited 122 s for its slot on a loaded 2-core host); past either: 429
  with `Retry-After` (seconds, estimated from the recent generations), which OpenAI's clients honour. 503: the
  runtime is not up (`Retry-After` too); 504: it did not answer in time.
- `model` must be the served model (--model): another, or none, is a 404 `model_not_found`, as OpenAI's API
  answers; GET /v1/models lists that one model. Only POST /v1/completions, POST /v1/chat/completions, GET
  /v1/models and GET /health are served, all else is 404.
- Slow or idle clients cannot hold the server: a request's line and headers must arrive within 10 s of the
  connection's start (or of the previous answer on it), its body within 30 s of its headers (else 408, and the
  connection is closed); an idle keep-alive connection is closed after 5 s. uvicorn 0.54.0's h11 protocol has
  no header deadline (its keep-alive timer starts only after a first answer and any byte cancels it), so the
  guard adds it (GuardedH11 below). Open connections: at most 512 (past it uvicorn answers 503).
- A client that leaves mid-stream closes the relayed stream, which `transformers serve` answers by cancelling
  its streamer; a non-streaming generation goes on at most N tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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
MAX_CONNECTIONS = 512  # open client connections (uvicorn's limit_concurrency): idle ones are closed by the deadlines
RETRY_AFTER_MAX_S = 60  # OpenAI's Python client honours a Retry-After of at most 60 s (its own backoff past that)


@dataclass(frozen=True)
class Limits:
    max_new_tokens: int
    max_request_bytes: int
    max_concurrency: int
    upstream_timeout_s: float = 300.0
    max_waiting: int | None = None  # requests waiting for a slot; None: 4 x max_concurrency
    queue_timeout_s: float = 300.0  # how long one waits for a slot (transformers serve runs one at a time)
    header_timeout_s: float = 10.0  # the request line and headers, from the connection's start or last answer
    body_timeout_s: float = 30.0  # the whole body, from its headers
    keep_alive_s: int = 5  # an idle connection between requests

    @property
    def waiting(self) -> int:
        return self.max_waiting if self.max_waiting is not None else 4 * self.max_concurrency


class Refused(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code, self.headers = code, dict(headers or {})

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        code = self.code if self.code is not None else self.status
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": code}}


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
    """The request to relay (max_tokens set), or Refused naming the field (404 for another model than `model`)."""
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
    if model is not None and doc.get("model") != model:
        given = doc.get("model")
        what = "no model was given" if given is None else f"the model {given[:80]!r} does not exist"
        raise Refused(404, f"{what}: this server serves {model[:200]!r}", "model", "model_not_found")
    out = dict(doc)
    if out.get("max_tokens") is None and out.get("max_completion_tokens") is None:
        out["max_tokens"] = limits.max_new_tokens  # transformers' default would be 1024
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


class Slots:
    """At most `size` generations at once; up to `waiting` more wait for a slot in arrival order, each at most
    `timeout` seconds. A full queue or a wait that runs out is a 429 whose Retry-After is an estimate of when a
    slot frees (the recent generations' mean duration per round of `size`), 1 to 60 s."""

    def __init__(self, size: int, waiting: int, timeout: float) -> None:
        self.size, self.waiting, self.timeout = size, waiting, timeout
        self.running = 0
        self.queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self.mean_s: float | None = None  # moving mean of a generation's seconds

    def retry_after(self) -> int:
        rounds = (len(self.queue) + self.size) / self.size
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil((self.mean_s or 1.0) * rounds)))

    def busy(self, message: str) -> Refused:
        headers = {"Retry-After": str(self.retry_after())}
        return Refused(429, message, None, "rate_limit_exceeded", headers)

    async def take(self, gone: Any) -> bool:
        """A slot (True), or False when `gone` (the client's disconnect) finished first; Refused 429 else."""
        if self.running < self.size and not self.queue:
            self.running += 1
            return True
        if len(self.queue) >= self.waiting:
            raise self.busy(f"this server runs {self.size} requests at once and {self.waiting} are waiting")
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.append(turn)
        leaving = asyncio.ensure_future(gone())
        try:
            await asyncio.wait({turn, leaving}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
            if not turn.done():
                turn.cancel()
                self.queue.remove(turn)
        if turn.cancelled():  # timed out (or the client left) before a slot was handed over
            if leaving.done() and not leaving.cancelled():
                return False
            raise self.busy(f"no slot freed within {self.timeout:.0f} s ({self.size} requests run at once)")
        if leaving.done() and not leaving.cancelled():  # handed a slot as the client left: give it on
            self.release(None)
            return False
        return True

    def release(self, seconds: float | None) -> None:
        """Free a slot: handed to the first waiter still waiting, else one fewer running."""
        if seconds is not None:
            self.mean_s = seconds if self.mean_s is None else 0.8 * self.mean_s + 0.2 * seconds
        while self.queue:
            turn = self.queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1


def build_app(limits: Limits, upstream: dict[str, int], model: str | None) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    slots = Slots(limits.max_concurrency, limits.waiting, limits.queue_timeout_s)
    too_large = f"the body is larger than this server's {limits.max_request_bytes} bytes"

    def refused(exc: Refused) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def read_body(request: Request) -> bytes:
        length = request.headers.get("content-length")
        if length is not None and (not length.isascii() or not length.isdigit() or len(length) > 19):
            raise Refused(400, "Content-Length is not a number", headers={"Connection": "close"})
        if length is not None and int(length) > limits.max_request_bytes:
            # No `Connection: close` here: closing while the client still sends its declared body makes the kernel
            # answer with a reset that can discard our 413 before the client reads it (the smoke's oversize-body
            # case saw BrokenPipeError under load); uvicorn reads and drops the rest, bounded by the header deadline.
            raise Refused(413, too_large)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(limits.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limits.max_request_bytes:
                        raise Refused(413, too_large, headers={"Connection": "close"})
                    chunks.append(chunk)
        except TimeoutError:
            message = f"the body did not arrive within {limits.body_timeout_s:g} s"
            raise Refused(408, message, headers={"Connection": "close"}) from None
        return b"".join(chunks)

    async def generate(request: Request) -> Response:
        try:
            raw = await read_body(request)
            doc = check(request.url.path, parse(raw), limits, model)
        except Refused as exc:
            return refused(exc)
        except ClientDisconnect:
            return Response(status_code=400)

        async def gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        try:
            if not await slots.take(gone):
                return Response(status_code=499)  # the client left while waiting: nothing to answer
        except Refused as exc:
            return refused(exc)
        started = time.monotonic()
        released = False

        def release(finished: bool) -> None:
            nonlocal released
            if not released:
                released = True
                slots.release(time.monotonic() - started if finished else None)

        try:
            status, ctype, reader, writer = await _open(
                upstream["port"], "POST", request.url.path, json.dumps(doc).encode(), limits.upstream_timeout_s
            )
        except Refused as exc:
            release(False)
            return refused(exc)
        if doc.get("stream") and status == 200:

            async def relay() -> Any:
                try:
                    while chunk := await reader.read(1 << 14):
                        yield chunk
                finally:  # the client left (cancelled) or the stream ended: the runtime sees the close
                    writer.close()
                    release(True)

            return StreamingResponse(relay(), status_code=status, media_type=ctype)
        try:
            body = await _bounded_answer(gone, reader, limits.upstream_timeout_s)
        except Refused as exc:
            return refused(exc)
        finally:
            writer.close()
            release(True)
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
            return JSONResponse({"status": "starting"}, status_code=503, headers={"Retry-After": "1"})
        return Response(body, status_code=status, media_type=ctype)

    async def models(request: Request) -> Response:
        """The one model a request may name (OpenAI's list shape); the runtime's own list without --model."""
        if model is None:
            return await passthrough(request)
        entry = {"id": model, "object": "model", "created": 0, "owned_by": "imagebuild"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def not_found(request: Request) -> Response:
        return refused(Refused(404, f"{request.method} {request.url.path[:80]} is not served here"))

    routes = [
        Route("/v1/completions", generate, methods=["POST"]),
        Route("/v1/chat/completions", generate, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", passthrough, methods=["GET"]),
        Route("/{rest:path}", not_found, methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    ]
    return Starlette(routes=routes)


def guarded_h11(header_timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline for each request's line and headers: armed when the connection
    opens and after every answer, disarmed when the headers are complete; at the deadline the connection is
    closed. (uvicorn 0.54.0 h11_impl.py: its keep-alive timer is armed only in on_response_complete and
    cancelled by every data_received, so a client that never finishes its headers, or sends nothing, holds a
    connection for ever.)"""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's headers are complete: its body has its own deadline
                self._disarm()

        def on_response_complete(self) -> None:
            self._arm()  # before: a pipelined request handled inside disarms it again
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11


async def _bounded_answer(gone: Any, reader: Any, timeout: float) -> bytes | None:
    """The runtime's whole answer (at most MAX_ANSWER bytes), or None when the client disconnected first."""

    async def body() -> bytes:
        out = bytearray()
        while chunk := await reader.read(1 << 16):
            out += chunk
            if len(out) > MAX_ANSWER:
                raise Refused(502, f"the runtime's answer is larger than {MAX_ANSWER} bytes")
        return bytes(out)

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


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the runtime, SIGKILL 15 s later."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if child.poll() is None:
            child.kill()


def tcp_port(text: str) -> int:
    port = positive(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1 to 65535)")
    return port


def _arguments(args_in: list[str]) -> tuple[argparse.Namespace, Limits]:
    parser = argparse.ArgumentParser(prog="openai-guard", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=tcp_port, required=True)
    parser.add_argument("--model", help="the served model: a request naming another (or none) is a 404")
    parser.add_argument("--max-new-tokens", type=positive, required=True)
    parser.add_argument("--max-request-bytes", type=positive, required=True)
    parser.add_argument("--max-concurrency", type=positive, required=True)
    parser.add_argument("--upstream-timeout-s", type=positive, default=300)
    parser.add_argument("--max-waiting", type=positive, help="requests waiting for a slot (default 4 x concurrency)")
    parser.add_argument("--queue-timeout-s", type=positive, default=300, help="how long one waits for a slot")
    parser.add_argument("--header-timeout-s", type=positive, default=10, help="a request's line and headers")
    parser.add_argument("--body-timeout-s", type=positive, default=30, help="a request's body, after its headers")
    args = parser.parse_args(args_in)
    limits = Limits(
        args.max_new_tokens,
        args.max_request_bytes,
        args.max_concurrency,
        args.upstream_timeout_s,
        args.max_waiting,
        args.queue_timeout_s,
        args.header_timeout_s,
        args.body_timeout_s,
    )
    return args, limits


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if "--" not in args_in:
        print("error: openai-guard ... -- RUNTIME ARGV (the runtime's command after --)", file=sys.stderr)
        return 2
    split = args_in.index("--")
    args, limits = _arguments(args_in[:split])
    runtime = args_in[split + 1 :]
    if not runtime:
        print("error: openai-guard: no runtime command after --", file=sys.stderr)
        return 2
    upstream = {"port": free_port()}
    child_argv = [a.replace("{upstream_port}", str(upstream["port"])) for a in runtime]
    # SIGTERM (and SIGINT) stop the server, then the runtime (the finally below). uvicorn 0.54.0 restores the handler it
    # found and raises the signal again once it has stopped (server.py capture_signals): with the default
    # handler that killed the guard before its finally, and the runtime lived on, orphaned (issue 34).
    stopping: dict[str, Any] = {"server": None, "asked": False}

    def on_term(signum: int, frame: object) -> None:
        stopping["asked"] = True
        if stopping["server"] is not None:
            stopping["server"].should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_term)
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
        http=guarded_h11(limits.header_timeout_s),  # h11 (the image has no httptools), with a header deadline
        limit_concurrency=MAX_CONNECTIONS,  # open connections: slow and idle ones are closed by the deadlines
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=16 << 10,  # request line and headers
    )
    server = stopping["server"] = uvicorn.Server(config)
    server.should_exit = stopping["asked"]

    def watch() -> None:
        child.wait()
        server.should_exit = True

    import threading

    threading.Thread(target=watch, daemon=True).start()
    print(
        f"openai-guard: {args.host}:{args.port} -> 127.0.0.1:{upstream['port']} ({child_argv[0]}); limits: "
        f"{limits.max_new_tokens} new tokens, {limits.max_request_bytes} bytes, {limits.max_concurrency} at once, "
        f"{limits.waiting} waiting",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.run()
    finally:
        _stop(child)
    code = child.wait()
    return code if code and code > 0 else (128 - code if code else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
