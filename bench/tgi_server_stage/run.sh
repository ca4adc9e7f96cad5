#!/usr/bin/env bash
# Build TGI's Python server stage (bench/tgi_server_stage/Dockerfile) in the local engine and show that it imports
# and runs (issue 10, section 3). TGI's source is exported from a local bare mirror into a temp dir outside the
# repository and never committed. Writes bench/results/tgi_server_stage.{log,json}.
# Usage: bash bench/tgi_server_stage/run.sh [TGI_MIRROR]   (or TGI_MIRROR=DIR; a bare git dir of
#        huggingface/text-generation-inference holding the pinned commit). TGI_SERVE=0 skips the gRPC serve check;
#        TGI_BUILD_CACHE=1 lets the engine reuse cached layers (default: every step runs, so the log shows them all).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COMMIT="232e8d522713f43834d48ae45d1330b0e6dd367e"
IMAGE="imagebuild-bench/tgi-server-stage"
DOCKER="/usr/bin/docker"
MIRROR="${1:-${TGI_MIRROR:-}}"
SERVE="${TGI_SERVE:-1}"
NO_CACHE=(--no-cache)
[ "${TGI_BUILD_CACHE:-0}" = "1" ] && NO_CACHE=()
WHEELS="${PIP_FIND_LINKS:-/opt/wheels}"
CA="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
RESULTS="${REPO_ROOT}/bench/results"
LOG="${RESULTS}/tgi_server_stage.log"
JSON="${RESULTS}/tgi_server_stage.json"

die() { printf 'tgi_server_stage: %s\n' "$*" >&2; exit 2; }

[ -n "$MIRROR" ] || die "no TGI mirror given: pass its path as the first argument or set TGI_MIRROR"
[ -d "$MIRROR" ] || die "TGI mirror not found: ${MIRROR}"
git -C "$MIRROR" cat-file -e "${COMMIT}^{commit}" 2>/dev/null || die "commit ${COMMIT} is not in ${MIRROR}"
WHEEL="$(find "$WHEELS" -maxdepth 1 -name 'torch-2.13.0*-cp311-*.whl' -print -quit 2>/dev/null || true)"
[ -n "$WHEEL" ] || die "no torch 2.13.0 cp311 wheel in ${WHEELS} (set PIP_FIND_LINKS)"
"$DOCKER" info >/dev/null 2>&1 || die "no Docker engine answers ${DOCKER}: run bash scripts/setup.sh"

WORK="$(mktemp -d /tmp/tgi-server-stage.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "${WORK}/ctx/tgi" "${WORK}/ctx/wheelhouse" "${WORK}/out" "$RESULTS"
git -C "$MIRROR" archive "$COMMIT" proto server | tar -x -C "${WORK}/ctx/tgi"
cp "$WHEEL" "${WORK}/ctx/wheelhouse/"
SECRETS=(--secret "id=pipcert,src=${CA}")
if [ -n "${PIP_INDEX_URL:-}" ]; then
    (umask 077 && printf '%s' "$PIP_INDEX_URL" >"${WORK}/pipindex")
    SECRETS+=(--secret "id=pipindex,src=${WORK}/pipindex")
fi

CMDLINE="bash bench/tgi_server_stage/run.sh ${MIRROR}"
{
    printf '# command: %s\n' "$CMDLINE"
    printf '# TGI source: huggingface/text-generation-inference@%s (git archive of proto/ and server/ into %s, outside the repo)\n' "$COMMIT" "${WORK}/ctx/tgi"
    printf '# base: local/debian:bookworm (Python 3.11); torch: %s from the local wheelhouse, pinned by a constraints file\n' "$(basename "$WHEEL")"
    printf '# substituted: transformers @ git+https://github.com/huggingface/transformers.git@b8aee2e918d7ba2d5e9e80162ae26b4806873307\n'
    printf '#   (server/requirements_rocm.txt:43, server/pyproject.toml:30; poetry.lock:3030 names it 4.41.0.dev0) -> transformers==4.41.0,\n'
    printf '#   the nearest PyPI release: GitHub is not reachable from builds on this machine.\n'
    printf '# required: build, import, --help; the serve check is optional and its outcome is recorded either way\n'
    printf '# date: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$LOG"

section() { printf '\n==== %s\n' "$*" | tee -a "$LOG"; }
run_logged() {  # run_logged NAME CMD...: append output to the log, keep it in out/NAME, record rc in out/NAME.rc
    local name="$1"
    shift
    set +e
    "$@" >"${WORK}/out/${name}" 2>&1
    local rc=$?
    set -e
    cat "${WORK}/out/${name}" >>"$LOG"
    printf '%s\n' "$rc" >"${WORK}/out/${name}.rc"
    printf '==== %s: exit %s\n' "$name" "$rc" | tee -a "$LOG"
    return 0
}
in_image() { "$DOCKER" run --rm --network host -e HF_HUB_OFFLINE=1 "$IMAGE" "$@"; }

BUILD_CMD=(env DOCKER_BUILDKIT=1 "$DOCKER" build --network host --progress plain "${NO_CACHE[@]}" "${SECRETS[@]}"
    -f "${REPO_ROOT}/bench/tgi_server_stage/Dockerfile" -t "$IMAGE" "${WORK}/ctx")
section "build: DOCKER_BUILDKIT=1 ${DOCKER} build --network host --progress plain ${NO_CACHE[*]} --secret id=pipcert,src=${CA} -f bench/tgi_server_stage/Dockerfile -t ${IMAGE} <ctx>"
START="$(date +%s.%N)"
run_logged build "${BUILD_CMD[@]}"
BUILD_END="$(date +%s.%N)"
"$DOCKER" image inspect -f '{{.Id}} {{.Size}}' "$IMAGE" >"${WORK}/out/image" 2>/dev/null || true

PROBE='
import importlib.metadata as md, json, sys
from loguru import logger
warnings = []
logger.add(lambda m: warnings.append(str(m).strip()), level="WARNING", format="{message}")
result = {"imported": False}
try:
    import text_generation_server.models as models
    from text_generation_server.utils.import_utils import SYSTEM
    result.update(imported=True, SYSTEM=SYSTEM, FLASH_ATTENTION=models.FLASH_ATTENTION,
                  HAS_FLASH_ATTN_V2_CUDA=models.HAS_FLASH_ATTN_V2_CUDA, MAMBA_AVAILABLE=models.MAMBA_AVAILABLE)
except Exception as exc:
    result["error"] = f"{type(exc).__name__}: {exc}"
try:
    import triton  # noqa: F401
    result["triton"] = md.version("triton")
except ImportError as exc:
    result["triton"] = f"absent ({exc})"
import torch
result.update(torch=torch.__version__, torch_cuda=torch.version.cuda, torch_hip=torch.version.hip,
              cuda_available=torch.cuda.is_available(), transformers=md.version("transformers"), warnings=warnings)
print("PROBE " + json.dumps(result))
sys.exit(0 if result["imported"] else 1)
'
# A tiny Llama (random weights, a word-level tokenizer trained here: no hub download) served by
# `text-generation-server serve` on CPU; then Health, Info, Prefill and Decode over its unix socket with the
# stubs gen-server generated (text_generation_server.pb).
SERVE_CHECK='
import json, subprocess, sys, tempfile, time
from pathlib import Path
import grpc, torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from text_generation_server.pb import generate_pb2 as pb, generate_pb2_grpc as pb_grpc

model_dir = Path(tempfile.mkdtemp()) / "tiny-llama"
tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece()
words = "the quick brown fox jumps over the lazy dog and runs far away from home".split()
tok.train_from_iterator([" ".join(words)] * 4, trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]))
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(model_dir)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                     bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(config).save_pretrained(model_dir)
sock = "/tmp/tgi-bench-server"
start = time.monotonic()
server = subprocess.Popen(["text-generation-server", "serve", str(model_dir), "--uds-path", sock],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
result = {"model": "tiny llama, random weights, vocab %d" % tok.get_vocab_size()}
try:
    channel = grpc.insecure_channel("unix://" + sock + "-0")
    ready = grpc.channel_ready_future(channel)
    while not ready.done():
        if server.poll() is not None:
            raise RuntimeError("server exited with code %d before its socket answered" % server.returncode)
        if time.monotonic() - start > 180:
            raise TimeoutError("no socket after 180 s")
        time.sleep(0.5)
    stub = pb_grpc.TextGenerationServiceStub(channel)
    stub.Health(pb.HealthRequest(), timeout=30)
    result["server_ready_s"] = round(time.monotonic() - start, 2)
    result["health"] = "ok"
    info = stub.Info(pb.InfoRequest(), timeout=30)
    result["info"] = {"requires_padding": info.requires_padding, "dtype": info.dtype,
                      "device_type": info.device_type, "speculate": info.speculate}
    params = pb.NextTokenChooserParameters(temperature=1.0, top_k=0, top_p=1.0, typical_p=1.0, do_sample=False,
                                           seed=0, repetition_penalty=1.0, frequency_penalty=0.0)
    request = pb.Request(id=0, inputs="the quick brown fox", truncate=64, parameters=params,
                         stopping_parameters=pb.StoppingCriteriaParameters(max_new_tokens=8, ignore_eos_token=True))
    t0 = time.monotonic()
    pre = stub.Prefill(pb.PrefillRequest(batch=pb.Batch(id=0, requests=[request], size=1, max_tokens=72)), timeout=60)
    result["prefill_ms"] = round((time.monotonic() - t0) * 1000, 1)
    ids = list(pre.generations[0].tokens.ids)
    batch, text, t1 = pre.batch, None, time.monotonic()
    while pre.HasField("batch") and batch.size:
        dec = stub.Decode(pb.DecodeRequest(batches=[batch]), timeout=60)
        ids += list(dec.generations[0].tokens.ids)
        if dec.generations[0].HasField("generated_text"):
            text = dec.generations[0].generated_text.text
        if not dec.HasField("batch"):
            break
        batch = dec.batch
    result["decode_ms_per_token"] = round((time.monotonic() - t1) * 1000 / max(len(ids) - 1, 1), 2)
    result.update(token_ids=ids, generated_text=text, generated_tokens=len(ids))
except Exception as exc:
    result["error"] = f"{type(exc).__name__}: {exc}"
finally:
    server.terminate()
    try:
        out = server.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        server.kill()
        out = server.communicate()[0]
    print(out)
    errors = [ln.strip() for ln in out.splitlines() if "Error:" in ln]
    if errors:
        result["server_last_error"] = errors[-1]
print("SERVE " + json.dumps(result))
sys.exit(0 if result.get("generated_tokens") else 1)
'
if [ "$(cat "${WORK}/out/build.rc")" = "0" ]; then
    section "import text_generation_server.models (and what the model registry decided)"
    run_logged import in_image python -c "$PROBE"
    section "text-generation-server --help"
    run_logged help in_image text-generation-server --help
    section "pip freeze"
    run_logged freeze in_image pip freeze --all
    if [ "$SERVE" = "1" ]; then
        section "serve a tiny local model (random weights, local tokenizer) on CPU; gRPC Health, Info, Prefill, Decode"
        run_logged serve in_image python -c "$SERVE_CHECK"
    fi
fi
END="$(date +%s.%N)"
"$DOCKER" image inspect -f '{{.Id}} {{.Size}}' "$IMAGE" >"${WORK}/out/image" 2>/dev/null || true

python3 - "$JSON" "$CMDLINE" "$COMMIT" "$IMAGE" "$START" "$BUILD_END" "$END" "${WORK}/out" <<'PY'
import json, sys
from pathlib import Path

path, cmdline, commit, image, start, build_end, end, out = sys.argv[1:]
out_dir = Path(out)


def text(name: str) -> str | None:
    f = out_dir / name
    return f.read_text(errors="replace") if f.exists() else None


def rc(name: str) -> int | None:
    t = text(name + ".rc")
    return int(t) if t else None


probe_line = next((ln for ln in (text("import") or "").splitlines() if ln.startswith("PROBE ")), None)
serve_line = next((ln for ln in (text("serve") or "").splitlines() if ln.startswith("SERVE ")), None)
image_id, _, image_size = (text("image") or "").strip().partition(" ")
freeze = [ln for ln in (text("freeze") or "").splitlines() if "==" in ln or " @ " in ln]
report = {
    "command": cmdline,
    "tgi_commit": commit,
    "image": image,
    "image_id": image_id or None,
    "image_size_bytes": int(image_size) if image_size else None,
    "duration_s": {"build": round(float(build_end) - float(start), 1), "total": round(float(end) - float(start), 1)},
    "exit_codes": {n: rc(n) for n in ("build", "import", "help", "freeze", "serve") if rc(n) is not None},
    "substitutions": {
        "transformers @ git+https://github.com/huggingface/transformers.git@b8aee2e918d7ba2d5e9e80162ae26b4806873307":
        "transformers==4.41.0 (nearest PyPI release; GitHub unreachable from builds)",
    },
    "deviations_from_upstream": [
        "base local/debian:bookworm, Python 3.11 venv (upstream: rocm/dev-ubuntu-22.04 + conda Python 3.10)",
        "torch 2.13.0+cpu wheel from the local wheelhouse, held by PIP_CONSTRAINT (upstream: fxmarty/pytorch 2.3 built for ROCm)",
        "setuptools==69.5.1 (TGI's own pin) installed before gen-server and again after the extras install: grpcio-tools "
        "1.51.1 and opentelemetry-api 1.15.0 import pkg_resources, which the setuptools>=77.0.3 torch 2.13.0 pulls in lacks",
    ],
    "import_result": json.loads(probe_line[len("PROBE "):]) if probe_line else None,
    "help_first_lines": (text("help") or "").splitlines()[:20],
    "serve_result": json.loads(serve_line[len("SERVE "):]) if serve_line else None,
    "pip_freeze": freeze,
}
Path(path).write_text(json.dumps(report, indent=2) + "\n")
PY
printf 'tgi_server_stage: log %s, report %s\n' "$LOG" "$JSON"
for step in build import help; do  # the serve check is reported, not required: see the report for its outcome
    [ "$(cat "${WORK}/out/${step}.rc" 2>/dev/null || echo missing)" = "0" ] || die "step ${step} failed: see ${LOG}"
done
