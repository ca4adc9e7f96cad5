#!/usr/bin/env bash
# GPU evidence run of the in-image smoke suite (python -m smoke) on the GPU machine, which has no container
# engine: the suite runs in that machine's own Python (torch 2.11 + CUDA 13.0 on one H200), with the image's
# kernels built there from ./kernels when they build.
#
# Usage, from the repository root:  OUT=/some/dir bash bench/gpu_smoke.sh
# Writes under $OUT: report.json, junit.xml, smoke.log, manifest.json, kernels_build.log, kernels.json (when
# the kernels built) and smoke_h200.json (the report plus the command, hardware and a rerun against it as
# baseline: the file committed under bench/results/).
# The manifest states what the machine must be (arch, torch, CUDA, python); override with EXPECT_* below.
set -uo pipefail

OUT=${OUT:-build/gpu_smoke}
PY=${PYTHON:-python3}
ARCH=${EXPECT_ARCH:-sm_90}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
WORK=$(mktemp -d)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$WORK/gpu.txt"
"$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'

# The image's kernels (kernels/), built here for this GPU; without them the suite records the ops as absent.
KDIR=$WORK/site
KERNELS_OK=0
KJSON=()
if [ -f kernels/pyproject.toml ] || [ -f kernels/setup.py ]; then
  start=$(date +%s)
  # The machine may preset TORCH_CUDA_ARCH_LIST (9.0a was seen): build for what we ask, IB_CUDA_ARCH.
  if TORCH_CUDA_ARCH_LIST=${IB_CUDA_ARCH:-9.0} MAX_JOBS=${MAX_JOBS:-16} \
    "$PY" -m pip install -v --no-index --no-build-isolation --no-deps --no-cache-dir --target "$KDIR" ./kernels \
    >"$OUT/kernels_build.log" 2>&1; then
    KERNELS_OK=1
    so=$(ls "$KDIR"/imagebuild_kernels/_C*.so 2>/dev/null | head -1)
    # kernels.json as the image's builder stage writes it (code objects read from the library)
    if [ -n "$so" ] && [ -f imagecontract/verify.py ] && "$PY" imagecontract/verify.py "$so" \
      --arch "${IB_CUDA_ARCH:-9.0}" --json-out "$OUT/kernels.json" >>"$OUT/kernels_build.log" 2>&1; then
      KJSON=(--kernels-json "$OUT/kernels.json")
    fi
  fi
  echo "kernels build: ok=$KERNELS_OK in $(( $(date +%s) - start )) s (log: kernels_build.log)"
  tail -5 "$OUT/kernels_build.log"
else
  echo "kernels/ has no pyproject.toml or setup.py: running without the image's kernels" | tee "$OUT/kernels_build.log"
fi
export PYTHONPATH="$KDIR:$PWD${PYTHONPATH:+:$PYTHONPATH}"

"$PY" - "$OUT/manifest.json" "$KERNELS_OK" "$ARCH" <<'PYEOF'
import json, sys
path, kernels_ok, arch = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
import os
manifest = {
    "schema_version": 1,
    "target": "gpu-machine-h200",
    "platform": {"name": "cuda13.0", "kind": "cuda", "version": "13.0", "base_image": None, "base_digest": None},
    "torch": {"version": os.environ.get("EXPECT_TORCH", "2.11.0"), "obtained": "preinstalled", "patches": []},
    "gpu_arches": [arch],
    "experimental_arches": [],
    "components": {
        "imagebuild-kernels": {
            "included": kernels_ok, "arches": [arch] if kernels_ok else [], "experimental": [],
            "reason": None if kernels_ok else "kernels/ did not build on the GPU machine (see kernels_build.log)",
        },
    },
    "attention_backends": {arch: ["flash", "efficient", "cudnn", "math"]},
    "runtime": None,
    "tunableop": {"enabled": False, "tuning": False, "filename": None},
    "versions": {
        "torch": os.environ.get("EXPECT_TORCH", "2.11.0"),
        "rocm": None,
        "cuda": os.environ.get("EXPECT_CUDA", "13.0"),
        "python": os.environ.get("EXPECT_PYTHON", "3.12"),
    },
}
with open(path, "w") as fh:
    json.dump(manifest, fh, indent=2)
PYEOF

"$PY" -m smoke --device cuda --manifest "$OUT/manifest.json" ${KJSON[@]+"${KJSON[@]}"} --report "$OUT/report.json" \
  --junit "$OUT/junit.xml" 2>&1 | tee "$OUT/smoke.log"
rc=${PIPESTATUS[0]}

# A second run of the throughput checks against the first as baseline (10% tolerance): run-to-run noise.
"$PY" -m smoke --device cuda --manifest "$OUT/manifest.json" ${KJSON[@]+"${KJSON[@]}"} --only silu,linear,attention \
  --baseline "$OUT/report.json" --report "$WORK/rerun.json" 2>&1 | tail -6
rerun=${PIPESTATUS[0]}

"$PY" - "$OUT" "$KERNELS_OK" "$rc" "$rerun" "$WORK" <<'PYEOF'
import json, sys
out, kernels_ok, rc, rerun, work = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
report = json.load(open(f"{out}/report.json"))
rerun_report = json.load(open(f"{work}/rerun.json"))
evidence = {
    "bench_command": "OUT=$OUT bash bench/gpu_smoke.sh",
    "hardware": open(f"{work}/gpu.txt").read().strip(),
    "kernels_built": kernels_ok,
    "exit_code": rc,
    "rerun_vs_baseline": {"exit_code": rerun, **rerun_report.get("baseline", {}),
                           "ratios": {c["name"]: c["numbers"].get("vs_baseline") for c in rerun_report["checks"]}},
    **report,
}
json.dump(evidence, open(f"{out}/smoke_h200.json", "w"), indent=2)
PYEOF
echo "gpu_smoke: suite exit $rc, rerun-vs-baseline exit $rerun"
exit "$rc"
