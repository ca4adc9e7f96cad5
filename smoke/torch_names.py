"""torch's own names that are spelt like platform kinds but are not them (tests/test_kinds_layout.py lets only this
module of the smoke suite spell them): torch calls every GPU device `cuda`, ROCm's HIP builds included, and the
host's processor `cpu`; the smoke CLI's `--device` takes the same names. Which platform kind an image is comes from
its manifest and imagecontract.kinds, never from these.

Stdlib only: the CLI and the manifest reader use them before torch is imported.
"""

from __future__ import annotations

GPU = "cuda"  # torch.device("cuda"): any GPU torch drives (CUDA or HIP)
CPU = "cpu"  # torch.device("cpu"); also the device, arch and vendor a run without a GPU records
DEVICES = ("auto", GPU, CPU)  # `python3 -m smoke --device`
