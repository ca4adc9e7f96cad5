"""The image's serving runtime serves: started from the manifest's argv on a tiny model made here, asked over HTTP.

Images once shipped a runtime that started but generated nothing, or TGI silently without flash attention. This
check builds a random-weight model and a local tokenizer (no hub download), starts the server on a free
127.0.0.1 port, waits for its health endpoint, sends generate requests and checks that tokens come back.
For TGI it first holds flash and paged attention against the manifest's promises (smoke/tgi_attention.py).
Server start, time to first token and tokens/s go in the report and take part in ``--baseline``. Then the
hostile part (smoke/hostile.py): chat plain and streaming, malformed and out-of-range requests, a client that
leaves mid-stream; each must get a 4xx or a bounded answer, and the server must answer normally right after.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from imagecontract.models.manifest import Runtime
from imagecontract.smoke_run import TIME_SCALE_ENV, time_scale
from smoke import hostile
from smoke.context import Context
from smoke.result import CheckResult
from smoke.serve import ServeError, Server, fill, free_port, generate
from smoke.tgi_attention import RUNTIME_KIND as TGI
from smoke.tiny_model import PROMPT

MODEL_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 120
DEFAULT_STARTUP_S = 300
GENERATE_TOKENS = 32
TTFT_REPEATS = 3  # medians of three requests: the CPUs these run on are often shared
ROOT = Path(__file__).resolve().parents[2]  # the directory holding the smoke package
# A model directory to serve instead of the tiny one (a real small model on a GPU runner; stand-ins in tests).
MODEL_ENV = "IMAGEBUILD_SMOKE_MODEL"


def _scaled(seconds: float) -> float:
    """A deadline times the host's factor for a slow CPU (an emulated platform: imagecontract/smoke_run.py)."""
    return seconds * time_scale(os.environ.get(TIME_SCALE_ENV))


def run(ctx: Context) -> CheckResult:
    res = CheckResult("runtime")
    runtime = ctx.manifest.runtime
    if not runtime or not runtime.serve:
        why = "no manifest" if not ctx.manifest.present else "the image has no serving runtime"
        return res.skip(why)
    res.numbers.update(runtime=runtime.name, kind=runtime.kind, api=runtime.api)
    if runtime.kind == TGI:  # the TGI kind's image-side module (smoke/tgi_attention.py) probes its promises
        for failure in _tgi_attention(runtime.attention, ctx.info.arch):
            res.fail(failure)
    # A GPU image's runtime (TGI, vLLM) serves on its GPU: without a usable one there is nothing to start (vllm
    # serve of a CUDA build has no CPU path); the GPU runner runs the serve and the OpenAI-API check.
    if ctx.gpu_expected() and not ctx.on_gpu:
        if res.failures:
            return res.finish()
        return res.skip("this runtime serves on the image's GPU and none is usable (see the environment check)")
    serve_once(runtime, res)
    return res.finish()


def _hostile_part(runtime: Runtime, base_url: str, model: str, res: CheckResult) -> None:
    """Chat (plain and streaming) where the API has it, then the hostile clients of smoke/hostile.py."""
    if runtime.api == "openai":
        res.numbers["chat_sample"] = hostile.chat(base_url, model, PROMPT, stream=False)[:80]
        res.numbers["chat_stream_sample"] = hostile.chat(base_url, model, PROMPT, stream=True)[:80]
    limits = runtime.limits.to_dict() if runtime.limits is not None else {}
    res.numbers["limits"] = limits
    numbers, failures = hostile.run(runtime.api, base_url, model, PROMPT, limits)
    if runtime.api == "openai" and runtime.limits is not None:  # the guard in front (smoke/serve_guard.py)
        failures += _another_model(base_url, numbers)
    res.numbers["hostile"] = numbers
    for failure in failures:
        res.fail(f"hostile client: {failure}")


def _another_model(base_url: str, numbers: dict[str, object]) -> list[str]:
    """A request naming a model the server does not serve: 404 `model_not_found`, as OpenAI's API answers (the
    runtime must not be asked to load it)."""
    body = {"model": "imagebuild-smoke-no-such-model", "prompt": PROMPT, "max_tokens": 1}
    try:
        answer = hostile.request(base_url, "POST", "/v1/completions", json.dumps(body).encode(), 60.0)
    except ServeError as exc:
        return [f"another-model: {exc}"]
    numbers["another-model"] = answer.status
    try:
        code = json.loads(answer.body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    if answer.status != 404 or code != "model_not_found":
        return [f"another-model: answered {answer.status} {answer.body[:120]!r} (404 model_not_found is required)"]
    return []


def _tgi_attention(promises: dict[str, dict[str, bool]], arch: str) -> list[str]:
    """Broken flash / paged attention promises, by name; a missing probe module is itself a failure."""
    try:
        from smoke import tgi_attention
    except ImportError as exc:
        return [f"smoke.tgi_attention cannot be imported ({exc}): attention promises unchecked"]
    failures, _state = tgi_attention.check_isolated(promises, arch)
    return failures


def serve_once(runtime: Runtime, res: CheckResult) -> None:
    """Make the tiny model, serve it, measure; the server is always stopped and the model removed."""
    work = Path(tempfile.mkdtemp(prefix="smoke-runtime-"))
    try:
        given = os.environ.get(MODEL_ENV)
        model = Path(given) if given else work / "model"
        res.numbers["model"] = given or "tiny random-weight Llama made by smoke.tiny_model"
        made = None if given else _make_model(model)
        if made is not None:
            res.fail(made)
            return
        _serve(runtime, str(model), work / "server.log", res)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false")
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def _make_model(dest: Path) -> str | None:
    """Build the tiny model in a child process (the runtime's own transformers); the failure line or None."""
    cmd = [sys.executable, "-m", "smoke.tiny_model", str(dest)]
    deadline = _scaled(MODEL_TIMEOUT_S)
    try:
        proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True, timeout=deadline, check=False)
    except subprocess.TimeoutExpired:
        return f"making the tiny model took over {deadline:.0f} s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return f"making the tiny model failed (exit {proc.returncode}): {last}"
    return None


def _serve(runtime: Runtime, model: str, log_path: Path, res: CheckResult) -> None:
    port = free_port()
    argv = fill(runtime.serve, model, port)
    res.numbers["argv"] = argv
    if shutil.which(argv[0]) is None:
        res.fail(f"runtime entrypoint {argv[0]!r} is not on PATH")
        return
    api = runtime.api
    timeout = _scaled(float(runtime.startup_timeout_s or DEFAULT_STARTUP_S))
    request_s = _scaled(REQUEST_TIMEOUT_S)
    server = Server.start(argv, _child_env(runtime.serve_env), log_path, port)
    try:
        res.latency["server_start_s"] = server.wait_healthy(runtime.health or "/health", timeout)
        first = generate(api, server.base_url, model, PROMPT, 1, request_s)  # cold: warms caches
        res.numbers["first_request_s"] = round(first.seconds, 4)
        ttft = [generate(api, server.base_url, model, PROMPT, 1, request_s) for _ in range(TTFT_REPEATS)]
        res.latency["ttft_s"] = statistics.median(g.seconds for g in ttft)
        runs = [generate(api, server.base_url, model, PROMPT, GENERATE_TOKENS, request_s) for _ in range(3)]
        rates = [g.tokens / g.seconds for g in runs]
        res.throughput["tokens_per_s"] = statistics.median(rates)  # the median of three: CPUs here are shared
        res.numbers["tokens_per_s_samples"] = [round(r, 2) for r in rates]
        res.numbers["ttft_s_samples"] = [round(g.seconds, 4) for g in ttft]
        res.numbers.update(completion_tokens=runs[0].tokens, completion_sample=runs[0].text[:80])
        _hostile_part(runtime, server.base_url, model, res)
    except ServeError as exc:
        res.fail(str(exc))
    finally:
        code = server.stop()
        if res.failures:
            tail = server.log_tail()
            res.numbers["server_exit_code"] = code
            res.numbers["server_log_tail"] = tail
            if tail:
                res.fail(f"server log ends: {tail[-1]}")
