#!/usr/bin/env bash
# Issue 13 on a real GPU host (H200): arch coverage of the installed torch and its CUDA wheels, doctor, and the
# in-image preflight against the real driver. Stdlib only (imagecontract/, imagebuild/prove/doctor.py): no container.
#   OUT=/some/dir bash bench/gpu_issue13.sh
#   IB_DEVICE=cpu: CPU mode (CI: tests/test_gpu_scripts_cpu.py): no nvidia-smi; the same commands against this
#   machine's (absent) driver; IB_COVERAGE_ROOT scans a smaller tree than site-packages.
# Exit: 1 when a step could not run at all (a module that does not import, a document that is not JSON).
set -u
OUT=${OUT:?set OUT to a folder}
DEVICE=${IB_DEVICE:-cuda}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv; else echo "cpu mode"; fi
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "arch_list", torch.cuda.get_arch_list())'
} >"$OUT/env.txt" 2>&1
SP=${IB_COVERAGE_ROOT:-$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')}
echo "site-packages: $SP" >>"$OUT/env.txt"
# Coverage of every library with device code under site-packages (torch, nvidia-* wheels, triton, ...).
# wall time and peak RSS measured by Python's resource module: GNU time (/usr/bin/time) is not on a stock Debian
python3 -c 'import resource, subprocess, sys, time
t = time.monotonic(); rc = subprocess.run(sys.argv[1:]).returncode
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"coverage wall {time.monotonic() - t:.2f} s, max RSS {rss} KB", file=sys.stderr); sys.exit(rc)' \
  python3 -m imagecontract.coverage --root "$SP" \
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
# Every step ran (whatever it found): the modules imported and the documents are JSON.
python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
bad = []
for name in ("coverage_raw.json", "doctor.json"):
    try:
        json.load(open(f"{out}/{name}"))
    except ValueError:
        bad.append(f"{name} is not JSON")
text = "".join(open(f"{out}/{n}").read() for n in ("env.txt", "doctor.txt", "preflight.txt"))
bad += [needle for needle in ("No module named", "Traceback") if needle in text]
print("gpu_issue13: " + ("ok" if not bad else "broken: " + ", ".join(bad)))
sys.exit(1 if bad else 0)
EOF
