#!/usr/bin/env bash
# On the GPU machine (H200, through the device tool): build the extension for that GPU with pip, verify the code
# objects it holds (our parser and cuobjdump), test it against float64 references, sweep skinny_linear's launch
# configurations into a dispatch table, then run bench/kernels.py with that table.
# Usage: OUT=/some/dir bash bench/gpu_kernels.sh
#   IB_STAGES: any of "build verify tests sanitize sweep bench unseen plan" (default: all but plan). With no build
#   stage the package at $IB_SITE_DIR (e.g. the one bench/gpu_smoke.sh built, IB_KERNELS_SITE there) is used,
#   else the site tarball $IB_SITE_TGZ (an earlier run's $OUT/ibk-site.tgz) is unpacked.
#   IB_DEVICE=cpu: CPU mode (CI: tests/test_gpu_scripts_cpu.py): no nvidia-smi, the source tree's CPU ops, stages
#   "tests plan" by default (plan: every row's dispatch choice without a GPU, kernels_plan.json).
#   results: $OUT/kernels.json (code objects), pytest.log, sanitize.log, skinny_table.json (+ .raw.json),
#   kernels_h200.json, kernels_unseen_h200.json, kernels_plan.json, ibk-site.tgz (the built package, to reuse)
set -euo pipefail
OUT=${OUT:-/tmp/imagebuild-gpu-out}
DEVICE=${IB_DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then
  STAGES=" ${IB_STAGES:-tests plan} "
else
  STAGES=" ${IB_STAGES:-build verify tests sanitize sweep bench unseen} "
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# The machine's image may preset TORCH_CUDA_ARCH_LIST (9.0a was seen): build for what we ask, IB_CUDA_ARCH.
export TORCH_CUDA_ARCH_LIST=${IB_CUDA_ARCH:-9.0} MAX_JOBS=${MAX_JOBS:-16}
has() { [[ "$STAGES" == *" $1 "* ]]; }
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
else
  echo "cpu mode: stages$STAGES"
fi
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

site=/tmp/ibk-site
if [ "$DEVICE" = cpu ]; then
  site=$PWD/kernels  # the CPU implementations, as IMAGEBUILD_KERNELS_CPU_ONLY=1 installs them
elif [ -n "${IB_SITE_DIR:-}" ] && ! has build; then
  site=$IB_SITE_DIR
elif has build; then
  rm -rf "$site"
  start=$(date +%s)
  python3 -m pip install -q --no-build-isolation --no-deps --no-cache-dir --target "$site" ./kernels
  echo "build: $(( $(date +%s) - start )) s"
  tar -C /tmp -czf "$OUT/ibk-site.tgz" ibk-site
else
  rm -rf "$site" && tar -C /tmp -xzf "${IB_SITE_TGZ:?no build stage: set IB_SITE_TGZ}"
fi
export PYTHONPATH="$site"
# The sweep's table replaces the packaged one for the bench that follows it.
if [ -f "$OUT/skinny_table.json" ]; then export IMAGEBUILD_SKINNY_TABLE="$OUT/skinny_table.json"; fi
so=$(ls "$site"/imagebuild_kernels/_C*.so 2>/dev/null || true)
if [ "$DEVICE" = cuda ] && [ -z "$so" ]; then echo "error: no built extension under $site" >&2; exit 2; fi

if has verify; then
  echo "== code objects (ours, then cuobjdump)"
  python3 imagecontract/verify.py "$so" --arch "$TORCH_CUDA_ARCH_LIST" --json-out "$OUT/kernels.json"
  { cuobjdump --list-elf "$so"; cuobjdump --list-ptx "$so" || true; } 2>&1
  if python3 imagecontract/verify.py "$so" --arch "8.0;9.0"; then
    echo "FAIL: a wrong arch request was not caught"; exit 1
  fi
  cuobjdump --dump-resource-usage "$so" 2>/dev/null | grep -E "Function|REG" | paste - - | \
    sed -E 's/.*Function ([^ :]+).*REG:([0-9]+).*SHARED:([0-9]+).*/\2 regs \3 smem \1/' | sort -k4 | head -80 || true
fi

if has tests; then
  echo "== tests (full log: pytest.log)"
  timeout 240 python3 -m pytest -q --noconftest -p no:cacheprovider tests/test_kernels_gpu.py >"$OUT/pytest.log" 2>&1 \
    || { [ "$DEVICE" = cpu ] && grep -q "no tests ran\|skipped" "$OUT/pytest.log"; } || echo "TESTS FAILED"
  grep -E "passed|failed|error|FAILED|Fatal|Segmentation" "$OUT/pytest.log" | tail -15 || true
fi

if has sanitize; then
  echo "== compute-sanitizer memcheck on small shapes"
  timeout 150 compute-sanitizer --tool memcheck --print-limit 5 python3 bench/kernels_sanitize.py >"$OUT/sanitize.log" 2>&1 \
    || echo "SANITIZER: nonzero exit"
  tail -4 "$OUT/sanitize.log"
fi

export IB_BENCH_VIA="OUT=\$OUT IB_STAGES='$STAGES' bash bench/gpu_kernels.sh (on the GPU machine; extension built by pip as above)"
if has sweep; then
  echo "== sweep"
  read -r -a extra <<<"${IB_SWEEP_ARGS:-}"
  python3 bench/kernels.py --sweep "$OUT/skinny_table.json" "${extra[@]}"
  export IMAGEBUILD_SKINNY_TABLE="$OUT/skinny_table.json"
fi
if has bench; then
  echo "== bench"
  read -r -a extra <<<"${IB_BENCH_ARGS:-}"
  python3 bench/kernels.py --out "$OUT/kernels_h200.json" "${extra[@]}"
fi
if has unseen; then
  echo "== unseen families (bench/shapes.yaml unseen_models): ours vs F.linear"
  read -r -a extra <<<"${IB_UNSEEN_ARGS:-}"
  python3 bench/kernels.py --unseen "$OUT/kernels_unseen_h200.json" "${extra[@]}"
fi
if has plan; then
  echo "== plan (the dispatch choice of every row, no GPU)"
  python3 bench/kernels.py --plan "$OUT/kernels_plan.json"
fi
