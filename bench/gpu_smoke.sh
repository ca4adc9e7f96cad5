#!/usr/bin/env bash
# GPU evidence run of the in-image smoke suite (python -m smoke) on the GPU machine, which has no container
# engine: the suite runs in that machine's own Python (torch 2.11 + CUDA 13.0 on one H200), with the image's
# kernels built there from ./kernels, the manifest written by bench/gpu_manifest.py (checked against
# imagecontract.models.Manifest before it is written) and the runtime check serving the tiny model from the GPU
# (local-cpu's `transformers serve` argv with --device cuda; its wheels must be importable, e.g. from carried
# wheels on PYTHONPATH).
#
# Usage, from the repository root:  OUT=/some/dir bash bench/gpu_smoke.sh
#   IB_DEVICE=cpu   CPU mode (CI: tests/test_gpu_scripts_cpu.py): the same manifest writer, arguments and report
#                   paths on the CPU device; the kernels are the source tree's CPU ops, no nvidia-smi, and the
#                   runtime check runs only when `transformers` is on PATH.
#   IB_SABOTAGE=0   skip the sabotage runs (bench/smoke_sabotage.py: each op off by 2% in fp16 and in bf16);
#                   IB_SABOTAGE_MODES=scale,noise (default) picks how the 2% error is made.
#   IB_RERUN=0      skip the second run of the throughput checks against the first as baseline.
# Writes under $OUT: manifest.json, report.json, junit.xml, smoke.log, kernels_build.log, kernels.json (when the
# kernels built for a GPU), gpu_memory.json (GPU processes sampled while the suite ran), sabotage.json and
# smoke_h200.json (cpu mode: smoke_cpu_mode.json): the report plus the command, hardware, rerun, GPU memory and
# sabotage summary (the file committed under bench/results/).
# The manifest states what the machine must be (arch, torch, CUDA, python); override with EXPECT_* (see
# bench/gpu_manifest.py).
set -uo pipefail

OUT=${OUT:-build/gpu_smoke}
PY=${PYTHON:-python3}
DEVICE=${IB_DEVICE:-cuda}
ARCH=${EXPECT_ARCH:-sm_90}
case "$DEVICE" in cuda | cpu) ;; *) echo "error: IB_DEVICE must be cuda or cpu, not '$DEVICE'" >&2; exit 2 ;; esac
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
EVIDENCE=$OUT/smoke_h200.json
[ "$DEVICE" = cpu ] && EVIDENCE=$OUT/smoke_cpu_mode.json

if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$WORK/gpu.txt"
else
  echo "cpu mode: $(uname -m), $(nproc) cores" | tee "$WORK/gpu.txt"
fi
"$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'

# The image's kernels (kernels/), built here for this GPU; without them the suite records the ops as absent.
KDIR=${IB_KERNELS_SITE:-$WORK/site}  # IB_KERNELS_SITE: keep the built package (bench/gpu_kernels.sh IB_SITE_DIR)
KERNELS_OK=0
KJSON=()
if [ "$DEVICE" = cpu ]; then
  # The source tree holds the ops' CPU implementations (what IMAGEBUILD_KERNELS_CPU_ONLY=1 installs).
  KDIR=$PWD/kernels
  if PYTHONPATH="$KDIR" "$PY" -c 'import imagebuild_kernels' >"$OUT/kernels_build.log" 2>&1; then KERNELS_OK=1; fi
  echo "kernels (cpu mode, source tree): ok=$KERNELS_OK" | tee -a "$OUT/kernels_build.log"
elif [ -f kernels/pyproject.toml ] || [ -f kernels/setup.py ]; then
  start=$(date +%s)
  # The machine may preset TORCH_CUDA_ARCH_LIST (9.0a was seen): build for what we ask, IB_CUDA_ARCH.
  if TORCH_CUDA_ARCH_LIST=${IB_CUDA_ARCH:-9.0} MAX_JOBS=${MAX_JOBS:-16} \
    "$PY" -m pip install -v --no-index --no-build-isolation --no-deps --no-cache-dir --target "$KDIR" ./kernels \
    >"$OUT/kernels_build.log" 2>&1; then
    KERNELS_OK=1
    so=$(ls "$KDIR"/imagebuild_kernels/_C*.so 2>/dev/null | head -1)
    # kernels.json as the image's builder stage writes it (code objects read from the library)
    if [ -n "$so" ] && "$PY" imagecontract/verify.py "$so" \
      --arch "${IB_CUDA_ARCH:-9.0}" --json-out "$OUT/kernels.json" >>"$OUT/kernels_build.log" 2>&1; then
      KJSON=(--kernels-json "$OUT/kernels.json")
    fi
  fi
  echo "kernels build: ok=$KERNELS_OK in $(($(date +%s) - start)) s (log: kernels_build.log)"
  tail -5 "$OUT/kernels_build.log"
else
  echo "kernels/ has no pyproject.toml or setup.py: running without the image's kernels" | tee "$OUT/kernels_build.log"
fi
export PYTHONPATH="$KDIR:$PWD${PYTHONPATH:+:$PYTHONPATH}"

# The serving runtime: the local-cpu image's (transformers serve), its --device set to this device.
"$PY" bench/gpu_manifest.py --out "$OUT/manifest.json" --device "$DEVICE" --arch "$ARCH" \
  --kernels-built "$KERNELS_OK" --runtime-from dockerfiles/local-cpu/manifest.json || exit 2

ONLY=()
RUNTIME_NOTE=null
if ! command -v transformers >/dev/null 2>&1; then
  if [ "$DEVICE" = cuda ]; then
    echo "error: no 'transformers' on PATH: the runtime check cannot serve (carry the runtime's wheels)" >&2
    exit 2
  fi
  ONLY=(--only environment,silu,linear,attention,tunableop)
  RUNTIME_NOTE='"cpu mode: transformers is not installed on this machine, so the runtime check was left out"'
fi

# GPU processes and memory, sampled while the suite runs: the runtime's server must hold the model on the GPU.
SAMPLER_PID=
if [ "$DEVICE" = cuda ]; then
  "$PY" bench/gpu_memory_sampler.py "$OUT/gpu_memory.json" &
  SAMPLER_PID=$!
fi

"$PY" -m smoke --device "$DEVICE" --manifest "$OUT/manifest.json" ${KJSON[@]+"${KJSON[@]}"} ${ONLY[@]+"${ONLY[@]}"} \
  --report "$OUT/report.json" --junit "$OUT/junit.xml" 2>&1 | tee "$OUT/smoke.log"
rc=${PIPESTATUS[0]}
if [ -n "$SAMPLER_PID" ]; then
  kill -INT "$SAMPLER_PID" 2>/dev/null
  wait "$SAMPLER_PID"
fi

# A second run of the throughput checks against the first as baseline (10% tolerance): run-to-run noise.
rerun=-1
if [ "${IB_RERUN:-1}" = 1 ] && [ -f "$OUT/report.json" ]; then
  "$PY" -m smoke --device "$DEVICE" --manifest "$OUT/manifest.json" ${KJSON[@]+"${KJSON[@]}"} \
    --only silu,linear,attention --baseline "$OUT/report.json" --report "$WORK/rerun.json" 2>&1 | tail -6
  rerun=${PIPESTATUS[0]}
fi

# Each op off by 2%, in fp16 and in bf16 (and fp32 on CPU): the suite must fail every one.
sab=-1
if [ "${IB_SABOTAGE:-1}" = 1 ]; then
  "$PY" bench/smoke_sabotage.py --device "$DEVICE" --manifest "$OUT/manifest.json" ${KJSON[@]+"${KJSON[@]}"} \
    --modes "${IB_SABOTAGE_MODES:-scale,noise}" --out "$OUT/sabotage.json" 2>&1 | tee "$OUT/sabotage.log" | tail -30
  sab=${PIPESTATUS[0]}
fi

"$PY" - "$OUT" "$KERNELS_OK" "$rc" "$rerun" "$sab" "$WORK" "$EVIDENCE" "$DEVICE" "$RUNTIME_NOTE" <<'PYEOF'
import json, os, sys
out, kernels_ok, rc, rerun, sab, work, evidence_path, device, runtime_note = sys.argv[1:]
def load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
report = load(f"{out}/report.json") or {}
rerun_report = load(f"{work}/rerun.json")
evidence = {
    "bench_command": f"OUT=$OUT IB_DEVICE={device} bash bench/gpu_smoke.sh",
    "hardware": open(f"{work}/gpu.txt").read().strip(),
    "kernels_built": kernels_ok == "1",
    "exit_code": int(rc),
    "runtime_note": json.loads(runtime_note),
    "gpu_memory": load(f"{out}/gpu_memory.json"),
    "sabotage": {"exit_code": int(sab), **(load(f"{out}/sabotage.json") or {})},
    "rerun_vs_baseline": None if rerun_report is None else {
        "exit_code": int(rerun), **rerun_report.get("baseline", {}),
        "ratios": {c["name"]: c["numbers"].get("vs_baseline") for c in rerun_report["checks"]},
    },
    **report,
}
with open(evidence_path, "w") as fh:
    json.dump(evidence, fh, indent=2)
print(f"evidence: {evidence_path}")
PYEOF
echo "gpu_smoke ($DEVICE): suite exit $rc, rerun-vs-baseline exit $rerun, sabotage exit $sab"
if [ "$rc" = 0 ] && [ "$sab" -gt 0 ]; then exit 1; fi
exit "$rc"
