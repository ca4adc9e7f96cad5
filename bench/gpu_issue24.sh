#!/usr/bin/env bash
# Issue 24's GPU evidence in one call on the GPU machine (H200, through the device tool):
#   1. the runtime's wheels (carried in .whl/, listed in runtimes/transformers-serve/requirements.txt) into
#      /tmp/site, beside the machine's own torch;
#   2. bench/gpu_smoke.sh: kernels built for sm_90, the suite with the runtime served from the GPU, the rerun
#      against the first report, the sabotages in fp16 and bf16;
#   3. bench/gpu_kernels.sh stages "verify tests unseen" on the package step 2 built: code objects, the kernels'
#      GPU tests (the C++ dispatch rule against the Python one), the unseen families against F.linear.
# Usage (repo root, on the GPU machine): OUT=/some/dir bash bench/gpu_issue24.sh
#   IB_DEVICE=cpu: CPU mode (CI: tests/test_gpu_scripts_cpu.py): both scripts in their CPU modes, kernels stages
#   "tests plan"; the evidence file is smoke_cpu_mode.json, the kernel result kernels_plan.json.
# Writes (flat, for the device tool): smoke_h200.json, smoke_h200_junit.xml, smoke_h200.log, manifest_h200.json,
# kernels_unseen_h200.json, kernels_gpu_tests_h200.log, gpu_issue24_h200.log (everything printed).
set -uo pipefail
OUT=${OUT:?set OUT}
DEVICE=${IB_DEVICE:-cuda}
export IB_DEVICE=$DEVICE
W=$(mktemp -d)
exec > >(tee "$OUT/gpu_issue24_h200.log") 2>&1
echo "== $(date -u) bench/gpu_issue24.sh"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
command -v transformers && python3 -c 'import transformers, fastapi, uvicorn; print("transformers", transformers.__version__)'
start=$(date +%s)
IB_KERNELS_SITE=/tmp/ibk-site OUT="$W/smoke" bash bench/gpu_smoke.sh
echo "== gpu_smoke.sh exit $? in $(($(date +%s) - start)) s"
if [ "$DEVICE" = cuda ]; then cp "$W/smoke/smoke_h200.json" "$OUT/smoke_h200.json"; else cp "$W/smoke/smoke_cpu_mode.json" "$OUT/"; fi
cp "$W/smoke/junit.xml" "$OUT/smoke_h200_junit.xml"
cp "$W/smoke/manifest.json" "$OUT/manifest_h200.json"
cat "$W/smoke/smoke.log" "$W/smoke/sabotage.log" "$W/smoke/kernels_build.log" >"$OUT/smoke_h200.log" 2>/dev/null
start=$(date +%s)
STAGES="verify tests unseen"
[ "$DEVICE" = cpu ] && STAGES="tests plan"
IB_STAGES="$STAGES" IB_SITE_DIR=/tmp/ibk-site IB_UNSEEN_ARGS="--deadline ${IB_UNSEEN_DEADLINE:-200}" \
  OUT="$W/kern" bash bench/gpu_kernels.sh
echo "== gpu_kernels.sh exit $? in $(($(date +%s) - start)) s"
cp "$W/kern/kernels_unseen_h200.json" "$W/kern/kernels_plan.json" "$OUT/" 2>/dev/null
cp "$W/kern/pytest.log" "$OUT/kernels_gpu_tests_h200.log" 2>/dev/null
echo "== $(date -u) done"
