#!/usr/bin/env bash
# On the GPU machine (H200, through the device tool): build the extension for that GPU with pip, verify the code
# objects it holds (our parser and cuobjdump), test it against float64 references, then run bench/kernels.py.
# Usage: OUT=/some/dir bash bench/gpu_kernels.sh [bench/kernels.py options]
#   results: $OUT/kernels.json, $OUT/kernels_h200.json, $OUT/pytest.log, logs; IB_SKIP_BENCH=1 stops after the tests
set -euo pipefail
OUT=${OUT:-/tmp/imagebuild-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# The machine's image may preset TORCH_CUDA_ARCH_LIST (9.0a was seen): build for what we ask, IB_CUDA_ARCH.
export TORCH_CUDA_ARCH_LIST=${IB_CUDA_ARCH:-9.0} MAX_JOBS=${MAX_JOBS:-16}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

site=/tmp/ibk-site
rm -rf "$site"
start=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps --no-cache-dir --target "$site" ./kernels
echo "build: $(( $(date +%s) - start )) s"
export PYTHONPATH="$site"
so=$(ls "$site"/imagebuild_kernels/_C*.so)
cp "$so" "$OUT/_C.so"

echo "== code objects (ours, then cuobjdump)"
python3 imagebuild/kernel_verify.py "$so" --arch "$TORCH_CUDA_ARCH_LIST" --json-out "$OUT/kernels.json"
{ cuobjdump --list-elf "$so"; cuobjdump --list-ptx "$so" || true; } 2>&1 | tee "$OUT/cuobjdump.txt"
if python3 imagebuild/kernel_verify.py "$so" --arch "8.0;9.0"; then
  echo "FAIL: a wrong arch request was not caught"; exit 1
fi
cuobjdump --dump-sass "$so" | grep -E "Function :|HMMA|LDG.E.128|LDG.E.ENL2|STG.E.128" | sort | uniq -c | sort -rn | head -40 || true

echo "== tests (full log: pytest.log)"
timeout 300 python3 -m pytest -v --noconftest -p no:cacheprovider tests/test_kernels_gpu.py >"$OUT/pytest.log" 2>&1 \
  || echo "TESTS FAILED"
grep -E "passed|failed|error|FAILED|Fatal|Segmentation" "$OUT/pytest.log" | tail -15 || true

echo "== compute-sanitizer memcheck on small shapes"
timeout 180 compute-sanitizer --tool memcheck --print-limit 5 python3 bench/kernels_sanitize.py 2>&1 | tail -8 || true

if [ "${IB_SKIP_BENCH:-0}" = 1 ]; then exit 0; fi
echo "== bench"
export IB_BENCH_VIA="OUT=\$OUT bash bench/gpu_kernels.sh $* (on the GPU machine; extension built by pip as above)"
python3 bench/kernels.py "$@" --out "$OUT/kernels_h200.json"
