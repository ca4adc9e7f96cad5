#!/usr/bin/env bash
# Issue 13 on a real GPU host (H200): arch coverage of the installed torch and its CUDA wheels, doctor, and the
# in-image preflight against the real driver. Stdlib only (imagecontract/, imagebuild/prove/doctor.py): no container.
#   OUT=/some/dir bash bench/gpu_issue13.sh
set -u
OUT=${OUT:?set OUT to a folder}
{
  date -u
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "arch_list", torch.cuda.get_arch_list())'
} >"$OUT/env.txt" 2>&1
SP=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "site-packages: $SP" >>"$OUT/env.txt"
# Coverage of every library with device code under site-packages (torch, nvidia-* wheels, triton, ...).
/usr/bin/time -f "coverage wall %e s, max RSS %M KB" python3 -m imagecontract.coverage --root "$SP" \
  --arch "sm_75;sm_80;sm_86;sm_89;sm_90;sm_100;sm_120" >"$OUT/coverage_raw.json" 2>>"$OUT/env.txt"
# doctor on the real driver (no image: the arches given by hand, as the image label would give them)
python3 -m imagebuild.prove.doctor >"$OUT/doctor.txt" 2>&1; echo "exit $?" >>"$OUT/doctor.txt"
python3 -m imagebuild.prove.doctor --json --arch "sm_80;sm_90" >"$OUT/doctor.json" 2>&1
python3 -m imagebuild.prove.doctor --arch "sm_80" >>"$OUT/doctor.txt" 2>&1; echo "exit $? (image sm_80 only)" >>"$OUT/doctor.txt"
# preflight: the real driver query against manifests of several arch lists; the entrypoint path with one of them
python3 - >"$OUT/preflight.txt" 2>&1 <<'EOF'
import json, os, subprocess, sys, tempfile, time
from pathlib import Path
from imagecontract import preflight
tmp = Path(tempfile.mkdtemp())
for arches in (["sm_80", "sm_90"], ["sm_80"], ["sm_100"], ["sm_80+PTX"], ["gfx942"]):
    kind = "rocm" if arches[0].startswith("gfx") else "cuda"
    path = tmp / "manifest.json"
    path.write_text(json.dumps({"target": "cuda12.1-torch2.3", "platform": {"kind": kind}, "gpu_arches": arches}))
    for env in ({}, {"IMAGEBUILD_SKIP_PREFLIGHT": "1"}):
        t0 = time.monotonic()
        code = preflight.run(env, manifest_path=path, out=sys.stdout)
        print(f"== image {arches} env {env}: exit {code} in {time.monotonic() - t0:.3f} s", flush=True)
path.write_text(json.dumps({"target": "cuda12.1-torch2.3", "platform": {"kind": "cuda"}, "gpu_arches": ["sm_80"]}))
code = (
    "import sys; sys.path.insert(0, '.'); from imagecontract import preflight; from pathlib import Path;"
    f"preflight.MANIFEST = Path({str(path)!r}); import runpy; sys.argv = ['entrypoint', '--', 'true'];"
    "runpy.run_path('image/tunableop/tunableop_entrypoint.py', run_name='__main__')"
)
t0 = time.monotonic()
proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print(f"== entrypoint (image sm_80): exit {proc.returncode} in {time.monotonic() - t0:.3f} s\n{proc.stderr}")
EOF
ls -la "$OUT"
