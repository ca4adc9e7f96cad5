#!/usr/bin/env bash
# What device code NVIDIA libraries of the GPU machine carry, by cuobjdump and by our reader side by side, and whether
# cuFFT (whose fat binary holds only an sm_75 cubin) runs on the GPU anyway. Run on the GPU machine:
#   bash bench/cufft_probe.sh > bench/results/cufft_probe_h200.txt
set -u
site=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "site=$site"
for lib in $(find "$site/nvidia" -name 'libcufft.so*' -o -name 'libcufile.so*' -o -name 'libcublas.so*' | sort); do
  echo "=== $lib $(stat -c %s $lib)"
  readelf -SW "$lib" | grep -iE "fatbin|nv_" | awk '{print $2, $3, $6}'
  echo "--- cuobjdump elf/ptx (arch: count)"
  cuobjdump --list-elf --list-ptx "$lib" 2>&1 | grep -oE "sm_[0-9]+[af]?|compute_[0-9]+[af]?" | sort | uniq -c | tr '\n' ' '; echo
  cuobjdump --list-elf --list-ptx "$lib" 2>&1 | head -3
  echo "--- ours"
  python3 -c "
import sys; sys.path.insert(0, '.')
from imagecontract.codeobjects import list_code_objects
l = list_code_objects(sys.argv[1]); print({k: getattr(l, k) for k in vars(l)} if hasattr(l, '__dict__') else l)
" "$lib" 2>&1 | cut -c1-600
done
echo "=== does cuFFT run on this GPU although its fat binary holds only an sm_75 cubin?"
python3 - <<'PY'
import torch
x = torch.randn(1 << 20, device="cuda", dtype=torch.complex64)
y = torch.fft.ifft(torch.fft.fft(x))
torch.cuda.synchronize()
print("device", torch.cuda.get_device_name(), "sm_%d%d" % torch.cuda.get_device_capability(),
      "torch", torch.__version__, "fft round trip max error", float((y - x).abs().max()))
PY
