#!/usr/bin/env bash
# TunableOp evidence on a GPU host without a container engine (the H200 test machine): run the in-image
# tuning script directly with the host's torch, for two "devices" (device 0 twice with different files when
# there is one GPU), then `imagebuild tunableop inspect/check/merge` on what torch wrote, then ask torch itself
# whether it accepts the merged file, and run the image entrypoint against a baked copy.
# Usage (repo root): bench/gpu_tunableop.sh [OUTDIR]   (default bench/results; $OUT on the device machine)
# Writes: tunableop_h200_dev0.csv, tunableop_h200_dev1.csv, tunableop_h200_merged.csv,
#         tunableop_h200.json (summary: step exit codes vs expected, validators, tuned/untuned timings),
#         tunableop_h200.log
# IB_DEVICE=cpu: CPU mode (CI: tests/test_gpu_scripts_cpu.py): the tuning steps and torch's own reads are left
# out (TunableOp tunes GPU GEMMs); the committed H200 results files stand in for what tuning wrote, checked
# against their own validators; every imagebuild step and the entrypoint run as on the GPU. Needs OUT (or the
# argument): it never writes into bench/results.
set -uo pipefail
DEVICE=${IB_DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then
  OUTDIR=${1:-${OUT:?cpu mode: set OUT to a folder}}
else
  OUTDIR=${1:-${OUT:-bench/results}}
fi
mkdir -p "$OUTDIR"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
LOG="$OUTDIR/tunableop_h200.log"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
STEPS="$W/steps.tsv"
: >"$STEPS"

# The tunableop command group alone, with the CLI's error mapping: the GPU host lacks some of the other
# commands' dependencies (docker, pydantic), and these subcommands need none of them.
CLI='
import sys
from imagebuild.errors import ImagebuildError
from imagebuild.commands.tunableop import command
try:
    command.main(sys.argv[1:], prog_name="imagebuild tunableop", standalone_mode=False)
except ImagebuildError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
'
ib() { python3 -c "$CLI" "$@"; }

# step NAME EXPECTED_RC CMD...: run, log, record the exit code next to the one the contract expects
step() {
  local name=$1 want=$2
  shift 2
  echo "### $name: $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$want" "$rc" >>"$STEPS"
  echo "$name: rc=$rc (expected $want)"
}

: >"$LOG"
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1
  NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
else
  echo "cpu mode" >>"$LOG"
  NGPU=1
fi
DEV1=$((NGPU > 1 ? 1 : 0))

to_json() { python3 -c 'import sys; from imagebuild.tunableop.shapes import parse_shapes, shapes_json
print(shapes_json(parse_shapes(open(sys.argv[1]).read(), sys.argv[1])), end="")' "$1" >"$2"; }
step shapes_dev0 0 to_json tests/data/tunableop/shapes_llama70b.txt "$W/shapes0.json"
step shapes_dev1 0 to_json tests/data/tunableop/shapes_llama70b_dev1.txt "$W/shapes1.json"

if [ "$DEVICE" = cuda ]; then
  step tune_dev0 0 python3 image/tunableop/tune_gemms.py --shapes "$W/shapes0.json" \
    --out "$W/dev0/tunableop_results%d.csv" --device 0 --report "$W/report0.json"
  step tune_dev1 0 python3 image/tunableop/tune_gemms.py --shapes "$W/shapes1.json" \
    --out "$W/dev1/tunableop_results%d.csv" --device "$DEV1" --report "$W/report1.json" --timing-iters 0
  cp "$W/dev0/tunableop_results0.csv" "$OUTDIR/tunableop_h200_dev0.csv"
  cp "$W/dev1/tunableop_results$DEV1.csv" "$OUTDIR/tunableop_h200_dev1.csv"
else
  cp bench/results/tunableop_h200_dev0.csv "$OUTDIR/tunableop_h200_dev0.csv"
  cp bench/results/tunableop_h200_dev1.csv "$OUTDIR/tunableop_h200_dev1.csv"
fi
D0="$OUTDIR/tunableop_h200_dev0.csv" D1="$OUTDIR/tunableop_h200_dev1.csv" M="$OUTDIR/tunableop_h200_merged.csv"

step inspect_text 0 ib inspect "$D0" "$D1"
inspect_json() { ib inspect --json "$D0" "$D1" >"$W/inspect.json"; }
step inspect_json 0 inspect_json
# check against the live torch: the validators it registers, as --expect arguments
if [ "$DEVICE" = cuda ]; then
  mapfile -t EXPECT < <(python3 -c 'import torch
for k, v in torch.cuda.tunable.get_validators(): print(f"--expect={k}={v}")')
else  # the file's own validators, as the GPU that wrote it registered them
  mapfile -t EXPECT < <(grep '^Validator,' "$D0" | cut -d, -f2- | sed 's/^\([^,]*\),/--expect=\1=/')
fi
echo "live validators: ${EXPECT[*]}" >>"$LOG"
step check_live_dev0 0 ib check "$D0" "${EXPECT[@]}"
step check_live_dev1 0 ib check "$D1" "${EXPECT[@]}"
step check_wrong_pt 1 ib check "$D0" --expect PT_VERSION=2.10.0
step check_rocm_arch 1 ib check "$D0" --expect GCN_ARCH_NAME=gfx942:sramecc+:xnack-
step merge_devices 0 ib merge --out "$M" "$D0" "$D1"
step merge_differing_validators 1 ib merge --out "$W/never.csv" "$D0" tests/data/tunableop/rocm_gfx942_dev0.csv
step merge_wrote_nothing_on_failure 1 test -e "$W/never.csv"
step check_live_merged 0 ib check "$M" "${EXPECT[@]}"
step inspect_malformed 2 ib inspect tests/data/tunableop/malformed_params.csv

# Does torch itself accept the merged file, and reject one whose PT_VERSION differs? Each in a fresh process.
sed 's/^Validator,PT_VERSION,.*/Validator,PT_VERSION,0.0.1/' "$M" >"$W/wrong_pt.csv"
TORCH_READ='
import json, sys, torch
t = torch.cuda.tunable
t.enable(True)
t.tuning_enable(False)
accepted = bool(t.read_file(sys.argv[1]))
print(json.dumps({"file": sys.argv[1], "read_file": accepted, "results_loaded": len(t.get_results())}))
'
torch_read() { PYTORCH_TUNABLEOP_FILENAME="$W/scratch%d.csv" python3 -c "$TORCH_READ" "$1" | tee -a "$W/torch_read.jsonl"; }
rows() { grep -vc '^Validator,' "$1"; }
torch_accepts_merged() { torch_read "$M" | grep -q "\"results_loaded\": $(rows "$M")}"; }
torch_rejects_wrong_pt() { torch_read "$W/wrong_pt.csv" | grep -q '"results_loaded": 0}'; }
if [ "$DEVICE" = cuda ]; then
  step torch_accepts_merged 0 torch_accepts_merged
  step torch_rejects_wrong_pt_version 0 torch_rejects_wrong_pt
fi

# The image entrypoint: baked file -> /data/tunableop/ when none is there, then exec "$@"; never overwrite.
mkdir -p "$W/baked"
cp "$M" "$W/baked/tunableop_sm_90.csv"
sed 's/^Validator,PT_VERSION,.*/Validator,PT_VERSION,0.0.1/' "$M" >"$W/baked/tunableop_aaa_stale.csv"
export IMAGEBUILD_TUNABLEOP_BAKED_DIR="$W/baked"
ENTRY_ENV=(env PYTORCH_TUNABLEOP_ENABLED=1 PYTORCH_TUNABLEOP_TUNING=0
  "PYTORCH_TUNABLEOP_FILENAME=$W/data/tunableop/tunableop_results%d.csv")
# Without a GPU the entrypoint installs nothing (it cannot know the validators): cmp then finds no file (exit 2).
INSTALLS_RC=0
[ "$DEVICE" = cpu ] && INSTALLS_RC=2
step entrypoint_installs "$INSTALLS_RC" "${ENTRY_ENV[@]}" python3 image/tunableop/tunableop_entrypoint.py \
  cmp "$M" "$W/data/tunableop/tunableop_results0.csv"
echo "user's own results" >"$W/data/tunableop/tunableop_results0.csv"
step entrypoint_keeps_existing 0 "${ENTRY_ENV[@]}" python3 image/tunableop/tunableop_entrypoint.py \
  grep -qx "user's own results" "$W/data/tunableop/tunableop_results0.csv"

python3 - "$STEPS" "$W" "$OUTDIR/tunableop_h200.json" "$*" <<'EOF'
import json, sys, os
steps_file, w, out, args = sys.argv[1:]
steps = [dict(zip(("name", "expected_rc", "rc"), l.rstrip("\n").split("\t"))) for l in open(steps_file)]
for s in steps:
    s["expected_rc"], s["rc"] = int(s["expected_rc"]), int(s["rc"])
    s["as_expected"] = s["rc"] == s["expected_rc"]
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
r0, r1 = load(f"{w}/report0.json"), load(f"{w}/report1.json")
timings = (r0 or {}).get("timings", [])
ratios = [t["tuned_over_untuned"] for t in timings]
summary = {
    "command": f"IB_DEVICE={os.environ.get('IB_DEVICE', 'cuda')} bench/gpu_tunableop.sh " + args,
    "all_as_expected": all(s["as_expected"] for s in steps),
    "steps": steps,
    "torch": (r0 or {}).get("torch"), "device": (r0 or {}).get("device"), "arch": (r0 or {}).get("arch"),
    "validators": (r0 or {}).get("validators"),
    "tune_seconds": {"dev0": (r0 or {}).get("tune_seconds"), "dev1": (r1 or {}).get("tune_seconds")},
    "gemms_tuned": {"dev0": (r0 or {}).get("gemms"), "dev1": (r1 or {}).get("gemms")},
    "torch_read": [json.loads(l) for l in open(f"{w}/torch_read.jsonl")] if os.path.exists(f"{w}/torch_read.jsonl") else None,
    "inspect": load(f"{w}/inspect.json"),
    "timings_ms": timings,
    "tuned_over_untuned": {"min": min(ratios), "max": max(ratios),
                           "median": sorted(ratios)[len(ratios) // 2]} if ratios else None,
    "reference": "untuned = the same F.linear with TunableOp disabled (cuBLAS), same process, same run",
}
json.dump(summary, open(out, "w"), indent=1)
print(json.dumps({k: summary[k] for k in ("all_as_expected", "torch", "device", "tuned_over_untuned")}))
sys.exit(0 if summary["all_as_expected"] else 1)
EOF
