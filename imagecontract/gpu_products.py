"""Product names people type for a GPU (`MI300X`, `RX 7900 XTX`, `H100`, `DGX Spark`) -> the processors they name.

The one alias table: `imagebuild arches --arch`, the plan, the compatibility page's lookup and the GPU names the
in-image driver reader prints all read it through imagecontract.targets. Stdlib only (the image carries it).

Sources, read 2026-12 with the search tools:
- AMD: ROCm's "AMD GPU specifications" table, column "LLVM target name"
  (https://rocm.docs.amd.com/en/7.13.0-preview/reference/gpu-specs.html: MI355X/MI350X gfx950, MI325X gfx942, ...);
  LLVM's processor table (llvm/docs/AMDGPUUsage.rst, amdgpu-processor-table, product names added by
  llvm/llvm-project#155577 (gfx1200: RX 9060 / 9060 XT; gfx1201: RX 9070 / 9070 XT / 9070 GRE), #163717 (gfx1150:
  Radeon 890M; gfx1151: Radeon 8060S; gfx1152: Radeon 860M) and #170469 (gfx1101: RX 7800 XT / 7700 XT;
  gfx1102: RX 7600 XT / 7600)). Strix Halo (Ryzen AI Max 385/390/395, Max+ 395) is gfx1151 (its GPU is the
  Radeon 8060S/8050S); Radeon AI PRO R9700 is Navi 48, gfx1201 like the RX 9070 XT.
- NVIDIA: NVIDIA's compute capability table, https://developer.nvidia.com/cuda-gpus (12.1: GB10 (DGX Spark);
  12.0: RTX PRO 6000 Blackwell, GeForce RTX 5090/5080/...; 11.0: Jetson T5000/T4000 (Jetson Thor); 10.3:
  GB300/B300; 10.0: GB200/B200; 9.0: GH200/H200/H100; 8.9: L4/L40/L40S, RTX 6000 Ada, RTX 4090; ...) and
  https://developer.nvidia.com/cuda-legacy-gpus for 7.2 and older.

A name may stand for several processors (a family name such as `RDNA4`) only where the list says so; every
answer that resolves one names each processor it stands for.
"""

from __future__ import annotations

import re

# (name as written, processors). The first name of a processor is its label on the page and in `doctor`.
PRODUCTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # AMD Instinct (CDNA)
    ("MI25", ("gfx900",)),
    ("MI50", ("gfx906",)),
    ("MI60", ("gfx906",)),
    ("MI100", ("gfx908",)),
    ("MI210", ("gfx90a",)),
    ("MI250", ("gfx90a",)),
    ("MI250X", ("gfx90a",)),
    ("MI300X", ("gfx942",)),
    ("MI300A", ("gfx942",)),
    ("MI325X", ("gfx942",)),
    ("MI350X", ("gfx950",)),
    ("MI355X", ("gfx950",)),
    # AMD Radeon (RDNA) and Ryzen APUs
    ("Radeon RX 470", ("gfx803",)),
    ("Radeon RX 580", ("gfx803",)),
    ("Radeon PRO W6800", ("gfx1030",)),
    ("Radeon PRO V620", ("gfx1030",)),
    ("Radeon RX 6900 XT", ("gfx1030",)),
    ("Radeon RX 6800 XT", ("gfx1030",)),
    ("Radeon PRO W7900", ("gfx1100",)),
    ("Radeon RX 7900 XTX", ("gfx1100",)),
    ("Radeon RX 7900 XT", ("gfx1100",)),
    ("Radeon RX 7900 GRE", ("gfx1100",)),
    ("Radeon PRO W7800", ("gfx1100",)),
    ("Radeon RX 7800 XT", ("gfx1101",)),
    ("Radeon RX 7700 XT", ("gfx1101",)),
    ("Radeon PRO W7700", ("gfx1101",)),
    ("Radeon RX 7600 XT", ("gfx1102",)),
    ("Radeon RX 7600", ("gfx1102",)),
    ("Radeon 780M", ("gfx1103",)),
    ("Radeon 890M", ("gfx1150",)),
    ("Ryzen AI 9 HX 370", ("gfx1150",)),
    ("Ryzen AI Max+ 395", ("gfx1151",)),
    ("Radeon 8060S", ("gfx1151",)),
    ("Strix Halo", ("gfx1151",)),
    ("Ryzen AI Max 395", ("gfx1151",)),
    ("Ryzen AI Max 390", ("gfx1151",)),
    ("Ryzen AI Max 385", ("gfx1151",)),
    ("Radeon 860M", ("gfx1152",)),
    ("Radeon RX 9060 XT", ("gfx1200",)),
    ("Radeon RX 9060", ("gfx1200",)),
    ("Radeon RX 9070 XT", ("gfx1201",)),
    ("Radeon RX 9070", ("gfx1201",)),
    ("Radeon RX 9070 GRE", ("gfx1201",)),
    ("Radeon AI PRO R9700", ("gfx1201",)),
    # AMD families: several processors, said so wherever one resolves
    ("RDNA3", ("gfx1100", "gfx1101", "gfx1102", "gfx1103")),
    ("RDNA3.5", ("gfx1150", "gfx1151", "gfx1152", "gfx1153")),
    ("RDNA4", ("gfx1200", "gfx1201")),
    # NVIDIA
    ("M40", ("sm_52",)),
    ("M60", ("sm_52",)),
    ("Jetson Nano", ("sm_53",)),
    ("P100", ("sm_60",)),
    ("P40", ("sm_61",)),
    ("P4", ("sm_61",)),
    ("Jetson TX2", ("sm_62",)),
    ("V100", ("sm_70",)),
    ("Jetson AGX Xavier", ("sm_72",)),
    ("T4", ("sm_75",)),
    ("RTX 2080", ("sm_75",)),
    ("A100", ("sm_80",)),
    ("A30", ("sm_80",)),
    ("A10", ("sm_86",)),
    ("A40", ("sm_86",)),
    ("RTX A6000", ("sm_86",)),
    ("RTX 3090", ("sm_86",)),
    ("Jetson AGX Orin", ("sm_87",)),
    ("Jetson Orin Nano", ("sm_87",)),
    ("L4", ("sm_89",)),
    ("L40", ("sm_89",)),
    ("L40S", ("sm_89",)),
    ("RTX 4090", ("sm_89",)),
    ("RTX 6000 Ada", ("sm_89",)),
    ("H100", ("sm_90",)),
    ("H200", ("sm_90",)),
    ("GH200", ("sm_90",)),
    ("B200", ("sm_100",)),
    ("GB200", ("sm_100",)),
    ("B300", ("sm_103",)),
    ("GB300", ("sm_103",)),
    ("Jetson Thor", ("sm_110",)),
    ("Jetson T5000", ("sm_110",)),
    ("Jetson T4000", ("sm_110",)),
    ("RTX 5090", ("sm_120",)),
    ("RTX 5080", ("sm_120",)),
    ("RTX PRO 6000", ("sm_120",)),
    ("DGX Spark", ("sm_121",)),
    ("GB10", ("sm_121",)),
)

# Words a typed name may start with that name no product (`NVIDIA H100`, `AMD Instinct MI300X`, `GeForce RTX
# 5090`, `Radeon RX 7900 XTX`): dropped before the lookup. The page's script applies the same pattern (it is
# handed this text, not a copy).
VENDOR_WORDS = r"^(?:nvidia|amd|instinct|geforce|tesla|radeon)\s+"
_VENDOR = re.compile(VENDOR_WORDS, re.IGNORECASE)
_SPACE = re.compile(r"\s+")
MAX_NAME = 64  # longer text is no product name (and is not normalised at all)


def name_key(text: str) -> str:
    """The key a product name is looked up by: vendor words dropped, lower case, no white space."""
    text = text.strip()[: MAX_NAME + 1]
    while _VENDOR.match(text):
        text = _VENDOR.sub("", text, count=1)
    return _SPACE.sub("", text.lower())


def _index() -> dict[str, tuple[str, tuple[str, ...]]]:
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, processors in PRODUCTS:
        key = name_key(name)
        if key in out:
            raise ValueError(f"product name {name!r} listed twice")
        out[key] = (name, processors)
    return out


BY_KEY = _index()
MAX_WORDS = max(len(name.split()) for name, _ in PRODUCTS) + 2  # + vendor words (`AMD Radeon ...`)


def lookup(text: str) -> tuple[str, tuple[str, ...]] | None:
    """(the product's name, its processors) for a typed name, or None."""
    return None if len(text) > MAX_NAME else BY_KEY.get(name_key(text))


LABEL_NAMES = 3


def labels() -> dict[str, str]:
    """processor -> a short label: its first LABEL_NAMES single-processor product names, `/`-joined, a first word
    they share written once (`MI300X/MI300A/MI325X`, `Radeon PRO W7900/RX 7900 XTX/RX 7900 XT`)."""
    out: dict[str, list[str]] = {}
    for name, processors in PRODUCTS:
        if len(processors) == 1:
            out.setdefault(processors[0], []).append(name)
    shown: dict[str, str] = {}
    for proc, names in out.items():
        first = names[0].split()[0] + " "
        rest = [n.removeprefix(first) if names[0].startswith(first) else n for n in names[1:LABEL_NAMES]]
        shown[proc] = "/".join([names[0], *rest])
    return shown
